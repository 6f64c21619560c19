/* trainer/loss_scale.c - see loss_scale.h. */
#include "loss_scale.h"

void trn_loss_scale_init(struct trn_loss_scale *ls, const struct trn_spec_precision *p)
{
	*ls = (struct trn_loss_scale){ .mode = TRN_LOSS_SCALE_NONE, .scale = 1.0,
	                               .growth_interval = p->growth_interval };
	if (p->compute != TRN_DTYPE_FP16)
		return;
	ls->mode = p->dynamic_loss_scale ? TRN_LOSS_SCALE_DYNAMIC : TRN_LOSS_SCALE_STATIC;
	ls->scale = p->dynamic_loss_scale ? p->init_scale : p->loss_scale;
}

static void back_off(struct trn_loss_scale *ls)
{
	double half = ls->scale * 0.5;
	if (half >= TRN_LOSS_SCALE_MIN)
		ls->scale = half;
	else if (ls->scale > TRN_LOSS_SCALE_MIN)
		ls->scale = TRN_LOSS_SCALE_MIN;
}

static void grow(struct trn_loss_scale *ls)
{
	double twice = ls->scale * 2.0;
	ls->scale = twice <= TRN_LOSS_SCALE_MAX ? twice : TRN_LOSS_SCALE_MAX;
}

int trn_loss_scale_update(struct trn_loss_scale *ls, int found_nonfinite)
{
	if (ls->mode == TRN_LOSS_SCALE_NONE)
		return 1;
	if (found_nonfinite) {
		ls->skipped++;
		ls->clean_steps = 0;
		if (ls->mode == TRN_LOSS_SCALE_DYNAMIC)
			back_off(ls);
		return 0;
	}
	ls->clean_steps++;
	if (ls->mode == TRN_LOSS_SCALE_DYNAMIC && ls->clean_steps >= ls->growth_interval) {
		grow(ls);
		ls->clean_steps = 0;
	}
	return 1;
}

const char *trn_loss_scale_mode_name(enum trn_loss_scale_mode mode)
{
	static const char *const names[] = {
		[TRN_LOSS_SCALE_NONE] = "none",
		[TRN_LOSS_SCALE_STATIC] = "static",
		[TRN_LOSS_SCALE_DYNAMIC] = "dynamic",
	};
	return (unsigned)mode < sizeof names / sizeof names[0] ? names[mode] : "?";
}
