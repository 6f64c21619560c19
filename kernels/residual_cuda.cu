/* kernels/residual_cuda.cu - residual connection on the GPU (see residual.h,
 * residual_cuda.h): one add per element, so the results equal the CPU's bit
 * for bit (with 16-bit operands, read and stored as 16-bit values, in fp32
 * buffers or packed: cuda_common.h). Four values a thread when every
 * pointer is aligned for it (16 bytes, or 8 for packed 16-bit values). */
#include "residual_cuda.h"

#include "cuda_common.h"
#include "elementwise_cuda.cuh"
#include "residual_kernels.cuh"

#define THREADS 256

extern "C" void kern_residual_fwd_act_cuda(int a16, void *out, const void *a, const void *b,
                                           long n)
{
	int ops = kern_cuda_act_operands(a16, "residual forward");
	if (n <= 0)
		return;
	int vec = kern_aligned_act4(a16, out, a, b);
	residual_fwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0,
	                      kern_cuda_stream()>>>(out, a, b, n, vec, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_residual_fwd_cuda(float *out, const float *a, const float *b, long n)
{
	kern_residual_fwd_act_cuda(KERN_ACT_F32, out, a, b, n);
}

extern "C" void kern_residual_bwd_cuda(float *da, float *db, const float *dout, long n)
{
	if (n <= 0)
		return;
	int vec = kern_aligned16(da, db, dout);
	residual_bwd_kernel<<<kern_cuda_grid(vec ? n / 4 : n, THREADS), THREADS, 0,
	                      kern_cuda_stream()>>>(da, db, dout, n, vec, kern_cuda_gemm_operands());
	KERN_CUDA_CHECK_LAUNCH();
}
