/* kernels/softmax_xent_cuda.cu - fused softmax + cross-entropy on the GPU
 * (see softmax_xent.h, softmax_xent_cuda.h).
 *
 * Forward: one block per row, one pass over the logits. Each thread keeps an
 * online (max m, sum s of exp(x - m)) over its strided share of the row;
 * the pairs are merged in a fixed order (butterfly within the warp, then the
 * warps' results in order), so lse has the same bits on every run.
 * Backward: a grid over (row, column block), one exponential per logit. Both in
 * one kernel for a training step (the forward's block goes on to write the
 * row's gradient, reading the row again while it is likely in the
 * caches). Where the
 * rows start on 16 bytes (the GPT's padded logits) both read and write
 * eight elements an access: with 2-byte accesses a thread kept too few
 * bytes in flight, and the two kernels ran at a quarter of an H200's
 * bandwidth over GPT-2's [B, T, 50304] logits. With 16-bit
 * operands the logits are read as 16-bit values (also by the argmax) and
 * dlogits is stored so, in fp32 buffers or packed (a16, cuda_common.h).
 * The exponential of each logit (of the eight-element groups' sums, and of
 * every gradient) is an fma and one SFU instruction (fast_exp2:
 * 2^(x log2(e) - m log2(e)), about 2 ulp and the rounding of m log2(e),
 * ~3e-6 relative at |m| = 70) where CUDA's accurate expf takes about eight
 * instructions: two exponentials a logit made the one-pass kernel's
 * arithmetic as long as its memory traffic. The merges of (max, sum)
 * pairs and the unaligned rows' element-at-a-time path keep expf.
 */
#include "softmax_xent_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.h"
#include "matmul_cuda.h"
#include "softmax_xent_kernels.cuh"

