/* kernels/gelu_cuda.h - GELU on the GPU (gelu_cuda.cu); the contract is
 * gelu.h's. Pointers are device pointers; the work goes on kern_cuda_stream().
 * Elementwise, so out may be inp, and the _set backward may run in place
 * (dinp == dout). */
#ifndef LARCH_KERNELS_GELU_CUDA_H
#define LARCH_KERNELS_GELU_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_gelu_fwd_cuda(float *out, const float *inp, long n);
void kern_gelu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n);
void kern_gelu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n);

/* The same on activations stored as a16 says (cuda_common.h). */
void kern_gelu_fwd_act_cuda(int a16, void *out, const void *inp, long n);
void kern_gelu_bwd_set_act_cuda(int a16, void *dinp, const void *inp, const void *dout, long n);

#ifdef __cplusplus
}
#endif

#endif
