/* kernels/quant8_kernels.cuh - the device code of quant8_cuda.cu (which
 * says how it works), in a header of its own so that tests/unit/test_q8_emu
 * can run the same kernels on the CPU (tests/unit/cuda_emu.hh). CUDA C++
 * (nvcc) otherwise. */
#ifndef LARCH_KERNELS_QUANT8_KERNELS_CUH
#define LARCH_KERNELS_QUANT8_KERNELS_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "optimizer_kernels.cuh"
extern "C" {
#include "quant8.h"
}

/* a thread block per state block, Q8_PER_THREAD values a thread */
#define Q8_THREADS 256
#define Q8_PER_THREAD ((int)(KERN_Q8_BLOCK / Q8_THREADS))

/* One code map (quant8.h): 3.5 KiB in device memory, which each block
 * copies to shared memory (coalesced; as a kernel argument the copy would
 * go through the constant cache one address at a time). */
struct q8_table {
	float s[256];                  /* signed values by (uint8_t)q */
	float u[256];                  /* unsigned values by q */
	float mid_s[127];              /* midpoints of the signed magnitudes, ascending */
	float mid_u[255];              /* midpoints of the unsigned values, ascending */
};

/* the code map's table, on the host (quant8_cpu.c's) */
static inline struct q8_table q8_table_of(void)
{
	struct q8_table t;
	memcpy(t.s, kern_q8_values_s(), sizeof t.s);
	memcpy(t.u, kern_q8_values_u(), sizeof t.u);
	memcpy(t.mid_s, kern_q8_midpoints_s(), sizeof t.mid_s);
	memcpy(t.mid_u, kern_q8_midpoints_u(), sizeof t.mid_u);
	return t;
}

enum { Q8_SGD, Q8_ADAMW, Q8_LARS, Q8_LAMB };

/* the update's scalars: lr is SGD's and AdamW's learning rate, LARS's and
 * LAMB's step (lr times the trust ratio) */
struct q8_hyper {
	float lr, mu, wd, b1, b2, eps, bc1, bc2;
	int nesterov;
};

__device__ static inline void q8_load_table(struct q8_table *dst, const struct q8_table *src)
{
	const float *from = (const float *)src;
	float *to = (float *)dst;
	for (int i = threadIdx.x; i < (int)(sizeof *dst / sizeof(float)); i += Q8_THREADS)
		to[i] = from[i];
	__syncthreads();
}

/* values in state block b of an n-value buffer */
__device__ static inline int q8_block_len(long n, long b)
{
	long left = n - b * KERN_Q8_BLOCK;
	return left < KERN_Q8_BLOCK ? (int)left : (int)KERN_Q8_BLOCK;
}

/* How many of the ascending mid[0 .. n) lie below a: the code's magnitude
 * (quant8_cpu.c counts the same midpoints); 0 for a NaN, below which
 * nothing lies. */
__device__ static inline int q8_count_below(const float *mid, int n, float a)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		int m = (lo + hi) / 2;
		if (mid[m] < a)
			lo = m + 1;
		else
			hi = m;
	}
	return lo;
}

/* x's code at scale; 0 for a scale that is not > 0 (all zero, or NaN) */
__device__ static inline int8_t q8_enc_s(const struct q8_table *t, float x, float scale)
{
	if (!(scale > 0))
		return 0;
	int k = q8_count_below(t->mid_s, 127, fabsf(x) / scale);
	return (int8_t)(x < 0 ? -k : k);
}

/* a positive value never takes code 0 (quant8.h) */
__device__ static inline uint8_t q8_enc_u(const struct q8_table *t, float x, float scale)
{
	if (!(scale > 0))
		return 0;
	float a = x / scale;
	int k = q8_count_below(t->mid_u, 255, a);
	k += (k == 0) & (a > 0);
	return (uint8_t)k;
}

/* The largest of every thread's x (|values| as bits: a NaN wins, as in
 * kern_q8_absmax), to every thread; red holds Q8_THREADS / 32 words that
 * no other call uses at the same time. */
__device__ static inline uint32_t q8_block_max(uint32_t x, uint32_t *red)
{
	for (int off = 16; off > 0; off >>= 1) {
		uint32_t o = __shfl_xor_sync(0xffffffffu, x, off);
		x = o > x ? o : x;
	}
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = x;
	__syncthreads();
	x = red[0];
	for (int w = 1; w < Q8_THREADS / 32; w++)
		x = red[w] > x ? red[w] : x;
	return x;
}

/* One state block per thread block: dequantize m (and v), the fp32 update
 * of optimizer_kernels.cuh element by element (as kern_<op>_update_ref runs
 * it on the CPU), then m and v requantized at their new block absmax. */
