/* kernels/matmul_cuda.cu - fully connected layer on the GPU (see matmul.h,
 * matmul_cuda.h).
 *
 * cuBLAS is column-major; a row-major [r, k] matrix is the same memory as a
 * column-major [k, r] one. So, with every matrix in its row-major storage,
 *   out[n, oc]     = inp @ weight^T   is  out^T = weight^T(op T) @ inp^T
 *   dinp[n, c]    += dout @ weight    is  dinp^T = weight^T @ dout^T
 *   dweight[oc, c] += dout^T @ inp   is  dweight^T = inp^T @ dout^T(op T)
 * in column-major terms, each a single GEMM on the row-major buffers.
 *
 * The forward's bias goes into the GEMM's epilogue through cuBLASLt (one
 * pass over out); without bias it is a plain cublasSgemm. The bias gradient
 * is a column sum of dout: per-chunk partials in double, one thread per
 * column walking the chunk's rows in order, then the partials summed in a
 * fixed order; the chunking depends on n alone, so the bits do not depend on
 * timing. The cuBLASLt calls, their plans and the tunings
 * of their algorithms are matmul_lt_cuda.cu's.
 */
#include "matmul_cuda.h"

#include <stdint.h>

#include "cuda_common.h"
#include "gelu_cuda.h"
#include "matmul_kernels.cuh"
#include "matmul_lt_cuda.h"
#include "precision_cuda.cuh"
#include "precision_cuda.h"

static int g_fused_bias = 1;
static int g_fused_gelu = 0;
static long g_fused_gelu_gemms;        /* GEMMs that took GELU into their epilogue */

extern "C" int kern_matmul_cuda_fused_bias(int on)
{
	int prev = g_fused_bias;
	g_fused_bias = !!on;
	return prev;
}

static int g_split_odd = 0;

extern "C" int kern_matmul_cuda_split_odd(int on)
{
	int prev = g_split_odd;
	g_split_odd = !!on;
	return prev;
}

extern "C" int kern_matmul_cuda_fused_gelu(int on)
{
	int prev = g_fused_gelu;
	g_fused_gelu = !!on;
	return prev;
}

extern "C" long kern_matmul_cuda_fused_gelu_gemms(void)
{
	return g_fused_gelu_gemms;
}

extern "C" int kern_matmul_cuda_operands(int dtype)
{
	int prev = kern_cuda_gemm_operands();
	kern_cuda_set_gemm_operands(dtype);
	return prev;
}

/* ---- 16-bit operands (kern_matmul_cuda_operands) --------------------------- */

/* The caller's 16-bit copy of its weights (kern_matmul_cuda_weights16). */
static struct kern_w16 g_kept;

extern "C" void kern_matmul_cuda_weights16(const float *w, const uint16_t *w16, long n,
                                           long pad_at, long pad, int dtype)
{
	g_kept.w = w16 && n > 0 ? w : NULL;
	g_kept.w16 = w16;
	g_kept.n = n;
	g_kept.pad_at = pad_at;
	g_kept.pad = pad;
	g_kept.dtype = dtype;
}

/* x[0..n)'s place in the kept 16-bit copy, followed there by at least
 * zeros zero values; NULL when the copy does not hold it so (another dtype,
 * kern_w16_place's -1), so that it is converted: the operands' scratch
 * copies are 16-byte aligned, and cuBLASLt's bias epilogue is known to fail
 * on a bias that is not. */
static const uint16_t *kept16(const float *x, long n, long zeros)
{
	if (g_kept.dtype != kern_cuda_gemm_operands())
		return NULL;
	long at = kern_w16_place(&g_kept, x, n);
	if (at < 0 || (zeros > 0 && !(at + n == g_kept.pad_at && zeros <= g_kept.pad)))
		return NULL;
	return g_kept.w16 + at;
}

/* Releases what to16 or to16_rows_padded gave: scratch, or nothing when it
 * was the kept copy. */
static void free16(const uint16_t *h)
{
	if (!g_kept.w || h < g_kept.w16 || h >= g_kept.w16 + g_kept.n + g_kept.pad)
		kern_cuda_scratch_free((void *)h);
}

/* A 16-bit copy of x[0..n): the kept one, or one made in stream-ordered
 * scratch (either way, free16 it once the GEMM is enqueued). */
