/* kernels/precision_cpu.c - fp32 <-> fp16 / bf16 conversions and the inf/NaN
 * check (see precision.h).
 *
 * Each conversion is written once, as a static function of bit operations
 * whose special cases are selects rather than branches, so that the array
 * loops inline it and the compiler vectorises them (with -fno-trapping-math,
 * kernels/CMakeLists.txt: otherwise GCC keeps a float operation under its
 * select as a branch); the exported scalar functions are the same code. Bit
 * patterns cross between float and uint32_t with memcpy.
 */
#include "precision.h"

#include <string.h>

/* Below this many elements the loops run on one thread. */
#define PREC_PAR_MIN 32768L

/* Vector loops for the CPUs that have wider units; the resolver picks one at
 * load time. Integer operations, one correctly rounded float addition and
 * one exact product: the same bits on every variant. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PREC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PREC_CLONES
#endif

static inline uint32_t bits_of(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static inline float float_of(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

/* fp16 bits of the fp32 x, rounded to nearest even. With a = |x|'s bits:
 * - a >= 2^-14 (0x38800000), a normal result: rebias the exponent from 127 to
 *   15 (subtract 112 << 23) and round off the 13 low bits by adding 0xfff plus
 *   the lowest kept bit. A carry out of the significand moves the result to
 *   the next binade, and from 65520 up (0x477ff000) into inf, 0x7c00.
 * - a < 2^-14, subnormal or zero: 0.5 + |x| lies in [0.5, 1), where the fp32
 *   ulp is 2^-24, the fp16 subnormal step, so the addition itself rounds
 *   |x| to a multiple of 2^-24 (to nearest even, the default rounding mode;
 *   DAZ and FTZ do not matter: an fp32 subnormal gives 0 either way and the
 *   sum is normal). Its low bits are the result, up to 0x400, the smallest
 *   normal, which a carry reaches correctly.
 * - a >= 65536 (0x47800000): inf; a NaN keeps the top payload bits and gets
 *   the quiet bit. */
static inline uint16_t fp16_of_bits(uint32_t x)
{
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t a = x & 0x7fffffffu;
	uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
	uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3f000000u;
	uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
	uint32_t h = a < 0x38800000u ? subnormal : normal;
	h = a >= 0x47800000u ? 0x7c00u : h;
	h = a > 0x7f800000u ? nan : h;
	return (uint16_t)(sign | h);
}

/* fp32 value of the fp16 bits h, exact: exponent e rebiased from 15 to 127
 * for normals, m * 2^-24 for subnormals (m < 2^10, so the product is exact),
 * inf and NaN with the payload in the top significand bits. */
static inline float fp32_of_fp16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;
	uint32_t normal = ((e + 112u) << 23) | (m << 13);
	uint32_t special = 0x7f800000u | (m << 13);
	uint32_t subnormal = bits_of((float)(int32_t)m * 0x1p-24f);
	uint32_t a = e == 0 ? subnormal : normal;
	a = e == 31 ? special : a;
	return float_of(sign | a);
}

/* bf16 bits of x: round the low 16 bits off to nearest even (adding 0x7fff
 * plus the lowest kept bit carries into it exactly from the half-way point
 * up, except at a tie to an even result). A NaN would round into inf or the
 * other sign: it is truncated and gets the quiet bit instead. */
static inline uint16_t bf16_of_bits(uint32_t x)
{
	uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	uint32_t nan = (x >> 16) | 0x0040u;
	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float fp32_of_bf16(uint16_t h)
{
	return float_of((uint32_t)h << 16);
}

uint16_t kern_fp32_to_fp16(float x) { return fp16_of_bits(bits_of(x)); }
float kern_fp16_to_fp32(uint16_t h) { return fp32_of_fp16(h); }
uint16_t kern_fp32_to_bf16(float x) { return bf16_of_bits(bits_of(x)); }
float kern_bf16_to_fp32(uint16_t h) { return fp32_of_bf16(h); }

PREC_CLONES
void kern_fp32_to_fp16_cpu(uint16_t *out, const float *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = fp16_of_bits(bits_of(inp[i]));
}

PREC_CLONES
void kern_fp16_to_fp32_cpu(float *out, const uint16_t *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = fp32_of_fp16(inp[i]);
}

PREC_CLONES
void kern_fp32_to_bf16_cpu(uint16_t *out, const float *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = bf16_of_bits(bits_of(inp[i]));
}

PREC_CLONES
void kern_bf16_to_fp32_cpu(float *out, const uint16_t *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = fp32_of_bf16(inp[i]);
}

PREC_CLONES
void kern_round_fp16_to_cpu(float *out, const float *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = fp32_of_fp16(fp16_of_bits(bits_of(inp[i])));
}

void kern_round_fp16_cpu(float *x, long n)
{
	kern_round_fp16_to_cpu(x, x, n);
}

PREC_CLONES
void kern_round_bf16_to_cpu(float *out, const float *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = fp32_of_bf16(bf16_of_bits(bits_of(inp[i])));
}

void kern_round_bf16_cpu(float *x, long n)
{
	kern_round_bf16_to_cpu(x, x, n);
}

/* An integer OR, so the reduction gives the same answer in any order. */
PREC_CLONES
int kern_nonfinite_cpu(const float *x, long n)
{
	uint32_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (n > PREC_PAR_MIN)
	for (long i = 0; i < n; i++)
		bad |= (bits_of(x[i]) & 0x7f800000u) == 0x7f800000u;
	return bad != 0;
}
