/* trainer/model_gpt_cuda.c - GPT-2 on the GPU: model_gpt.c's forward and
 * backward, op for op, with the kernels' CUDA versions on device copies of
 * the parameters (trainer/model_cuda.h). With offload.activations "none"
 * every block keeps its activations; with "recompute" each block keeps its
 * input and, right before its backward, runs its forward again from there
 * into one block's scratch, as model_gpt.c does (the same ops on the same
 * inputs: the same bits); with "cpu" blocks are computed in two slots of
 * one block each, whose activations the activation offload engine
 * (trainer/act_offload.h) copies out to a page-locked host store and back
 * one block ahead of backward, on the copy stream. One layer's worth of activation-gradient scratch
 * is reused from the top block down, the residual stream's gradient
 * accumulating in place, as on the CPU.
 *
 * A block's weights and gradients are reached through trn_model_block_*
 * (model.h), as in model_gpt.c: the device copies, or with offload.params
 * "cpu" the engine's slots on the device (model_cuda.h), whose gradients
 * this model rounds in place before they go out, as the CPU model's
 * trn_model_block_grad_ready does; the resident tensors' gradients come to
 * g as they are final (the final LayerNorm's before the blocks', the
 * embeddings' after), so grad_ready keeps the CPU model's order.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_common.h"
#include "kernels/embedding_cuda.h"
#include "kernels/gelu_cuda.h"
#include "kernels/layernorm_cuda.h"
#include "kernels/matmul_cuda.h"
#include "kernels/residual_cuda.h"
#include "kernels/softmax_xent_cuda.h"
#include "act_offload.h"
#include "model_cuda.h"
#include "param_offload.h"
#include "spec/plan.h"

/* parameter indices within one block, in model_gpt.c's table order
 * (trn_gpt_block_names; check_table holds the two together) */
enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FCPW, P_FCPB, P_PER_BLOCK };
_Static_assert(P_PER_BLOCK == TRN_GPT_BLOCK_PARAMS, "a block's parameters");
static const char *const block_names[P_PER_BLOCK] = {
	[P_LN1W] = "norm1.weight", [P_LN1B] = "norm1.bias", [P_QKVW] = "attn.qkv.weight",
	[P_QKVB] = "attn.qkv.bias", [P_PROJW] = "attn.proj.weight", [P_PROJB] = "attn.proj.bias",
	[P_LN2W] = "norm2.weight", [P_LN2B] = "norm2.bias", [P_FCW] = "mlp.fc.weight",
	[P_FCB] = "mlp.fc.bias", [P_FCPW] = "mlp.proj.weight", [P_FCPB] = "mlp.proj.bias",
};

/* Activations and their gradients are void pointers: fp32 buffers, or with
 * 16-bit activations (a16) packed 16-bit values (cuda_common.h); the
 * LayerNorm statistics, the losses and lse are fp32 either way. */
struct gpt_block_acts {
	void *x;                           /* [B,T,C] the block's input */
	void *ln1;
	float *ln1_mean, *ln1_rstd;
	void *qkv;                         /* [B,T,3C] */
	void *atty;                        /* [B,T,C] */
	void *att;                         /* [B,NH,T,T]; none with flash */
	float *lse;                        /* flash: [B,NH,T] the rows' log-sum-exp */
	void *res2;
	void *ln2;
	float *ln2_mean, *ln2_rstd;
	void *fch, *fch_gelu;              /* [B,T,4C] */
};

/* The logits' rows (and their gradient's) are VP floats apart, V rounded
 * up to a multiple of TRN_GPT_LOGITS_ALIGN (trn_gpt_logits_rows, plan.h):
 * with GPT-2's odd vocabulary (50257) unpadded, cuBLAS falls back to its
 * slow unaligned kernels for the three largest GEMMs of the step (llm.c
 * pads the vocabulary for the same reason). The logits' padding columns
 * are never read; their gradient's are, by the 16-bit backward GEMM (over
 * all VP columns against zero weight rows), and stay zero: the arena
 * starts zeroed and no op writes them. */
