/* trainer/capi.c - see capi.h. */
#include "capi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/precision.h"
#include "loss_scale.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "spec/gpt_layout.h"
#include "spec/spec.h"

struct trn_capi_model {
	struct trn_spec spec;
	struct trn_model *m;
	int seq;
	int in_dim;
	float *x16;                    /* the mlp's input rounded to a 16-bit dtype, owned */
};

struct trn_capi_optim {
	struct trn_spec spec;
	struct trn_param *params;
	struct trn_optim opt;
};

struct trn_capi_loss_scale {
	struct trn_loss_scale ls;
};

static int parse(struct trn_spec *spec, const char *json, char *err, int errlen)
{
	struct trn_err e = { 0 };
	if (trn_spec_from_string(spec, json, &e) == 0)
		return 0;
	snprintf(err, (size_t)errlen, "%s", e.text);
	return -1;
}

struct trn_capi_model *trn_capi_model_new(const char *spec_json, int in_dim, int n_classes,
                                          int vocab, int max_batch, char *err, int errlen)
{
	struct trn_capi_model *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, (size_t)errlen, "out of memory");
		return NULL;
	}
	if (parse(&h->spec, spec_json, err, errlen) != 0) {
		free(h);
		return NULL;
	}
	struct trn_dataset ds;
	memset(&ds, 0, sizeof ds);
	ds.task = h->spec.model.type == TRN_MODEL_MLP ? TRN_TASK_CLASSIFY : TRN_TASK_TOKENS;
	ds.dim = in_dim;
	ds.n_classes = n_classes;
	ds.vocab = vocab;
	ds.seq = h->spec.model.seq;
	h->seq = h->spec.model.seq;
	h->in_dim = in_dim;
	struct trn_err e = { 0 };
	h->m = trn_model_new(&h->spec, &ds, max_batch, &e);
	if (!h->m) {
		snprintf(err, (size_t)errlen, "%s", e.text);
		trn_spec_release(&h->spec);
		free(h);
		return NULL;
	}
	trn_model_init_weights(h->m, h->spec.seed);
	return h;
}

void trn_capi_model_free(struct trn_capi_model *h)
{
	if (!h)
		return;
	trn_model_free(h->m);
	trn_spec_release(&h->spec);
	free(h->x16);
	free(h);
}

long trn_capi_model_n_floats(const struct trn_capi_model *h) { return h->m->n_floats; }
int trn_capi_model_n_params(const struct trn_capi_model *h) { return h->m->n_params; }
float *trn_capi_model_weights(struct trn_capi_model *h) { return h->m->w; }
float *trn_capi_model_grads(struct trn_capi_model *h) { return h->m->g; }

const char *trn_capi_model_param(const struct trn_capi_model *h, int i, long *offset, long *numel)
{
	if (i < 0 || i >= h->m->n_params)
		return NULL;
	*offset = h->m->params[i].offset;
	*numel = h->m->params[i].numel;
	return h->m->params[i].name;
}

double trn_capi_model_step(struct trn_capi_model *h, const float *x, const int *tokens,
                           const int *targets, int n)
{
	return trn_capi_model_step_scaled(h, x, tokens, targets, n, 1.0f);
}

/* x rounded to the model's 16-bit dtype in h's own buffer, or x itself for
 * fp32 (and gpt, x NULL); NULL when the buffer cannot be had. */
static const float *model_input(struct trn_capi_model *h, const float *x, int n)
{
	if (!x || h->m->dtype == TRN_DTYPE_FP32)
		return x;
	size_t len = (size_t)h->m->max_batch * (size_t)h->in_dim;
	if (!h->x16 && !(h->x16 = malloc(sizeof(float) * len)))
		return NULL;
	memcpy(h->x16, x, sizeof(float) * (size_t)n * (size_t)h->in_dim);
	trn_model_round(h->m, h->x16, (long)n * h->in_dim);
	return h->x16;
}

double trn_capi_model_step_scaled(struct trn_capi_model *h, const float *x, const int *tokens,
                                  const int *targets, int n, float scale)
{
	if (n < 1 || n > h->m->max_batch)
		return NAN;
	const float *inp = model_input(h, x, n);
	if (x && !inp)
		return NAN;
	/* the model only reads the batch: the casts lend it arrays it may not write */
	struct trn_batch b = {
		.n = n, .cap = n, .seq = h->seq, .x = (float *)inp,
		.tokens = (int32_t *)tokens, .targets = (int32_t *)targets,
	};
	trn_model_zero_grad(h->m);
	double loss = trn_model_forward(h->m, &b, NULL);
	trn_model_backward(h->m, &b, scale);
	return loss;
}

