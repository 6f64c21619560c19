/* trainer/probe.c - see probe.h. */
#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "data.h"
#include "export_hf.h"

json_t *trn_probe_failure(const char *message)
{
	/* the field is what the message names before its first ": " */
	char field[128] = "spec";
	const char *colon = strstr(message, ": ");
	size_t n = colon ? (size_t)(colon - message) : 0;
	if (n > 0 && n < sizeof field && !memchr(message, ' ', n)) {
		memcpy(field, message, n);
		field[n] = '\0';
	}
	return json_pack("{s:b, s:s, s:s}", "ok", 0, "field", field, "message", message);
}

struct input {
	const char *field;
	char *path;                    /* in the probe's copy of the spec, rebased there */
	const struct trn_input_policy *policy;
};

/* The files spec names, in the probe's order; returns the count. */
static int list_inputs(struct trn_spec *s, const struct trn_input_policy *inputs,
                       struct input out[5])
{
	struct trn_spec_data *d = &s->data;
	const struct trn_input_policy *data_policy = d->name[0] ? NULL : inputs;
	int n = 0;
#define ADD(f, p, pol) (out[n++] = (struct input){ .field = (f), .path = (p), .policy = (pol) })
	if (d->format == TRN_DATA_IDX) {
		ADD("data.train.images", d->train, data_policy);
		ADD("data.train.labels", d->train_labels, data_policy);
		ADD("data.val.images", d->val, data_policy);
		ADD("data.val.labels", d->val_labels, data_policy);
	} else if (d->format == TRN_DATA_TOKENS_U16) {
		ADD("data.train", d->train, data_policy);
		ADD("data.val", d->val, data_policy);
	} else {
		ADD("data.path", d->train, data_policy);
	}
	ADD("init.from", s->init_from, inputs);
#undef ADD
	return n;
}

/* What the loader would refuse of the shape's counts: a validation split
 * without a sample, a train split without a global batch. */
static int enough_data(const struct trn_spec *s, const struct trn_dataset *shape,
                       struct trn_err *err)
{
	const struct trn_spec_data *d = &s->data;
	if (shape->task == TRN_TASK_TOKENS && (d->val[0] || d->val_fraction > 0) &&
	    shape->val.n < 1) {
		if (d->val[0])
			return trn_err_set(err, "data.val: %s: %ld tokens, too few for one sample of "
			                   "%d + 1 tokens", d->val, shape->val.n_tokens, shape->seq);
		return trn_err_set(err, "data.val_fraction: %g holds out %ld tokens, too few for one "
		                   "sample of %d + 1 tokens", d->val_fraction, shape->val.n_tokens,
		                   shape->seq);
	}
	if (shape->train.n < s->batch.global)
		return trn_err_set(err, "batch.global: must not exceed the %ld samples of the train "
		                   "split (got %ld)", shape->train.n, s->batch.global);
	return 0;
}

json_t *trn_probe(const struct trn_spec *spec, const struct trn_input_policy *inputs,
                  const char *base_dir)
{
	struct trn_err err = { 0 };
	struct trn_spec *s = malloc(sizeof *s);
	json_t *answer = NULL;
	if (!s)
		return NULL;
	*s = *spec;                    /* a copy to rebase paths in; shares spec->json */
	const char *kind = NULL;       /* "missing": a path that names nothing here */
	struct input in[5];
	int n = list_inputs(s, inputs, in);
	char rebased[TRN_PATH_MAX], given[TRN_PATH_MAX];
	for (int i = 0; i < n; i++) {
		if (!in[i].path[0])
			continue;
		snprintf(given, sizeof given, "%s", in[i].path);
		if (!s->data.name[0] || in[i].path == s->init_from) {
			if (trn_input_rebase(in[i].path, base_dir, rebased, sizeof rebased, in[i].field,
			                     &err) != 0)
				goto fail;
			memcpy(in[i].path, rebased, strlen(rebased) + 1);
		}
		/* messages name the path as the spec gave it and as it was opened */
		int fd = trn_input_open_as(in[i].path, given, in[i].policy, in[i].field, &err);
		if (fd < 0) {
			/* outside the roots is no "missing": that would tell what exists there */
			struct stat st;
			if (!strstr(err.text, " is outside the directories ") &&
			    stat(in[i].path, &st) != 0 && errno == ENOENT)
				kind = "missing";
			goto fail;
		}
		close(fd);
	}
	struct trn_dataset shape;
	if (trn_dataset_shape(&shape, s, inputs, &err) != 0)
		goto fail;
	if (s->init_from[0]) {
		struct trn_ckpt c;
		if (trn_ckpt_open_input(&c, s->init_from, inputs, "init.from", &err) != 0)
			goto fail;
		trn_ckpt_close(&c);
	}
	if (s->init_hf[0]) {
		/* a directory: its two files are opened by trn_hf_check under inputs */
		if (trn_input_rebase(s->init_hf, base_dir, rebased, sizeof rebased, "init.hf",
		                     &err) != 0)
			goto fail;
		int gpt = s->model.type == TRN_MODEL_GPT;
		/* gpt: the vocabulary trn_gpt_layout_init settles on */
		long a = gpt ? (s->model.vocab ? s->model.vocab
		                               : s->data.format == TRN_DATA_TEXT ? 256 : 50257)
		             : shape.dim;
		if (trn_hf_check(s, rebased, a, gpt ? 0 : shape.n_classes, inputs, &err) != 0)
			goto fail;
	}
	if (enough_data(s, &shape, &err) != 0)
		goto fail;
	answer = json_pack("{s:b, s:o}", "ok", 1, "shape", trn_dataset_shape_to_json(&shape));
	free(s);
	return answer;
fail:
	free(s);
	answer = trn_probe_failure(err.text);
	if (answer && kind)
		json_object_set_new(answer, "kind", json_string(kind));
	return answer;
}
