/* kernels/elementwise_cuda.cuh - the loop of the memory-bound element-wise
 * kernels (relu, gelu, residual, precision): a grid-stride loop that moves
 * four values a thread (a float4 of each operand, or four packed 16-bit
 * activations) while every pointer is aligned for that, and the scalar
 * loop for the rest or for misaligned views. CUDA only (nvcc). */
#ifndef LARCH_KERNELS_ELEMENTWISE_CUDA_CUH
#define LARCH_KERNELS_ELEMENTWISE_CUDA_CUH

#include <stdint.h>

/* Whether the three pointers allow 16-byte accesses (pass one twice for two). */
static inline int kern_aligned16(const void *a, const void *b, const void *c)
{
	return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

/* Whether groups of four activations can be moved whole (precision_cuda.cuh's
 * act_ld4 / act_st4): 8-byte aligned pointers with a16 (packed 16-bit
 * values), 16-byte aligned ones without. */
static inline int kern_aligned_act4(int a16, const void *a, const void *b, const void *c)
{
	return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & (a16 ? 7 : 15)) == 0;
}

/* For n values: four(k) for each group k of four (values 4k .. 4k + 3) when
 * vec, then one(k) for every value k after the groups (all of them without
 * vec). Launch over kern_cuda_grid(vec ? n / 4 : n, threads). */
template <typename Four, typename One>
__device__ static inline void grid_stride4(long n, int vec, Four four, One one)
{
	long stride = (long)gridDim.x * blockDim.x;
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
	long done = 0;
	if (vec) {
		long n4 = n / 4;
		for (long k = i; k < n4; k += stride)
			four(k);
		done = n4 * 4;
	}
	for (long k = done + i; k < n; k += stride)
		one(k);
}

#endif