int trn_capi_model_gpt_logits(struct trn_capi_model *h, const int *tokens, int n, float *out)
{
	if (h->spec.model.type != TRN_MODEL_GPT || n < 1 || n > h->m->max_batch)
		return -1;
	/* any target in range will do: the losses are not asked for */
	struct trn_batch b = {
		.n = n, .cap = n, .seq = h->seq,
		.tokens = (int32_t *)tokens, .targets = (int32_t *)tokens,
	};
	trn_model_forward(h->m, &b, NULL);
	const struct gpt *g = (const struct gpt *)h->m;
	memcpy(out, g->logits, sizeof(float) * (size_t)n * (size_t)g->T * (size_t)g->V);
	return 0;
}

struct trn_capi_optim *trn_capi_optim_new(const char *spec_json, const char *const *names,
                                          const long *numels, int n, char *err, int errlen)
{
	struct trn_capi_optim *h = calloc(1, sizeof *h);
	if (!h || !(h->params = calloc((size_t)n, sizeof *h->params))) {
		free(h);
		snprintf(err, (size_t)errlen, "out of memory");
		return NULL;
	}
	if (parse(&h->spec, spec_json, err, errlen) != 0) {
		free(h->params);
		free(h);
		return NULL;
	}
	long off = 0;
	for (int i = 0; i < n; i++) {
		snprintf(h->params[i].name, sizeof h->params[i].name, "%s", names[i]);
		h->params[i].ndim = 1;
		h->params[i].shape[0] = (int)numels[i];
		h->params[i].numel = numels[i];
		h->params[i].offset = off;
		off += numels[i];
	}
	struct trn_err e = { 0 };
	if (trn_optim_init(&h->opt, &h->spec.optimizer, h->params, n, off, &e) != 0) {
		snprintf(err, (size_t)errlen, "%s", e.text);
		trn_capi_optim_free(h);
		return NULL;
	}
	return h;
}

void trn_capi_optim_free(struct trn_capi_optim *h)
{
	if (!h)
		return;
	trn_optim_release(&h->opt);
	trn_spec_release(&h->spec);
	free(h->params);
	free(h);
}

void trn_capi_optim_step(struct trn_capi_optim *h, float *w, const float *g, double lr)
{
	trn_optim_step(&h->opt, w, g, lr, NULL);
}

float *trn_capi_optim_state(struct trn_capi_optim *h, int which)
{
	return which == 0 ? h->opt.m : h->opt.v;
}

double trn_capi_schedule_lr(const char *spec_json, long steps_per_epoch, long total_steps,
                            long step, char *err, int errlen)
{
	struct trn_spec spec;
	if (parse(&spec, spec_json, err, errlen) != 0)
		return NAN;
	struct trn_schedule s;
	trn_schedule_init(&s, &spec, steps_per_epoch, total_steps);
	trn_spec_release(&spec);
	return trn_schedule_lr(&s, step);
}

void trn_capi_fp32_to_fp16(uint16_t *out, const float *inp, long n)
{
	kern_fp32_to_fp16_cpu(out, inp, n);
}

void trn_capi_fp16_to_fp32(float *out, const uint16_t *inp, long n)
{
	kern_fp16_to_fp32_cpu(out, inp, n);
}

void trn_capi_fp32_to_bf16(uint16_t *out, const float *inp, long n)
{
	kern_fp32_to_bf16_cpu(out, inp, n);
}

void trn_capi_bf16_to_fp32(float *out, const uint16_t *inp, long n)
{
	kern_bf16_to_fp32_cpu(out, inp, n);
}

void trn_capi_round_fp16(float *x, long n) { kern_round_fp16_cpu(x, n); }
void trn_capi_round_bf16(float *x, long n) { kern_round_bf16_cpu(x, n); }
int trn_capi_nonfinite(const float *x, long n) { return kern_nonfinite_cpu(x, n); }

struct trn_capi_loss_scale *trn_capi_loss_scale_new(const char *spec_json, char *err, int errlen)
{
	struct trn_spec spec;
	if (parse(&spec, spec_json, err, errlen) != 0)
		return NULL;
	struct trn_capi_loss_scale *h = calloc(1, sizeof *h);
	if (!h)
		snprintf(err, (size_t)errlen, "out of memory");
	else
		trn_loss_scale_init(&h->ls, &spec.precision);
	trn_spec_release(&spec);
	return h;
}

void trn_capi_loss_scale_free(struct trn_capi_loss_scale *h)
{
	free(h);
}

int trn_capi_loss_scale_update(struct trn_capi_loss_scale *h, int found_nonfinite)
{
	return trn_loss_scale_update(&h->ls, found_nonfinite);
}

double trn_capi_loss_scale_state(const struct trn_capi_loss_scale *h, long *clean_steps,
                                 long *skipped)
{
	if (clean_steps)
		*clean_steps = h->ls.clean_steps;
	if (skipped)
		*skipped = h->ls.skipped;
	return h->ls.scale;
}

const char *trn_capi_loss_scale_mode(const struct trn_capi_loss_scale *h)
{
	return trn_loss_scale_mode_name(h->ls.mode);
}
