/* kernels/optimizer_kernels.cuh - the optimizers' per-element formulas on
 * the device: optimizer_cpu.c's, written the same way (the same operations
 * in the same order), for optimizer_cuda.cu and quant8_cuda.cu, both built
 * with --fmad=false so that they give the CPU's bits; in a header of its own
 * so that tests/unit/test_q8_emu can run them on the CPU too
 * (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_OPTIMIZER_KERNELS_CUH
#define LARCH_KERNELS_OPTIMIZER_KERNELS_CUH

#include <math.h>

__device__ static inline void sgd_step(float *w, float *m, float g, float lr, float mu,
                                       float wd, int nesterov)
{
	float d = g + wd * *w;
	*m = mu * *m + d;
	*w -= lr * (nesterov ? d + mu * *m : *m);
}

__device__ static inline void sgd_step_nomomentum(float *w, float g, float lr, float wd)
{
	float d = g + wd * *w;
	*w -= lr * d;
}

__device__ static inline void adamw_step(float *w, float *m, float *v, float g, float lr,
                                         float b1, float b2, float eps, float wd, float bc1,
                                         float bc2)
{
	*w -= lr * wd * *w;
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
	*w -= lr * (*m / bc1) / (sqrtf(*v / bc2) + eps);
}

__device__ static inline void lars_step(float *w, float *m, float g, float step, float mu,
                                        float wd)
{
	*m = mu * *m + step * (g + wd * *w);
	*w -= *m;
}

__device__ static inline void lamb_moments_step(float *m, float *v, float g, float b1, float b2)
{
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
}

__device__ static inline float lamb_u(float m, float v, float w, float eps, float wd, float bc1,
                                      float bc2)
{
	return (m / bc1) / (sqrtf(v / bc2) + eps) + wd * w;
}

#endif
