/* kernels/gelu_cuda.cu - GELU forward and backward on the GPU (see gelu.h,
 * gelu_cuda.h).
 *
 * The same identities as gelu_cpu.c, with e = exp(-2u):
 *   0.5 (1 + tanh u) = 1 / (1 + e),  sech^2 u = 4 e / (1 + e)^2,
 * and -2u clamped to [-87, 87] so that e and the gradient stay finite. expf
 * is CUDA's accurate one (2 ulp), not __expf. Memory-bound: 16-byte loads
 * and stores when every pointer is 16-byte aligned, a grid-stride loop.
 * With 16-bit operands inputs are read and results stored as 16-bit values,
 * in fp32 buffers or packed (a16: 8-byte accesses; cuda_common.h).
 */
#include "gelu_cuda.h"

#include "cuda_common.h"
#include "elementwise_cuda.cuh"
#include "precision_cuda.cuh"

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715
#define THREADS 256

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

extern "C" void kern_gelu_fwd_act_cuda(int a16, void *out, const void *inp, long n)
{
	int ops = kern_cuda_act_operands(a16, "gelu forward");
	if (n <= 0)
		return;
	int vec = kern_aligned_act4(a16, out, inp, inp);
	gelu_fwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0, kern_cuda_stream()>>>(
		out, inp, n, vec, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_gelu_fwd_cuda(float *out, const float *inp, long n)
{
	kern_gelu_fwd_act_cuda(KERN_ACT_F32, out, inp, n);
}

static void gelu_bwd(int a16, void *dinp, const void *inp, const void *dout, long n, int set)
{
	int ops = kern_cuda_act_operands(a16, "gelu backward");
	if (n <= 0)
		return;
	int vec = kern_aligned_act4(a16, dinp, inp, dout);
	gelu_bwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0, kern_cuda_stream()>>>(
		dinp, inp, dout, n, vec, set, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_gelu_bwd_set_act_cuda(int a16, void *dinp, const void *inp,
                                           const void *dout, long n)
{
	gelu_bwd(a16, dinp, inp, dout, n, 1);
}

extern "C" void kern_gelu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	gelu_bwd(KERN_ACT_F32, dinp, inp, dout, n, 0);
}

extern "C" void kern_gelu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	gelu_bwd(KERN_ACT_F32, dinp, inp, dout, n, 1);
}
