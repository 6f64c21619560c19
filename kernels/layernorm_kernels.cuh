/* kernels/layernorm_kernels.cuh - the device code of layernorm_cuda.cu
 * (which says how it works), in a header of its own so that
 * tests/unit/test_act16_emu can run the same kernels on the CPU
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise; the includer brings
 * layernorm.h (KERN_LAYERNORM_EPS). */
#ifndef LARCH_KERNELS_LAYERNORM_KERNELS_CUH
#define LARCH_KERNELS_LAYERNORM_KERNELS_CUH

#include <stdint.h>

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

/* Whether the kernels below may read and write rows of c elements at p
 * four at a time (act_ld4): every row starts on 16 bytes (8 with a16). */
static inline int ln_vec_ok(const void *p, int c, int a16)
{
	return c % 4 == 0 && (uintptr_t)p % (a16 ? 8 : 16) == 0;
}

/* The forward's steps on a group of four: its part of the row's sum, of
 * the sum of squared deviations from m, and its outputs. ln_fwd_kernel and
 * ln_res_fwd_kernel both take them from here, so that the two give the
 * same bits (the same expressions, contracted alike). */
__device__ static inline float ln_sum4(float4 x)
{
	return x.x + x.y + x.z + x.w;
}

__device__ static inline float ln_sq4(float4 x, float m)
{
	float d0 = x.x - m, d1 = x.y - m, d2 = x.z - m, d3 = x.w - m;
	return d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
}

__device__ static inline float4 ln_out4(float4 x, float m, float r, const float *w,
                                        const float *b)
{
	return make_float4((x.x - m) * r * w[0] + b[0], (x.y - m) * r * w[1] + b[1],
	                   (x.z - m) * r * w[2] + b[2], (x.w - m) * r * w[3] + b[3]);
}

/* One warp per row; with vec (ln_vec_ok for inp and out) each lane reads
 * and writes groups of four, else one element at a time */
