/* tests/gpu/gpu_test.h - what the CUDA kernel tests share: skipping without
 * a GPU, and host/device buffers for comparing a _cuda kernel with its _ref.
 *
 * Host buffers come from malloc and device buffers from kern_cuda_malloc;
 * every helper that returns a buffer returns a new one the caller frees
 * (free, kern_cuda_free). Allocation failures abort.
 */
#ifndef LARCH_TESTS_GPU_TEST_H
#define LARCH_TESTS_GPU_TEST_H

#include <stdint.h>

#include "check.h"

/* Exits with 77 after printing "no CUDA device: skipping (why)" when the
 * runtime finds no GPU; otherwise prints the device and returns. */
void gpu_test_init(const char *test);
/* 1 when the "device" is tests/unit/cuda_shim.c, the CPU stand-in these
 * tests are also built against in the unit suite (tests/unit/CMakeLists.txt:
 * the tests' own logic checked without a GPU): checks of what only the
 * hardware does (cuBLASLt fusing an epilogue) are left out there. */
int gpu_test_standin(void);

/* Host buffers: uniform in [lo, hi) from *rng, zeros, or all NaN. */
float *host_rand(long n, float lo, float hi, uint64_t *rng);
float *host_zeros(long n);
float *host_nan(long n);
float *host_copy(const float *x, long n);
/* n values of a 16-bit type (bf16, else fp16) in [lo, hi) from *rng, as
 * floats */
float *host_rand16(long n, float lo, float hi, int bf16, uint64_t *rng);

/* Device buffers: a copy of host data, or n floats of uninitialised
 * memory (cudaMalloc's 256-byte alignment; a test that wants a misaligned
 * view allocates one more float and offsets by one). */
float *dev_copy(const float *host, long n);
float *dev_alloc(long n);
/* A device buffer of x[0..n) packed as 16-bit values (KERN_ACT_16): bf16,
 * else fp16. */
void *dev_copy16(const float *x, long n, int bf16);
/* Device to host into a new host buffer. */
float *dev_fetch(const float *dev, long n);
/* Overwrites n floats at dev with host data. */
void dev_put(float *dev, const float *host, long n);

/* 1 when a and b hold the same bits (n floats); reports the first
 * difference as a failed check under `what` otherwise. */
int check_same_bits(const char *what, const float *a, const float *b, long n);

/* A kernel's outputs stored with bf16 operands (kern_matmul_cuda_operands,
 * cuda_common.h): every value of got is a bf16 value (low 16 bits zero),
 * and got is the fp32 reference want rounded to bf16: bit for bit with rtol
 * 0, else within rtol (2^-7: one bf16 spacing, where the GPU's fp32 result
 * rounds to the neighbour of the reference's) or atol (the fp32 sums' own
 * error where a value is small from cancellation: LayerNorm's dinp sums in
 * another order than the reference; 0 where each value is its own op's). */
int check_stored_bf16(const char *what, const float *got, const float *want, long n, double atol,
                      double rtol);

#endif
