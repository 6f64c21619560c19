/* kernels/precision_cuda.cuh - the bit manipulations of 16-bit storage as
 * device functions, for the kernels that round what they write
 * (precision_cuda.cu, attention_cuda.cu). They are precision_cpu.c's, line
 * for line (fp16_of_bits, bf16_of_bits and their inverses), so every result
 * has the CPU's bits: tests/gpu/test_cuda_precision.c runs all 2^32
 * patterns. CUDA only (nvcc). */
#ifndef LARCH_KERNELS_PRECISION_CUDA_CUH
#define LARCH_KERNELS_PRECISION_CUDA_CUH

#include <stddef.h>
#include <stdint.h>

__device__ static inline uint16_t fp16_of_bits(uint32_t x)
{
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7fffffffu;
	uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
	/* |x| + 0.5 rounds |x| to a multiple of 2^-24 (round to nearest even,
	 * __fadd_rn: no contraction, no flush to zero of the normal sum) */
	uint32_t subnormal = __float_as_uint(__fadd_rn(__uint_as_float(a), 0.5f)) - 0x3f000000u;
	uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
	uint32_t h = a < 0x38800000u ? subnormal : normal;
	h = a >= 0x47800000u ? 0x7c00u : h;
	h = a > 0x7f800000u ? nan : h;
	return (uint16_t)(sign | h);
}

__device__ static inline float fp32_of_fp16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;
	uint32_t normal = ((e + 112u) << 23) | (m << 13);
	uint32_t special = 0x7f800000u | (m << 13);
	uint32_t subnormal = __float_as_uint(__fmul_rn((float)(int32_t)m, 0x1p-24f));
	uint32_t a = e == 0 ? subnormal : normal;
	a = e == 31 ? special : a;
	return __uint_as_float(sign | a);
}

