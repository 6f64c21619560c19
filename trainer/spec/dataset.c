/* trainer/spec/dataset.c - see data.h: data sets loaded by format
 * (data_idx.c, data_tokens.c) and their shapes, which memory plans read
 * without loading the data. Batches and the loader are trainer/data.c's. */
#include "trainer/data_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
