/* kernels/precision.h - 16-bit floating-point storage for mixed precision:
 * conversions between fp32 and IEEE binary16 (fp16) or bfloat16 (bf16), both
 * held as uint16_t bit patterns, and the inf/NaN check of the loss scaler.
 *
 * fp32 -> fp16: round to nearest, ties to even, as IEEE 754 and numpy's
 *   astype(np.float16): magnitudes from 65520 (65504 + half an ulp) up become
 *   inf, results below 2^-14 are subnormal (2^-24 the smallest; 2^-25 itself
 *   is a tie and rounds to 0), -0 stays -0. A NaN stays NaN with its sign and
 *   the top 10 bits of its payload, and with the quiet bit set (as x86's
 *   F16C does): a quiet NaN gives numpy's bits; a signalling one, which numpy
 *   leaves signalling, comes out quiet.
 * fp32 -> bf16: the upper 16 bits, rounded to nearest, ties to even, on the
 *   bit pattern, which is exact IEEE rounding for bf16 (same exponent range as
 *   fp32): subnormals round to bf16 subnormals (no flush to zero), the largest
 *   fp32 values round up to inf. A NaN keeps its sign and top payload bits and
 *   gets the quiet bit (0x0040), never rounding into inf.
 * fp16 -> fp32 and bf16 -> fp32 are exact; NaN payloads are kept as they are.
 *
 * Scalar functions are the reference; the _cpu array versions evaluate the
 * same code in threaded, vectorised loops and give the same bits. Arrays must
 * not overlap, except in the in-place _round_ functions.
 */
#ifndef LARCH_KERNELS_PRECISION_H
#define LARCH_KERNELS_PRECISION_H

#include <stdint.h>

uint16_t kern_fp32_to_fp16(float x);
float kern_fp16_to_fp32(uint16_t h);
uint16_t kern_fp32_to_bf16(float x);
float kern_bf16_to_fp32(uint16_t h);

void kern_fp32_to_fp16_cpu(uint16_t *out, const float *inp, long n);
void kern_fp16_to_fp32_cpu(float *out, const uint16_t *inp, long n);
void kern_fp32_to_bf16_cpu(uint16_t *out, const float *inp, long n);
void kern_bf16_to_fp32_cpu(float *out, const uint16_t *inp, long n);

/* x[i] = fp32(fp16(x[i])) (or bf16), in place: emulates 16-bit storage. */
void kern_round_fp16_cpu(float *x, long n);
void kern_round_bf16_cpu(float *x, long n);
/* out[i] = fp32(fp16(inp[i])) (or bf16): a copy rounded as it goes, one
 * pass instead of a copy and a rounding (out may be inp) */
void kern_round_fp16_to_cpu(float *out, const float *inp, long n);
void kern_round_bf16_to_cpu(float *out, const float *inp, long n);

/* 1 if any of x[0..n) is inf or NaN, else 0 (the gradient check after
 * unscaling). Reads every element: no early exit, one OR per element. */
int kern_nonfinite_cpu(const float *x, long n);

#endif