__global__ static void ln_fwd_kernel(void *out, float *mean, float *rstd, const void *inp,
                                     const float *weight, const float *bias, int n, int c,
                                     int vec, int a16, int ops)
{
	int lane = threadIdx.x & 31;
	int row = blockIdx.x * LN_FWD_WARPS + (threadIdx.x >> 5);
	if (row >= n)
		return;
	size_t x0 = (size_t)row * c;
	float s = 0.0f;
	if (vec) {
		size_t g0 = x0 / 4;
		for (int g = lane; g < c / 4; g += 32)
			s += ln_sum4(act_ld4(inp, (long)(g0 + g), a16, ops));
		float m = warp_sum(s) / c;
		float v = 0.0f;
		for (int g = lane; g < c / 4; g += 32)
			v += ln_sq4(act_ld4(inp, (long)(g0 + g), a16, ops), m);
		float r = 1.0f / sqrtf(warp_sum(v) / c + KERN_LAYERNORM_EPS);
		for (int g = lane; g < c / 4; g += 32)
			act_st4(out, (long)(g0 + g),
			        ln_out4(act_ld4(inp, (long)(g0 + g), a16, ops), m, r, weight + 4 * g,
			                bias + 4 * g),
			        a16, ops);
		if (lane == 0) {
			mean[row] = m;
			rstd[row] = r;
		}
		return;
	}
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

/* The most groups of four a lane of ln_res_fwd_kernel holds: rows of up
 * to 128 LN_RES_MAX_G elements */
#define LN_RES_MAX_G 16

/* The residual connection and the LayerNorm after it, one warp a row:
 * res = a + b, stored rounded as residual_fwd_kernel stores it, and out,
 * mean and rstd the LayerNorm of res's stored values, as ln_fwd_kernel's
 * groups of four give them: the same steps (ln_sum4 ...) on the same
 * values in the same order, so the same bits as the two kernels. A lane
 * keeps its G groups of the row (g = lane, lane + 32, ...; c <= 128 G) in
 * registers: a and b are read once and res and out written once, where
 * the two kernels read res back three times. The caller checks ln_vec_ok
 * for res, out, a and b. */
template <int G>
__global__ static void ln_res_fwd_kernel(void *res, void *out, float *mean, float *rstd,
                                         const void *a, const void *b, const float *weight,
                                         const float *bias, int n, int c, int a16, int ops)
{
	int lane = threadIdx.x & 31;
	int row = blockIdx.x * LN_FWD_WARPS + (threadIdx.x >> 5);
	if (row >= n)
		return;
	long g0 = (long)row * (c / 4);
	int groups = c / 4;
	/* every read before the first store: res may be a or b, so that a
	 * store would keep the compiler from issuing the next group's reads
	 * before it, two reads in flight where the row's 2 G can be */
	float4 x[G];
#pragma unroll
	for (int i = 0; i < G; i++) {
		int g = lane + 32 * i;
		if (g < groups) {
			float4 p = act_ld4(a, g0 + g, a16, ops), q = act_ld4(b, g0 + g, a16, ops);
			x[i] = make_float4(p.x + q.x, p.y + q.y, p.z + q.z, p.w + q.w);
		}
	}
	float s = 0.0f;
#pragma unroll
	for (int i = 0; i < G; i++) {
		int g = lane + 32 * i;
		if (g < groups) {
			act_st4(res, g0 + g, x[i], a16, ops);
			x[i] = store16x4(x[i], ops);   /* as act_ld4 reads back what act_st4 stored */
			s += ln_sum4(x[i]);
		}
	}
	float m = warp_sum(s) / c;
	float v = 0.0f;
#pragma unroll
	for (int i = 0; i < G; i++)
		if (lane + 32 * i < groups)
			v += ln_sq4(x[i], m);
	float r = 1.0f / sqrtf(warp_sum(v) / c + KERN_LAYERNORM_EPS);
#pragma unroll
	for (int i = 0; i < G; i++) {
		int g = lane + 32 * i;
		if (g < groups)
			act_st4(out, g0 + g, ln_out4(x[i], m, r, weight + 4 * g, bias + 4 * g), a16, ops);
	}
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

/* Element j of a row in backward's first pass: adds dn = dout * weight and
 * dn * norm to the row's sums a and b */
__device__ static inline void ln_bwd_sums(float x, float dy, float w, float m, float r, float *a,
                                          float *b)
{
	float norm = (x - m) * r, dn = dy * w;
	*a += dn;
	*b += dn * norm;
}

/* Element (row k, column j) in backward's second pass: dinp's value g
 * (rounded before the add, no FMA: adding gives exactly dinp + what the
 * _set version writes), and the column sums for dweight and dbias */
__device__ static inline float ln_bwd_elem(float x, float dy, float w, float m, float r,
                                           float mdn, float mdnn, float *sw, float *sb)
{
	float norm = (x - m) * r, dn = dy * w;
	*sw += dy * norm;
	*sb += dy;
	return __fmul_rn(r, dn - mdn - norm * mdnn);
}

/* part: [gridDim.x][2][c], the block's dweight sums then its dbias sums;
 * with vec (ln_vec_ok for dinp, dout and inp) groups of four, else single
 * elements (the same values but for the row sums' order) */
__global__ static void ln_bwd_kernel(void *dinp, float *part, const void *dout,
                                     const void *inp, const float *weight, const float *mean,
                                     const float *rstd, int n, int c, int set, int vec, int a16,
                                     int ops)
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
		if (vec) {
			for (int g = lane; g < c / 4; g += 32) {
				float4 x = act_ld4(inp, (long)(x0 / 4 + g), a16, ops);
				float4 dy = act_ld4(dout, (long)(x0 / 4 + g), a16, ops);
				const float *w = weight + 4 * g;
				ln_bwd_sums(x.x, dy.x, w[0], m, r, &a, &b);
				ln_bwd_sums(x.y, dy.y, w[1], m, r, &a, &b);
				ln_bwd_sums(x.z, dy.z, w[2], m, r, &a, &b);
				ln_bwd_sums(x.w, dy.w, w[3], m, r, &a, &b);
			}
		} else {
			for (int j = lane; j < c; j += 32)
				ln_bwd_sums(act_ld(inp, x0 + j, a16, ops), act_ld(dout, x0 + j, a16, ops),
				            weight[j], m, r, &a, &b);
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
	if (vec) {
		for (int g = threadIdx.x; g < c / 4; g += LN_BWD_THREADS) {
			const float *w = weight + 4 * g;
			float sw[4] = { 0.0f, 0.0f, 0.0f, 0.0f }, sb[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
			for (int k = 0; k < rows; k++) {
				long at = (long)(((size_t)(r0 + k) * c) / 4) + g;
				float4 dy = act_ld4(dout, at, a16, ops), x = act_ld4(inp, at, a16, ops);
				float m = s_mean[k], r = s_rstd[k], mdn = s_mdn[k], mdnn = s_mdnn[k];
				float4 d = make_float4(ln_bwd_elem(x.x, dy.x, w[0], m, r, mdn, mdnn, &sw[0], &sb[0]),
				                       ln_bwd_elem(x.y, dy.y, w[1], m, r, mdn, mdnn, &sw[1], &sb[1]),
				                       ln_bwd_elem(x.z, dy.z, w[2], m, r, mdn, mdnn, &sw[2], &sb[2]),
				                       ln_bwd_elem(x.w, dy.w, w[3], m, r, mdn, mdnn, &sw[3], &sb[3]));
				if (!set) {
					float4 o = act_raw4(dinp, at, a16, ops);
					d = make_float4(o.x + d.x, o.y + d.y, o.z + d.z, o.w + d.w);
				}
				act_st4(dinp, at, d, a16, ops);
			}
			for (int i = 0; i < 4; i++) {
				pw[4 * g + i] = sw[i];
				pb[4 * g + i] = sb[i];
			}
		}
		return;
	}
	for (int j = threadIdx.x; j < c; j += LN_BWD_THREADS) {
		float w = weight[j], sw = 0.0f, sb = 0.0f;
		for (int k = 0; k < rows; k++) {
			size_t at = (size_t)(r0 + k) * c + j;
			float g = ln_bwd_elem(act_ld(inp, at, a16, ops), act_ld(dout, at, a16, ops), w,
			                      s_mean[k], s_rstd[k], s_mdn[k], s_mdnn[k], &sw, &sb);
			act_st(dinp, at, set ? g : act_raw(dinp, at, a16, ops) + g, a16, ops);
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
