/* trainer/model.c - the parameter table shared by the models, and dispatch. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct trn_model *build(const struct trn_spec *spec, const struct trn_dataset *ds,
                               int max_batch, int layout_only, struct trn_err *err)
{
	if (max_batch < 1) {
		trn_err_set(err, "model: micro-batch must be at least 1 (got %d)", max_batch);
		return NULL;
	}
	struct trn_model *m = NULL;
	switch (spec->model.type) {
	case TRN_MODEL_MLP:
		if (ds->task != TRN_TASK_CLASSIFY) {
			trn_err_set(err, "model.type: mlp needs image data (data.format idx)");
			return NULL;
		}
		m = trn_mlp_new(spec, ds, max_batch, layout_only, err);
		break;
	case TRN_MODEL_GPT:
		if (ds->task != TRN_TASK_TOKENS) {
			trn_err_set(err, "model.type: gpt needs token data (data.format tokens_u16 or text)");
			return NULL;
		}
		m = trn_gpt_new(spec, ds, max_batch, layout_only, err);
		break;
	default:
		trn_err_set(err, "model.type: unknown model type");
		return NULL;
	}
	if (m)
		m->dtype = spec->precision.compute;
	return m;
}

struct trn_model *trn_model_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                int max_batch, struct trn_err *err)
{
	return build(spec, ds, max_batch, 0, err);
}

struct trn_model *trn_model_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, struct trn_err *err)
{
	return build(spec, ds, max_batch, 1, err);
}

void trn_model_free(struct trn_model *m)
{
	if (m)
		m->ops->free(m);
}

double trn_model_forward(struct trn_model *m, const struct trn_batch *b, struct trn_fwd_stats *st)
{
	return m->ops->forward(m, b, st);
}

void trn_model_backward(struct trn_model *m, const struct trn_batch *b, float scale)
{
	m->ops->backward(m, b, scale);
}

void trn_model_init_weights(struct trn_model *m, uint64_t seed)
{
	m->ops->init_weights(m, seed);
}

void trn_model_zero_grad(struct trn_model *m)
{
	memset(m->g, 0, sizeof(float) * (size_t)m->n_floats);
}

const struct trn_param *trn_model_param(const struct trn_model *m, const char *name)
{
	for (int i = 0; i < m->n_params; i++)
		if (strcmp(m->params[i].name, name) == 0)
			return &m->params[i];
	return NULL;
}

int trn_model_add_param(struct trn_model *m, const char *name, int ndim, const int *shape)
{
	struct trn_param *grown = realloc(m->params, sizeof *grown * (size_t)(m->n_params + 1));
	if (!grown)
		return -1;
	m->params = grown;
	struct trn_param *p = &m->params[m->n_params];
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->ndim = ndim;
	p->numel = 1;
	for (int i = 0; i < ndim; i++) {
		p->shape[i] = shape[i];
		p->numel *= shape[i];
	}
	p->offset = m->n_floats;
	m->n_floats += p->numel;
	return m->n_params++;
}

int trn_model_alloc(struct trn_model *m)
{
	m->w = calloc((size_t)m->n_floats, sizeof(float));
	m->g = calloc((size_t)m->n_floats, sizeof(float));
	return m->w && m->g ? 0 : -1;
}

void trn_model_release(struct trn_model *m)
{
	free(m->params);
	free(m->w);
	free(m->g);
	m->params = NULL;
	m->w = m->g = NULL;
}

double trn_model_score(const float *logits, const float *losses, const int32_t *targets,
                       long rows, int classes, struct trn_fwd_stats *st)
{
	double sum = 0;
	long correct = 0, counted = 0;
	for (long r = 0; r < rows; r++) {
		if (targets[r] < 0)
			continue;
		sum += losses[r];
		counted++;
		const float *row = logits + r * classes;
		int best = 0;
		for (int j = 1; j < classes; j++)
			if (row[j] > row[best])
				best = j;
		correct += best == targets[r];
	}
	if (st) {
		st->loss_sum += sum;
		st->correct += correct;
		st->count += counted;
	}
	return counted ? sum / (double)counted : 0.0;
}
