/* trainer/state.h - a run's state in a checkpoint, and parameters from a file.
 *
 * A training checkpoint holds param.<name>, optim.m.<name> and optim.v.<name>
 * (where the optimizer has them) as F32 tensors, or with int8 optimizer
 * state optim.m.<name> as I8 and optim.v.<name> as U8 codes in the
 * parameter's shape, with their block scales optim.m_scale.<name> and
 * optim.v_scale.<name> (F32, one per block of the tensor) and the metadata
 * optim_state ("int8-dynamic-2048": code map and block); and the metadata format,
 * step, epoch, pos (the data loader's place), t (optimizer updates), seed,
 * optimizer, spec_hash and ranks (how many wrote it); with fp16 compute also loss_scale,
 * loss_scale_clean_steps and skipped_steps. Resuming restores all of it, so
 * the continued run is bit-identical to one that never stopped (on the same
 * thread and rank count).
 *
 * The parameters saved are the fp32 master weights, whatever the compute
 * dtype (the 16-bit ones are their rounding). A run of several ranks writes
 * one consolidated checkpoint from rank 0: with ZeRO-1 the ranks' shards of
 * the master weights and optimizer state are gathered there first, and every
 * rank reads the whole file on resume and keeps its shard (so a checkpoint
 * also resumes on another rank count, though not bit-exactly). int8 blocks
 * are cut per tensor, whatever the ranks: their state is the same in a
 * consolidated file whatever the rank count.
 */
#ifndef LARCH_TRAINER_STATE_H
#define LARCH_TRAINER_STATE_H

#include "data.h"
#include "err.h"
#include "loss_scale.h"
#include "model.h"
#include "optim.h"

struct trn_state {
	const struct trn_model *model; /* the parameter table */
	struct trn_optim *opt;         /* its type and update count t */
	struct trn_loader *loader;
	/* whole-buffer (model layout) buffers: what a save writes and where a
	 * load reads to; os NULL, or without m and v, when the optimizer has none */
	float *w;
	struct trn_optim_state *os;
	struct trn_loss_scale *ls;     /* saved and restored when not mode none; may be NULL */
	long step;                     /* completed steps */
	int ranks;                     /* save: the ranks writing it; load: the ranks that
	                                  wrote it (0: the file does not say) */
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
 * PyTorch); sizes must match. The file (init.from) is opened with
 * trn_input_open under inputs (borrowed; NULL confines nothing). */
struct trn_input_policy;
int trn_params_load(struct trn_model *m, const char *path, const struct trn_input_policy *inputs,
                    struct trn_err *err);

#endif