__device__ static inline uint16_t bf16_of_bits(uint32_t x)
{
	uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	uint32_t nan = (x >> 16) | 0x0040u;
	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

__device__ static inline float fp32_of_bf16(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* the 16-bit pattern of x in kern_cuda_gemm_operands' type (bf16 when bf16
 * is nonzero, else fp16), and back */
__device__ static inline uint16_t to16_bits(float x, int bf16)
{
	return bf16 ? bf16_of_bits(__float_as_uint(x)) : fp16_of_bits(__float_as_uint(x));
}

__device__ static inline float of16_bits(uint16_t h, int bf16)
{
	return bf16 ? fp32_of_bf16(h) : fp32_of_fp16(h);
}

/* x as a buffer of the GEMM operands' type ops holds it (kern_cuda_gemm_operands:
 * 0 fp32, x itself; 1 fp16; 2 bf16): how the elementwise kernels store
 * their activation outputs with 16-bit operands (cuda_common.h) */
__device__ static inline float store16(float x, int ops)
{
	if (ops == 2)
		return fp32_of_bf16(bf16_of_bits(__float_as_uint(x)));
	if (ops == 1)
		return fp32_of_fp16(fp16_of_bits(__float_as_uint(x)));
	return x;
}

__device__ static inline float4 store16x4(float4 v, int ops)
{
	return make_float4(store16(v.x, ops), store16(v.y, ops), store16(v.z, ops),
	                   store16(v.w, ops));
}

/* Element i of an activation buffer (cuda_common.h, "activations"): with
 * a16 the buffer holds packed 16-bit values of ops' type (1 fp16, 2 bf16),
 * read exactly and stored rounded to nearest even; without, fp32 values,
 * read and stored as ops' type holds them (store16). act_raw reads an fp32
 * buffer's value as it is, for the inputs the kernels read without
 * rounding. */
__device__ static inline float act_raw(const void *p, size_t i, int a16, int ops)
{
	if (a16)
		return of16_bits(((const uint16_t *)p)[i], ops == 2);
	return ((const float *)p)[i];
}

__device__ static inline float act_ld(const void *p, size_t i, int a16, int ops)
{
	float x = act_raw(p, i, a16, ops);
	return a16 ? x : store16(x, ops);
}

__device__ static inline void act_st(void *p, size_t i, float x, int a16, int ops)
{
	if (a16)
		((uint16_t *)p)[i] = to16_bits(x, ops == 2);
	else
		((float *)p)[i] = store16(x, ops);
}

/* Group k of four activations (cuda_common.h): 8 bytes of packed 16-bit
 * values with a16 (element 4k in the low half of the first word), else a
 * float4, read as act_ld (act_raw4: as act_raw) and stored as act_st. The
 * caller checks the alignment (8 or 16 bytes). */
__device__ static inline float4 unpack16x4(uint2 u, int bf16)
{
	return make_float4(of16_bits((uint16_t)(u.x & 0xffffu), bf16),
	                   of16_bits((uint16_t)(u.x >> 16), bf16),
	                   of16_bits((uint16_t)(u.y & 0xffffu), bf16),
	                   of16_bits((uint16_t)(u.y >> 16), bf16));
}

__device__ static inline float4 act_raw4(const void *p, long k, int a16, int ops)
{
	if (a16)
		return unpack16x4(((const uint2 *)p)[k], ops == 2);
	return ((const float4 *)p)[k];
}

__device__ static inline float4 act_ld4(const void *p, long k, int a16, int ops)
{
	float4 v = act_raw4(p, k, a16, ops);
	return a16 ? v : store16x4(v, ops);
}

__device__ static inline void act_st4(void *p, long k, float4 v, int a16, int ops)
{
	if (a16) {
		int bf16 = ops == 2;
		uint2 u;
		u.x = (uint32_t)to16_bits(v.x, bf16) | (uint32_t)to16_bits(v.y, bf16) << 16;
		u.y = (uint32_t)to16_bits(v.z, bf16) | (uint32_t)to16_bits(v.w, bf16) << 16;
		((uint2 *)p)[k] = u;
		return;
	}
	((float4 *)p)[k] = store16x4(v, ops);
}

/* Group k of eight activations, as act_ld and act_st (act_raw8: act_raw):
 * one 16-byte access of packed 16-bit values with a16, else two float4s.
 * The caller checks the alignment (16 bytes). For the kernels that stream
 * long rows (the logits), where a 16-byte access a thread keeps enough
 * bytes in flight to reach the memory's bandwidth and a 2-byte one does
 * not. */
__device__ static inline void unpack16x8(uint4 u, int bf16, float x[8])
{
	uint2 lo = { u.x, u.y }, hi = { u.z, u.w };
	float4 a = unpack16x4(lo, bf16), b = unpack16x4(hi, bf16);
	x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
	x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

__device__ static inline void act_raw8(const void *p, size_t k, int a16, int ops, float x[8])
{
	float4 a, b;
	if (a16) {
		unpack16x8(((const uint4 *)p)[k], ops == 2, x);
		return;
	} else {
		a = ((const float4 *)p)[2 * k];
		b = ((const float4 *)p)[2 * k + 1];
	}
	x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
	x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

__device__ static inline void act_ld8(const void *p, size_t k, int a16, int ops, float x[8])
{
	act_raw8(p, k, a16, ops, x);
	if (!a16)
		for (int i = 0; i < 8; i++)
			x[i] = store16(x[i], ops);
}

__device__ static inline void act_st8(void *p, size_t k, const float x[8], int a16, int ops)
{
	if (a16) {
		int bf16 = ops == 2;
		uint32_t w[4];
		for (int i = 0; i < 4; i++)
			w[i] = (uint32_t)to16_bits(x[2 * i], bf16) |
			       (uint32_t)to16_bits(x[2 * i + 1], bf16) << 16;
		((uint4 *)p)[k] = make_uint4(w[0], w[1], w[2], w[3]);
		return;
	}
	((float4 *)p)[2 * k] = store16x4(make_float4(x[0], x[1], x[2], x[3]), ops);
	((float4 *)p)[2 * k + 1] = store16x4(make_float4(x[4], x[5], x[6], x[7]), ops);
}

/* 2^x by the SFU in one instruction (ex2.approx.ftz: about 2 ulp, a
 * subnormal argument or result taken as zero). exp2f without fast math
 * is the same MUFU.EX2 with a compare and two multiplies around it for
 * subnormal results, and expf a few more instructions for its argument's
 * reduction: the kernels that take one exponential an element (the fused
 * attention's scores, the cross-entropy's logits) call this, with the
 * base-e scale folded into an fma of the argument. The CPU emulation
 * (tests/unit/cuda_emu.hh, which defines KERN_MMA_EMULATED) computes the
 * same function with exp2f. */
#ifndef KERN_MMA_EMULATED
__device__ static inline float fast_exp2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}
#else
__device__ static inline float fast_exp2(float x)
{
	if (std::fpclassify(x) == FP_SUBNORMAL)
		x = 0.0f;
	float y = exp2f(x);
	return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}
#endif

#endif
