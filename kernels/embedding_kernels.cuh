/* kernels/embedding_kernels.cuh - the device code of embedding_cuda.cu
 * (which says how it works), in a header of its own so that
 * tests/unit/test_act16_emu can run the same kernels on the CPU
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_EMBEDDING_KERNELS_CUH
#define LARCH_KERNELS_EMBEDDING_KERNELS_CUH

#include <stdint.h>

#include "precision_cuda.cuh"

#define EMB_THREADS 256
#define EMB_DWTE_THREADS 128

__global__ static void embedding_fwd_kernel(void *out, const int *tokens, const float *wte,
                                            const float *wpe, long total, int t, int c, int a16,
                                            int ops)
{
	long stride = (long)gridDim.x * blockDim.x;
	for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
		long row = k / c;
		int j = (int)(k - row * c);
		float w = wte[(size_t)tokens[row] * c + j];
		act_st(out, k, wpe ? w + wpe[(size_t)(row % t) * c + j] : w, a16, ops);
	}
}

__global__ static void iota_kernel(unsigned *x, long n)
{
	long stride = (long)gridDim.x * blockDim.x;
	for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
		x[k] = (unsigned)k;
}

/* Block i handles the run of equal tokens that starts at sorted index i
 * (blocks inside a run return at once). */
__global__ static void dwte_kernel(float *dwte, const void *dout, const unsigned *tok_sorted,
                                   const unsigned *pos_sorted, long rows, int c, int a16,
                                   int ops)
{
	long i = blockIdx.x;
	unsigned tok = tok_sorted[i];
	if (i > 0 && tok_sorted[i - 1] == tok)
		return;
	long end = i + 1;
	while (end < rows && tok_sorted[end] == tok)
		end++;
	float *dst = dwte + (size_t)tok * c;
	for (int j = threadIdx.x; j < c; j += EMB_DWTE_THREADS) {
		float acc = dst[j];
		for (long k = i; k < end; k++)
			acc += act_raw(dout, (size_t)pos_sorted[k] * c + j, a16, ops);
		dst[j] = acc;
	}
}

/* dwpe[p, j] += dout[0, p, j], then dout[1, p, j], ... */
__global__ static void dwpe_kernel(float *dwpe, const void *dout, int b, int t, int c, int a16,
                                   int ops)
{
	long tc = (long)t * c;
	long stride = (long)gridDim.x * blockDim.x;
	for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < tc; k += stride) {
		float acc = dwpe[k];
		for (int i = 0; i < b; i++)
			acc += act_raw(dout, (size_t)i * tc + k, a16, ops);
		dwpe[k] = acc;
	}
}

#endif
