/* kernels/gelu_kernels.cuh - the device code of gelu_cuda.cu (which says
 * how it works), in a header of its own so that tests/unit/test_act16_emu
 * can run the same kernels on the CPU (tests/unit/cuda_emu.hh). CUDA C++
 * (nvcc) otherwise. */
#ifndef LARCH_KERNELS_GELU_KERNELS_CUH
#define LARCH_KERNELS_GELU_KERNELS_CUH

#include "elementwise_cuda.cuh"
#include "precision_cuda.cuh"

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715

/* exp(-2u) for u = s (x + a x^3) */
__device__ static inline float exp_m2u(float x)
{
	float z = x * ((float)(-2 * GELU_S) + (float)(-2 * GELU_S * GELU_A) * (x * x));
	z = fabsf(z) < 87.0f ? z : copysignf(87.0f, z);
	return expf(z);
}

__device__ static inline float gelu(float x)
{
	return x / (1.0f + exp_m2u(x));
}

__device__ static inline float gelu_grad(float x)
{
	float e = exp_m2u(x);
	float sg = 1.0f / (1.0f + e);  /* 0.5 (1 + tanh u) */
	float sech2_4 = (e * sg) * sg; /* sech^2(u) / 4 */
	return sg + 2.0f * x * sech2_4 * (float)GELU_S * (1.0f + 3.0f * (float)GELU_A * x * x);
}

__global__ static void gelu_fwd_kernel(void *out, const void *inp, long n, int vec, int a16,
                                       int ops)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 x = act_ld4(inp, k, a16, ops);
			act_st4(out, k, make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)), a16, ops);
		},
		[=](long k) { act_st(out, k, gelu(act_ld(inp, k, a16, ops)), a16, ops); });
}

/* set: dinp = gelu'(inp) dout; else dinp += gelu'(inp) dout. The product is
 * rounded before the add (__fmul_rn: no FMA), so that adding gives exactly
 * dinp + what the _set version writes. */
__global__ static void gelu_bwd_kernel(void *dinp, const void *inp, const void *dout, long n,
                                       int vec, int set, int a16, int ops)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 x = act_ld4(inp, k, a16, ops), dy = act_ld4(dout, k, a16, ops);
			float4 g = make_float4(__fmul_rn(gelu_grad(x.x), dy.x), __fmul_rn(gelu_grad(x.y), dy.y),
			                       __fmul_rn(gelu_grad(x.z), dy.z), __fmul_rn(gelu_grad(x.w), dy.w));
			if (!set) {
				float4 d = act_raw4(dinp, k, a16, ops);
				g = make_float4(d.x + g.x, d.y + g.y, d.z + g.z, d.w + g.w);
			}
			act_st4(dinp, k, g, a16, ops);
		},
		[=](long k) {
			float g = __fmul_rn(gelu_grad(act_ld(inp, k, a16, ops)), act_ld(dout, k, a16, ops));
			act_st(dinp, k, set ? g : act_raw(dinp, k, a16, ops) + g, a16, ops);
		});
}

#endif
