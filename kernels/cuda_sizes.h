/* kernels/cuda_sizes.h - the fixed device memory the CUDA kernels take,
 * and the GEMM tuning's candidate count that decides part of it, without
 * the CUDA headers: larch plan (trainer/spec/plan.c) counts it in every build,
 * one without the CUDA toolkit too. */
#ifndef LARCH_KERNELS_CUDA_SIZES_H
#define LARCH_KERNELS_CUDA_SIZES_H

#include <stddef.h>

/* The device workspaces the kernels take through kern_cuda_malloc on first
 * use, cuBLAS's and cuBLASLt's (bytes; 32 MiB each, what NVIDIA recommends
 * for Hopper): a GPU run's fixed cost beside the model, which larch plan
 * counts. */
#define KERN_CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define KERN_CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)
#define KERN_CUDA_WORKSPACE_BYTES (KERN_CUBLAS_WORKSPACE_BYTES + KERN_CUBLASLT_WORKSPACE_BYTES)

/* The candidates a tuned GEMM times (kern_matmul_cuda_gemm_tune): n of 2 up to
 * KERN_GEMM_TUNE_MOST, 0 (no tuning) for fewer than 2, the most for more.
 * Tuned, every 16-bit GEMM goes through cuBLASLt, which larch plan counts. */
#define KERN_GEMM_TUNE_MOST 16
static inline int kern_gemm_tune_count(long n)
{
	return n < 2 ? 0 : n > KERN_GEMM_TUNE_MOST ? KERN_GEMM_TUNE_MOST : (int)n;
}

#endif