static const uint16_t *to16(const float *x, long n)
{
	const uint16_t *k = kept16(x, n, 0);
	return k ? k : kern_cuda_to16_scratch(x, n);
}

/* A 16-bit copy of weight [rows, c] with rows padded to [ld, c] by zero
 * rows: with a padded dimension of a multiple of 8 the tensor cores' aligned
 * kernels run where an odd rows (GPT-2's vocabulary, 50257) makes cuBLAS
 * fall back to slow ones. The kept copy where its gap follows weight. */
static const uint16_t *to16_rows_padded(const float *weight, int rows, int ld, int c)
{
	const uint16_t *k = kept16(weight, (long)rows * c, (long)(ld - rows) * c);
	if (k)
		return k;
	uint16_t *w16 = (uint16_t *)kern_cuda_scratch_alloc(sizeof(uint16_t) * (size_t)ld * c);
	if (kern_cuda_gemm_operands() == KERN_MM_BF16)
		kern_fp32_to_bf16_cuda(w16, weight, (long)rows * c);
	else
		kern_fp32_to_fp16_cuda(w16, weight, (long)rows * c);
	kern_cuda_zero(w16 + (size_t)rows * c, sizeof(uint16_t) * (size_t)(ld - rows) * c);
	return w16;
}

/* the operands' 16-bit type for cuBLAS */
static cudaDataType type16(void)
{
	return kern_cuda_gemm_operands() == KERN_MM_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* C (ldc, of type ct: fp32, or the operands' 16-bit type, rounded to nearest
 * from the fp32 result) = alpha op(A) op(B) + beta C with A and B in 16
 * bits, the products exact and summed in fp32 on the tensor cores: through
 * cuBLAS, or with the GEMMs tuned (kern_matmul_cuda_gemm_tune) through
 * cuBLASLt on the algorithm timed fastest, where it has one; with the
 * same-bits tuning, through the fastest of cuBLAS's call and those of
 * cuBLASLt's algorithms that gave its bits (matmul_lt_cuda.cu). */
static void gemm16_to(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                      void *c, cudaDataType ct, int ldc)
{
	const float one = 1.0f;
	cudaDataType t = type16();
	if (kern_lt_plain() &&
	    kern_lt_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, t, ct, CUBLASLT_EPILOGUE_DEFAULT,
	            NULL, NULL, 0))
		return;
	KERN_CUBLAS_CHECK(cublasGemmEx(kern_cuda_cublas(), ta, tb, m, n, k, &one, a, t, lda, b, t,
	                               ldb, &beta, c, ct, ldc, CUBLAS_COMPUTE_32F,
	                               CUBLAS_GEMM_DEFAULT));
}

static void gemm16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                   float *c, int ldc)
{
	gemm16_to(ta, tb, m, n, k, a, lda, b, ldb, beta, c, CUDA_R_32F, ldc);
}

/* dweight [oc, c] += dout^T inp, dout 16-bit [n, oc] rows ldd apart, inp
 * 16-bit [n, c]: the weight gradient's GEMM; an odd oc in two
 * (kern_matmul_cuda_split_odd) */
static void dweight16(float *dweight, const uint16_t *dout, int ldd, const uint16_t *inp, int n,
                      int c, int oc)
{
	int head = g_split_odd && oc % 8 != 0 && oc > 64 ? oc / 64 * 64 : oc;
	gemm16(CUBLAS_OP_N, CUBLAS_OP_T, c, head, n, inp, c, dout, ldd, 1.0f, dweight, c);
	if (head < oc)
		gemm16(CUBLAS_OP_N, CUBLAS_OP_T, c, oc - head, n, inp, c, dout + head, ldd, 1.0f,
		       dweight + (size_t)head * (size_t)c, c);
}

/* out = weight^T-GEMM + bias in one cuBLASLt call, with weight and inp of
 * type ab (16-bit ones are copies the caller made, or 16-bit activations)
 * and out of type dt: fp32 with an fp32 bias, or ab with a bias of type ab;
 * 0 when cuBLASLt has no algorithm for this shape and alignment (the caller
 * falls back). */