template <int OP>
__global__ static void q8_update_kernel(const struct q8_table *tab, float *w, int8_t *mq, float *ms,
                                        uint8_t *vq, float *vs, const float *g, long n,
                                        struct q8_hyper h)
{
	__shared__ struct q8_table t;
	__shared__ uint32_t red[2][Q8_THREADS / 32];
	const int has_v = OP == Q8_ADAMW || OP == Q8_LAMB;
	q8_load_table(&t, tab);
	long b = blockIdx.x, lo = b * KERN_Q8_BLOCK;
	int len = q8_block_len(n, b);
	float sm = ms[b], sv = has_v ? vs[b] : 0.0f;
	float m[Q8_PER_THREAD], v[Q8_PER_THREAD];
	uint32_t am = 0, av = 0;
	for (int k = 0; k < Q8_PER_THREAD; k++) {
		int i = (int)threadIdx.x + k * Q8_THREADS;
		m[k] = v[k] = 0.0f;
		if (i >= len)
			continue;
		float wi = w[lo + i], gi = g[lo + i];
		float mi = t.s[(uint8_t)mq[lo + i]] * sm;
		float vi = has_v ? t.u[vq[lo + i]] * sv : 0.0f;
		if (OP == Q8_SGD) {
			sgd_step(&wi, &mi, gi, h.lr, h.mu, h.wd, h.nesterov);
		} else if (OP == Q8_ADAMW) {
			adamw_step(&wi, &mi, &vi, gi, h.lr, h.b1, h.b2, h.eps, h.wd, h.bc1, h.bc2);
		} else if (OP == Q8_LARS) {
			lars_step(&wi, &mi, gi, h.lr, h.mu, h.wd);
		} else {
			lamb_moments_step(&mi, &vi, gi, h.b1, h.b2);
			wi -= h.lr * lamb_u(mi, vi, wi, h.eps, h.wd, h.bc1, h.bc2);
		}
		w[lo + i] = wi;
		m[k] = mi;
		v[k] = vi;
		uint32_t bm = __float_as_uint(mi) & 0x7fffffffu, bv = __float_as_uint(vi) & 0x7fffffffu;
		am = bm > am ? bm : am;
		av = bv > av ? bv : av;
	}
	float scale_m = __uint_as_float(q8_block_max(am, red[0]));
	float scale_v = has_v ? __uint_as_float(q8_block_max(av, red[1])) : 0.0f;
	for (int k = 0; k < Q8_PER_THREAD; k++) {
		int i = (int)threadIdx.x + k * Q8_THREADS;
		if (i >= len)
			continue;
		mq[lo + i] = q8_enc_s(&t, m[k], scale_m);
		if (has_v)
			vq[lo + i] = q8_enc_u(&t, v[k], scale_v);
	}
	if (threadIdx.x == 0) {
		ms[b] = scale_m;
		if (has_v)
			vs[b] = scale_v;
	}
}

/* LAMB's pass 1 (kern_lamb_norm_q8_cpu): block b's sum of u^2 over the
 * moments this step makes, in element order as kern_lamb_moments_ref sums
 * it (one thread adds the block's squares, which the others put in shared
 * memory), into part[b]. Nothing is stored. */
__global__ static void q8_lamb_norm_kernel(const struct q8_table *tab, double *part, const int8_t *mq,
                                           const float *ms, const uint8_t *vq, const float *vs,
                                           const float *g, const float *w, long n,
                                           struct q8_hyper h)
{
	__shared__ struct q8_table t;
	__shared__ double sq[KERN_Q8_BLOCK];
	q8_load_table(&t, tab);
	long b = blockIdx.x, lo = b * KERN_Q8_BLOCK;
	int len = q8_block_len(n, b);
	float sm = ms[b], sv = vs[b];
	for (int i = threadIdx.x; i < len; i += Q8_THREADS) {
		float mi = t.s[(uint8_t)mq[lo + i]] * sm, vi = t.u[vq[lo + i]] * sv;
		lamb_moments_step(&mi, &vi, g[lo + i], h.b1, h.b2);
		float u = lamb_u(mi, vi, w[lo + i], h.eps, h.wd, h.bc1, h.bc2);
		sq[i] = (double)u * u;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double s = 0;
		for (int i = 0; i < len; i++)
			s += sq[i];
		part[b] = s;
	}
}

/* The block sums of q8_lamb_norm_kernel, nb of them, added as
 * kern_lamb_norm_q8_cpu adds them: per chunks of per blocks in order
 * (per = kern_q8_norm_chunk(nb)), then the chunks in order; one thread
 * block. */
__global__ static void q8_norm_sum_kernel(double *result, const double *part, long nb, long per)
{
	__shared__ double chunk[KERN_Q8_NORM_CHUNKS];
	long nchunks = (nb + per - 1) / per;
	for (long c = threadIdx.x; c < nchunks; c += Q8_THREADS) {
		double s = 0;
		for (long b = c * per; b < (c + 1) * per && b < nb; b++)
			s += part[b];
		chunk[c] = s;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double s = 0;
		for (long c = 0; c < nchunks; c++)
			s += chunk[c];
		*result = s;
	}
}

#endif
