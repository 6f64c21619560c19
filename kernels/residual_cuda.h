/* kernels/residual_cuda.h - residual connection on the GPU (residual_cuda.cu);
 * the contract is residual.h's. Pointers are device pointers; the work goes
 * on kern_cuda_stream(). out may be a or b. */
#ifndef LARCH_KERNELS_RESIDUAL_CUDA_H
#define LARCH_KERNELS_RESIDUAL_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_residual_fwd_cuda(float *out, const float *a, const float *b, long n);
void kern_residual_bwd_cuda(float *da, float *db, const float *dout, long n);

/* The forward on activations stored as a16 says (cuda_common.h). */
void kern_residual_fwd_act_cuda(int a16, void *out, const void *a, const void *b, long n);

#ifdef __cplusplus
}
#endif

#endif
