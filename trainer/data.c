/* trainer/data.c - see data.h: loading by format (data_idx.c,
 * data_tokens.c), batches, and the loader that orders and cuts them.
 */
#include "data_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* the rng stream of epoch e's order is DATA_STREAM + e */
#define DATA_STREAM 1000

long trn_data_holdout(long n, double fraction)
{
	if (fraction <= 0 || n <= 0)
		return 0;
	long k = (long)llround((double)n * fraction);
	return k < 1 ? 1 : k;
}

/* Named data sets are Debian's packaged files: never confined. */
static const struct trn_input_policy *policy_for(const struct trn_spec *spec,
                                                 const struct trn_input_policy *inputs)
{
	return spec->data.name[0] ? NULL : inputs;
}

int trn_dataset_load(struct trn_dataset *ds, const struct trn_spec *spec,
                     const struct trn_input_policy *inputs, struct trn_err *err)
{
	memset(ds, 0, sizeof *ds);
	inputs = policy_for(spec, inputs);
	int rc;
	switch (spec->data.format) {
	case TRN_DATA_IDX:
		rc = trn_data_idx_load(ds, spec, inputs, err);
		break;
	case TRN_DATA_TOKENS_U16:
	case TRN_DATA_TEXT:
		rc = trn_data_tokens_load(ds, spec, inputs, err);
		break;
	default:
		rc = trn_err_set(err, "data.format: unknown format %d", (int)spec->data.format);
	}
	if (rc != 0)
		trn_dataset_release(ds);
	return rc;
}

int trn_dataset_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                      const struct trn_input_policy *inputs, struct trn_err *err)
{
	memset(ds, 0, sizeof *ds);
	inputs = policy_for(spec, inputs);
	int rc = spec->data.format == TRN_DATA_IDX ? trn_data_idx_shape(ds, spec, inputs, err)
	                                           : trn_data_tokens_shape(ds, spec, inputs, err);
	if (rc != 0)
		memset(ds, 0, sizeof *ds);
	return rc;
}

json_t *trn_dataset_shape_to_json(const struct trn_dataset *s)
{
	return json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I}",
	                 "task", s->task == TRN_TASK_CLASSIFY ? "classify" : "tokens",
	                 "dim", s->dim, "n_classes", s->n_classes, "seq", s->seq, "vocab", s->vocab,
	                 "train_samples", (json_int_t)s->train.n, "val_samples", (json_int_t)s->val.n,
	                 "train_tokens", (json_int_t)s->train.n_tokens,
	                 "val_tokens", (json_int_t)s->val.n_tokens);
}

/* j.key as an integer in [lo, hi] (absent: 0 when lo is 0). */
static int shape_int(const json_t *j, const char *key, long long lo, long long hi, long long *out,
                     struct trn_err *err)
{
	json_t *v = json_object_get(j, key);
	*out = 0;
	if (!v && lo == 0)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return trn_err_set(err, "shape.%s: must be an integer in [%lld, %lld]", key, lo, hi);
	*out = json_integer_value(v);
	return 0;
}

int trn_dataset_shape_from_json(struct trn_dataset *s, const json_t *j, struct trn_err *err)
{
	memset(s, 0, sizeof *s);
	if (!json_is_object(j))
		return trn_err_set(err, "shape: must be a JSON object");
	const char *task = json_string_value(json_object_get(j, "task"));
	if (!task || (strcmp(task, "classify") != 0 && strcmp(task, "tokens") != 0))
		return trn_err_set(err, "shape.task: must be \"classify\" or \"tokens\"");
	int classify = strcmp(task, "classify") == 0;
	const long long big = 1LL << 50;
	long long dim, classes, seq, vocab, tn, vn, tt, vt;
	if (shape_int(j, "dim", classify, INT_MAX, &dim, err) != 0 ||
	    shape_int(j, "n_classes", classify, INT_MAX, &classes, err) != 0 ||
	    shape_int(j, "seq", !classify, INT_MAX, &seq, err) != 0 ||
	    shape_int(j, "vocab", 0, INT_MAX, &vocab, err) != 0 ||
	    shape_int(j, "train_samples", 0, big, &tn, err) != 0 ||
	    shape_int(j, "val_samples", 0, big, &vn, err) != 0 ||
	    shape_int(j, "train_tokens", 0, big, &tt, err) != 0 ||
	    shape_int(j, "val_tokens", 0, big, &vt, err) != 0) {
		memset(s, 0, sizeof *s);
		return -1;
	}
	s->task = classify ? TRN_TASK_CLASSIFY : TRN_TASK_TOKENS;
	s->dim = (int)dim;
	s->n_classes = (int)classes;
	s->seq = (int)seq;
	s->vocab = (int)vocab;
	s->train.n = (long)tn;
	s->val.n = (long)vn;
	s->train.n_tokens = (long)tt;
	s->val.n_tokens = (long)vt;
	return 0;
}

double trn_dataset_bytes(const struct trn_dataset *ds)
{
	if (ds->task == TRN_TASK_CLASSIFY)
		return (double)(ds->train.n + ds->val.n) * ((double)ds->dim * sizeof(float) +
		                                             sizeof(int32_t));
	return (double)(ds->train.n_tokens + ds->val.n_tokens) * sizeof(uint16_t);
}

static void split_release(struct trn_split *s)
{
	free(s->x);
	free(s->y);
	free(s->tokens);
	memset(s, 0, sizeof *s);
}

void trn_dataset_release(struct trn_dataset *ds)
{
	split_release(&ds->train);
	split_release(&ds->val);
	memset(ds, 0, sizeof *ds);
}

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
