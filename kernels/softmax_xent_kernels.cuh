/* kernels/softmax_xent_kernels.cuh - the device code of
 * softmax_xent_cuda.cu (which says how it works), in a header of its own
 * so that tests/unit/test_act16_emu can run the same kernels on the CPU
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_SOFTMAX_XENT_KERNELS_CUH
#define LARCH_KERNELS_SOFTMAX_XENT_KERNELS_CUH

#include <math.h>
#include <stdint.h>

#include "precision_cuda.cuh"

#define XENT_FWD_THREADS 512
#define XENT_BWD_THREADS 256
#define XENT_VEC 8              /* elements of one vector access (act_ld8) */
#define XENT_BWD_PER_THREAD XENT_VEC
#define XENT_LOG2E 1.4426950408889634f

/* Whether the kernels below may read (and write) rows of ld elements at p
 * eight at a time: every row starts on 16 bytes. */
static inline int xent_vec_ok(const void *p, int ld)
{
	return ld % XENT_VEC == 0 && (uintptr_t)p % 16 == 0;
}

/* (m, s) merge: the sum of exp(x - max) over both sets. Empty sets have
 * m = -inf, s = 0; a NaN in s stays there (a NaN logit's loss is NaN). */
__device__ static inline void lse_merge(float *m, float *s, float m2, float s2)
{
	float mx = fmaxf(*m, m2);
	if (mx == -INFINITY) { /* both empty (or all -inf): only a NaN to keep */
		*s += s2;
		return;
	}
	*s = *s * expf(*m - mx) + s2 * expf(m2 - mx);
	*m = mx;
}

/* One element into (m, s), online. */
__device__ static inline void lse_add(float *m, float *s, float x)
{
	if (x > *m) {
		*s = *s * expf(*m - x) + 1.0f;
		*m = x;
	} else if (x != -INFINITY) { /* NaN goes here, and into s */
		*s += expf(x - *m);
	}
}

/* A group of eight logits into a thread's (m, s): the group's own maximum
 * and sum, merged (one exp an element, as online). */
__device__ static inline void xent_group_add(float *m, float *s, const float x[XENT_VEC])
{
	float mk = x[0];
	for (int i = 1; i < XENT_VEC; i++)
		mk = fmaxf(mk, x[i]);           /* NaNs left out here ... */
	/* exp(x - mk) as 2^(x log2(e) - mk log2(e)): an fma and fast_exp2 an
	 * element */
	float sk = 0.0f, mk2 = mk * XENT_LOG2E;
	for (int i = 0; i < XENT_VEC; i++)  /* ... not here */
		sk += x[i] == -INFINITY ? 0.0f : fast_exp2(fmaf(x[i], XENT_LOG2E, -mk2));
	lse_merge(m, s, mk, sk);
}

/* The block's lse from each thread's (m, s) of the row, merged in a fixed
 * order: the butterfly in each warp, then the warps in turn. */
__device__ static float xent_block_lse(float m, float s);

/* The row's lse = log sum exp(logits) from x0 (v elements) for every thread
 * of the block (XENT_FWD_THREADS): with vec (xent_vec_ok) each thread reads
 * groups of eight (xent_group_add), groups threadIdx.x + j XENT_FWD_THREADS,
 * else one element at a time; then the merges in a fixed order
 * (xent_block_lse). */
__device__ static float xent_row_lse(const void *logits, size_t x0, int v, int vec, int a16,
                                     int ops)
{
	float m = -INFINITY, s = 0.0f;
	int head = 0;                       /* elements [0, head) went eight at a time */
	if (vec) {
		int groups = v / XENT_VEC;
		head = groups * XENT_VEC;
		size_t k0 = x0 / XENT_VEC;
		for (int k = threadIdx.x; k < groups; k += XENT_FWD_THREADS) {
			float x[XENT_VEC];
			act_ld8(logits, k0 + k, a16, ops, x);
			xent_group_add(&m, &s, x);
		}
	}
	for (int j = head + threadIdx.x; j < v; j += XENT_FWD_THREADS)
		lse_add(&m, &s, act_ld(logits, x0 + j, a16, ops));
	return xent_block_lse(m, s);
}

