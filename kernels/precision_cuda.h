/* kernels/precision_cuda.h - 16-bit storage on the GPU (precision_cuda.cu):
 * the conversions and roundings of precision.h, bit for bit the CPU's (the
 * same integer arithmetic on the bit patterns; the one fp32 add they use
 * rounds to nearest even on the GPU as on the CPU), and the loss scaler's
 * inf/NaN check. Pointers are device pointers; the work goes on
 * kern_cuda_stream(). */
#ifndef LARCH_KERNELS_PRECISION_CUDA_H
#define LARCH_KERNELS_PRECISION_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] = fp32(fp16(x[i])) (or bf16), in place: 16-bit storage, emulated. */
void kern_round_fp16_cuda(float *x, long n);
void kern_round_bf16_cuda(float *x, long n);

/* out[i] = the 16-bit pattern of inp[i] (the GEMMs' operands). */
void kern_fp32_to_fp16_cuda(uint16_t *out, const float *inp, long n);
void kern_fp32_to_bf16_cuda(uint16_t *out, const float *inp, long n);

/* out[i] = fp32(bf16(inp[i])) (bf16 1; else fp16) and out16[i] = its 16-bit
 * pattern, in one pass: master weights published to a model's rounded fp32
 * copy and to the 16-bit one its GEMMs read (kern_matmul_cuda_weights16). */
void kern_publish16_cuda(float *out, uint16_t *out16, const float *inp, long n, int bf16);

/* A 16-bit copy of x[0..n) in the GEMM operands' type (kern_cuda_gemm_operands:
 * bf16 or fp16), in stream-ordered scratch: free it with
 * kern_cuda_scratch_free once the work that reads it is enqueued. */
uint16_t *kern_cuda_to16_scratch(const float *x, long n);

/* 1 if any of x[0..n) is inf or NaN, else 0; waits for the answer. */
int kern_nonfinite_cuda(const float *x, long n);

#ifdef __cplusplus
}
#endif

#endif
