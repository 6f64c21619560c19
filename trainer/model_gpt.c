/* trainer/model_gpt.c - GPT-2: token + position embeddings, pre-LayerNorm
 * blocks (causal self-attention, GELU MLP, residuals), final LayerNorm and a
 * language-model head tied to the token embedding.
 *
 * Gradients of activations need only one layer's worth of scratch, reused
 * from the top layer down, plus the residual stream's gradient, which each
 * block adds into in place. What backward needs of the forward depends on
 * offload.activations (model.h): "none" keeps every block's activations;
 * "recompute" keeps each block's input (the residual stream entering it)
 * and, right before the block's backward, runs its forward again from there
 * into one block's scratch, shared by all blocks (as far as backward needs:
 * not the MLP's projection and the residual sum); "cpu" computes each block
 * in one of two staging slots and keeps its activations in a host store
 * (trainer/act_offload.h). The recompute runs the same code on the same
 * inputs, roundings included, so all three give the same bits.
 *
 * The parameters of a block are reached only through trn_model_block_*
 * (model.h): with offload.params "cpu" a block computes with its staged
 * weights and into its staged gradients (trainer/param_offload.h), also
 * when "recompute" runs its forward again in backward. The embeddings, the
 * tied head and the final LayerNorm stay resident.
 *
 * With a 16-bit compute dtype (base.dtype) every activation buffer and every
 * activation-gradient buffer is rounded to it right after the op that writes
 * it, as a GPU would store it, while GEMMs, LayerNorm statistics and softmax
 * sums accumulate in fp32. Forward: the embedding output, LayerNorm outputs
 * (their mean and rstd stay fp32), qkv, the attention probabilities and
 * output, both projections' outputs, the residual sums, the MLP's hidden
 * layer before and after GELU, and the logits. The attention kernel forms
 * its output from the probabilities before they are stored, as a fused
 * kernel does, and its backward's score gradient (datt) is internal scratch.
 * Backward: dlogits (they carry the loss scale) and every gradient buffer an
 * op writes or adds into (dln, dres, dbig, datty, dqkv). The per-token losses
 * and lse stay fp32 (reductions).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/softmax_xent.h"
#include "rng.h"
#include "spec/gpt_layout.h"


static float *wp(struct gpt *g, int idx) { return g->base.w + g->base.params[idx].offset; }
static float *gp(struct gpt *g, int idx) { return g->base.g + g->base.params[idx].offset; }

/* Where block l's input goes in forward (the embedding's output for block
 * 0, block l - 1's output otherwise; gpt.top for l = L). With "cpu" this
 * claims block l's staging slot, once the copy of block l - 2 out of it is
 * done. */
static float *fwd_input(struct gpt *g, int l)
{
	long btc = (long)g->base.max_batch * g->T * g->C;
	if (l == g->L)
		return g->top;
	switch (g->base.act_offload) {
	case TRN_OFFLOAD_RECOMPUTE:
		return g->inputs + l * btc;
	case TRN_OFFLOAD_CPU:
		return g->blocks[trn_act_offload_fwd_begin(&g->off, l)].x;
	default:
		return g->blocks[l].x;
	}
}

/* The buffers block l's forward writes to, its input in place. */
static struct gpt_block_acts *fwd_acts(struct gpt *g, int l)
{
	long btc = (long)g->base.max_batch * g->T * g->C;
	switch (g->base.act_offload) {
	case TRN_OFFLOAD_RECOMPUTE:
		g->blocks[0].x = g->inputs + l * btc;
		return &g->blocks[0];
	case TRN_OFFLOAD_CPU:
		return &g->blocks[l % 2];
	default:
		return &g->blocks[l];
	}
}

/* Block l's forward from a->x with its weights bw as far as backward needs
 * it: everything in a. Each op is followed by the rounding of what it wrote
 * (16-bit storage). */
