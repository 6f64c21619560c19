/* kernels/quant8_cuda.h - the fused updates of 8-bit block-wise optimizer
 * state on the GPU (quant8_cuda.cu); the contract is quant8.h's _cpu
 * versions', with device pointers for the tensors, codes and scales, and
 * the work on kern_cuda_stream(). They give the CPU's bits: the same
 * per-element update (optimizer_kernels.cuh, no FMA contraction), the same
 * block absmax and the same codes (the count of the same midpoints below
 * |x| / scale), and the LAMB norm summed in the CPU's order.
 * kern_lamb_norm_q8_cuda waits for the stream. */
#ifndef LARCH_KERNELS_QUANT8_CUDA_H
#define LARCH_KERNELS_QUANT8_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "quant8.h"

void kern_sgd_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n,
                             float lr, float mu, float wd, int nesterov);
void kern_adamw_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                               const float *g, long n, float lr, float b1, float b2, float eps,
                               float wd, float bc1, float bc2);
void kern_lars_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n,
                              float step, float mu, float wd);
double kern_lamb_norm_q8_cuda(const int8_t *mq, const float *ms, const uint8_t *vq,
                              const float *vs, const float *g, const float *w, long n, float b1,
                              float b2, float eps, float wd, float bc1, float bc2);
void kern_lamb_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                              const float *g, long n, float step, float b1, float b2, float eps,
                              float wd, float bc1, float bc2);

#ifdef __cplusplus
}
#endif

#endif
