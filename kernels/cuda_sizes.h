/* kernels/cuda_sizes.h - the fixed device memory the CUDA kernels take,
 * without the CUDA headers: larch plan (trainer/plan.c) counts it in every
 * build, one without the CUDA toolkit too. */
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

#endif