static void block_fwd(struct gpt *g, const float *bw, struct gpt_block_acts *a)
{
	struct trn_model *base = &g->base;
	int B = g->B, T = g->T, C = g->C, NH = g->NH, BT = B * g->T;
	long btc = (long)BT * C;
#define W(which) (bw + g->rel[which])
	kern_layernorm_fwd_cpu(a->ln1, a->ln1_mean, a->ln1_rstd, a->x, W(P_LN1W), W(P_LN1B), BT, C);
	trn_model_round(base, a->ln1, btc);
	kern_matmul_fwd_cpu(a->qkv, a->ln1, W(P_QKVW), W(P_QKVB), BT, C, 3 * C);
	trn_model_round(base, a->qkv, btc * 3);
	kern_attention_fwd_cpu(a->atty, NULL, a->att, a->qkv, B, T, C, NH);
	trn_model_round(base, a->atty, btc);
	trn_model_round(base, a->att, (long)B * NH * T * T);
	kern_matmul_fwd_cpu(g->tmp_c, a->atty, W(P_PROJW), W(P_PROJB), BT, C, C);
	trn_model_round(base, g->tmp_c, btc);
	kern_residual_fwd_cpu(a->res2, a->x, g->tmp_c, btc);
	trn_model_round(base, a->res2, btc);
	kern_layernorm_fwd_cpu(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(P_LN2W), W(P_LN2B), BT, C);
	trn_model_round(base, a->ln2, btc);
	kern_matmul_fwd_cpu(a->fch, a->ln2, W(P_FCW), W(P_FCB), BT, C, 4 * C);
	trn_model_round(base, a->fch, btc * 4);
	kern_gelu_fwd_cpu(a->fch_gelu, a->fch, btc * 4);
	trn_model_round(base, a->fch_gelu, btc * 4);
#undef W
}

static double gpt_forward(struct trn_model *base, const struct trn_batch *b, struct trn_fwd_stats *st)
{
	struct gpt *g = (struct gpt *)base;
	int B = b->n, T = g->T, C = g->C, V = g->V, BT = B * g->T;
	long btc = (long)BT * C;
	g->B = B;
	int lf = 2 + g->L * P_PER_BLOCK;   /* index of norm_f.weight */

	/* each op is followed by the rounding of what it wrote (16-bit storage) */
	trn_model_fwd_start(base);
	float *x = fwd_input(g, 0);
	kern_embedding_fwd_cpu(x, b->tokens, wp(g, 0), wp(g, 1), B, T, C);
	trn_model_round(base, x, btc);
	for (int l = 0; l < g->L; l++) {
		const float *bw = trn_model_block_fwd(base, l);
		struct gpt_block_acts *a = fwd_acts(g, l);
		block_fwd(g, bw, a);
		kern_matmul_fwd_cpu(g->tmp_c, a->fch_gelu, bw + g->rel[P_FCPW], bw + g->rel[P_FCPB],
		                    BT, 4 * C, C);
		trn_model_round(base, g->tmp_c, btc);
		x = fwd_input(g, l + 1);
		kern_residual_fwd_cpu(x, a->res2, g->tmp_c, btc);
		trn_model_round(base, x, btc);
		if (base->act_offload == TRN_OFFLOAD_CPU)
			trn_act_offload_fwd_end(&g->off, l);
	}
	kern_layernorm_fwd_cpu(g->lnf, g->lnf_mean, g->lnf_rstd, x, wp(g, lf), wp(g, lf + 1), BT, C);
	trn_model_round(base, g->lnf, btc);
	kern_matmul_fwd_cpu(g->logits, g->lnf, wp(g, 0), NULL, BT, C, V);
	trn_model_round(base, g->logits, (long)BT * V);
	kern_softmax_xent_fwd_cpu(g->losses, g->lse, g->logits, b->targets, BT, V);

	return trn_model_score(g->logits, g->losses, b->targets, BT, V, st);
}

/* Block l's activations for its backward: with "recompute" its forward
 * runs again from its saved input, with its weights bw; with "cpu" they
 * come back from the host store (and block l - 1's start to). */
static struct gpt_block_acts *bwd_acts(struct gpt *g, int l, const float *bw)
{
	struct gpt_block_acts *a;
	switch (g->base.act_offload) {
	case TRN_OFFLOAD_RECOMPUTE:
		a = fwd_acts(g, l);
		block_fwd(g, bw, a);
		return a;
	case TRN_OFFLOAD_CPU:
		return &g->blocks[trn_act_offload_bwd_begin(&g->off, l)];
	default:
		return &g->blocks[l];
	}
}

