/* trainer/data.c - see data.h: batches, and the loader that orders and
 * cuts them. Loading and shapes are trainer/spec/dataset.c's.
 */
#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* the rng stream of epoch e's order is DATA_STREAM + e */
#define DATA_STREAM 1000

/* ---- batches ------------------------------------------------------------- */

int trn_batch_alloc(struct trn_batch *b, const struct trn_dataset *ds, int cap)
{
	memset(b, 0, sizeof *b);
	if (cap < 1)
		return -1;
	b->cap = cap;
	if (ds->task == TRN_TASK_CLASSIFY) {
		b->x = malloc(sizeof(float) * (size_t)cap * (size_t)ds->dim);
		b->targets = malloc(sizeof(int32_t) * (size_t)cap);
		if (!b->x || !b->targets)
			goto fail;
	} else {
		b->seq = ds->seq;
		b->tokens = malloc(sizeof(int32_t) * (size_t)cap * (size_t)ds->seq);
		b->targets = malloc(sizeof(int32_t) * (size_t)cap * (size_t)ds->seq);
		if (!b->tokens || !b->targets)
			goto fail;
	}
	return 0;
fail:
	trn_batch_release(b);
	return -1;
}

void trn_batch_release(struct trn_batch *b)
{
	free(b->x);
	free(b->tokens);
	free(b->targets);
	memset(b, 0, sizeof *b);
}

/* Copies sample i of split s into slot k of b. */
static void put_sample(struct trn_batch *b, int k, const struct trn_dataset *ds,
                       const struct trn_split *s, long i)
{
	if (ds->task == TRN_TASK_CLASSIFY) {
		memcpy(b->x + (size_t)k * ds->dim, s->x + (size_t)i * ds->dim, sizeof(float) * ds->dim);
		b->targets[k] = s->y[i];
		return;
	}
	const uint16_t *t = s->tokens + (size_t)i * ds->seq;
	int32_t *in = b->tokens + (size_t)k * ds->seq, *out = b->targets + (size_t)k * ds->seq;
	for (int j = 0; j < ds->seq; j++) {
		in[j] = t[j];
		out[j] = t[j + 1];
	}
}

int trn_split_batch(const struct trn_dataset *ds, const struct trn_split *split, long first,
                    struct trn_batch *b)
{
	long n = split->n - first;
	if (first < 0 || n < 0)
		n = 0;
	if (n > b->cap)
		n = b->cap;
	for (long k = 0; k < n; k++)
		put_sample(b, (int)k, ds, split, first + k);
	b->n = (int)n;
	return (int)n;
}

/* ---- the loader ---------------------------------------------------------- */

/* this epoch's order: a permutation from (seed, DATA_STREAM + epoch) */
static void make_order(struct trn_loader *l)
{
	long n = l->split->n;
	for (long i = 0; i < n; i++)
		l->order[i] = i;
	if (l->shuffle) {
		struct trn_rng r;
		trn_rng_seed(&r, l->seed, DATA_STREAM + (uint64_t)l->epoch);
		trn_rng_shuffle(&r, l->order, n);
	}
}

int trn_loader_init(struct trn_loader *l, const struct trn_dataset *ds, const struct trn_split *split,
                    uint64_t seed, int shuffle, int rank, int ranks, long global, long micro,
                    struct trn_err *err)
{
	memset(l, 0, sizeof *l);
	const char *name = split == &ds->val ? "val" : "train";
	if (ranks < 1 || rank < 0 || rank >= ranks)
		return trn_err_set(err, "data: rank %d outside 0..%d", rank, ranks - 1);
	if (micro < 1 || global < 1 || global % (micro * ranks) != 0)
		return trn_err_set(err, "data: a global batch of %ld is not a multiple of micro-batch "
		                   "%ld x %d ranks", global, micro, ranks);
	if (split->n < global)
		return trn_err_set(err, "data: the %s split holds %ld samples, fewer than one global "
		                   "batch of %ld", name, split->n, global);
	l->order = malloc(sizeof(long) * (size_t)split->n);
	if (!l->order)
		return trn_err_set(err, "data: out of memory for the order of %ld samples", split->n);
	l->ds = ds;
	l->split = split;
	l->seed = seed;
	l->shuffle = shuffle;
	l->rank = rank;
	l->ranks = ranks;
	l->global = global;
	l->micro = micro;
	make_order(l);
	return 0;
}

void trn_loader_release(struct trn_loader *l)
{
	free(l->order);
	memset(l, 0, sizeof *l);
}

long trn_loader_steps_per_epoch(const struct trn_loader *l)
{
	return l->split->n / l->global;
}

void trn_loader_seek(struct trn_loader *l, long epoch, long pos)
{
	l->epoch = epoch < 0 ? 0 : epoch;
	l->pos = pos < 0 ? 0 : pos;
	/* a position with no full batch left (a checkpoint taken from another
	 * batch size) belongs to the start of the next epoch */
	if (l->split->n - l->pos < l->global) {
		l->epoch++;
		l->pos = 0;
	}
	make_order(l);
}

/* Micro-batch a of the step at position pos of this epoch's order. */
static void micro_at(const struct trn_loader *l, long pos, long a, struct trn_batch *b)
{
	long start = pos + (a * l->ranks + l->rank) * l->micro;
	long n = l->micro < b->cap ? l->micro : b->cap;
	for (long k = 0; k < n; k++)
		put_sample(b, (int)k, l->ds, l->split, l->order[start + k]);
	b->n = (int)n;
}

void trn_loader_micro(const struct trn_loader *l, long a, struct trn_batch *b)
{
	micro_at(l, l->pos, a, b);
}

int trn_loader_next_micro(const struct trn_loader *l, long a, long accum, struct trn_batch *b)
{
	if (a + 1 < accum) {
		micro_at(l, l->pos, a + 1, b);
		return 1;
	}
	long next = l->pos + l->global;
	if (l->split->n - next < l->global)
		return 0;                      /* the next epoch's order is not made yet */
	micro_at(l, next, 0, b);
	return 1;
}

void trn_loader_advance(struct trn_loader *l)
{
	l->pos += l->global;
	if (l->split->n - l->pos < l->global) {
		l->epoch++;
		l->pos = 0;
		make_order(l);
	}
}