struct gpt_cuda {
	struct trn_cuda_model c;           /* first */
	int L, NH, C, T, V, VP;
	int B;                             /* samples in the last forward */
	struct gpt_block_acts *blocks;     /* [L]; recompute [1], the scratch; cpu [2], the slots */
	int recompute;                     /* offload.activations "recompute" */
	int act_cpu;                       /* offload.activations "cpu" */
	struct trn_act_offload off;        /* cpu */
	int a16;                           /* activations stored as 16 bits (KERN_ACT_16) */
	int flash;                         /* attention fused (attention_cuda.h's flash) */
	float dlogits_scale;               /* the backward scale dlogits was written for by
	                                    * the last forward, 0 none */
	long btc_max;                      /* values of one [B,T,C] at the largest batch */
	void *inputs;                      /* recompute: [L][B,T,C] every block's input */
	void *top, *lnf, *logits, *tmp_c;
	float *lnf_mean, *lnf_rstd, *losses, *lse;
	void *dres, *dln, *datty, *dbig, *dqkv, *dlogits;
	float *datt;                       /* [B,NH,T,T] fp32: attention's scratch with a16 */
	int *ready;                        /* model_gpt.c's grad_ready order */
	long rel[P_PER_BLOCK];             /* a block's parameters' floats from its first */
};

static int block_param(int layer, int which) { return 2 + layer * P_PER_BLOCK + which; }

/* bytes of one activation: 2 with a16, else 4 */
static size_t act_size(const struct gpt_cuda *g)
{
	return g->a16 ? sizeof(uint16_t) : sizeof(float);
}

/* Lays the arena out from base (NULL: only counts) for offload.activations
 * mode; each buffer starts on 256 bytes, a block's buffers one after the
 * other from its x (the region the activation offload copies). Returns its
 * floats. */
static long carve(struct gpt_cuda *g, long B, enum trn_offload mode, float *base)
{
	long es = (long)act_size(g);
	/* the fused attention keeps a row's log-sum-exp where the other keeps
	 * [T, T], and needs no scratch */
	long BT = B * g->T, C = g->C, att = g->flash ? 0 : B * g->NH * g->T * g->T;
	long lse = g->flash ? B * g->NH * g->T : 0;
	long used = 0;
	int recompute = mode == TRN_OFFLOAD_RECOMPUTE;
	int n_blocks = recompute ? (g->L > 0) : mode == TRN_OFFLOAD_CPU ? 2 * (g->L > 0) : g->L;
	/* n fp32 values (TAKE) or n activations (TAKE_A), in whole 256 bytes */
#define TAKE_BYTES(ptr, bytes)                                                                   \
	do {                                                                                     \
		if (base)                                                                        \
			(ptr) = (void *)(base + used);                                           \
		used += ((long)(bytes) + 255) / 256 * 64;                                        \
	} while (0)
#define TAKE(ptr, n) TAKE_BYTES(ptr, (n) * (long)sizeof(float))
#define TAKE_A(ptr, n) TAKE_BYTES(ptr, (n) * es)
	if (recompute)
		TAKE_A(g->inputs, g->L * BT * C);   /* x of the scratch points into it */
	for (int l = 0; l < n_blocks; l++) {
		struct gpt_block_acts *a = base ? &g->blocks[l] : NULL;
		struct gpt_block_acts dummy;
		if (!a)
			a = &dummy;
		if (!recompute)
			TAKE_A(a->x, BT * C);
		TAKE_A(a->ln1, BT * C); TAKE(a->ln1_mean, BT); TAKE(a->ln1_rstd, BT);
		TAKE_A(a->qkv, BT * 3 * C); TAKE_A(a->atty, BT * C); TAKE_A(a->att, att);
		TAKE(a->lse, lse);
		TAKE_A(a->res2, BT * C);
		TAKE_A(a->ln2, BT * C); TAKE(a->ln2_mean, BT); TAKE(a->ln2_rstd, BT);
		TAKE_A(a->fch, BT * 4 * C); TAKE_A(a->fch_gelu, BT * 4 * C);
	}
	TAKE_A(g->top, BT * C);
	TAKE_A(g->lnf, BT * C); TAKE(g->lnf_mean, BT); TAKE(g->lnf_rstd, BT);
	TAKE_A(g->logits, BT * g->VP); TAKE(g->losses, BT); TAKE(g->lse, BT);
	TAKE_A(g->tmp_c, BT * C);
	TAKE_A(g->dres, BT * C); TAKE_A(g->dln, BT * C); TAKE_A(g->datty, BT * C);
	TAKE_A(g->dbig, BT * 4 * C); TAKE_A(g->dqkv, BT * 3 * C);
	TAKE(g->datt, att); TAKE_A(g->dlogits, BT * g->VP);
#undef TAKE_A
#undef TAKE
#undef TAKE_BYTES
	return used;
}