__device__ static float xent_block_lse(float m, float s)
{
	__shared__ float sm[XENT_FWD_THREADS / 32], ss[XENT_FWD_THREADS / 32], sl;
	for (int off = 16; off > 0; off >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, off);
		float s2 = __shfl_xor_sync(0xffffffffu, s, off);
		lse_merge(&m, &s, m2, s2);
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		sm[warp] = m;
		ss[warp] = s;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		m = sm[0];
		s = ss[0];
		for (int w = 1; w < XENT_FWD_THREADS / 32; w++)
			lse_merge(&m, &s, sm[w], ss[w]);
		sl = m + logf(s);
	}
	__syncthreads();
	return sl;
}

/* Per row: lse = log sum exp(logits), loss = lse - logits[target] (0 and 0
 * for a negative target). One block a row (xent_row_lse). */
__global__ static void xent_fwd_kernel(float *losses, float *lse, const void *logits, int ld,
                                       const int *targets, int v, int vec, int a16, int ops)
{
	int row = blockIdx.x;
	int tgt = targets[row];
	if (tgt < 0) {
		if (threadIdx.x == 0) {
			losses[row] = 0.0f;
			lse[row] = 0.0f;
		}
		return;
	}
	size_t x0 = (size_t)row * ld;
	float l = xent_row_lse(logits, x0, v, vec, a16, ops);
	if (threadIdx.x == 0) {
		lse[row] = l;
		losses[row] = l - act_ld(logits, x0 + tgt, a16, ops);
	}
}

/* dlogits' element j of a row: g = dloss (p - [j == target]) rounded before
 * the add (__fmul_rn), so that adding gives exactly dlogits + what the _set
 * version writes; 0 for a negative target. p = exp(x - lse) as
 * 2^(x log2(e) - l2) with l2 = lse log2(e) (xent_l2): an fma and
 * fast_exp2. */
__device__ static inline float xent_grad(float x, float l2, int j, int tgt, float dloss)
{
	return tgt < 0 ? 0.0f
	               : __fmul_rn(dloss, fast_exp2(fmaf(x, XENT_LOG2E, -l2)) -
	                                          (j == tgt ? 1.0f : 0.0f));
}

__device__ static inline float xent_l2(float lse)
{
	return lse * XENT_LOG2E;
}

/* set: dlogits = g; else dlogits += g. Block (row, y) covers the row's
 * columns [y, y + 1) x XENT_BWD_THREADS x XENT_VEC, below v (the padding
 * columns are not written): with vec (xent_vec_ok for both buffers) a group
 * of eight a thread, else eight elements XENT_BWD_THREADS apart; the same
 * values either way. Rows with a negative target: g = 0. */
__global__ static void xent_bwd_kernel(void *dlogits, float dloss, const void *logits, int ld,
                                       const float *lse, const int *targets, int v, int set,
                                       int vec, int a16, int ops)
{
	int row = blockIdx.x;
	int tgt = targets[row];
	if (tgt < 0 && !set)
		return;
	float l2 = tgt < 0 ? 0.0f : xent_l2(lse[row]);
	size_t base = (size_t)row * ld;
	int span0 = blockIdx.y * (XENT_BWD_THREADS * XENT_VEC);
	int j0 = span0 + threadIdx.x * XENT_VEC;
	if (vec && j0 + XENT_VEC <= v) {
		size_t k = (base + (size_t)j0) / XENT_VEC;
		float x[XENT_VEC], d[XENT_VEC];
		act_ld8(logits, k, a16, ops, x);
		if (!set)
			act_raw8(dlogits, k, a16, ops, d);
		for (int i = 0; i < XENT_VEC; i++) {
			float g = xent_grad(x[i], l2, j0 + i, tgt, dloss);
			d[i] = set ? g : d[i] + g;
		}
		act_st8(dlogits, k, d, a16, ops);
		return;
	}
	for (int i = 0; i < XENT_VEC; i++) {
		/* vec: this thread's group, straddling v; else strided */
		int j = vec ? j0 + i : span0 + threadIdx.x + i * XENT_BWD_THREADS;
		if (j >= v)
			break;
		float g = xent_grad(act_ld(logits, base + j, a16, ops), l2, j, tgt, dloss);
		act_st(dlogits, base + j, set ? g : act_raw(dlogits, base + j, a16, ops) + g, a16, ops);
	}
}

