/* trainer/data.h - datasets held in memory and the loader that cuts batches.
 *
 * Formats (spec.data.format):
 *   idx        IDX image and label files, gzip or not (Fashion-MNIST); pixels
 *              become floats standardised with the train split's mean and std.
 *   tokens_u16 llm.c's token files: a 256 x int32 header (magic 20240520,
 *              version 1, token count at [2]), then uint16 tokens.
 *   text       any file, one token per byte (vocab 256).
 * Token streams are cut into samples of seq + 1 tokens at offsets i * seq
 * (input = the first seq, target = the last seq).
 *
 * A global batch of step s is the next batch.global indices of the epoch's
 * order (a permutation from (seed, epoch), or 0..n-1 without shuffling).
 * Within it, rank r's micro-batch a covers positions
 * [(a * ranks + r) * micro, + micro). A partial last batch is dropped.
 */
#ifndef LARCH_TRAINER_DATA_H
#define LARCH_TRAINER_DATA_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "spec/spec.h"

struct trn_input_policy;

enum trn_task { TRN_TASK_CLASSIFY, TRN_TASK_TOKENS };

struct trn_split {
	long n;                        /* samples */
	/* classify */
	float *x;                      /* [n, dim], standardised */
	int32_t *y;                    /* [n] in [0, n_classes) */
	/* tokens */
	uint16_t *tokens;              /* [n_tokens] */
	long n_tokens;
};

struct trn_dataset {
	enum trn_task task;
	struct trn_split train, val;   /* val.n == 0: no validation */
	int dim;                       /* classify: features per sample (784) */
	int n_classes;                 /* classify: max label + 1 over both splits */
	int seq;                       /* tokens: sample length (model.seq) */
	int vocab;                     /* tokens: max token + 1 seen (the model may be larger) */
	double mean, std;              /* classify: standardisation applied (from train) */
};

/* Loads spec->data (paths already resolved by the spec validator). Every
 * file is opened with trn_input_open (input.h) under inputs (borrowed; NULL
 * confines nothing), but for a named data set (data.name), whose packaged
 * files are never confined. Returns 0 or -1 with err naming the field and
 * the file and what is wrong with it (never bytes read from it). */
int trn_dataset_load(struct trn_dataset *ds, const struct trn_spec *spec,
                     const struct trn_input_policy *inputs, struct trn_err *err);
void trn_dataset_release(struct trn_dataset *ds);
/* The shape of spec->data without loading it, for memory plans: task, dim,
 * n_classes (idx: from the label files), the splits' sample counts, and for
 * tokens the token counts (tokens_u16: from the checked headers; text: the
 * sizes), seq, and vocab 256 for text (0: unknown); no buffers. Files are
 * opened as trn_dataset_load opens them, and their headers checked as it
 * checks them; the counts are described, not judged (a split too small to
 * train is the probe's to refuse, probe.h). 0, or -1 with err naming the
 * field and the file. */
int trn_dataset_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                      const struct trn_input_policy *inputs, struct trn_err *err);
/* A shape as JSON (larch-train --probe prints it, larchd plans with it):
 *   {"task": "classify" | "tokens", "dim": D, "n_classes": C, "seq": S,
 *    "vocab": V, "train_samples": N, "val_samples": N, "train_tokens": T,
 *    "val_tokens": T}
 * every key always present (0 where the task has none). A new reference,
 * NULL when out of memory. */
json_t *trn_dataset_shape_to_json(const struct trn_dataset *shape);
/* The shape from such an object (borrowed), checked: the task known, every
 * count an integer in range, a classify shape with dim and n_classes >= 1,
 * a tokens shape with seq >= 1; absent counts read as 0. No buffers. 0, or
 * -1 with err naming the key ("shape.dim: ..."). */
int trn_dataset_shape_from_json(struct trn_dataset *shape, const json_t *j, struct trn_err *err);
/* Bytes the loaded data of a shape takes in memory. */
double trn_dataset_bytes(const struct trn_dataset *ds);

/* One micro-batch; buffers are owned by whoever set up the batch
 * (trn_batch_alloc) and sized for `cap` samples. */
struct trn_batch {
	int n;                         /* samples in this batch */
	int cap;
	int seq;                       /* tokens per sample (tokens task) */
	float *x;                      /* classify: [cap, dim] */
	int32_t *tokens;               /* tokens: [cap, seq] */
	int32_t *targets;              /* classify: [cap]; tokens: [cap, seq] */
};

int trn_batch_alloc(struct trn_batch *b, const struct trn_dataset *ds, int cap);
void trn_batch_release(struct trn_batch *b);

struct trn_loader {
	const struct trn_dataset *ds;
	const struct trn_split *split;
	uint64_t seed;
	int shuffle;
	int rank, ranks;
	long global, micro;            /* samples per step (all ranks), per micro-batch */
	long epoch;                    /* current epoch, from 0 */
	long pos;                      /* samples of this epoch's order consumed */
	long *order;                   /* this epoch's permutation [split->n] */
};

/* Sets up a training loader at epoch 0, position 0. Returns -1 with err when
 * the split holds fewer samples than one global batch. */
int trn_loader_init(struct trn_loader *l, const struct trn_dataset *ds, const struct trn_split *split,
                    uint64_t seed, int shuffle, int rank, int ranks, long global, long micro,
                    struct trn_err *err);
void trn_loader_release(struct trn_loader *l);

/* Full steps in one epoch: split->n / global. */
long trn_loader_steps_per_epoch(const struct trn_loader *l);

/* Moves to (epoch, pos), e.g. from a checkpoint; pos is a multiple of global. */
void trn_loader_seek(struct trn_loader *l, long epoch, long pos);

/* Fills b with this rank's micro-batch a (0 <= a < accum) of the current step. */
void trn_loader_micro(const struct trn_loader *l, long a, struct trn_batch *b);

/* Fills b with the micro-batch after micro-batch a of the current step
 * (accum a step): a + 1, or the next step's first while that step is in
 * this epoch's order. 1, or 0 (b untouched) at an epoch's end. */
int trn_loader_next_micro(const struct trn_loader *l, long a, long accum, struct trn_batch *b);

/* Moves past the current step; starts the next epoch when too few samples remain. */
void trn_loader_advance(struct trn_loader *l);

/* Sequential batches of the validation split for evaluation: fills b with
 * samples [first, first + cap) clipped to split->n; returns the count. */
int trn_split_batch(const struct trn_dataset *ds, const struct trn_split *split, long first,
                    struct trn_batch *b);

#endif
