/* trainer/spec/mlp_layout.c - see mlp_layout.h. */
#include "mlp_layout.h"

#include <stdio.h>
#include <stdlib.h>

long trn_mlp_block_floats(const struct mlp *m, int j)
{
	return (m->act == TRN_ACT_GELU ? 2L : 1L) * m->base.max_batch * m->dims[j + 1];
}


long trn_mlp_carve(struct mlp *m, enum trn_offload mode, long B, float *arena)
{
	int last = m->n_layers - 1, gelu = m->act == TRN_ACT_GELU;
	long used = 0;
#define TAKE(ptr, n) do { if (arena) (ptr) = arena + used; used += (n); } while (0)
	if (mode == TRN_OFFLOAD_RECOMPUTE && gelu && last > 0) {
		/* one pre for all hidden layers, recomputed for backward */
		long wide = 0;
		for (int j = 0; j < last; j++)
			wide = m->dims[j + 1] > wide ? m->dims[j + 1] : wide;
		float *scratch = NULL;
		TAKE(scratch, B * wide);
		for (int j = 0; j < last; j++) {
			if (arena)
				m->pre[j] = scratch;
			TAKE(m->post[j], B * m->dims[j + 1]);
		}
	} else if (mode == TRN_OFFLOAD_CPU && last > 0) {
		long slot = 0;
		for (int j = 0; j < last; j++)
			slot = trn_mlp_block_floats(m, j) > slot ? trn_mlp_block_floats(m, j) : slot;
		TAKE(m->slot[0], slot);
		TAKE(m->slot[1], slot);
	} else {
		for (int j = 0; j < last; j++) {
			TAKE(m->pre[j], B * m->dims[j + 1]);
			if (gelu)
				TAKE(m->post[j], B * m->dims[j + 1]);
			else if (arena)
				m->post[j] = m->pre[j];
		}
	}
	TAKE(m->pre[last], B * m->dims[last + 1]);
	TAKE(m->dpre, B * m->widest);
	TAKE(m->dpost, B * m->widest);
	TAKE(m->losses, B);
	TAKE(m->lse, B);
#undef TAKE
	return used;
}


/* Sizes the activations of mode (act_bytes, act_bytes_none, act_host_bytes). */
static void size_acts(struct mlp *m, enum trn_offload mode)
{
	struct trn_model *base = &m->base;
	long B = base->max_batch;
	base->act_offload = mode;
	base->act_bytes = trn_mlp_carve(m, mode, B, NULL) * (long)sizeof(float);
	base->act_bytes_none = trn_mlp_carve(m, TRN_OFFLOAD_NONE, B, NULL) * (long)sizeof(float);
	if (mode == TRN_OFFLOAD_CPU) {
		long floats[MLP_MAX_LAYERS];
		int n_blocks = m->n_layers - 1;
		for (int j = 0; j < n_blocks; j++)
			floats[j] = trn_mlp_block_floats(m, j);
		base->act_host_bytes = trn_act_offload_host_floats(n_blocks, floats) *
		                       (long)sizeof(float);
	}
}

int trn_mlp_layout_init(struct mlp *m, const struct trn_spec *spec, const struct trn_dataset *ds,
                        int max_batch, struct trn_err *err)
{
	struct trn_model *base = &m->base;
	base->max_batch = max_batch;
	base->tokens_per_sample = 1;
	m->act = spec->model.activation;
	m->n_layers = spec->model.n_hidden + 1;
	m->dims[0] = ds->dim;
	for (int i = 0; i < spec->model.n_hidden; i++)
		m->dims[i + 1] = spec->model.hidden[i];
	m->dims[m->n_layers] = ds->n_classes;

	double flops = 0;
	for (int i = 0; i < m->n_layers; i++) {
		char name[TRN_PARAM_NAME];
		int wshape[2] = { m->dims[i + 1], m->dims[i] }, bshape[1] = { m->dims[i + 1] };
		snprintf(name, sizeof name, "fc%d.weight", i + 1);
		if (trn_model_add_param(base, name, 2, wshape) < 0)
			return trn_err_set(err, "model: out of memory");
		snprintf(name, sizeof name, "fc%d.bias", i + 1);
		if (trn_model_add_param(base, name, 1, bshape) < 0)
			return trn_err_set(err, "model: out of memory");
		if (m->dims[i + 1] > m->widest)
			m->widest = m->dims[i + 1];
		if (m->dims[i] > m->widest)
			m->widest = m->dims[i];
		/* forward 2, weight gradient 2, input gradient 2 (not for the first layer) */
		flops += (i == 0 ? 4.0 : 6.0) * m->dims[i] * m->dims[i + 1];
	}
	trn_model_set_blocks(base, m->n_layers, 0, 2);
	size_acts(m, spec->offload.activations);
	base->flops_per_sample = flops;
	return 0;
}

void trn_mlp_layout_release(struct mlp *m)
{
	trn_model_release(&m->base);
}

static void layout_free(struct trn_model *base)
{
	trn_mlp_layout_release((struct mlp *)base);
	free(base);
}

static const struct trn_model_ops layout_ops = { .free = layout_free };

struct trn_model *trn_mlp_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                 int max_batch, struct trn_err *err)
{
	struct mlp *m = calloc(1, sizeof *m);
	if (!m) {
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	m->base.ops = &layout_ops;
	if (trn_mlp_layout_init(m, spec, ds, max_batch, err) != 0) {
		layout_free(&m->base);
		return NULL;
	}
	return &m->base;
}
