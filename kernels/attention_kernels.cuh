/* kernels/attention_kernels.cuh - the device code of attention_cuda.cu
 * (its causal softmax, forward and backward), in a header of its own so
 * that tests/unit/test_act16_emu can run the same kernels on the CPU
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_ATTENTION_KERNELS_CUH
#define LARCH_KERNELS_ATTENTION_KERNELS_CUH

#include <math.h>
#include <stdint.h>

#include "precision_cuda.cuh"

#define ATT_SOFTMAX_WARPS 8 /* rows per block */

/* butterfly reductions, then lane 0's value for everyone */
__device__ static inline float att_warp_max(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
	return __shfl_sync(0xffffffffu, v, 0);
}

__device__ static inline float att_warp_sum(float v)
{
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, off);
	return __shfl_sync(0xffffffffu, v, 0);
}

/* att[r, 0..i] = softmax(att[r, 0..i]), att[r, i+1..t) = 0, for the rows r
 * of all [t, t] blocks (i = r % t). With att16, each probability is rounded
 * to 16 bits (bf16 or fp16 by bf16) and written there, and also into att
 * unless only16 (then att keeps the scores). */
__global__ static void causal_softmax_kernel(float *att, uint16_t *att16, int bf16, int only16,
                                             long rows, int t)
{
	long r = (long)blockIdx.x * ATT_SOFTMAX_WARPS + (threadIdx.x >> 5);
	if (r >= rows)
		return;
	int lane = threadIdx.x & 31, i = (int)(r % t);
	float *a = att + (size_t)r * t;
	float m = -INFINITY;
	for (int j = lane; j <= i; j += 32)
		m = fmaxf(m, a[j]);
	m = att_warp_max(m);
	float s = 0.0f;
	for (int j = lane; j <= i; j += 32)
		s += expf(a[j] - m);
	float inv = 1.0f / att_warp_sum(s);
	if (att16) {
		uint16_t *a16 = att16 + (size_t)r * t;
		for (int j = lane; j < t; j += 32) {
			uint16_t h = to16_bits(j <= i ? expf(a[j] - m) * inv : 0.0f, bf16);
			a16[j] = h;
			if (!only16)
				a[j] = of16_bits(h, bf16);
		}
		return;
	}
	for (int j = lane; j < t; j += 32)
		a[j] = j <= i ? expf(a[j] - m) * inv : 0.0f;
}

/* d[r, j] = att[r, j] (d[r, j] - sum_k att[r, k] d[r, k]) for j <= i, 0
 * above: datt becomes dpreatt; with d16, its 16-bit rounding (bf16 or fp16
 * by bf16) goes there too, and only there with att16 (packed 16-bit
 * probabilities, read in place of att). */
__global__ static void causal_softmax_bwd_kernel(float *d, uint16_t *d16, int bf16,
                                                 const float *att, const uint16_t *att16,
                                                 long rows, int t)
{
	long r = (long)blockIdx.x * ATT_SOFTMAX_WARPS + (threadIdx.x >> 5);
	if (r >= rows)
		return;
	int lane = threadIdx.x & 31, i = (int)(r % t);
	float *dr = d + (size_t)r * t;
	if (att16) {
		const uint16_t *ar = att16 + (size_t)r * t;
		float s = 0.0f;
		for (int j = lane; j <= i; j += 32)
			s += of16_bits(ar[j], bf16) * dr[j];
		s = att_warp_sum(s);
		uint16_t *h = d16 + (size_t)r * t;
		for (int j = lane; j < t; j += 32)
			h[j] = to16_bits(j <= i ? of16_bits(ar[j], bf16) * (dr[j] - s) : 0.0f, bf16);
		return;
	}
	const float *ar = att + (size_t)r * t;
	float s = 0.0f;
	for (int j = lane; j <= i; j += 32)
		s += ar[j] * dr[j];
	s = att_warp_sum(s);
	if (d16) {
		uint16_t *h = d16 + (size_t)r * t;
		for (int j = lane; j < t; j += 32) {
			float v = j <= i ? ar[j] * (dr[j] - s) : 0.0f;
			dr[j] = v;
			h[j] = to16_bits(v, bf16);
		}
		return;
	}
	for (int j = lane; j < t; j += 32)
		dr[j] = j <= i ? ar[j] * (dr[j] - s) : 0.0f;
}

#endif
