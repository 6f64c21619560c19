/* kernels/attention_cuda.cu - causal multi-head self-attention on the GPU
 * (see attention.h, attention_cuda.h).
 *
 * Every product is a cuBLAS strided-batched GEMM over the nh heads of one
 * batch row (one call per row of the batch and product): a head's q, k and
 * v are [t, hs] blocks of qkv with row stride 3c, hs apart from head to
 * head; its att block is [t, t], t*t apart. In cuBLAS's column-major terms a
 * row-major [r, k] block with row stride ld is a [k, r] matrix with leading
 * dimension ld, so (row-major products on the left):
 *   att   = scale q k^T        att^T = (k^T)^T(op T) q^T          (T, N)
 *   out   = att v              out^T = v^T att^T                  (N, N)
 *   datt  = dout v^T           datt^T = (v^T)^T(op T) dout^T      (T, N)
 *   dv   += att^T dout         dv^T  = dout^T (att^T)^T(op T)     (N, T)
 *   dq   += scale dpre k       dq^T  = k^T dpre^T                 (N, N)
 *   dk   += scale dpre^T q     dk^T  = q^T (dpre^T)^T(op T)       (N, T)
 * The scores are computed for the whole [t, t] block (the masked half too)
 * and the causal softmax, forward and backward, is a warp per row that
 * writes zeros above the diagonal.
 *
 * With 16-bit GEMM operands (kern_cuda_gemm_operands, as a bf16 or fp16
 * model sets) the products run on the tensor cores from 16-bit copies of
 * qkv, dout, att and dpreatt, with fp32 sums and fp32 results; the softmax
 * sums in fp32. qkv and dout hold 16-bit values already (exact copies); the
 * probabilities are rounded for the products with v and q, k, as a fused
 * (flash) kernel rounds them. The softmax kernels write those 16-bit copies
 * of att and dpreatt beside their fp32 results, in the same pass, and the
 * forward leaves att itself rounded (16-bit storage: the model need not
 * round it again).
 */
#include "attention_cuda.h"

#include <math.h>

#include "attention_kernels.cuh"
#include "cuda_common.h"
#include "precision_cuda.cuh"
#include "precision_cuda.h"

/* C (m x n, ldc, strideC) = alpha op(A) op(B) + beta C over the nh heads */
static void heads_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       float alpha, const float *a, int lda, long sa, const float *b, int ldb,
                       long sb, float beta, float *c, int ldc, long sc, int nh)
{
	KERN_CUBLAS_CHECK(cublasSgemmStridedBatched(kern_cuda_cublas(), ta, tb, m, n, k, &alpha, a,
	                                            lda, sa, b, ldb, sb, &beta, c, ldc, sc, nh));
}

/* the operands' 16-bit type (kern_cuda_gemm_operands) for cuBLAS */
static cudaDataType type16(void)
{
	return kern_cuda_gemm_operands() == 2 ? CUDA_R_16BF : CUDA_R_16F;
}

/* heads_gemm with 16-bit A and B (kern_cuda_gemm_operands' type) and C of
 * type ct: fp32, or that 16-bit type (rounded from the fp32 result) */