/* activation i of buffer p */
static void *act_at(const struct gpt_cuda *g, void *p, long i)
{
	return (char *)p + (size_t)i * act_size(g);
}

/* a resident parameter's device weights and gradients (the embeddings, the
 * final LayerNorm); a block's come from trn_model_block_* */
static float *wd(struct gpt_cuda *g, int p)
{
	return trn_cuda_model_dev(&g->c, g->c.w_dev, g->c.base.params[p].offset);
}

static float *gd(struct gpt_cuda *g, int p)
{
	return trn_cuda_model_dev(&g->c, g->c.g_dev, g->c.base.params[p].offset);
}

/* offload.params, or gradients out block by block: the resident parameters
 * [p0, p1]'s gradients (adjacent in the layout) to g, then their grad_ready
 * from p1 down, as final now */
static void resident_ready(struct gpt_cuda *g, int p0, int p1)
{
	struct trn_model *base = &g->c.base;
	long off = base->params[p0].offset;
	trn_cuda_model_grads_range(&g->c, off,
	                           base->params[p1].offset + base->params[p1].numel - off);
	for (int p = p1; p >= p0; p--)
		trn_model_grad_ready(base, p);
}

/* Where block l's input goes in forward (the embedding's output for block
 * 0, block l - 1's output otherwise; top for l = L). */
static void *fwd_input(struct gpt_cuda *g, int l)
{
	if (l == g->L)
		return g->top;
	if (g->act_cpu)                    /* its slot, once block l - 2 is out of it */
		return g->blocks[trn_act_offload_fwd_begin(&g->off, l)].x;
	return g->recompute ? act_at(g, g->inputs, l * g->btc_max) : g->blocks[l].x;
}

/* The buffers block l's forward writes to, its input in place. */
static struct gpt_block_acts *fwd_acts(struct gpt_cuda *g, int l)
{
	if (g->act_cpu)
		return &g->blocks[l % 2];
	if (!g->recompute)
		return &g->blocks[l];
	g->blocks[0].x = act_at(g, g->inputs, l * g->btc_max);
	return &g->blocks[0];
}

/* Block l's forward from a->x with its weights bw as far as backward needs
 * it: everything in a; with ln1_done, a->ln1 and its statistics are there
 * already (gpt_cuda_forward's residual connection before them wrote them).
 * 16-bit storage as in model_gpt.c, which rounds what each op writes.
 * With a16 every op stores its outputs as 16-bit values (attention's
 * probabilities too). Without, in fp32 buffers: the element-wise ops store
 * rounded values, the attention leaves att rounded
 * (attention_cuda.h), and a GEMM's fp32 output is left as it is, because
 * everything that reads it reads it as a 16-bit value: the GEMMs through
 * their operand copies, the element-wise kernels as they load it
 * (cuda_common.h). The same values either way, without a rounding pass. */
