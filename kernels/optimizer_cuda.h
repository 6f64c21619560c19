/* kernels/optimizer_cuda.h - parameter updates and norms on the GPU
 * (optimizer_cuda.cu); the contract is optimizer.h's. Tensors are device
 * pointers, scalars host values; the work goes on kern_cuda_stream().
 *
 * The updates evaluate optimizer_cpu.c's per-element formulas operation for
 * operation, compiled without FMA contraction: they give the CPU's bits.
 * Norms are sums in double with a fixed two-pass reduction (same bits on
 * every run; within rounding of the CPU's, whose order differs). The
 * functions that return a norm wait for the stream; the _dev variants write
 * it to device memory instead (*result = the sum, no wait), for callers that
 * combine norms on the GPU. */
#ifndef LARCH_KERNELS_OPTIMIZER_CUDA_H
#define LARCH_KERNELS_OPTIMIZER_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

double kern_sumsq_cuda(const float *x, long n);
void kern_sumsq_cuda_dev(double *result, const float *x, long n);

void kern_scale_cuda(float *x, long n, float s);

void kern_sgd_update_cuda(float *w, float *m, const float *g, long n,
                          float lr, float mu, float wd, int nesterov);

void kern_adamw_update_cuda(float *w, float *m, float *v, const float *g, long n,
                            float lr, float b1, float b2, float eps, float wd,
                            float bc1, float bc2);

void kern_lars_update_cuda(float *w, float *m, const float *g, long n,
                           float step, float mu, float wd);

double kern_lamb_moments_cuda(float *m, float *v, const float *g, const float *w, long n,
                              float b1, float b2, float eps, float wd, float bc1, float bc2);
void kern_lamb_moments_cuda_dev(double *result, float *m, float *v, const float *g,
                                const float *w, long n, float b1, float b2, float eps,
                                float wd, float bc1, float bc2);

void kern_lamb_apply_cuda(float *w, const float *m, const float *v, long n, float step,
                          float eps, float wd, float bc1, float bc2);

#ifdef __cplusplus
}
#endif

#endif