static void heads_gemm16_to(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            float alpha, const uint16_t *a, int lda, long sa, const uint16_t *b,
                            int ldb, long sb, float beta, void *c, cudaDataType ct, int ldc,
                            long sc, int nh)
{
	cudaDataType t = type16();
	KERN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(kern_cuda_cublas(), ta, tb, m, n, k, &alpha, a,
	                                             t, lda, sa, b, t, ldb, sb, &beta, c, ct, ldc, sc,
	                                             nh, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void heads_gemm16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         float alpha, const uint16_t *a, int lda, long sa, const uint16_t *b,
                         int ldb, long sb, float beta, float *c, int ldc, long sc, int nh)
{
	heads_gemm16_to(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, CUDA_R_32F, ldc, sc,
	                nh);
}

/* att16 NULL: fp32 only; only16: the probabilities go to att16 alone */
static void softmax_rows(float *att, uint16_t *att16, int only16, long rows, int t)
{
	unsigned blocks = (unsigned)((rows + ATT_SOFTMAX_WARPS - 1) / ATT_SOFTMAX_WARPS);
	int bf16 = kern_cuda_gemm_operands() == 2;
	causal_softmax_kernel<<<blocks, ATT_SOFTMAX_WARPS * 32, 0, kern_cuda_stream()>>>(
		att, att16, bf16, only16, rows, t);
	KERN_CUDA_CHECK_LAUNCH();
}

/* datt becomes dpreatt over rows rows of t; d16 NULL: fp32 only; att16:
 * the probabilities as packed 16-bit values, dpreatt to d16 alone */
static void softmax_bwd_rows(float *datt, uint16_t *d16, const float *att, const uint16_t *att16,
                             long rows, int t)
{
	unsigned blocks = (unsigned)((rows + ATT_SOFTMAX_WARPS - 1) / ATT_SOFTMAX_WARPS);
	int bf16 = kern_cuda_gemm_operands() == 2;
	causal_softmax_bwd_kernel<<<blocks, ATT_SOFTMAX_WARPS * 32, 0, kern_cuda_stream()>>>(
		datt, d16, bf16, att, att16, rows, t);
	KERN_CUDA_CHECK_LAUNCH();
}

/* element i of a buffer of GEMM results of type ty (fp32 or 16-bit) */
static void *elem(void *p, cudaDataType ty, size_t i)
{
	return (char *)p + i * (ty == CUDA_R_32F ? sizeof(float) : sizeof(uint16_t));
}

/* The forward on 16-bit q, k, v (qkv16): the scaled scores into scores
 * (fp32), the probabilities rounded to 16 bits into att16 (with only16 0
 * also over the scores, as fp32 values), and their product with v into out
 * (rows c apart) of type ot: fp32, or the operands' 16-bit type. */
static void fwd16(void *out, cudaDataType ot, float *scores, uint16_t *att16, int only16,
                  const uint16_t *qkv16, int b, int t, int c, int nh)
{
	int hs = c / nh;
	float scale = (float)(1.0 / sqrt((double)hs));
	long tt = (long)t * t;
	for (int bb = 0; bb < b; bb++) {
		const uint16_t *q = qkv16 + (size_t)bb * t * 3 * c, *k = q + c;
		heads_gemm16(CUBLAS_OP_T, CUBLAS_OP_N, t, t, hs, scale, k, 3 * c, hs, q, 3 * c, hs, 0.0f,
		             scores + (size_t)bb * nh * tt, t, tt, nh);
	}
	softmax_rows(scores, att16, only16, (long)b * nh * t, t);
	for (int bb = 0; bb < b; bb++) {
		const uint16_t *v = qkv16 + (size_t)bb * t * 3 * c + 2 * c;
		heads_gemm16_to(CUBLAS_OP_N, CUBLAS_OP_N, hs, t, t, 1.0f, v, 3 * c, hs,
		                att16 + (size_t)bb * nh * tt, t, tt, 0.0f,
		                elem(out, ot, (size_t)bb * t * c), ot, c, hs, nh);
	}
}

/* The backward on 16-bit dout, q, k, v and probabilities (dout16, qkv16,
 * att16) into dqkv of type dt (fp32, or the operands' 16-bit type; dbeta 1
 * adds into it, 0 overwrites it), datt the fp32 scratch for dout v^T:
 * dpreatt there at the end where att (the same probabilities as fp32
 * values) is given, else the softmax backward reads att16 and keeps
 * dpreatt as 16 bits only, which is what the products with q and k read. */
static void bwd16(void *dqkv, cudaDataType dt, float dbeta, float *datt, const uint16_t *dout16,
                  const uint16_t *qkv16, const uint16_t *att16, const float *att, int b, int t,
                  int c, int nh)
{
	int hs = c / nh;
	float scale = (float)(1.0 / sqrt((double)hs));
	long tt = (long)t * t, rows = (long)b * nh * t;
	for (int bb = 0; bb < b; bb++) {
		size_t o3 = (size_t)bb * t * 3 * c, o1 = (size_t)bb * t * c;
		const uint16_t *v = qkv16 + o3 + 2 * c, *dy = dout16 + o1;
		heads_gemm16(CUBLAS_OP_T, CUBLAS_OP_N, t, t, hs, 1.0f, v, 3 * c, hs, dy, c, hs, 0.0f,
		             datt + (size_t)bb * nh * tt, t, tt, nh);
		heads_gemm16_to(CUBLAS_OP_N, CUBLAS_OP_T, hs, t, t, 1.0f, dy, c, hs,
		                att16 + (size_t)bb * nh * tt, t, tt, dbeta, elem(dqkv, dt, o3 + 2 * c),
		                dt, 3 * c, hs, nh);
	}
	uint16_t *dp16 = (uint16_t *)kern_cuda_scratch_alloc(sizeof(uint16_t) * (size_t)rows *
	                                                     (size_t)t);
	softmax_bwd_rows(datt, dp16, att, att ? NULL : att16, rows, t);
	for (int bb = 0; bb < b; bb++) {
		size_t o3 = (size_t)bb * t * 3 * c;
		const uint16_t *q = qkv16 + o3, *k = q + c, *dp = dp16 + (size_t)bb * nh * tt;
		heads_gemm16_to(CUBLAS_OP_N, CUBLAS_OP_N, hs, t, t, scale, k, 3 * c, hs, dp, t, tt,
		                dbeta, elem(dqkv, dt, o3), dt, 3 * c, hs, nh);
		heads_gemm16_to(CUBLAS_OP_N, CUBLAS_OP_T, hs, t, t, scale, q, 3 * c, hs, dp, t, tt,
		                dbeta, elem(dqkv, dt, o3 + c), dt, 3 * c, hs, nh);
	}
	kern_cuda_scratch_free(dp16);
}

extern "C" void kern_attention_fwd_cuda(float *out, float *preatt, float *att, const float *qkv,
                                        int b, int t, int c, int nh)
{
	(void)preatt;
	if (b <= 0 || t <= 0 || c <= 0 || nh <= 0)
		return;
	int hs = c / nh;
	float scale = (float)(1.0 / sqrt((double)hs));
	long tt = (long)t * t;
	if (kern_cuda_gemm_operands()) {
		/* from 16-bit copies, att left rounded, out fp32 */
		uint16_t *qkv16 = kern_cuda_to16_scratch(qkv, (long)b * t * 3 * c);
		uint16_t *att16 = (uint16_t *)kern_cuda_scratch_alloc(sizeof(uint16_t) * (size_t)b *
		                                                      (size_t)nh * (size_t)tt);
		fwd16(out, CUDA_R_32F, att, att16, 0, qkv16, b, t, c, nh);
		kern_cuda_scratch_free(att16);
		kern_cuda_scratch_free(qkv16);
		return;
	}
	for (int bb = 0; bb < b; bb++) {
		const float *q = qkv + (size_t)bb * t * 3 * c, *k = q + c;
		float *a = att + (size_t)bb * nh * tt;
		heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, t, t, hs, scale, k, 3 * c, hs, q, 3 * c, hs,
		           0.0f, a, t, tt, nh);
	}
	softmax_rows(att, NULL, 0, (long)b * nh * t, t);
	for (int bb = 0; bb < b; bb++) {
		const float *v = qkv + (size_t)bb * t * 3 * c + 2 * c;
		const float *a = att + (size_t)bb * nh * tt;
		heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, t, t, 1.0f, v, 3 * c, hs, a, t, tt, 0.0f,
		           out + (size_t)bb * t * c, c, hs, nh);
	}
}