static void block_fwd(struct gpt_cuda *g, const float *bw, struct gpt_block_acts *a,
                      int ln1_done)
{
	int B = g->B, T = g->T, C = g->C, NH = g->NH, BT = B * T, a16 = g->a16;
#define W(which) (bw + g->rel[which])
	if (!ln1_done)
		kern_layernorm_fwd_act_cuda(a16, a->ln1, a->ln1_mean, a->ln1_rstd, a->x, W(P_LN1W),
		                            W(P_LN1B), BT, C);
	kern_matmul_fwd_act_cuda(a16, a->qkv, a->ln1, W(P_QKVW), W(P_QKVB), BT, C, 3 * C);
	if (g->flash)
		kern_attention_flash_fwd_cuda(a->atty, a->lse, a->qkv, B, T, C, NH);
	else
		kern_attention_fwd_act_cuda(a16, a->atty, a16 ? g->datt : NULL, a->att, a->qkv, B, T,
		                            C, NH);
	kern_matmul_fwd_act_cuda(a16, g->tmp_c, a->atty, W(P_PROJW), W(P_PROJB), BT, C, C);
	kern_residual_layernorm_fwd_act_cuda(a16, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->x,
	                                     g->tmp_c, W(P_LN2W), W(P_LN2B), BT, C);
	kern_matmul_gelu_fwd_act_cuda(a16, a->fch_gelu, a->fch, a->ln2, W(P_FCW), W(P_FCB), BT, C,
	                              4 * C);
#undef W
}

/* The batch's rows that have a target (the loss's mean is over them) */
static long counted_targets(const struct trn_batch *b, long rows)
{
	long n = 0;
	for (long r = 0; r < rows; r++)
		n += b->targets[r] >= 0;
	return n;
}

/* dlogits' scale for a backward of scale over counted targets: one
 * expression for the forward that writes them (trn_model_expect_backward)
 * and the backward that would, so that the two give the same bits */
static float xent_dloss(float scale, long counted)
{
	return scale / (float)counted;
}

static double gpt_cuda_forward(struct trn_model *base, const struct trn_batch *b,
                               struct trn_fwd_stats *st)
{
	struct gpt_cuda *g = (struct gpt_cuda *)base;
	int B = b->n, T = g->T, C = g->C, V = g->V, VP = g->VP, BT = B * T, a16 = g->a16;
	int lf = block_param(g->L, 0);
	g->B = B;
	struct trn_cuda_model *c = &g->c;
	trn_cuda_model_sync_weights(c);
	trn_cuda_model_gemms(c);
	trn_cuda_model_inputs(c, b, NULL, 0);

