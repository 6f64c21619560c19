/* kernels/matmul_lt_kernels.cuh - the device code of matmul_lt_cuda.cu's
 * same-bits tuning: a hash of a GEMM's output, and the pattern of C a
 * GEMM that adds starts from, in a header of their own so that
 * tests/unit/test_act16_emu can run them on the CPU (tests/unit/cuda_emu.hh).
 * CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_MATMUL_LT_KERNELS_CUH
#define LARCH_KERNELS_MATMUL_LT_KERNELS_CUH

#include <stdint.h>

/* splitmix64's finaliser: every bit of x moves about half of the result's */
__device__ static inline uint64_t bits_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* *hash += the sum, mod 2^64, over the column-major matrix [rows, cols]
 * (columns ld elements apart, each es bytes: 2 or 4) of each element's
 * bits mixed with its place, bits_mix64(bits + e * golden), e = column *
 * rows + row: the same value for any grid or order of the adds, another
 * for almost any change of an element's bits or place (a chance of about
 * 2^-64 that two different matrices give one sum). What lies between the
 * columns (ld > rows) does not count. A thread's adds summed, then one
 * atomic add a thread. */
__global__ static void bits_hash_kernel(unsigned long long *hash, const void *p, int es,
                                        long rows, long cols, long ld)
{
	long total = rows * cols, stride = (long)gridDim.x * blockDim.x;
	uint64_t h = 0;
	for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		long at = e / rows * ld + e % rows;
		uint64_t bits = es == 2 ? ((const uint16_t *)p)[at] : ((const uint32_t *)p)[at];
		h += bits_mix64(bits + (uint64_t)e * 0x9e3779b97f4a7c15ull);
	}
	if (h)
		atomicAdd(hash, (unsigned long long)h);
}

/* The column-major matrix [rows, cols] (ld, es bytes an element: fp32, or
 * bf16 or fp16 as bf16 says) set to values of magnitude 0.25 to 1 and
 * either sign, each from its place alone: the input C of a GEMM that adds
 * (beta != 0), the same for every algorithm a problem's tuning runs. */
__global__ static void bits_fill_kernel(void *p, int es, int bf16, long rows, long cols, long ld)
{
	long total = rows * cols, stride = (long)gridDim.x * blockDim.x;
	for (long e = (long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
		long at = e / rows * ld + e % rows;
		uint64_t h = bits_mix64((uint64_t)e + 1);
		uint32_t sign = (uint32_t)(h >> 63);
		if (es == 4)       /* exponents 125 and 126, any mantissa */
			((uint32_t *)p)[at] = sign << 31 | (0x3e800000u + (uint32_t)(h & 0xffffffu));
		else if (bf16)     /* bf16: exponents 125 and 126 */
			((uint16_t *)p)[at] = (uint16_t)(sign << 15 | (0x3e80u + (uint32_t)(h & 0xffu)));
		else               /* fp16: exponents 13 and 14 */
			((uint16_t *)p)[at] = (uint16_t)(sign << 15 | (0x3400u + (uint32_t)(h & 0x7ffu)));
	}
}

#endif