/* Gradients of activations overwrite their buffers (the _set kernels) where
 * a buffer starts afresh, so nothing is zeroed first; only the residual
 * stream's gradient dres accumulates, from both branches of every block. */
static void gpt_backward(struct trn_model *base, const struct trn_batch *b, float scale)
{
	struct gpt *g = (struct gpt *)base;
	int B = g->B, T = g->T, C = g->C, NH = g->NH, V = g->V, BT = B * g->T;
	long btc = (long)BT * C;
	int lf = 2 + g->L * P_PER_BLOCK;

	long counted = 0;
	for (long r = 0; r < BT; r++)
		counted += b->targets[r] >= 0;
	if (!counted) {
		/* nothing to learn from, but every parameter is still final for this
		 * backward: data parallel waits for all of them */
		trn_model_grads_ready_as_they_are(base);
		return;
	}

	/* as in forward, each op is followed by the rounding of the activation
	 * gradient it wrote; parameter gradients are rounded by grad_ready */
	kern_softmax_xent_bwd_set_cpu(g->dlogits, scale / (float)counted, g->logits, g->lse,
	                              b->targets, BT, V);
	trn_model_round(base, g->dlogits, (long)BT * V);
	kern_matmul_bwd_set_cpu(g->dln, gp(g, 0), NULL, g->dlogits, g->lnf, wp(g, 0), BT, C, V);
	trn_model_round(base, g->dln, btc);
	kern_layernorm_bwd_set_cpu(g->dres, gp(g, lf), gp(g, lf + 1), g->dln, g->top, wp(g, lf),
	                           g->lnf_mean, g->lnf_rstd, BT, C);
	trn_model_round(base, g->dres, btc);
	trn_model_grad_ready(base, lf + 1);
	trn_model_grad_ready(base, lf);

	for (int l = g->L - 1; l >= 0; l--) {
		float *bg;
		const float *bw = trn_model_block_bwd(base, l, &bg);
		struct gpt_block_acts *a = bwd_acts(g, l, bw);
#define W(which) (bw + g->rel[which])
#define G(which) (bg + g->rel[which])
#define READY(which) trn_model_block_grad_ready(base, l, GPT_BLOCK_PARAM(l, which))
		/* output = res2 + fcproj: dres flows to both unchanged */
		kern_matmul_bwd_set_cpu(g->dbig, G(P_FCPW), G(P_FCPB), g->dres, a->fch_gelu, W(P_FCPW),
		                        BT, 4 * C, C);
		trn_model_round(base, g->dbig, btc * 4);
		READY(P_FCPB);
		READY(P_FCPW);
		kern_gelu_bwd_set_cpu(g->dbig, a->fch, g->dbig, btc * 4);
		trn_model_round(base, g->dbig, btc * 4);
		kern_matmul_bwd_set_cpu(g->dln, G(P_FCW), G(P_FCB), g->dbig, a->ln2, W(P_FCW), BT, C,
		                        4 * C);
		trn_model_round(base, g->dln, btc);
		READY(P_FCB);
		READY(P_FCW);
		kern_layernorm_bwd_cpu(g->dres, G(P_LN2W), G(P_LN2B), g->dln, a->res2, W(P_LN2W),
		                       a->ln2_mean, a->ln2_rstd, BT, C);
		trn_model_round(base, g->dres, btc);
		READY(P_LN2B);
		READY(P_LN2W);
		/* res2 = x + attproj */
		kern_matmul_bwd_set_cpu(g->datty, G(P_PROJW), G(P_PROJB), g->dres, a->atty, W(P_PROJW),
		                        BT, C, C);
		trn_model_round(base, g->datty, btc);
		READY(P_PROJB);
		READY(P_PROJW);
		kern_attention_bwd_set_cpu(g->dqkv, NULL, g->datt, g->datty, a->qkv, a->att, B, T, C, NH);
		trn_model_round(base, g->dqkv, btc * 3);
		kern_matmul_bwd_set_cpu(g->dln, G(P_QKVW), G(P_QKVB), g->dqkv, a->ln1, W(P_QKVW), BT, C,
		                        3 * C);
		trn_model_round(base, g->dln, btc);
		READY(P_QKVB);
		READY(P_QKVW);
		kern_layernorm_bwd_cpu(g->dres, G(P_LN1W), G(P_LN1B), g->dln, a->x, W(P_LN1W),
		                       a->ln1_mean, a->ln1_rstd, BT, C);
		trn_model_round(base, g->dres, btc);
		READY(P_LN1B);
		READY(P_LN1W);
		trn_model_block_bwd_end(base, l);
#undef W
#undef G
#undef READY
	}
	trn_model_blocks_bwd_done(base);
	kern_embedding_bwd_cpu(gp(g, 0), gp(g, 1), g->dres, b->tokens, B, T, C, V);
	/* the tied embedding also took the head's gradient above: final only now */
	trn_model_grad_ready(base, 1);
	trn_model_grad_ready(base, 0);
}