	void *x = fwd_input(g, 0);
	/* what each op writes is rounded (16-bit storage), as in model_gpt.c:
	 * see block_fwd */
	trn_model_fwd_start(base);
	kern_embedding_fwd_act_cuda(a16, x, c->tokens_dev, wd(g, 0), wd(g, 1), B, T, C);
	if (g->L == 0)
		kern_layernorm_fwd_act_cuda(a16, g->lnf, g->lnf_mean, g->lnf_rstd, g->top, wd(g, lf),
		                            wd(g, lf + 1), BT, C);
	const float *bw = g->L > 0 ? trn_model_block_fwd(base, 0) : NULL;
	for (int l = 0; l < g->L; l++) {
		struct gpt_block_acts *a = fwd_acts(g, l);
		block_fwd(g, bw, a, l > 0);
		kern_matmul_fwd_act_cuda(a16, g->tmp_c, a->fch_gelu, bw + g->rel[P_FCPW],
		                         bw + g->rel[P_FCPB], BT, 4 * C, C);
		/* the residual connection into the next block's input and the
		 * LayerNorm that reads it (the next block's first, or the final
		 * one) in one pass: the same bits as the two ops */
		x = fwd_input(g, l + 1);
		if (l + 1 < g->L) {
			bw = trn_model_block_fwd(base, l + 1);
			struct gpt_block_acts *n = fwd_acts(g, l + 1);
			kern_residual_layernorm_fwd_act_cuda(a16, x, n->ln1, n->ln1_mean, n->ln1_rstd,
			                                     a->res2, g->tmp_c, bw + g->rel[P_LN1W],
			                                     bw + g->rel[P_LN1B], BT, C);
		} else {
			kern_residual_layernorm_fwd_act_cuda(a16, x, g->lnf, g->lnf_mean, g->lnf_rstd,
			                                     a->res2, g->tmp_c, wd(g, lf), wd(g, lf + 1),
			                                     BT, C);
		}
		if (g->act_cpu)
			trn_act_offload_fwd_end(&g->off, l);
	}
	kern_matmul_fwd_ld_act_cuda(a16, g->logits, VP, g->lnf, wd(g, 0), NULL, BT, C, V);
	/* a training step's forward (trn_model_expect_backward) writes the
	 * backward's dlogits in the same pass over the logits, with the dloss
	 * gpt_cuda_backward would use */
	float bscale = base->bwd_scale_next;
	long counted = bscale != 0.0f ? counted_targets(b, BT) : 0;
	g->dlogits_scale = 0.0f;
	if (counted) {
		kern_softmax_xent_fwd_bwd_set_ld_act_cuda(a16, g->losses, g->lse, g->dlogits,
		                                          xent_dloss(bscale, counted), g->logits, VP,
		                                          c->targets_dev, BT, V);
		g->dlogits_scale = bscale;
	} else {
		kern_softmax_xent_fwd_ld_act_cuda(a16, g->losses, g->lse, g->logits, VP,
		                                  c->targets_dev, BT, V);
	}
	return trn_cuda_model_score(c, g->losses, a16, g->logits, VP, b->targets, BT, V, st);
}

