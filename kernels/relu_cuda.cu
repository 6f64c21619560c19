/* kernels/relu_cuda.cu - ReLU forward and backward on the GPU (see relu.h,
 * relu_cuda.h). The same selects as relu_cpu.c, so the results equal the
 * CPU's bit for bit. 16-byte accesses when every pointer is 16-byte aligned,
 * a grid-stride loop. */
#include "relu_cuda.h"

#include "cuda_common.h"
#include "elementwise_cuda.cuh"

#define THREADS 256

__device__ static inline float relu(float x)
{
	return x > 0.0f ? x : 0.0f;
}

/* the gradient that passes: a select, so inf or NaN in dout where x <= 0
 * does not leak */
__device__ static inline float relu_pass(float x, float dy)
{
	return x > 0.0f ? dy : 0.0f;
}

__global__ static void relu_fwd_kernel(float *out, const float *inp, long n, int vec)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 x = ((const float4 *)inp)[k];
			((float4 *)out)[k] = make_float4(relu(x.x), relu(x.y), relu(x.z), relu(x.w));
		},
		[=](long k) { out[k] = relu(inp[k]); });
}

/* set: dinp = pass; else dinp += pass (adding 0 where the unit is off, as
 * the CPU version does) */
__global__ static void relu_bwd_kernel(float *dinp, const float *inp, const float *dout, long n,
                                       int vec, int set)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 x = ((const float4 *)inp)[k], dy = ((const float4 *)dout)[k];
			float4 g = make_float4(relu_pass(x.x, dy.x), relu_pass(x.y, dy.y),
			                       relu_pass(x.z, dy.z), relu_pass(x.w, dy.w));
			if (!set) {
				float4 d = ((const float4 *)dinp)[k];
				g = make_float4(d.x + g.x, d.y + g.y, d.z + g.z, d.w + g.w);
			}
			((float4 *)dinp)[k] = g;
		},
		[=](long k) {
			float g = relu_pass(inp[k], dout[k]);
			dinp[k] = set ? g : dinp[k] + g;
		});
}

extern "C" void kern_relu_fwd_cuda(float *out, const float *inp, long n)
{
	if (n <= 0)
		return;
	int vec = kern_aligned16(out, inp, inp);
	relu_fwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0, kern_cuda_stream()>>>(
		out, inp, n, vec);
	KERN_CUDA_CHECK_LAUNCH();
}

static void relu_bwd(float *dinp, const float *inp, const float *dout, long n, int set)
{
	if (n <= 0)
		return;
	int vec = kern_aligned16(dinp, inp, dout);
	relu_bwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0, kern_cuda_stream()>>>(
		dinp, inp, dout, n, vec, set);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_relu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	relu_bwd(dinp, inp, dout, n, 0);
}

extern "C" void kern_relu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	relu_bwd(dinp, inp, dout, n, 1);
}