/* attention_bwd with 16-bit operands: from 16-bit copies, dqkv fp32 */
static void attention_bwd16(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int b, int t, int c, int nh, float dbeta)
{
	uint16_t *qkv16 = kern_cuda_to16_scratch(qkv, (long)b * t * 3 * c);
	uint16_t *dout16 = kern_cuda_to16_scratch(dout, (long)b * t * c);
	uint16_t *att16 = kern_cuda_to16_scratch(att, (long)b * nh * t * t);
	bwd16(dqkv, CUDA_R_32F, dbeta, datt, dout16, qkv16, att16, att, b, t, c, nh);
	kern_cuda_scratch_free(att16);
	kern_cuda_scratch_free(dout16);
	kern_cuda_scratch_free(qkv16);
}

/* dbeta: 1 adds into dqkv, 0 overwrites it (each element of dqkv is written
 * by exactly one of the dq, dk, dv products) */
static void attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, int b, int t, int c, int nh, float dbeta)
{
	if (b <= 0 || t <= 0 || c <= 0 || nh <= 0)
		return;
	if (kern_cuda_gemm_operands()) {
		attention_bwd16(dqkv, datt, dout, qkv, att, b, t, c, nh, dbeta);
		return;
	}
	int hs = c / nh;
	float scale = (float)(1.0 / sqrt((double)hs));
	long tt = (long)t * t;
	for (int bb = 0; bb < b; bb++) {
		size_t o3 = (size_t)bb * t * 3 * c, o1 = (size_t)bb * t * c;
		const float *v = qkv + o3 + 2 * c, *dy = dout + o1, *a = att + (size_t)bb * nh * tt;
		float *da = datt + (size_t)bb * nh * tt;
		heads_gemm(CUBLAS_OP_T, CUBLAS_OP_N, t, t, hs, 1.0f, v, 3 * c, hs, dy, c, hs, 0.0f, da,
		           t, tt, nh);
		heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, t, t, 1.0f, dy, c, hs, a, t, tt, dbeta,
		           dqkv + o3 + 2 * c, 3 * c, hs, nh);
	}
	softmax_bwd_rows(datt, NULL, att, NULL, (long)b * nh * t, t);
	for (int bb = 0; bb < b; bb++) {
		size_t o3 = (size_t)bb * t * 3 * c;
		const float *q = qkv + o3, *k = q + c, *dp = datt + (size_t)bb * nh * tt;
		heads_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, t, t, scale, k, 3 * c, hs, dp, t, tt, dbeta,
		           dqkv + o3, 3 * c, hs, nh);
		heads_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, t, t, scale, q, 3 * c, hs, dp, t, tt, dbeta,
		           dqkv + o3 + c, 3 * c, hs, nh);
	}
}