static void gpt_cuda_backward(struct trn_model *base, const struct trn_batch *b, float scale)
{
	struct gpt_cuda *g = (struct gpt_cuda *)base;
	int B = g->B, T = g->T, C = g->C, V = g->V, VP = g->VP, NH = g->NH, BT = B * T;
	int a16 = g->a16;
	int lf = block_param(g->L, 0);
	int dlogits_ready = g->dlogits_scale != 0.0f && g->dlogits_scale == scale;
	g->dlogits_scale = 0.0f;
	long counted = counted_targets(b, BT);
	struct trn_cuda_model *c = &g->c;
	trn_cuda_model_gemms(c);
	trn_cuda_model_grads_begin(c);
	int poff = base->param_off != NULL;
	int out = trn_cuda_model_streams_grads(c);  /* block by block, as they are final */
	int dev = trn_cuda_model_reports_on_device(c);   /* the same, on the device */
	if (!counted && poff) {            /* nothing to learn from: g as it is, every one final */
		trn_model_grads_ready_as_they_are(base);
		base->g_zeroed = 0;
		return;
	}
	if (!counted) {                    /* nothing to learn from: zeros, every one final */
		trn_cuda_model_grads_out(c, g->ready);
		return;
	}
	/* as in forward, the activation gradient each op writes is rounded;
	 * parameter gradients are rounded at grad_ready */
	if (!dlogits_ready)                /* else the forward wrote them (gpt_cuda_forward) */
		kern_softmax_xent_bwd_set_ld_act_cuda(a16, g->dlogits, xent_dloss(scale, counted),
		                                      g->logits, VP, g->lse, c->targets_dev, BT, V);
	kern_matmul_bwd_set_ld_act_cuda(a16, g->dln, gd(g, 0), NULL, g->dlogits, VP, g->lnf,
	                                wd(g, 0), BT, C, V);
	kern_layernorm_bwd_set_act_cuda(a16, g->dres, gd(g, lf), gd(g, lf + 1), g->dln, g->top,
	                                wd(g, lf), g->lnf_mean, g->lnf_rstd, BT, C);
	if (poff || out) {
		resident_ready(g, lf, lf + 1);
	} else if (dev) {
		trn_cuda_model_param_final(c, lf + 1);
		trn_cuda_model_param_final(c, lf);
	}
	for (int l = g->L - 1; l >= 0; l--) {
		float *bg;
		const float *bw = trn_model_block_bwd(base, l, &bg);
		struct gpt_block_acts *a = g->act_cpu ? &g->blocks[trn_act_offload_bwd_begin(&g->off, l)]
		                                      : fwd_acts(g, l);
		if (g->recompute)          /* the block's activations again, from its input */
			block_fwd(g, bw, a, 0);
#define W(which) (bw + g->rel[which])
#define G(which) (bg + g->rel[which])
		kern_matmul_bwd_set_dgelu_act_cuda(a16, g->dbig, G(P_FCPW), G(P_FCPB), g->dres,
		                                   a->fch_gelu, W(P_FCPW), a->fch, BT, 4 * C, C);
		kern_matmul_bwd_set_act_cuda(a16, g->dln, G(P_FCW), G(P_FCB), g->dbig, a->ln2, W(P_FCW),
		                             BT, C, 4 * C);
		kern_layernorm_bwd_act_cuda(a16, g->dres, G(P_LN2W), G(P_LN2B), g->dln, a->res2,
		                            W(P_LN2W), a->ln2_mean, a->ln2_rstd, BT, C);
		kern_matmul_bwd_set_act_cuda(a16, g->datty, G(P_PROJW), G(P_PROJB), g->dres, a->atty,
		                             W(P_PROJW), BT, C, C);
		if (g->flash)
			kern_attention_flash_bwd_set_cuda(g->dqkv, g->datty, a->atty, a->qkv, a->lse, B,
			                                  T, C, NH);
		else
			kern_attention_bwd_set_act_cuda(a16, g->dqkv, NULL, g->datt, g->datty, a->qkv,
			                                a->att, B, T, C, NH);
		kern_matmul_bwd_set_act_cuda(a16, g->dln, G(P_QKVW), G(P_QKVB), g->dqkv, a->ln1,
		                             W(P_QKVW), BT, C, 3 * C);
		kern_layernorm_bwd_act_cuda(a16, g->dres, G(P_LN1W), G(P_LN1B), g->dln, a->x, W(P_LN1W),
		                            a->ln1_mean, a->ln1_rstd, BT, C);
		if (poff) {
			/* the block's gradients are final: rounded in their slot, which
			 * goes out to g as it is */
			for (int k = 0; k < P_PER_BLOCK; k++)
				trn_cuda_model_round(c, bg + g->rel[k],
				                     base->params[block_param(l, k)].numel);
			trn_model_block_bwd_end(base, l);
		} else if (out) {
			trn_cuda_model_block_out(c, l, g->ready);
		} else if (dev) {
			trn_cuda_model_block_final(c, l, g->ready);
		}
#undef W
#undef G
	}
	if (poff)
		trn_model_blocks_bwd_done(base);
	else if (out)
		trn_cuda_model_blocks_out_done(c, g->ready);
	kern_embedding_bwd_act_cuda(a16, gd(g, 0), gd(g, 1), g->dres, c->tokens_dev, B, T, C, V);
	if (dev) {
		trn_cuda_model_param_final(c, 1);
		trn_cuda_model_param_final(c, 0);
		return;
	}
	if (!poff && !out) {
		trn_cuda_model_grads_out(c, g->ready);
		return;
	}
	resident_ready(g, 0, 1);
	base->g_zeroed = 0;
}

static void gpt_cuda_init_weights(struct trn_model *base, uint64_t seed)
{
	struct gpt_cuda *g = (struct gpt_cuda *)base;
	trn_model_init_weights(g->c.cpu, seed);   /* into the shared host w */
}

