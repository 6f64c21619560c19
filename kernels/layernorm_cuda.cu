/* kernels/layernorm_cuda.cu - LayerNorm forward and backward on the GPU (see
 * layernorm.h, layernorm_cuda.h).
 *
 * Forward: one warp per row, two passes over the row (mean, then the squared
 * deviations: E[x^2] - E[x]^2 cancels when |mean| >> std) and a third that
 * writes out; the row stays in L1 between them.
 *
 * Backward, per block of LN_ROWS rows:
 *   1. one warp per row sums dn = dout * weight and dn * norm over the row;
 *   2. one thread per column walks the block's rows in order: it writes dinp
 *      and sums dout * norm and dout for dweight and dbias in registers,
 *      then stores them as the block's partials (the rows are still in L2);
 * then a second kernel adds the partials up per column in a fixed order.
 * The residual connection before a LayerNorm goes into the forward's
 * kernel (kern_residual_layernorm_fwd_act_cuda): a warp keeps its row's
 * sums in registers, one read of each input and one write of each output.
 * Where the rows start on 16 bytes (8 with 16-bit storage) and c is a
 * multiple of 4, both read and write four elements an access: one 2-byte
 * access a thread kept too few bytes in flight, and the backward ran at a
 * fifth of an H200's bandwidth on GPT-2's [B, T, 768].
 * With 16-bit operands inp and dout are read as 16-bit values, out and dinp
 * stored so: in fp32 buffers, or packed as 16 bits (a16, cuda_common.h).
 * The order of every sum depends on n and c alone: no float atomics, the
 * same bits on every run.
 */
#include "layernorm_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#include "cuda_common.h"

extern "C" {
#include "layernorm.h"
}

#include "layernorm_kernels.cuh"   /* after layernorm.h: KERN_LAYERNORM_EPS */
#include "matmul_cuda.h"
#include "residual_cuda.h"

