/* kernels/precision_cuda.cu - 16-bit storage on the GPU; see
 * precision_cuda.h. The bit manipulations are precision_cuda.cuh's (the
 * CPU's, line for line). */
#include "precision_cuda.h"

#include "cuda_common.h"
#include "precision_cuda.cuh"

#define THREADS 256

__global__ static void round_fp16_kernel(float *x, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		x[i] = fp32_of_fp16(fp16_of_bits(__float_as_uint(x[i])));
}

__global__ static void round_bf16_kernel(float *x, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		x[i] = fp32_of_bf16(bf16_of_bits(__float_as_uint(x[i])));
}

__global__ static void to_fp16_kernel(uint16_t *out, const float *inp, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		out[i] = fp16_of_bits(__float_as_uint(inp[i]));
}

__global__ static void to_bf16_kernel(uint16_t *out, const float *inp, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		out[i] = bf16_of_bits(__float_as_uint(inp[i]));
}

/* an OR of every element's "exponent all ones": any order, the same answer */
__global__ static void nonfinite_kernel(unsigned *bad, const float *x, long n)
{
	unsigned b = 0;
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		b |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
	b = __any_sync(0xffffffffu, b);
	if (b && threadIdx.x % 32 == 0)
		atomicOr(bad, 1u);
}

#define LAUNCH(kernel, n, ...)                                                                  \
	do {                                                                                    \
		if ((n) > 0) {                                                                  \
			kernel<<<kern_cuda_grid((n), THREADS), THREADS, 0, kern_cuda_stream()>>>(   \
				__VA_ARGS__);                                                   \
			KERN_CUDA_CHECK_LAUNCH();                                               \
		}                                                                               \
	} while (0)

extern "C" void kern_round_fp16_cuda(float *x, long n)
{
	LAUNCH(round_fp16_kernel, n, x, n);
}

extern "C" void kern_round_bf16_cuda(float *x, long n)
{
	LAUNCH(round_bf16_kernel, n, x, n);
}

extern "C" void kern_fp32_to_fp16_cuda(uint16_t *out, const float *inp, long n)
{
	LAUNCH(to_fp16_kernel, n, out, inp, n);
}

extern "C" void kern_fp32_to_bf16_cuda(uint16_t *out, const float *inp, long n)
{
	LAUNCH(to_bf16_kernel, n, out, inp, n);
}

extern "C" uint16_t *kern_cuda_to16_scratch(const float *x, long n)
{
	uint16_t *h = (uint16_t *)kern_cuda_scratch_alloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
	if (kern_cuda_gemm_operands() == 2)
		kern_fp32_to_bf16_cuda(h, x, n);
	else
		kern_fp32_to_fp16_cuda(h, x, n);
	return h;
}

extern "C" int kern_nonfinite_cuda(const float *x, long n)
{
	if (n <= 0)
		return 0;
	unsigned *bad = (unsigned *)kern_cuda_scratch_alloc(sizeof(unsigned));
	kern_cuda_zero(bad, sizeof(unsigned));
	LAUNCH(nonfinite_kernel, n, bad, x, n);
	unsigned host = 0;
	kern_cuda_download(&host, bad, sizeof host);
	kern_cuda_scratch_free(bad);
	return host != 0;
}
