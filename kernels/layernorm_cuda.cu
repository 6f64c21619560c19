/* kernels/layernorm_cuda.cu - LayerNorm forward and backward on the GPU (see
 * layernorm.h, layernorm_cuda.h).
 *
 * Forward: one warp per row, two passes over the row (mean, then the squared
 * deviations: E[x^2] - E[x]^2 cancels when |mean| >> std) and a third that
 * writes out; the row stays in L1 between them.
 *
 * Backward, per block of ROWS rows:
 *   1. one warp per row sums dn = dout * weight and dn * norm over the row;
 *   2. one thread per column walks the block's rows in order: it writes dinp
 *      and sums dout * norm and dout for dweight and dbias in registers,
 *      then stores them as the block's partials (the rows are still in L2);
 * then a second kernel adds the partials up per column in a fixed order.
 * With 16-bit operands inp and dout are read as 16-bit values, out and dinp
 * stored so: in fp32 buffers, or packed as 16 bits (a16, cuda_common.h).
 * The order of every sum depends on n and c alone: no float atomics, the
 * same bits on every run.
 */
#include "layernorm_cuda.h"

#include "cuda_common.h"
#include "precision_cuda.cuh"

extern "C" {
#include "layernorm.h"
}

#define FWD_WARPS 8  /* rows per forward block */
#define ROWS 8       /* rows per backward block, one per warp */
#define BWD_THREADS (ROWS * 32)

/* Butterfly sum over the warp, then lane 0's value for everyone (the lanes'
 * values agree anyway: each step adds the same two numbers). */
__device__ static inline float warp_sum(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, off);
	return __shfl_sync(0xffffffffu, v, 0);
}

__global__ static void ln_fwd_kernel(void *out, float *mean, float *rstd, const void *inp,
                                     const float *weight, const float *bias, int n, int c,
                                     int a16, int ops)
{
	int lane = threadIdx.x & 31;
	int row = blockIdx.x * FWD_WARPS + (threadIdx.x >> 5);
	if (row >= n)
		return;
	size_t x0 = (size_t)row * c;
	float s = 0.0f;
	for (int j = lane; j < c; j += 32)
		s += act_ld(inp, x0 + j, a16, ops);
	float m = warp_sum(s) / c;
	float v = 0.0f;
	for (int j = lane; j < c; j += 32) {
		float d = act_ld(inp, x0 + j, a16, ops) - m;
		v += d * d;
	}
	float r = 1.0f / sqrtf(warp_sum(v) / c + KERN_LAYERNORM_EPS);
	for (int j = lane; j < c; j += 32)
		act_st(out, x0 + j, (act_ld(inp, x0 + j, a16, ops) - m) * r * weight[j] + bias[j], a16,
		       ops);
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

/* part: [gridDim.x][2][c], the block's dweight sums then its dbias sums */
__global__ static void ln_bwd_kernel(void *dinp, float *part, const void *dout,
                                     const void *inp, const float *weight, const float *mean,
                                     const float *rstd, int n, int c, int set, int a16, int ops)
{
	__shared__ float s_mean[ROWS], s_rstd[ROWS], s_mdn[ROWS], s_mdnn[ROWS];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int r0 = blockIdx.x * ROWS;
	int rows = min(ROWS, n - r0);

	/* 1: the row sums behind dinp */
	if (warp < rows) {
		int i = r0 + warp;
		size_t x0 = (size_t)i * c;
		float m = mean[i], r = rstd[i];
		float a = 0.0f, b = 0.0f;
		for (int j = lane; j < c; j += 32) {
			float norm = (act_ld(inp, x0 + j, a16, ops) - m) * r;
			float dn = act_ld(dout, x0 + j, a16, ops) * weight[j];
			a += dn;
			b += dn * norm;
		}
		a = warp_sum(a);
		b = warp_sum(b);
		if (lane == 0) {
			s_mean[warp] = m;
			s_rstd[warp] = r;
			s_mdn[warp] = a / c;
			s_mdnn[warp] = b / c;
		}
	}
	__syncthreads();

	/* 2: dinp, and this block's column sums in row order */
	float *pw = part + (size_t)blockIdx.x * 2 * c, *pb = pw + c;
	for (int j = threadIdx.x; j < c; j += BWD_THREADS) {
		float w = weight[j], sw = 0.0f, sb = 0.0f;
		for (int k = 0; k < rows; k++) {
			size_t at = (size_t)(r0 + k) * c + j;
			float dy = act_ld(dout, at, a16, ops), r = s_rstd[k];
			float norm = (act_ld(inp, at, a16, ops) - s_mean[k]) * r, dn = dy * w;
			/* rounded before the add (no FMA): adding gives exactly
			 * dinp + what the _set version writes */
			float g = __fmul_rn(r, dn - s_mdn[k] - norm * s_mdnn[k]);
			act_st(dinp, at, set ? g : act_raw(dinp, at, a16, ops) + g, a16, ops);
			sw += dy * norm;
			sb += dy;
		}
		pw[j] = sw;
		pb[j] = sb;
	}
}

/* dweight[j] += sum over blocks of part[blk][0][j], dbias likewise: the
 * partials are a [nblk, 2c] matrix whose column sums go to dweight (first c
 * columns) and dbias. Block (32, FINAL_TY): thread row ty sums the partial
 * rows ty, ty + FINAL_TY, ... in order (double), then row 0 adds the
 * FINAL_TY sums in order. */
#define FINAL_TY 32
__global__ static void ln_bwd_final_kernel(float *dweight, float *dbias, const float *part,
                                           int nblk, int c)
{
	__shared__ double acc[FINAL_TY][32];
	int col = blockIdx.x * 32 + threadIdx.x;
	double s = 0;
	if (col < 2 * c)
		for (int k = threadIdx.y; k < nblk; k += FINAL_TY)
			s += part[(size_t)k * 2 * c + col];
	acc[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && col < 2 * c) {
		for (int y = 1; y < FINAL_TY; y++)
			s += acc[y][threadIdx.x];
		if (col < c)
			dweight[col] += (float)s;
		else
			dbias[col - c] += (float)s;
	}
}

extern "C" void kern_layernorm_fwd_act_cuda(int a16, void *out, float *mean, float *rstd,
                                            const void *inp, const float *weight,
                                            const float *bias, int n, int c)
{
	int ops = kern_cuda_act_operands(a16, "layernorm forward");
	if (n <= 0 || c <= 0)
		return;
	ln_fwd_kernel<<<(n + FWD_WARPS - 1) / FWD_WARPS, FWD_WARPS * 32, 0, kern_cuda_stream()>>>(
		out, mean, rstd, inp, weight, bias, n, c, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *inp,
                                        const float *weight, const float *bias, int n, int c)
{
	kern_layernorm_fwd_act_cuda(KERN_ACT_F32, out, mean, rstd, inp, weight, bias, n, c);
}

static void layernorm_bwd(int a16, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp, const float *weight, const float *mean,
                          const float *rstd, int n, int c, int set)
{
	int ops = kern_cuda_act_operands(a16, "layernorm backward");
	if (n <= 0 || c <= 0)
		return;
	int nblk = (n + ROWS - 1) / ROWS;
	float *part = (float *)kern_cuda_scratch_alloc(sizeof(float) * 2 * (size_t)c * nblk);
	ln_bwd_kernel<<<nblk, BWD_THREADS, 0, kern_cuda_stream()>>>(dinp, part, dout, inp, weight,
	                                                            mean, rstd, n, c, set, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
	ln_bwd_final_kernel<<<(2 * c + 31) / 32, dim3(32, FINAL_TY), 0, kern_cuda_stream()>>>(
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