extern "C" void kern_attention_bwd_cuda(float *dqkv, float *dpreatt, float *datt,
                                        const float *dout, const float *qkv, const float *att,
                                        int b, int t, int c, int nh)
{
	(void)dpreatt;
	attention_bwd(dqkv, datt, dout, qkv, att, b, t, c, nh, 1.0f);
}

extern "C" void kern_attention_bwd_set_cuda(float *dqkv, float *dpreatt, float *datt,
                                            const float *dout, const float *qkv,
                                            const float *att, int b, int t, int c, int nh)
{
	(void)dpreatt;
	attention_bwd(dqkv, datt, dout, qkv, att, b, t, c, nh, 0.0f);
}

/* ---- 16-bit activations (cuda_common.h) ------------------------------------ */

extern "C" void kern_attention_fwd_act_cuda(int a16, void *out, float *preatt, void *att,
                                            const void *qkv, int b, int t, int c, int nh)
{
	kern_cuda_act_operands(a16, "attention forward");
	if (!a16) {
		kern_attention_fwd_cuda((float *)out, preatt, (float *)att, (const float *)qkv, b, t, c,
		                        nh);
		return;
	}
	if (b > 0 && t > 0 && c > 0 && nh > 0)
		fwd16(out, type16(), preatt, (uint16_t *)att, 1, (const uint16_t *)qkv, b, t, c, nh);
}

extern "C" void kern_attention_bwd_set_act_cuda(int a16, void *dqkv, float *dpreatt, float *datt,
                                                const void *dout, const void *qkv,
                                                const void *att, int b, int t, int c, int nh)
{
	kern_cuda_act_operands(a16, "attention backward");
	if (!a16) {
		kern_attention_bwd_set_cuda((float *)dqkv, dpreatt, datt, (const float *)dout,
		                            (const float *)qkv, (const float *)att, b, t, c, nh);
		return;
	}
	if (b > 0 && t > 0 && c > 0 && nh > 0)
		bwd16(dqkv, type16(), 0.0f, datt, (const uint16_t *)dout, (const uint16_t *)qkv,
		      (const uint16_t *)att, NULL, b, t, c, nh);
}
