/* kernels/layernorm_kernels.cuh - the device code of layernorm_cuda.cu
 * (which says how it works), in a header of its own so that
 * tests/unit/test_act16_emu can run the same kernels on the CPU
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise; the includer brings
 * layernorm.h (KERN_LAYERNORM_EPS). */
#ifndef LARCH_KERNELS_LAYERNORM_KERNELS_CUH
#define LARCH_KERNELS_LAYERNORM_KERNELS_CUH

#include "precision_cuda.cuh"

#define LN_FWD_WARPS 8  /* rows per forward block */
#define LN_ROWS 8       /* rows per backward block, one per warp */
#define LN_BWD_THREADS (LN_ROWS * 32)

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
	int row = blockIdx.x * LN_FWD_WARPS + (threadIdx.x >> 5);
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
	__shared__ float s_mean[LN_ROWS], s_rstd[LN_ROWS], s_mdn[LN_ROWS], s_mdnn[LN_ROWS];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int r0 = blockIdx.x * LN_ROWS;
	int rows = min(LN_ROWS, n - r0);

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
	for (int j = threadIdx.x; j < c; j += LN_BWD_THREADS) {
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
 * columns) and dbias. Block (32, LN_FINAL_TY): thread row ty sums the partial
 * rows ty, ty + LN_FINAL_TY, ... in order (double), then row 0 adds the
 * LN_FINAL_TY sums in order. */
#define LN_FINAL_TY 32
__global__ static void ln_bwd_final_kernel(float *dweight, float *dbias, const float *part,
                                           int nblk, int c)
{
	__shared__ double acc[LN_FINAL_TY][32];
	int col = blockIdx.x * 32 + threadIdx.x;
	double s = 0;
	if (col < 2 * c)
		for (int k = threadIdx.y; k < nblk; k += LN_FINAL_TY)
			s += part[(size_t)k * 2 * c + col];
	acc[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && col < 2 * c) {
		for (int y = 1; y < LN_FINAL_TY; y++)
			s += acc[y][threadIdx.x];
		if (col < c)
			dweight[col] += (float)s;
		else
			dbias[col - c] += (float)s;
	}
}

#endif
