/* trainer/loss_scale.h - the loss scaler of fp16 training (PyTorch's
 * GradScaler, DeepSpeed's dynamic loss scaler).
 *
 * The loss is multiplied by `scale` before the backward pass, so that small
 * gradients do not flush to zero in fp16, and the gradients are divided by it
 * before the update. After each backward pass the trainer checks the
 * unscaled gradients for inf/NaN (kern_nonfinite_cpu) and calls
 * trn_loss_scale_update, which says whether to apply the step:
 * - dynamic: a non-finite gradient skips the step and halves the scale (never
 *   below TRN_LOSS_SCALE_MIN, and a scale already below it stays); after
 *   growth_interval clean steps in a row the scale doubles (up to
 *   TRN_LOSS_SCALE_MAX) and the count starts again.
 * - static: the scale never changes; a non-finite gradient still skips the step.
 * - none (fp32 and bf16 compute): scale 1 and every step applied; those runs
 *   keep the trainer's own divergence check.
 *
 * The struct is plain data: a checkpoint stores scale, clean_steps and
 * skipped, and a resume builds the scaler from the spec and sets them back.
 */
#ifndef LARCH_TRAINER_LOSS_SCALE_H
#define LARCH_TRAINER_LOSS_SCALE_H

#include "spec/spec.h"

enum trn_loss_scale_mode { TRN_LOSS_SCALE_NONE, TRN_LOSS_SCALE_STATIC, TRN_LOSS_SCALE_DYNAMIC };

#define TRN_LOSS_SCALE_MIN 1.0
#define TRN_LOSS_SCALE_MAX 4294967296.0 /* 2^32, the largest init_scale the spec takes */

struct trn_loss_scale {
	enum trn_loss_scale_mode mode;
	long growth_interval;          /* dynamic: clean steps before the scale doubles */
	double scale;                  /* the factor on the loss (train/loss_scale) */
	long clean_steps;              /* clean steps since the last skip or growth */
	long skipped;                  /* steps skipped so far (train/skipped_steps) */
};

/* A scaler for the spec's precision: dynamic from init_scale or static at
 * loss_scale with fp16 compute, none otherwise. Borrows p. */
void trn_loss_scale_init(struct trn_loss_scale *ls, const struct trn_spec_precision *p);

/* Records one step whose gradients had an inf or NaN (found_nonfinite != 0)
 * or not, and adjusts the scale for the next step. Returns 1 when the step's
 * update is to be applied, 0 when it is to be skipped. */
int trn_loss_scale_update(struct trn_loss_scale *ls, int found_nonfinite);

const char *trn_loss_scale_mode_name(enum trn_loss_scale_mode mode);

#endif
