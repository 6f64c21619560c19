/* trainer/schedule.c - see schedule.h. */
#include "schedule.h"

#include <math.h>

void trn_schedule_init(struct trn_schedule *s, const struct trn_spec *spec,
                       long steps_per_epoch, long total_steps)
{
	const struct trn_spec_schedule *c = &spec->schedule;
	double k = (double)spec->batch.global / (double)spec->batch.reference;

	switch (c->lr_scaling) {
	case TRN_SCALE_LINEAR: s->scale = k; break;
	case TRN_SCALE_SQRT: s->scale = sqrt(k); break;
	case TRN_SCALE_NONE: default: s->scale = 1.0; break;
	}
	s->base_lr = spec->optimizer.lr;
	s->peak_lr = s->base_lr * s->scale;
	if (c->warmup_start_lr >= 0)
		s->start_lr = c->warmup_start_lr;
	else
		s->start_lr = s->scale != 1.0 ? s->base_lr : 0.0;
	s->final_lr = c->final_lr;
	s->total_steps = total_steps;
	s->warmup_steps = trn_period_steps(&c->warmup, steps_per_epoch);
	if (s->warmup_steps > total_steps)
		s->warmup_steps = total_steps;
	s->decay = c->decay;
	s->power = c->power;
	s->gamma = c->gamma;
	s->step_size = trn_period_steps(&c->step_size, steps_per_epoch);
	if (s->step_size < 1)
		s->step_size = 1;
}

double trn_schedule_lr(const struct trn_schedule *s, long step)
{
	if (step < s->warmup_steps)
		return s->start_lr + (s->peak_lr - s->start_lr) * (double)(step + 1) / (double)s->warmup_steps;

	long after = step - s->warmup_steps;
	long span = s->total_steps - s->warmup_steps;
	double p = span > 0 ? (double)after / (double)span : 0.0;
	if (p > 1.0)
		p = 1.0;
	switch (s->decay) {
	case TRN_DECAY_COSINE:
		return s->final_lr + (s->peak_lr - s->final_lr) * 0.5 * (1.0 + cos(M_PI * p));
	case TRN_DECAY_POLY:
		return s->final_lr + (s->peak_lr - s->final_lr) * pow(1.0 - p, s->power);
	case TRN_DECAY_STEP:
		return s->peak_lr * pow(s->gamma, (double)(after / s->step_size));
	case TRN_DECAY_NONE:
	default:
		return s->peak_lr;
	}
}
