/* kernels/precision_cuda.cu - 16-bit storage on the GPU; see
 * precision_cuda.h. The bit manipulations are precision_cuda.cuh's (the
 * CPU's, line for line). */
#include "precision_cuda.h"

#include <stdint.h>

#include "cuda_common.h"
#include "elementwise_cuda.cuh"
#include "precision_cuda.cuh"

#define THREADS 256

/* Memory-bound passes through grid_stride4 (elementwise_cuda.cuh). */

template <int BF16> __device__ static inline uint16_t to16(float x)
{
	return BF16 ? bf16_of_bits(__float_as_uint(x)) : fp16_of_bits(__float_as_uint(x));
}

template <int BF16> __device__ static inline float round16(float x)
{
	return BF16 ? fp32_of_bf16(to16<1>(x)) : fp32_of_fp16(to16<0>(x));
}

template <int BF16> __global__ static void round_kernel(float *x, long n, int vec)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 v = ((const float4 *)x)[k];
			((float4 *)x)[k] = make_float4(round16<BF16>(v.x), round16<BF16>(v.y),
			                               round16<BF16>(v.z), round16<BF16>(v.w));
		},
		[=](long k) { x[k] = round16<BF16>(x[k]); });
}

template <int BF16> __global__ static void to16_kernel(uint16_t *out, const float *inp, long n,
                                                       int vec)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 v = ((const float4 *)inp)[k];
			((ushort4 *)out)[k] = make_ushort4(to16<BF16>(v.x), to16<BF16>(v.y),
			                                   to16<BF16>(v.z), to16<BF16>(v.w));
		},
		[=](long k) { out[k] = to16<BF16>(inp[k]); });
}

/* out = inp rounded (fp32) and out16 = its 16-bit pattern, in one pass */
template <int BF16> __global__ static void publish16_kernel(float *out, uint16_t *out16,
                                                            const float *inp, long n, int vec)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 v = ((const float4 *)inp)[k];
			ushort4 h = make_ushort4(to16<BF16>(v.x), to16<BF16>(v.y), to16<BF16>(v.z),
			                         to16<BF16>(v.w));
			((ushort4 *)out16)[k] = h;
			((float4 *)out)[k] = BF16 ? make_float4(fp32_of_bf16(h.x), fp32_of_bf16(h.y),
			                                        fp32_of_bf16(h.z), fp32_of_bf16(h.w))
			                          : make_float4(fp32_of_fp16(h.x), fp32_of_fp16(h.y),
			                                        fp32_of_fp16(h.z), fp32_of_fp16(h.w));
		},
		[=](long k) {
			uint16_t h = to16<BF16>(inp[k]);
			out16[k] = h;
			out[k] = BF16 ? fp32_of_bf16(h) : fp32_of_fp16(h);
		});
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

/* (out, written 8 bytes a group of four, needs only 8-byte alignment) */
static int aligned8(const void *p)
{
	return ((uintptr_t)p & 7) == 0;
}

#define LAUNCH_VEC(kernel, n, vec, ...)                                                         \
	do {                                                                                    \
		if ((n) > 0) {                                                                  \
			kernel<<<kern_cuda_grid((vec) ? (n) / 4 + 1 : (n), THREADS), THREADS, 0,        \
			         kern_cuda_stream()>>>(__VA_ARGS__, vec);                           \
			KERN_CUDA_CHECK_LAUNCH();                                               \
		}                                                                               \
	} while (0)

extern "C" void kern_round_fp16_cuda(float *x, long n)
{
	LAUNCH_VEC(round_kernel<0>, n, kern_aligned16(x, x, x), x, n);
}

extern "C" void kern_round_bf16_cuda(float *x, long n)
{
	LAUNCH_VEC(round_kernel<1>, n, kern_aligned16(x, x, x), x, n);
}

extern "C" void kern_fp32_to_fp16_cuda(uint16_t *out, const float *inp, long n)
{
	LAUNCH_VEC(to16_kernel<0>, n, kern_aligned16(inp, inp, inp) && aligned8(out), out, inp, n);
}

extern "C" void kern_fp32_to_bf16_cuda(uint16_t *out, const float *inp, long n)
{
	LAUNCH_VEC(to16_kernel<1>, n, kern_aligned16(inp, inp, inp) && aligned8(out), out, inp, n);
}

extern "C" void kern_publish16_cuda(float *out, uint16_t *out16, const float *inp, long n,
                                    int bf16)
{
	int vec = kern_aligned16(out, inp, inp) && aligned8(out16);
	if (bf16)
		LAUNCH_VEC(publish16_kernel<1>, n, vec, out, out16, inp, n);
	else
		LAUNCH_VEC(publish16_kernel<0>, n, vec, out, out16, inp, n);
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
