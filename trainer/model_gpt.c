/* trainer/model_gpt.c - GPT-2: token + position embeddings, pre-LayerNorm
 * blocks (causal self-attention, GELU MLP, residuals), final LayerNorm and a
 * language-model head tied to the token embedding.
 *
 * Activations of every layer are kept for backward; gradients of activations
 * need only one layer's worth of scratch, reused from the top layer down, plus
 * the residual stream's gradient, which each block adds into in place.
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
#include "model.h"
#include "rng.h"

/* parameter indices within one block, in table order */
enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FCPW, P_FCPB, P_PER_BLOCK };

struct gpt_layer_acts {
	float *ln1, *ln1_mean, *ln1_rstd;  /* [B,T,C], [B,T], [B,T] */
	float *qkv;                        /* [B,T,3C] */
	float *atty;                       /* [B,T,C] attention output before the projection */
	float *att;                        /* [B,NH,T,T] */
	float *res2;                       /* [B,T,C] residual after attention */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fch, *fch_gelu;             /* [B,T,4C] */
	float *res3;                       /* [B,T,C] residual after the MLP: the block's output */
};

struct gpt {
	struct trn_model base;             /* first: a struct trn_model * is a struct gpt * */
	int L, NH, C, T, V;
	int B;                             /* rows (samples) in the last forward */
	float *arena;                      /* every activation and scratch buffer */
	float *encoded;                    /* [B,T,C] */
	struct gpt_layer_acts *layers;
	float *lnf, *lnf_mean, *lnf_rstd;
	float *logits;                     /* [B,T,V] */
	float *losses, *lse;               /* [B,T] */
	/* shared scratch: attproj/fcproj outputs in forward, gradients in backward */
	float *tmp_c;                      /* [B,T,C] */
	float *dres, *dln, *dbig, *dqkv, *datty;
	float *datt;                       /* [B,NH,T,T] */
	float *dlogits;                    /* [B,T,V] */
};

static float *wp(struct gpt *g, int idx) { return g->base.w + g->base.params[idx].offset; }
static float *gp(struct gpt *g, int idx) { return g->base.g + g->base.params[idx].offset; }
static int block_param(int layer, int which) { return 2 + layer * P_PER_BLOCK + which; }