extern "C" void kern_softmax_xent_fwd_ld_act_cuda(int a16, float *losses, float *lse,
                                                  const void *logits, int ld, const int *targets,
                                                  int n, int v)
{
	int ops = kern_cuda_act_operands(a16, "softmax_xent forward");
	if (n <= 0 || v <= 0)
		return;
	int vec = xent_vec_ok(logits, ld);
	xent_fwd_kernel<<<n, XENT_FWD_THREADS, 0, kern_cuda_stream()>>>(losses, lse, logits, ld,
	                                                                 targets, v, vec, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_softmax_xent_fwd_ld_cuda(float *losses, float *lse, const float *logits,
                                              int ld, const int *targets, int n, int v)
{
	kern_softmax_xent_fwd_ld_act_cuda(KERN_ACT_F32, losses, lse, logits, ld, targets, n, v);
}

extern "C" void kern_softmax_xent_fwd_cuda(float *losses, float *lse, const float *logits,
                                           const int *targets, int n, int v)
{
	kern_softmax_xent_fwd_ld_cuda(losses, lse, logits, v, targets, n, v);
}

static void xent_bwd(int a16, void *dlogits, float dloss, const void *logits, int ld,
                     const float *lse, const int *targets, int n, int v, int set)
{
	int ops = kern_cuda_act_operands(a16, "softmax_xent backward");
	if (n <= 0 || v <= 0)
		return;
	dim3 grid((unsigned)n, (unsigned)((v + XENT_BWD_THREADS * XENT_BWD_PER_THREAD - 1) /
	                                  (XENT_BWD_THREADS * XENT_BWD_PER_THREAD)));
	int vec = xent_vec_ok(logits, ld) && xent_vec_ok(dlogits, ld);
	xent_bwd_kernel<<<grid, XENT_BWD_THREADS, 0, kern_cuda_stream()>>>(
		dlogits, dloss, logits, ld, lse, targets, v, set, vec, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_softmax_xent_bwd_cuda(float *dlogits, float dloss, const float *logits,
                                           const float *lse, const int *targets, int n, int v)
{
	xent_bwd(KERN_ACT_F32, dlogits, dloss, logits, v, lse, targets, n, v, 0);
}

extern "C" void kern_softmax_xent_bwd_set_cuda(float *dlogits, float dloss, const float *logits,
                                               const float *lse, const int *targets, int n,
                                               int v)
{
	xent_bwd(KERN_ACT_F32, dlogits, dloss, logits, v, lse, targets, n, v, 1);
}

extern "C" void kern_softmax_xent_bwd_set_ld_cuda(float *dlogits, float dloss,
                                                  const float *logits, int ld, const float *lse,
                                                  const int *targets, int n, int v)
{
	xent_bwd(KERN_ACT_F32, dlogits, dloss, logits, ld, lse, targets, n, v, 1);
}

extern "C" void kern_softmax_xent_bwd_set_ld_act_cuda(int a16, void *dlogits, float dloss,
                                                      const void *logits, int ld,
                                                      const float *lse, const int *targets,
                                                      int n, int v)
{
	xent_bwd(a16, dlogits, dloss, logits, ld, lse, targets, n, v, 1);
}

/* A training step's forward and backward over the logits, for its
 * variants (xent_run): the one-pass kernel, or the forward's kernel then
 * the backward's; the same bits each */
struct xent_call {
	float *losses, *lse;
	void *dlogits;
	float dloss;
	const void *logits;
	const int *targets;
	int a16, ld, n, v, vec, ops;
};

enum { XENT_ONE_PASS, XENT_TWO_KERNELS };
static const char *const xent_names[2] = { "one pass", "two kernels" };

static void xent_run(void *ctx, int way)
{
	const struct xent_call *x = (const struct xent_call *)ctx;
	if (way == XENT_TWO_KERNELS) {
		kern_softmax_xent_fwd_ld_act_cuda(x->a16, x->losses, x->lse, x->logits, x->ld,
		                                  x->targets, x->n, x->v);
		xent_bwd(x->a16, x->dlogits, x->dloss, x->logits, x->ld, x->lse, x->targets, x->n,
		         x->v, 1);
	} else {
		xent_fwd_bwd_kernel<<<x->n, XENT_FWD_THREADS, 0, kern_cuda_stream()>>>(
			x->losses, x->lse, x->dlogits, x->dloss, x->logits, x->ld, x->targets, x->v,
			x->vec, x->a16, x->ops);
		KERN_CUDA_CHECK_LAUNCH();
	}
}

extern "C" void kern_softmax_xent_fwd_bwd_set_ld_act_cuda(int a16, float *losses, float *lse,
                                                          void *dlogits, float dloss,
                                                          const void *logits, int ld,
                                                          const int *targets, int n, int v)
{
	int ops = kern_cuda_act_operands(a16, "softmax_xent forward and backward");
	if (n <= 0 || v <= 0)
		return;
	struct xent_call x = { losses, lse, dlogits, dloss, logits, targets, a16, ld, n, v, 0, ops };
	x.vec = xent_vec_ok(logits, ld) && xent_vec_ok(dlogits, ld);
	int way = XENT_ONE_PASS;
	/* the faster, where the logits could not be rewritten by the gradient
	 * (no variant may read what one writes) */
	if (dlogits != logits) {
		char key[96];
		snprintf(key, sizeof key, "xent-fwd-bwd:%s,n%d,v%d,ld%d,vec%d",
		         !a16 ? "f32" : ops == KERN_MM_BF16 ? "bf16" : "fp16", n, v, ld, x.vec);
		way = kern_cuda_variant_pick(key, 2, xent_names, xent_run, &x);
	}
	xent_run(&x, way);
}

extern "C" void kern_argmax_rows_ld_act_cuda(int a16, int *best, const void *logits, int ld,
                                             int n, int v)
{
	int ops = kern_cuda_act_operands(a16, "argmax");
	if (n <= 0 || v <= 0)
		return;
	argmax_kernel<<<n, XENT_FWD_THREADS, 0, kern_cuda_stream()>>>(best, logits, ld, v, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_argmax_rows_ld_cuda(int *best, const float *logits, int ld, int n, int v)
{
	kern_argmax_rows_ld_act_cuda(KERN_ACT_F32, best, logits, ld, n, v);
}

extern "C" void kern_argmax_rows_cuda(int *best, const float *logits, int n, int v)
{
	kern_argmax_rows_ld_cuda(best, logits, v, n, v);
}
