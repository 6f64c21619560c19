/* trainer/spec/gpt_layout.c - see gpt_layout.h. */
#include "gpt_layout.h"

#include <stdio.h>
#include <stdlib.h>

const char *const trn_gpt_block_names[TRN_GPT_BLOCK_PARAMS] = {
	"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
	"attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
	"mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias",
};

static int add_params(struct gpt *g)
{
	struct trn_model *base = &g->base;
	int C = g->C;
	int wte[2] = { g->V, C }, wpe[2] = { g->T, C }, vec[1] = { C };
	int qkvw[2] = { 3 * C, C }, qkvb[1] = { 3 * C }, projw[2] = { C, C };
	int fcw[2] = { 4 * C, C }, fcb[1] = { 4 * C }, fcpw[2] = { C, 4 * C };
	if (trn_model_add_param(base, "wte.weight", 2, wte) < 0 ||
	    trn_model_add_param(base, "wpe.weight", 2, wpe) < 0)
		return -1;
	const int *shapes[P_PER_BLOCK] = { vec, vec, qkvw, qkvb, projw, vec, vec, vec, fcw, fcb, fcpw, vec };
	const int ndims[P_PER_BLOCK] = { 1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1 };
	for (int l = 0; l < g->L; l++)
		for (int k = 0; k < P_PER_BLOCK; k++) {
			char name[TRN_PARAM_NAME];
			snprintf(name, sizeof name, "blocks.%d.%s", l, trn_gpt_block_names[k]);
			if (trn_model_add_param(base, name, ndims[k], shapes[k]) < 0)
				return -1;
		}
	if (trn_model_add_param(base, "norm_f.weight", 1, vec) < 0 ||
	    trn_model_add_param(base, "norm_f.bias", 1, vec) < 0)
		return -1;
	trn_model_set_blocks(base, g->L, 2, P_PER_BLOCK);
	for (int k = 0; k < P_PER_BLOCK && g->L > 0; k++)
		g->rel[k] = base->params[GPT_BLOCK_PARAM(0, k)].offset -
		            base->params[GPT_BLOCK_PARAM(0, 0)].offset;
	return 0;
}

/* Lays one block's activations out from base (with x when with_x), or with
 * base NULL only counts them; returns their floats. */
static long carve_block(const struct gpt *g, long B, struct gpt_block_acts *a, float *base,
                        int with_x)
{
	long BT = B * g->T, C = g->C, att = B * g->NH * g->T * g->T;
	long used = 0;
#define TAKE(ptr, n) do { if (base) (ptr) = base + used; used += (n); } while (0)
	if (with_x)
		TAKE(a->x, BT * C);
	TAKE(a->ln1, BT * C); TAKE(a->ln1_mean, BT); TAKE(a->ln1_rstd, BT);
	TAKE(a->qkv, BT * 3 * C); TAKE(a->atty, BT * C); TAKE(a->att, att);
	TAKE(a->res2, BT * C);
	TAKE(a->ln2, BT * C); TAKE(a->ln2_mean, BT); TAKE(a->ln2_rstd, BT);
	TAKE(a->fch, BT * 4 * C); TAKE(a->fch_gelu, BT * 4 * C);
#undef TAKE
	return used;
}

/* Lays every activation buffer of mode out in one arena. With arena NULL it
 * only counts; the same walk then hands out the pointers, so the two cannot
 * disagree. */
long trn_gpt_carve(struct gpt *g, enum trn_offload mode, long B, float *arena)
{
	long BT = B * g->T, C = g->C, att = B * g->NH * g->T * g->T;
	long used = 0;
#define TAKE(ptr, n) do { if (arena) (ptr) = arena + used; used += (n); } while (0)
#define BLOCK(i, with_x) (used += carve_block(g, B, arena ? &g->blocks[i] : NULL, \
                                              arena ? arena + used : NULL, with_x))
	switch (mode) {
	case TRN_OFFLOAD_RECOMPUTE:
		TAKE(g->inputs, g->L * BT * C);
		BLOCK(0, 0);
		break;
	case TRN_OFFLOAD_CPU:
		BLOCK(0, 1);
		BLOCK(1, 1);
		break;
	default:
		for (int l = 0; l < g->L; l++)
			BLOCK(l, 1);
	}
	TAKE(g->top, BT * C);
	TAKE(g->lnf, BT * C); TAKE(g->lnf_mean, BT); TAKE(g->lnf_rstd, BT);
	TAKE(g->logits, BT * g->V); TAKE(g->losses, BT); TAKE(g->lse, BT);
	TAKE(g->tmp_c, BT * C);
	TAKE(g->dres, BT * C); TAKE(g->dln, BT * C); TAKE(g->datty, BT * C);
	TAKE(g->dbig, BT * 4 * C); TAKE(g->dqkv, BT * 3 * C);
	TAKE(g->datt, att); TAKE(g->dlogits, BT * g->V);