static double gpt_forward(struct trn_model *base, const struct trn_batch *b, struct trn_fwd_stats *st)
{
	struct gpt *g = (struct gpt *)base;
	int B = b->n, T = g->T, C = g->C, NH = g->NH, V = g->V, BT = B * g->T;
	long btc = (long)BT * C;
	g->B = B;
	int lf = 2 + g->L * P_PER_BLOCK;   /* index of norm_f.weight */

	/* each op is followed by the rounding of what it wrote (16-bit storage) */
	kern_embedding_fwd_cpu(g->encoded, b->tokens, wp(g, 0), wp(g, 1), B, T, C);
	trn_model_round(base, g->encoded, btc);
	const float *x = g->encoded;
	for (int l = 0; l < g->L; l++) {
		struct gpt_layer_acts *a = &g->layers[l];
#define W(which) wp(g, block_param(l, which))
		kern_layernorm_fwd_cpu(a->ln1, a->ln1_mean, a->ln1_rstd, x, W(P_LN1W), W(P_LN1B), BT, C);
		trn_model_round(base, a->ln1, btc);
		kern_matmul_fwd_cpu(a->qkv, a->ln1, W(P_QKVW), W(P_QKVB), BT, C, 3 * C);
		trn_model_round(base, a->qkv, btc * 3);
		kern_attention_fwd_cpu(a->atty, NULL, a->att, a->qkv, B, T, C, NH);
		trn_model_round(base, a->atty, btc);
		trn_model_round(base, a->att, (long)B * NH * T * T);
		kern_matmul_fwd_cpu(g->tmp_c, a->atty, W(P_PROJW), W(P_PROJB), BT, C, C);
		trn_model_round(base, g->tmp_c, btc);
		kern_residual_fwd_cpu(a->res2, x, g->tmp_c, btc);
		trn_model_round(base, a->res2, btc);
		kern_layernorm_fwd_cpu(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(P_LN2W), W(P_LN2B), BT, C);
		trn_model_round(base, a->ln2, btc);
		kern_matmul_fwd_cpu(a->fch, a->ln2, W(P_FCW), W(P_FCB), BT, C, 4 * C);
		trn_model_round(base, a->fch, btc * 4);
		kern_gelu_fwd_cpu(a->fch_gelu, a->fch, btc * 4);
		trn_model_round(base, a->fch_gelu, btc * 4);
		kern_matmul_fwd_cpu(g->tmp_c, a->fch_gelu, W(P_FCPW), W(P_FCPB), BT, 4 * C, C);
		trn_model_round(base, g->tmp_c, btc);
		kern_residual_fwd_cpu(a->res3, a->res2, g->tmp_c, btc);
		trn_model_round(base, a->res3, btc);
#undef W
		x = a->res3;
	}
	kern_layernorm_fwd_cpu(g->lnf, g->lnf_mean, g->lnf_rstd, x, wp(g, lf), wp(g, lf + 1), BT, C);
	trn_model_round(base, g->lnf, btc);
	kern_matmul_fwd_cpu(g->logits, g->lnf, wp(g, 0), NULL, BT, C, V);
	trn_model_round(base, g->logits, (long)BT * V);
	kern_softmax_xent_fwd_cpu(g->losses, g->lse, g->logits, b->targets, BT, V);

	return trn_model_score(g->logits, g->losses, b->targets, BT, V, st);
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
		for (int p = base->n_params - 1; p >= 0; p--)
			trn_model_grad_ready(base, p);
		return;
	}

	/* as in forward, each op is followed by the rounding of the activation
	 * gradient it wrote; parameter gradients are rounded by grad_ready */
	kern_softmax_xent_bwd_set_cpu(g->dlogits, scale / (float)counted, g->logits, g->lse,
	                              b->targets, BT, V);
	trn_model_round(base, g->dlogits, (long)BT * V);
	kern_matmul_bwd_set_cpu(g->dln, gp(g, 0), NULL, g->dlogits, g->lnf, wp(g, 0), BT, C, V);
	trn_model_round(base, g->dln, btc);
	const float *top = g->L ? g->layers[g->L - 1].res3 : g->encoded;
	kern_layernorm_bwd_set_cpu(g->dres, gp(g, lf), gp(g, lf + 1), g->dln, top, wp(g, lf),
	                           g->lnf_mean, g->lnf_rstd, BT, C);
	trn_model_round(base, g->dres, btc);
	trn_model_grad_ready(base, lf + 1);
	trn_model_grad_ready(base, lf);

	for (int l = g->L - 1; l >= 0; l--) {
		struct gpt_layer_acts *a = &g->layers[l];
		const float *x = l ? g->layers[l - 1].res3 : g->encoded;
#define W(which) wp(g, block_param(l, which))
#define G(which) gp(g, block_param(l, which))
#define READY(which) trn_model_grad_ready(base, block_param(l, which))
		/* res3 = res2 + fcproj: dres flows to both unchanged */
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
		kern_layernorm_bwd_cpu(g->dres, G(P_LN1W), G(P_LN1B), g->dln, x, W(P_LN1W),
		                       a->ln1_mean, a->ln1_rstd, BT, C);
		trn_model_round(base, g->dres, btc);
		READY(P_LN1B);
		READY(P_LN1W);
#undef W
#undef G
#undef READY
	}
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
			for (long k = 0; k < p->numel; k++)
				w[k] = (float)(std * trn_rng_normal(&rng));
		}
	}
}

static void gpt_free(struct trn_model *base)
{
	struct gpt *g = (struct gpt *)base;
	free(g->arena);
	free(g->layers);
	trn_model_release(base);
	free(g);
}

static const struct trn_model_ops gpt_ops = {
	.forward = gpt_forward,
	.backward = gpt_backward,
	.init_weights = gpt_init_weights,
	.free = gpt_free,
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
	static const char *const names[P_PER_BLOCK] = {
		"norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
		"attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
		"mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias",
	};
	const int *shapes[P_PER_BLOCK] = { vec, vec, qkvw, qkvb, projw, vec, vec, vec, fcw, fcb, fcpw, vec };
	const int ndims[P_PER_BLOCK] = { 1, 1, 2, 1, 2, 1, 1, 1, 2, 1, 2, 1 };
	for (int l = 0; l < g->L; l++)
		for (int k = 0; k < P_PER_BLOCK; k++) {
			char name[TRN_PARAM_NAME];
			snprintf(name, sizeof name, "blocks.%d.%s", l, names[k]);
			if (trn_model_add_param(base, name, ndims[k], shapes[k]) < 0)
				return -1;
		}
	if (trn_model_add_param(base, "norm_f.weight", 1, vec) < 0 ||
	    trn_model_add_param(base, "norm_f.bias", 1, vec) < 0)
		return -1;
	return 0;
}

