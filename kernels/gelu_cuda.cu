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
#include "gelu_kernels.cuh"

#define THREADS 256

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
