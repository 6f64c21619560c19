/* kernels/relu_cuda.h - ReLU on the GPU (relu_cuda.cu); the contract is
 * relu.h's. Pointers are device pointers; the work goes on kern_cuda_stream().
 * Elementwise, so out may be inp, and the _set backward may run in place
 * (dinp == dout). */
#ifndef LARCH_KERNELS_RELU_CUDA_H
#define LARCH_KERNELS_RELU_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_relu_fwd_cuda(float *out, const float *inp, long n);
void kern_relu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n);
void kern_relu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n);

#ifdef __cplusplus
}
#endif

#endif