static int fwd_lt(void *out, int ldo, const void *inp, const void *weight, cudaDataType ab,
                  cudaDataType dt, const void *bias, int n, int c, int oc)
{
	/* column-major views: weight [c, oc] (transposed), inp [c, n], out [oc, n] */
	return kern_lt_gemm(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, weight, c, inp, c, 0.0f, out, ldo, ab, dt,
	               CUBLASLT_EPILOGUE_BIAS, bias, NULL, 0);
}

/* ---- small kernels --------------------------------------------------------- */

static void dbias_colsum(float *dbias, const void *dout, int a16, int ldd, int n, int oc)
{
	int nchunk = (n + DBIAS_ROWS - 1) / DBIAS_ROWS;
	double *part = (double *)kern_cuda_scratch_alloc(sizeof(double) * (size_t)nchunk * oc);
	/* several columns a thread where the rows allow, and several of its
	 * rows' reads in flight (2-byte reads kept too few bytes in flight: a
	 * GPT-2 step's 48 bias sums ran at a third of an H200's bandwidth;
	 * four columns, at most a read in flight, at about 0.3) */
	int w = dbias_columns(dout, oc, ldd, a16, 8), ops = kern_cuda_gemm_operands();
	dim3 grid((unsigned)((oc + 32 * w - 1) / (32 * w)), (unsigned)nchunk), block(32, DBIAS_TY);
	if (w == 8)
		dbias_partial_kernel<8><<<grid, block, 0, kern_cuda_stream()>>>(part, dout, n, oc, ldd,
		                                                                 a16, ops);
	else if (w == 4)
		dbias_partial_kernel<4><<<grid, block, 0, kern_cuda_stream()>>>(part, dout, n, oc, ldd,
		                                                                 a16, ops);
	else
		dbias_partial_kernel<1><<<grid, block, 0, kern_cuda_stream()>>>(part, dout, n, oc, ldd,
		                                                                 a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
	dbias_final_kernel<<<(unsigned)((oc + 31) / 32), dim3(32, DBIAS_FY), 0, kern_cuda_stream()>>>(
		dbias, part, nchunk, oc);
	KERN_CUDA_CHECK_LAUNCH();
	kern_cuda_scratch_free(part);
}

/* ---- entry points ---------------------------------------------------------- */

extern "C" void kern_matmul_fwd_ld_cuda(float *out, int ldo, const float *inp,
                                        const float *weight, const float *bias, int n, int c,
                                        int oc)
{
	if (n <= 0 || oc <= 0)
		return;
	long total = (long)n * oc;
	if (kern_cuda_gemm_operands() != KERN_MM_FP32 && c > 0 && !bias && ldo > oc && ldo % 8 == 0) {
		/* the GEMM over all ldo columns, zero rows of weight giving zeros in
		 * the padding: an aligned problem */
		const uint16_t *w16 = to16_rows_padded(weight, oc, ldo, c), *x16 = to16(inp, (long)n * c);
		gemm16(CUBLAS_OP_T, CUBLAS_OP_N, ldo, n, c, w16, c, x16, c, 0.0f, out, ldo);
		free16(w16);
		free16(x16);
		return;
	}
	if (kern_cuda_gemm_operands() != KERN_MM_FP32 && c > 0) {
		const uint16_t *w16 = to16(weight, (long)oc * c), *x16 = to16(inp, (long)n * c);
		cudaDataType ab = kern_cuda_gemm_operands() == KERN_MM_BF16 ? CUDA_R_16BF : CUDA_R_16F;
		if (bias && g_fused_bias && fwd_lt(out, ldo, x16, w16, ab, CUDA_R_32F, bias, n, c, oc)) {
			free16(w16);
			free16(x16);
			return;
		}
		/* out = bias (or 0), then the 16-bit GEMM adds onto it */
		if (bias) {
			broadcast_rows_kernel<<<kern_cuda_grid(total, 256), 256, 0, kern_cuda_stream()>>>(
				out, bias, total, oc, ldo);
			KERN_CUDA_CHECK_LAUNCH();
		}
		gemm16(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, w16, c, x16, c, bias ? 1.0f : 0.0f, out,
		       ldo);
		free16(w16);
		free16(x16);
		return;
	}
	if (c <= 0 ||
	    (bias && (!g_fused_bias ||
	              !fwd_lt(out, ldo, inp, weight, CUDA_R_32F, CUDA_R_32F, bias, n, c, oc)))) {
		/* out = bias (or 0), then the GEMM adds onto it */
		broadcast_rows_kernel<<<kern_cuda_grid(total, 256), 256, 0, kern_cuda_stream()>>>(
			out, bias, total, oc, ldo);
		KERN_CUDA_CHECK_LAUNCH();
		if (c <= 0)
			return;
		const float one = 1.0f;
		KERN_CUBLAS_CHECK(cublasSgemm(kern_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c,
		                              &one, weight, c, inp, c, &one, out, ldo));
	} else if (!bias) {
		const float one = 1.0f, zero = 0.0f;
		KERN_CUBLAS_CHECK(cublasSgemm(kern_cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c,
		                              &one, weight, c, inp, c, &zero, out, ldo));
	}
}

extern "C" void kern_matmul_fwd_cuda(float *out, const float *inp, const float *weight,
                                     const float *bias, int n, int c, int oc)
{
	kern_matmul_fwd_ld_cuda(out, oc, inp, weight, bias, n, c, oc);
}

/* dinp_beta: 1 adds into dinp, 0 overwrites it (NaN in it included) */
static void matmul_bwd(float *dinp, float *dweight, float *dbias, const float *dout, int ldd,
                       const float *inp, const float *weight, int n, int c, int oc,
                       float dinp_beta)
{
	if (n <= 0)
		return;
	if (oc <= 0) {
		if (dinp && dinp_beta == 0.0f && c > 0)
			kern_cuda_zero(dinp, sizeof(float) * (size_t)n * (size_t)c);
		return;
	}
	if (c > 0 && kern_cuda_gemm_operands() != KERN_MM_FP32) {
		/* dout spans n rows of ldd (cuBLAS's aligned kernels read whole
		 * vectors past column oc); with ldd > oc, dinp's sum runs over all ldd
		 * (an aligned problem): zero rows of weight and, in the copy of dout,
		 * zeros in place of whatever its padding held */
		int padded = ldd > oc && ldd % 8 == 0;
		const uint16_t *w16 = padded ? to16_rows_padded(weight, oc, ldd, c)
		                             : to16(weight, (long)oc * c);
		uint16_t *d16 = kern_cuda_to16_scratch(dout, (long)n * ldd);   /* written below */
		const uint16_t *x16 = to16(inp, (long)n * c);
		if (padded)
			KERN_CUDA_CHECK(cudaMemset2DAsync(d16 + oc, sizeof(uint16_t) * (size_t)ldd, 0,
			                                  sizeof(uint16_t) * (size_t)(ldd - oc), (size_t)n,
			                                  kern_cuda_stream()));
		if (dinp)
			gemm16(CUBLAS_OP_N, CUBLAS_OP_N, c, n, padded ? ldd : oc, w16, c, d16, ldd,
			       dinp_beta, dinp, c);
		dweight16(dweight, d16, ldd, x16, n, c, oc);
		free16(w16);
		kern_cuda_scratch_free(d16);
		free16(x16);
	} else if (c > 0) {
		cublasHandle_t h = kern_cuda_cublas();
		const float one = 1.0f;
		if (dinp)
			KERN_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, &one,
			                              weight, c, dout, ldd, &dinp_beta, dinp, c));
		KERN_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, &one, inp, c,
		                              dout, ldd, &one, dweight, c));
	}
	if (dbias)
		dbias_colsum(dbias, dout, KERN_ACT_F32, ldd, n, oc);
}