#undef BLOCK
#undef TAKE
	return used;
}

long *trn_gpt_block_floats(const struct gpt *g, long B)
{
	long *floats = malloc(sizeof *floats * (size_t)(g->L + 1));
	for (int l = 0; floats && l < g->L; l++)
		floats[l] = carve_block(g, B, NULL, NULL, 1);
	return floats;
}

/* Sizes the activations of mode (act_bytes, act_bytes_none, act_host_bytes). */
static int size_acts(struct gpt *g, enum trn_offload mode, int B)
{
	int n_blocks = mode == TRN_OFFLOAD_CPU ? 2 : mode == TRN_OFFLOAD_RECOMPUTE ? 1 : g->L;
	g->base.act_offload = mode;
	g->blocks = calloc((size_t)n_blocks, sizeof *g->blocks);
	if (!g->blocks)
		return -1;
	g->base.act_bytes = trn_gpt_carve(g, mode, B, NULL) * (long)sizeof(float);
	g->base.act_bytes_none = trn_gpt_carve(g, TRN_OFFLOAD_NONE, B, NULL) * (long)sizeof(float);
	if (mode == TRN_OFFLOAD_CPU) {
		long *floats = trn_gpt_block_floats(g, B);
		if (!floats)
			return -1;
		g->base.act_host_bytes = trn_act_offload_host_floats(g->L, floats) * (long)sizeof(float);
		free(floats);
	}
	return 0;
}

int trn_gpt_layout_init(struct gpt *g, const struct trn_spec *spec, const struct trn_dataset *ds,
                        int max_batch, struct trn_err *err)
{
	const struct trn_spec_model *ms = &spec->model;
	int vocab = ms->vocab ? ms->vocab : (spec->data.format == TRN_DATA_TEXT ? 256 : 50257);
	if (ds->vocab > vocab)
		return trn_err_set(err, "model.vocab: the data holds token %d, past the vocabulary of %d",
		                   ds->vocab - 1, vocab);
	g->L = ms->layers;
	g->NH = ms->heads;
	g->C = ms->dim;
	g->T = ms->seq;
	g->V = vocab;
	struct trn_model *base = &g->base;
	base->max_batch = max_batch;
	base->tokens_per_sample = g->T;
	if (add_params(g) < 0 || size_acts(g, spec->offload.activations, max_batch) < 0)
		return trn_err_set(err, "model: out of memory for %d layers of dim %d at micro-batch "
		                   "%d x %d", ms->layers, ms->dim, max_batch, ms->seq);
	/* GEMM FLOPs per sample as executed: per layer 24TC^2 forward (qkv 3, proj 1,
	 * fc 4, fc proj 4: 12C^2 multiply-adds per token) and twice that backward,
	 * attention 4T^2C forward (QK^T and AV over the full square) and 8T^2C
	 * backward; the tied head 2TCV forward and 4TCV backward. */
	double T = g->T, C = g->C, V = g->V;
	base->flops_per_sample = g->L * (72.0 * T * C * C + 12.0 * T * T * C) + 6.0 * T * C * V;
	return 0;
}

void trn_gpt_layout_release(struct gpt *g)
{
	free(g->blocks);
	g->blocks = NULL;
	trn_model_release(&g->base);
}

static void layout_free(struct trn_model *base)
{
	trn_gpt_layout_release((struct gpt *)base);
	free(base);
}

static const struct trn_model_ops layout_ops = { .free = layout_free };

struct trn_model *trn_gpt_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                 int max_batch, struct trn_err *err)
{
	struct gpt *g = calloc(1, sizeof *g);
	if (!g) {
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	g->base.ops = &layout_ops;
	if (trn_gpt_layout_init(g, spec, ds, max_batch, err) != 0) {
		layout_free(&g->base);
		return NULL;
	}
	return &g->base;
}
