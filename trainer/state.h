/* trainer/state.h - a run's state in a checkpoint, and parameters from a file.
 *
 * A training checkpoint holds param.<name>, optim.m.<name> and optim.v.<name>
 * (where the optimizer has them) as F32 tensors, and the metadata format,
 * step, epoch, pos (the data loader's place), t (optimizer updates), seed,
 * optimizer and spec_hash. Resuming restores all of it, so the continued run
 * is bit-identical to one that never stopped (on the same thread count).
 */
#ifndef LARCH_TRAINER_STATE_H
#define LARCH_TRAINER_STATE_H

#include "data.h"
#include "err.h"
#include "model.h"
#include "optim.h"

struct trn_state {
	struct trn_model *model;
	struct trn_optim *opt;
	struct trn_loader *loader;
	long step;                     /* completed steps */
	uint64_t seed;
	char spec_hash[65];
};

/* Writes DIR/checkpoints/step-<step>.safetensors and prunes to keep. */
int trn_state_save(const char *job_dir, const struct trn_state *s, int keep, struct trn_err *err);

/* Restores model parameters, optimizer state, loader position and step from
 * the checkpoint at path; refuses one written for a different spec. */
int trn_state_load(const char *path, struct trn_state *s, struct trn_err *err);

/* Loads every parameter of m from a safetensors file whose F32 tensors are
 * named param.<name> (a larch checkpoint) or <name> (e.g. saved by numpy or
 * PyTorch); sizes must match. */
int trn_params_load(struct trn_model *m, const char *path, struct trn_err *err);

#endif