/* Lays every activation buffer out in one arena. With arena NULL it only
 * counts; the same walk then hands out the pointers, so the two cannot disagree. */
static long carve(struct gpt *g, long B, float *arena)
{
	long BT = B * g->T, C = g->C, att = B * g->NH * g->T * g->T;
	long used = 0;
#define TAKE(ptr, n) do { if (arena) (ptr) = arena + used; used += (n); } while (0)
	TAKE(g->encoded, BT * C);
	for (int l = 0; l < g->L; l++) {
		struct gpt_layer_acts *a = &g->layers[l];
		TAKE(a->ln1, BT * C); TAKE(a->ln1_mean, BT); TAKE(a->ln1_rstd, BT);
		TAKE(a->qkv, BT * 3 * C); TAKE(a->atty, BT * C); TAKE(a->att, att);
		TAKE(a->res2, BT * C);
		TAKE(a->ln2, BT * C); TAKE(a->ln2_mean, BT); TAKE(a->ln2_rstd, BT);
		TAKE(a->fch, BT * 4 * C); TAKE(a->fch_gelu, BT * 4 * C);
		TAKE(a->res3, BT * C);
	}
	TAKE(g->lnf, BT * C); TAKE(g->lnf_mean, BT); TAKE(g->lnf_rstd, BT);
	TAKE(g->logits, BT * g->V); TAKE(g->losses, BT); TAKE(g->lse, BT);
	TAKE(g->tmp_c, BT * C);
	TAKE(g->dres, BT * C); TAKE(g->dln, BT * C); TAKE(g->datty, BT * C);
	TAKE(g->dbig, BT * 4 * C); TAKE(g->dqkv, BT * 3 * C);
	TAKE(g->datt, att); TAKE(g->dlogits, BT * g->V);
#undef TAKE
	return used;
}

static int alloc_acts(struct gpt *g, int B)
{
	g->layers = calloc((size_t)g->L, sizeof *g->layers);
	if (!g->layers)
		return -1;
	long total = carve(g, B, NULL);
	g->arena = malloc(sizeof(float) * (size_t)total);
	if (!g->arena)
		return -1;
	carve(g, B, g->arena);
	g->base.act_bytes = total * (long)sizeof(float);
	return 0;
}

struct trn_model *trn_gpt_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                              int max_batch, struct trn_err *err)
{
	const struct trn_spec_model *ms = &spec->model;
	int vocab = ms->vocab ? ms->vocab : (spec->data.format == TRN_DATA_TEXT ? 256 : 50257);
	if (ds->vocab > vocab) {
		trn_err_set(err, "model.vocab: the data holds token %d, past the vocabulary of %d",
		            ds->vocab - 1, vocab);
		return NULL;
	}
	struct gpt *g = calloc(1, sizeof *g);
	if (!g) {
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	g->L = ms->layers;
	g->NH = ms->heads;
	g->C = ms->dim;
	g->T = ms->seq;
	g->V = vocab;
	struct trn_model *base = &g->base;
	base->ops = &gpt_ops;
	base->max_batch = max_batch;
	base->tokens_per_sample = g->T;
	if (add_params(g) < 0 || trn_model_alloc(base) < 0 || alloc_acts(g, max_batch) < 0) {
		gpt_free(base);
		trn_err_set(err, "model: out of memory for %d layers of dim %d at micro-batch %d x %d",
		            ms->layers, ms->dim, max_batch, ms->seq);
		return NULL;
	}
	/* GEMM FLOPs per sample as executed: per layer 24TC^2 forward (qkv 3, proj 1,
	 * fc 4, fc proj 4: 12C^2 multiply-adds per token) and twice that backward,
	 * attention 4T^2C forward (QK^T and AV over the full square) and 8T^2C
	 * backward; the tied head 2TCV forward and 4TCV backward. */
	double T = g->T, C = g->C, V = g->V;
	base->flops_per_sample = g->L * (72.0 * T * C * C + 12.0 * T * T * C) + 6.0 * T * C * V;
	return base;
}