extern "C" void kern_layernorm_fwd_act_cuda(int a16, void *out, float *mean, float *rstd,
                                            const void *inp, const float *weight,
                                            const float *bias, int n, int c)
{
	int ops = kern_cuda_act_operands(a16, "layernorm forward");
	if (n <= 0 || c <= 0)
		return;
	unsigned blocks = (unsigned)((n + LN_FWD_WARPS - 1) / LN_FWD_WARPS);
	int vec = ln_vec_ok(out, c, a16) && ln_vec_ok(inp, c, a16);
	ln_fwd_kernel<<<blocks, LN_FWD_WARPS * 32, 0, kern_cuda_stream()>>>(out, mean, rstd, inp,
	                                                                   weight, bias, n, c, vec,
	                                                                   a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *inp,
                                        const float *weight, const float *bias, int n, int c)
{
	kern_layernorm_fwd_act_cuda(KERN_ACT_F32, out, mean, rstd, inp, weight, bias, n, c);
}

static int g_ln_residual = 1;

extern "C" int kern_layernorm_cuda_fuse_residual(int on)
{
	return kern_cuda_switch(&g_ln_residual, on);
}

/* A residual + LayerNorm call's operands, for its variants (res_ln_run):
 * the one kernel (0) or the residual's then the LayerNorm's (1), the same
 * bits */
struct res_ln_call {
	void *res, *out;
	float *mean, *rstd;
	const void *a, *b;
	const float *weight, *bias;
	int a16, n, c, ops, g;
};

static const char *const res_ln_names[2] = { "one kernel", "two kernels" };

static void res_ln_run(void *ctx, int two)
{
	const struct res_ln_call *r = (const struct res_ln_call *)ctx;
	if (two) {
		kern_residual_fwd_act_cuda(r->a16, r->res, r->a, r->b, (long)r->n * r->c);
		kern_layernorm_fwd_act_cuda(r->a16, r->out, r->mean, r->rstd, r->res, r->weight,
		                            r->bias, r->n, r->c);
		return;
	}
	typedef void (*res_kernel)(void *, void *, float *, float *, const void *, const void *,
	                           const float *, const float *, int, int, int, int);
	/* the fewest registers that hold the row: GPT-2's 768 (6 groups a
	 * lane) in 8, 1600 (13) in 16 */
	res_kernel k = r->g <= 2 ? ln_res_fwd_kernel<2>
	             : r->g <= 4 ? ln_res_fwd_kernel<4>
	             : r->g <= 8 ? ln_res_fwd_kernel<8>
	                         : ln_res_fwd_kernel<LN_RES_MAX_G>;
	unsigned blocks = (unsigned)((r->n + LN_FWD_WARPS - 1) / LN_FWD_WARPS);
	k<<<blocks, LN_FWD_WARPS * 32, 0, kern_cuda_stream()>>>(r->res, r->out, r->mean, r->rstd,
	                                                        r->a, r->b, r->weight, r->bias,
	                                                        r->n, r->c, r->a16, r->ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_residual_layernorm_fwd_act_cuda(int a16, void *res, void *out, float *mean,
                                                     float *rstd, const void *a, const void *b,
                                                     const float *weight, const float *bias,
                                                     int n, int c)
{
	int ops = kern_cuda_act_operands(a16, "residual + layernorm forward");
	if (n <= 0 || c <= 0)
		return;
	struct res_ln_call r = { res, out, mean, rstd, a, b, weight, bias, a16, n, c, ops,
		                 (c / 4 + 31) / 32 /* the groups of four a lane holds */ };
	if (!kern_layernorm_cuda_fuse_residual(-1) || r.g > LN_RES_MAX_G || !ln_vec_ok(res, c, a16) ||
	    !ln_vec_ok(out, c, a16) || !ln_vec_ok(a, c, a16) || !ln_vec_ok(b, c, a16)) {
		res_ln_run(&r, 1);
		return;
	}
	int two = 0;
	/* the faster, where the sum does not overwrite an input (no variant
	 * may read what one writes) */
	if (res != a && res != b) {
		char key[96];
		snprintf(key, sizeof key, "residual-layernorm:%s,n%d,c%d",
		         !a16 ? "f32" : ops == KERN_MM_BF16 ? "bf16" : "fp16", n, c);
		two = kern_cuda_variant_pick(key, 2, res_ln_names, res_ln_run, &r);
	}
	res_ln_run(&r, two);
}

static void layernorm_bwd(int a16, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp, const float *weight, const float *mean,
                          const float *rstd, int n, int c, int set)
{
	int ops = kern_cuda_act_operands(a16, "layernorm backward");
	if (n <= 0 || c <= 0)
		return;
	int nblk = (n + LN_ROWS - 1) / LN_ROWS;
	float *part = (float *)kern_cuda_scratch_alloc(sizeof(float) * 2 * (size_t)c * nblk);
	int vec = ln_vec_ok(dinp, c, a16) && ln_vec_ok(dout, c, a16) && ln_vec_ok(inp, c, a16);
	ln_bwd_kernel<<<nblk, LN_BWD_THREADS, 0, kern_cuda_stream()>>>(
		dinp, part, dout, inp, weight, mean, rstd, n, c, set, vec, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
	ln_bwd_final_kernel<<<(2 * c + 31) / 32, dim3(32, LN_FINAL_TY), 0, kern_cuda_stream()>>>(
		dweight, dbias, part, nblk, c);
	KERN_CUDA_CHECK_LAUNCH();
	kern_cuda_scratch_free(part);
}

extern "C" void kern_layernorm_bwd_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                            const void *dout, const void *inp,
                                            const float *weight, const float *mean,
                                            const float *rstd, int n, int c)
{
	layernorm_bwd(a16, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 0);
}

extern "C" void kern_layernorm_bwd_set_act_cuda(int a16, void *dinp, float *dweight,
                                                float *dbias, const void *dout, const void *inp,
                                                const float *weight, const float *mean,
                                                const float *rstd, int n, int c)
{
	layernorm_bwd(a16, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 1);
}

extern "C" void kern_layernorm_bwd_cuda(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int n, int c)
{
	layernorm_bwd(KERN_ACT_F32, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 0);
}

extern "C" void kern_layernorm_bwd_set_cuda(float *dinp, float *dweight, float *dbias,
                                            const float *dout, const float *inp,
                                            const float *weight, const float *mean,
                                            const float *rstd, int n, int c)
{
	layernorm_bwd(KERN_ACT_F32, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 1);
}