static void gpt_cuda_free(struct trn_model *base)
{
	struct gpt_cuda *g = (struct gpt_cuda *)base;
	trn_cuda_model_drain_copies();
	trn_act_offload_release(&g->off);
	trn_cuda_model_release(&g->c);
	free(g->blocks);
	free(g->ready);
	free(g);
}

static const struct trn_model_ops gpt_cuda_ops = {
	.forward = gpt_cuda_forward,
	.backward = gpt_cuda_backward,
	.init_weights = gpt_cuda_init_weights,
	.free = gpt_cuda_free,
	.zero_device_grads = trn_cuda_model_zero_device_grads,
	.pull_weights = trn_cuda_model_pull_weights,
	.publish_master = trn_cuda_model_publish_master,
	.device_weights_changed = trn_cuda_model_device_weights_changed,
	.device_memory = trn_cuda_model_device_memory,
	.range_changed = trn_cuda_model_range_changed,
	.stage_batch = trn_cuda_model_stage_batch,
};

/* The CPU layout's table is model_gpt.c's: checked name by name, so that a
 * change there cannot go unnoticed here. */
static int check_table(const struct trn_model *cpu, int L, struct trn_err *err)
{
	char want[TRN_PARAM_NAME];
	if (cpu->n_params != 2 + L * P_PER_BLOCK + 2)
		return trn_err_set(err, "model: gpt's parameter table has %d entries, the GPU model "
		                   "expects %d", cpu->n_params, 2 + L * P_PER_BLOCK + 2);
	for (int l = 0; l < L; l++)
		for (int k = 0; k < P_PER_BLOCK; k++) {
			snprintf(want, sizeof want, "blocks.%d.%s", l, block_names[k]);
			if (strcmp(cpu->params[block_param(l, k)].name, want) != 0)
				return trn_err_set(err, "model: gpt's parameter %d is %s, the GPU model "
				                   "expects %s", block_param(l, k),
				                   cpu->params[block_param(l, k)].name, want);
		}
	if (strcmp(cpu->params[0].name, "wte.weight") || strcmp(cpu->params[1].name, "wpe.weight") ||
	    strcmp(cpu->params[block_param(L, 0)].name, "norm_f.weight"))
		return trn_err_set(err, "model: gpt's embeddings or final norm are not where the GPU "
		                   "model expects them");
	return 0;
}

