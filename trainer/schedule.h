/* trainer/schedule.h - the large-batch learning-rate schedule.
 *
 * peak lr = base lr * k, k = global / reference (linear), sqrt of that
 * (sqrt) or 1 (none). Warmup goes linearly from the start lr to the peak
 * over the warmup steps (Goyal et al. 2017: from the base lr), then decay
 * runs over the remaining steps: cosine or polynomial down to final_lr, or
 * step (x gamma every step_size), or none.
 */
#ifndef LARCH_TRAINER_SCHEDULE_H
#define LARCH_TRAINER_SCHEDULE_H

#include "spec/spec.h"

struct trn_schedule {
	double base_lr, peak_lr, start_lr, final_lr;
	double scale;                  /* k after the scaling rule */
	long warmup_steps, total_steps;
	enum trn_decay decay;
	double power, gamma;
	long step_size;
};

void trn_schedule_init(struct trn_schedule *s, const struct trn_spec *spec,
                       long steps_per_epoch, long total_steps);

/* lr for the update that ends step `step` (0-based). */
double trn_schedule_lr(const struct trn_schedule *s, long step);

#endif