extern "C" void kern_matmul_bwd_cuda(float *dinp, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *weight,
                                     int n, int c, int oc)
{
	matmul_bwd(dinp, dweight, dbias, dout, oc, inp, weight, n, c, oc, 1.0f);
}

extern "C" void kern_matmul_bwd_set_cuda(float *dinp, float *dweight, float *dbias,
                                         const float *dout, const float *inp, const float *weight,
                                         int n, int c, int oc)
{
	matmul_bwd(dinp, dweight, dbias, dout, oc, inp, weight, n, c, oc, 0.0f);
}

extern "C" void kern_matmul_bwd_set_ld_cuda(float *dinp, float *dweight, float *dbias,
                                            const float *dout, int ldd, const float *inp,
                                            const float *weight, int n, int c, int oc)
{
	matmul_bwd(dinp, dweight, dbias, dout, ldd, inp, weight, n, c, oc, 0.0f);
}

/* ---- 16-bit activations (cuda_common.h) ------------------------------------ */

/* The forward with inp and out packed 16-bit values: the GEMM reads inp in
 * place and writes out rounded from its fp32 sums, the bias (exact as a
 * 16-bit value, as the model's weights are) added in cuBLASLt's epilogue
 * before that rounding, or where cuBLASLt has no algorithm, to an fp32
 * result in scratch by a kernel that then rounds. */