/* GPT-2's initialisation: N(0, 0.02) for embeddings and linear weights, the
 * residual projections scaled by 1/sqrt(2 * layers), zero biases, LayerNorm
 * weights 1. */
static void gpt_init_weights(struct trn_model *base, uint64_t seed)
{
	struct gpt *g = (struct gpt *)base;
	struct trn_rng rng;
	trn_rng_seed(&rng, seed, 1);
	double proj_std = 0.02 / sqrt(2.0 * g->L);
	for (int i = 0; i < base->n_params; i++) {
		const struct trn_param *p = &base->params[i];
		float *w = base->w + p->offset;
		const char *name = p->name;
		size_t len = strlen(name);
		int is_bias = len >= 4 && strcmp(name + len - 4, "bias") == 0;
		if (strstr(name, "norm")) {
			float v = is_bias ? 0.0f : 1.0f;
			for (long k = 0; k < p->numel; k++)
				w[k] = v;
		} else if (is_bias) {
			memset(w, 0, sizeof(float) * (size_t)p->numel);
		} else {
			double std = strstr(name, ".proj.weight") ? proj_std : 0.02;
			trn_rng_fill_normal(&rng, w, p->numel, std);
		}
	}
}

static void gpt_free(struct trn_model *base)
{
	struct gpt *g = (struct gpt *)base;
	trn_act_offload_release(&g->off);
	free(g->arena);
	trn_gpt_layout_release(g);
	free(g);
}

const struct trn_model_ops trn_gpt_ops = {
	.forward = gpt_forward,
	.backward = gpt_backward,
	.init_weights = gpt_init_weights,
	.free = gpt_free,
};


/* Lays the activations of g's offload.activations out in one arena. */
static int alloc_acts(struct gpt *g, int B)
{
	long total = trn_gpt_carve(g, g->base.act_offload, B, NULL);
	g->arena = malloc(sizeof(float) * (size_t)total);
	if (!g->arena)
		return -1;
	trn_gpt_carve(g, g->base.act_offload, B, g->arena);
	if (g->base.act_offload != TRN_OFFLOAD_CPU)
		return 0;
	long *floats = trn_gpt_block_floats(g, B);
	int rc = floats ? trn_act_offload_init(&g->off, g->L, floats, g->blocks[0].x, g->blocks[1].x,
	                                       NULL, 0) : -1;
	free(floats);
	return rc;
}

struct trn_model *trn_gpt_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                              int max_batch, struct trn_err *err)
{
	const struct trn_spec_model *ms = &spec->model;
	struct gpt *g = calloc(1, sizeof *g);
	if (!g) {
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	struct trn_model *base = &g->base;
	base->ops = &trn_gpt_ops;
	if (trn_gpt_layout_init(g, spec, ds, max_batch, err) != 0) {
		gpt_free(base);
		return NULL;
	}
	if (trn_model_alloc(base) < 0 || alloc_acts(g, max_batch) < 0) {
		gpt_free(base);
		trn_err_set(err, "model: out of memory for %d layers of dim %d at micro-batch %d x %d",
		            ms->layers, ms->dim, max_batch, ms->seq);
		return NULL;
	}
	return base;
}