/* The forward and the _set backward in one: xent_fwd_kernel's losses and
 * lse, then from the row as it is read again (while it is likely still in
 * the caches) dlogits = xent_grad's g, written over [0, v) of the row (the
 * padding columns are not written; zeros for a negative target). The same
 * values as the two kernels one after the other, for one read of the
 * logits from memory where they make two. One block a row; with vec
 * (xent_vec_ok for both buffers) eight elements an access. */
__global__ static void xent_fwd_bwd_kernel(float *losses, float *lse, void *dlogits, float dloss,
                                           const void *logits, int ld, const int *targets,
                                           int v, int vec, int a16, int ops)
{
	int row = blockIdx.x;
	int tgt = targets[row];
	size_t x0 = (size_t)row * ld;
	float l = 0.0f;
	if (tgt >= 0)
		l = xent_row_lse(logits, x0, v, vec, a16, ops);
	if (threadIdx.x == 0) {
		lse[row] = l;
		losses[row] = tgt < 0 ? 0.0f : l - act_ld(logits, x0 + tgt, a16, ops);
	}
	int head = 0;
	float l2 = xent_l2(l);
	if (vec) {
		int groups = v / XENT_VEC;
		head = groups * XENT_VEC;
		size_t k0 = x0 / XENT_VEC;
		for (int k = threadIdx.x; k < groups; k += XENT_FWD_THREADS) {
			float x[XENT_VEC], d[XENT_VEC];
			act_ld8(logits, k0 + k, a16, ops, x);
			for (int i = 0; i < XENT_VEC; i++)
				d[i] = xent_grad(x[i], l2, k * XENT_VEC + i, tgt, dloss);
			act_st8(dlogits, k0 + k, d, a16, ops);
		}
	}
	for (int j = head + threadIdx.x; j < v; j += XENT_FWD_THREADS)
		act_st(dlogits, x0 + j, xent_grad(act_ld(logits, x0 + j, a16, ops), l2, j, tgt, dloss),
		       a16, ops);
}

/* ---- argmax per row ------------------------------------------------------- */

/* (value, index) of the better candidate as a left-to-right scan with a
 * strict > keeps it: the larger value, the lower index on a tie; a NaN never
 * wins (the scan's x > best is false for it). */
__device__ static inline void best_merge(float *v, int *i, float v2, int i2)
{
	if (i2 < 0)
		return;
	if (*i < 0 || v2 > *v || (v2 == *v && i2 < *i)) {
		*v = v2;
		*i = i2;
	}
}

__global__ static void argmax_kernel(int *best, const void *logits, int ld, int v, int a16,
                                     int ops)
{
	__shared__ float sv[XENT_FWD_THREADS / 32];
	__shared__ int si[XENT_FWD_THREADS / 32];
	int row = blockIdx.x;
	size_t x0 = (size_t)row * ld;
	/* the scan starts at column 0, and nothing beats a NaN there */
	if (isnan(act_raw(logits, x0, a16, ops))) {
		if (threadIdx.x == 0)
			best[row] = 0;
		return;
	}
	float bv = 0.0f;
	int bi = -1;
	for (int j = threadIdx.x; j < v; j += XENT_FWD_THREADS) {
		float xj = act_ld(logits, x0 + j, a16, ops);
		if (!isnan(xj) && (bi < 0 || xj > bv)) {
			bv = xj;
			bi = j;
		}
	}
	for (int off = 16; off > 0; off >>= 1) {
		float v2 = __shfl_xor_sync(0xffffffffu, bv, off);
		int i2 = __shfl_xor_sync(0xffffffffu, bi, off);
		best_merge(&bv, &bi, v2, i2);
	}
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 1; w < XENT_FWD_THREADS / 32; w++)
			best_merge(&bv, &bi, sv[w], si[w]);
		best[row] = bi < 0 ? 0 : bi;
	}
}

#endif