struct trn_model *trn_gpt_cuda_new(const struct trn_spec *spec, struct trn_model *cpu,
                                   int max_batch, struct trn_err *err)
{
	const struct trn_spec_model *ms = &spec->model;
	struct gpt_cuda *g = calloc(1, sizeof *g);
	if (!g) {
		trn_model_free(cpu);
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	g->L = ms->layers;
	g->NH = ms->heads;
	g->C = ms->dim;
	g->T = ms->seq;
	g->V = cpu->params[0].shape[0];    /* wte [V, C]: the vocabulary trn_gpt_new settled */
	g->VP = (int)trn_gpt_logits_rows(g->V);
	g->blocks = calloc((size_t)(g->L > 2 ? g->L : 2), sizeof *g->blocks);
	g->ready = malloc(sizeof(int) * (size_t)cpu->n_params);
	if (!g->blocks || !g->ready) {
		g->c.cpu = cpu;
		gpt_cuda_free(&g->c.base);
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	if (check_table(cpu, g->L, err) != 0) {
		g->c.cpu = cpu;
		gpt_cuda_free(&g->c.base);
		return NULL;
	}
	int n = 0, lf = block_param(g->L, 0);
	g->ready[n++] = lf + 1;
	g->ready[n++] = lf;
	static const int block_order[P_PER_BLOCK] = { P_FCPB, P_FCPW, P_FCB, P_FCW, P_LN2B, P_LN2W,
		                                      P_PROJB, P_PROJW, P_QKVB, P_QKVW, P_LN1B, P_LN1W };
	for (int l = g->L - 1; l >= 0; l--)
		for (int k = 0; k < P_PER_BLOCK; k++)
			g->ready[n++] = block_param(l, block_order[k]);
	g->ready[n++] = 1;
	g->ready[n++] = 0;
	for (int k = 0; k < P_PER_BLOCK && g->L > 0; k++)
		g->rel[k] = cpu->params[block_param(0, k)].offset - cpu->params[block_param(0, 0)].offset;

	enum trn_offload mode = spec->offload.activations;
	g->recompute = mode == TRN_OFFLOAD_RECOMPUTE;
	g->act_cpu = mode == TRN_OFFLOAD_CPU;
	g->btc_max = (long)max_batch * g->T * g->C;
	/* the layout larch plan counts (plan.h) */
	struct trn_gpt_gpu_layout lay;
	trn_gpt_gpu_layout(ms, cpu->dtype, spec->precision.nondeterministic, &lay);
	g->a16 = lay.a16 ? KERN_ACT_16 : KERN_ACT_F32;
	g->flash = lay.flash && kern_attention_flash_supported(g->T, g->C, g->NH);
	kern_matmul_cuda_fused_gelu(lay.gelu_fused);
	kern_attention_flash_dq_atomic(lay.flash_dq_atomic);
	long floats = carve(g, max_batch, mode, NULL);
	/* the GEMMs' 16-bit weights: wte's rows padded to VP with zeros, for the
	 * logits' GEMMs (forward and dinp) over the padded vocabulary */
	g->c.w16_pad_at = (long)g->V * g->C;
	g->c.w16_pad = (long)(g->VP - g->V) * g->C;
	if (trn_cuda_model_init(&g->c, cpu, &gpt_cuda_ops, (long)max_batch * g->T, floats, err) != 0) {
		gpt_cuda_free(&g->c.base);
		return NULL;
	}
	carve(g, max_batch, mode, g->c.arena);
	if (cpu->dtype != TRN_DTYPE_FP32) {     /* for the "device:" line larch-train prints */
		char *d = g->c.base.device_desc;
		size_t len = strlen(d);
		snprintf(d + len, sizeof g->c.base.device_desc - len,
		         "; activations stored as 16 bits%s%s",
		         !g->flash                    ? ""
		         : lay.flash_dq_atomic        ? ", attention fused (dq added atomically, 128 "
		                                        "keys a block)"
		                                      : ", attention fused",
		         lay.gelu_fused ? ", GELU in the fc GEMMs' epilogues" : "");
	}
	/* The arena starts zeroed (trn_cuda_model_init): so do the padding
	 * columns of the logits' gradient, which no op writes and the 16-bit
	 * GEMM reads (matmul_cuda.h). */
	g->c.base.act_offload = mode;
	g->c.base.act_bytes_none = carve(g, max_batch, TRN_OFFLOAD_NONE, NULL) * (long)sizeof(float);
	if (g->act_cpu && g->L > 0) {
		/* every block's region is one slot's: from a slot's x to the next's */
		long *region = malloc(sizeof *region * (size_t)g->L);
		int rc = region ? 0 : -1;
		for (int l = 0; rc == 0 && l < g->L; l++)
			region[l] = ((char *)g->blocks[1].x - (char *)g->blocks[0].x) /
			            (long)sizeof(float);
		if (rc == 0)
			rc = trn_act_offload_init(&g->off, g->L, region, g->blocks[0].x, g->blocks[1].x,
			                          &trn_cuda_copier, TRN_PARAM_OFFLOAD_CHANNELS);
		free(region);
		if (rc != 0) {
			gpt_cuda_free(&g->c.base);
			trn_err_set(err, "model: out of memory for the activation offload's host store");
			return NULL;
		}
		g->c.base.act_host_bytes = g->off.host_floats * (long)sizeof(float);
	}
	return &g->c.base;
}