static void matmul_fwd16(uint16_t *out, int ldo, const uint16_t *inp, const float *weight,
                         const float *bias, int n, int c, int oc)
{
	cudaDataType t = type16();
	if (c <= 0) {                      /* out = bias, or zeros */
		float *zero = (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)oc);
		kern_cuda_zero(zero, sizeof(float) * (size_t)oc);
		long total = (long)n * oc;
		bias_store16_kernel<<<kern_cuda_grid(total, 256), 256, 0, kern_cuda_stream()>>>(
			out, NULL, bias ? bias : zero, total, oc, ldo, kern_cuda_gemm_operands());
		KERN_CUDA_CHECK_LAUNCH();
		kern_cuda_scratch_free(zero);
		return;
	}
	if (!bias) {
		int padded = ldo > oc && ldo % 8 == 0;   /* zero rows give zeros in the padding */
		const uint16_t *w16 = padded ? to16_rows_padded(weight, oc, ldo, c)
		                             : to16(weight, (long)oc * c);
		gemm16_to(CUBLAS_OP_T, CUBLAS_OP_N, padded ? ldo : oc, n, c, w16, c, inp, c, 0.0f, out, t,
		          ldo);
		free16(w16);
		return;
	}
	const uint16_t *w16 = to16(weight, (long)oc * c), *b16 = to16(bias, oc);
	int fused = g_fused_bias && fwd_lt(out, ldo, inp, w16, t, t, b16, n, c, oc);
	if (!fused) {
		long total = (long)n * oc;
		float *tmp = (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)total);
		gemm16(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, w16, c, inp, c, 0.0f, tmp, oc);
		bias_store16_kernel<<<kern_cuda_grid(total, 256), 256, 0, kern_cuda_stream()>>>(
			out, tmp, bias, total, oc, ldo, kern_cuda_gemm_operands());
		KERN_CUDA_CHECK_LAUNCH();
		kern_cuda_scratch_free(tmp);
	}
	free16(b16);
	free16(w16);
}

extern "C" void kern_matmul_fwd_ld_act_cuda(int a16, void *out, int ldo, const void *inp,
                                            const float *weight, const float *bias, int n, int c,
                                            int oc)
{
	kern_cuda_act_operands(a16, "matmul forward");
	if (!a16) {
		kern_matmul_fwd_ld_cuda((float *)out, ldo, (const float *)inp, weight, bias, n, c, oc);
		return;
	}
	if (n > 0 && oc > 0)
		matmul_fwd16((uint16_t *)out, ldo, (const uint16_t *)inp, weight, bias, n, c, oc);
}

extern "C" void kern_matmul_fwd_act_cuda(int a16, void *out, const void *inp, const float *weight,
                                         const float *bias, int n, int c, int oc)
{
	kern_matmul_fwd_ld_act_cuda(a16, out, oc, inp, weight, bias, n, c, oc);
}

/* The _set backward with dinp, dout and inp packed 16-bit values: the GEMMs
 * read dout and inp in place; dinp is written rounded from the fp32 sums,
 * dweight gets fp32 sums added, and so does dbias (the column sum). With ldd > oc (a multiple of 8)
 * dinp's sum runs over all ldd columns against zero rows of weight, reading
 * dout's padding, which must hold finite values (the caller zeroes it once).
 * With pre (16-bit, [n, c]: the GELU's input that made inp), dinp's GEMM
 * applies GELU's gradient at pre in cuBLASLt's epilogue (DGELU) when
 * cuBLASLt has an algorithm for it: returns 1 then, 0 when dinp is the
 * GEMM's alone. */
static int matmul_bwd_set16(uint16_t *dinp, float *dweight, float *dbias, const uint16_t *dout,
                            int ldd, const uint16_t *inp, const float *weight, int n, int c,
                            int oc, const uint16_t *pre)
{
	int dgelu = 0;
	if (oc <= 0) {
		if (dinp && c > 0)
			kern_cuda_zero(dinp, sizeof(uint16_t) * (size_t)n * (size_t)c);
		return 0;
	}
	if (c > 0) {
		int padded = ldd > oc && ldd % 8 == 0;
		const uint16_t *w16 = padded ? to16_rows_padded(weight, oc, ldd, c)
		                             : to16(weight, (long)oc * c);
		int k = padded ? ldd : oc;
		cudaDataType t = type16();
		if (dinp && pre)
			dgelu = kern_lt_gemm(CUBLAS_OP_N, CUBLAS_OP_N, c, n, k, w16, c, dout, ldd, 0.0f, dinp, c,
			                t, t, CUBLASLT_EPILOGUE_DGELU, NULL, pre, c);
		if (dinp && !dgelu)
			gemm16_to(CUBLAS_OP_N, CUBLAS_OP_N, c, n, k, w16, c, dout, ldd, 0.0f, dinp, t, c);
		dweight16(dweight, dout, ldd, inp, n, c, oc);
		free16(w16);
	}
	if (dbias)
		dbias_colsum(dbias, dout, KERN_ACT_16, ldd, n, oc);
	return dgelu;
}

extern "C" void kern_matmul_bwd_set_ld_act_cuda(int a16, void *dinp, float *dweight,
                                                float *dbias, const void *dout, int ldd,
                                                const void *inp, const float *weight, int n,
                                                int c, int oc)
{
	kern_cuda_act_operands(a16, "matmul backward");
	if (!a16) {
		kern_matmul_bwd_set_ld_cuda((float *)dinp, dweight, dbias, (const float *)dout, ldd,
		                            (const float *)inp, weight, n, c, oc);
		return;
	}
	if (n > 0)
		matmul_bwd_set16((uint16_t *)dinp, dweight, dbias, (const uint16_t *)dout, ldd,
		                 (const uint16_t *)inp, weight, n, c, oc, NULL);
}

extern "C" void kern_matmul_bwd_set_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                             const void *dout, const void *inp,
                                             const float *weight, int n, int c, int oc)
{
	kern_matmul_bwd_set_ld_act_cuda(a16, dinp, dweight, dbias, dout, oc, inp, weight, n, c, oc);
}

/* ---- the fc layer and its GELU, fused (matmul_cuda.h) ----------------------- */

extern "C" void kern_matmul_gelu_fwd_act_cuda(int a16, void *out, void *pre, const void *inp,
                                              const float *weight, const float *bias, int n,
                                              int c, int oc)
{
	kern_cuda_act_operands(a16, "matmul + GELU forward");
	int fused = 0;
	if (g_fused_gelu && a16 && bias && n > 0 && c > 0 && oc > 0) {
		cudaDataType t = type16();
		const uint16_t *w16 = to16(weight, (long)oc * c), *b16 = to16(bias, oc);
		fused = kern_lt_gemm(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, w16, c, inp, c, 0.0f, out, oc, t, t,
		                CUBLASLT_EPILOGUE_GELU_AUX_BIAS, b16, pre, oc);
		g_fused_gelu_gemms += fused;
		free16(b16);
		free16(w16);
	}
	if (!fused) {
		kern_matmul_fwd_act_cuda(a16, pre, inp, weight, bias, n, c, oc);
		kern_gelu_fwd_act_cuda(a16, out, pre, (long)n * oc);
	}
}

extern "C" void kern_matmul_bwd_set_dgelu_act_cuda(int a16, void *dpre, float *dweight,
                                                   float *dbias, const void *dout,
                                                   const void *inp, const float *weight,
                                                   const void *pre, int n, int c, int oc)
{
	kern_cuda_act_operands(a16, "matmul backward + GELU backward");
	if (g_fused_gelu && a16) {
		if (n <= 0)
			return;
		if (matmul_bwd_set16((uint16_t *)dpre, dweight, dbias, (const uint16_t *)dout, oc,
		                     (const uint16_t *)inp, weight, n, c, oc, (const uint16_t *)pre)) {
			g_fused_gelu_gemms++;
			return;
		}
	} else {
		kern_matmul_bwd_set_act_cuda(a16, dpre, dweight, dbias, dout, inp, weight, n, c, oc);
	}
	kern_gelu_bwd_set_act_cuda(a16, dpre, pre, dpre, (long)n * c);
}
