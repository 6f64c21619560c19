/* tests/unit/test_kern_precision.c - kernels/precision_cpu.c: fp32 <-> fp16
 * and bf16 conversions against hand-computed bits, against references that
 * round in double arithmetic (nearbyint at the format's ulp), and against
 * GCC's own _Float16 conversion where the compiler has it; every fp16 and
 * bf16 bit pattern decoded and round-tripped; the array versions against the
 * scalar ones; the inf/NaN check.
 *
 * Tolerance: none. Every comparison is of bit patterns.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/precision.h"

static uint64_t rng = 17;

static uint32_t bits_of(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static float float_of(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

/* Counts mismatches of one comparison and prints the first few. */
struct tally {
	const char *what;
	long bad;
};

static void expect_bits(struct tally *t, uint32_t in, uint32_t got, uint32_t want)
{
	if (got == want)
		return;
	if (t->bad++ < 5)
		printf("  %s: input 0x%08x gives 0x%04x, want 0x%04x\n", t->what, in, got, want);
}

static void finish(const struct tally *t)
{
	CHECK_MSG(t->bad == 0, "%s: %ld mismatches", t->what, t->bad);
}

/* ---- references ----------------------------------------------------------- */

/* fp16 bits of x by arithmetic in double: the nearest multiple of the fp16
 * ulp of x's binade, ties to even (nearbyint in the default rounding mode).
 * A NaN keeps its sign and top 10 payload bits and gets the quiet bit. */
static uint16_t ref_fp16(float x)
{
	uint32_t u = bits_of(x);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	if (isnan(x))
		return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
	double a = fabs((double)x);
	if (a >= 65520.0) /* 65504 + half an ulp: a tie, and 65504 is odd */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x1p-14) /* subnormal: multiples of 2^-24 (1024 is the smallest normal) */
		return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24));
	int ex;
	frexp(a, &ex); /* a in [2^(ex-1), 2^ex), where the fp16 ulp is 2^(ex-11) */
	double q = nearbyint(ldexp(a, 11 - ex));
	if (q == 2048.0) {
		q = 1024.0;
		ex++;
	}
	return (uint16_t)(sign | ((ex - 1 + 15) << 10) | ((int)q - 1024));
}

/* The value of fp16 bits h, from the format's definition. */
static double ref_fp16_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double s = (h & 0x8000) ? -1.0 : 1.0;
	if (e == 0)
		return s * ldexp(m, -24);
	if (e == 31)
		return m ? NAN : s * INFINITY;
	return s * ldexp(1024 + m, e - 25);
}

/* bf16 bits of x in double: the nearest multiple of the bf16 ulp (2^-7 of
 * the binade, 2^-133 for subnormals), ties to even; inf from 2^128 up. */
static uint16_t ref_bf16(float x)
{
	uint32_t u = bits_of(x);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	if (isnan(x))
		return (uint16_t)((u >> 16) | 0x0040u);
	double a = fabs((double)x);
	if (a == 0 || isinf(a))
		return (uint16_t)(u >> 16);
	int ex;
	frexp(a, &ex);
	int ulp = ex - 8 < -133 ? -133 : ex - 8;
	double r = ldexp(nearbyint(ldexp(a, -ulp)), ulp);
	if (r >= 0x1p128)
		return (uint16_t)(sign | 0x7f80u);
	return (uint16_t)(sign | (bits_of((float)r) >> 16));
}

#ifdef __FLT16_MAX__
/* GCC's conversion (libgcc's soft-fp or F16C), an independent implementation. */
static uint16_t gcc_fp16(float x)
{
	_Float16 h = (_Float16)x;
	uint16_t u;
	memcpy(&u, &h, sizeof u);
	return u;
}
#endif

/* Checks one fp32 pattern against the references. */
static void check_one(struct tally *f16, struct tally *gcc, struct tally *b16, uint32_t u)
{
	float x = float_of(u);
	expect_bits(f16, u, kern_fp32_to_fp16(x), ref_fp16(x));
#ifdef __FLT16_MAX__
	expect_bits(gcc, u, kern_fp32_to_fp16(x), gcc_fp16(x));
#else
	(void)gcc;
#endif
	expect_bits(b16, u, kern_fp32_to_bf16(x), ref_bf16(x));
}

/* ---- fp16 ----------------------------------------------------------------- */

static void test_fp16_known(void)
{
	static const struct { uint32_t in; uint16_t want; } cases[] = {
		{ 0x00000000, 0x0000 }, /* 0 */
		{ 0x80000000, 0x8000 }, /* -0 stays -0 */
		{ 0x3f800000, 0x3c00 }, /* 1 */
		{ 0xc0000000, 0xc000 }, /* -2 */
		{ 0x3f801000, 0x3c00 }, /* 1 + 2^-11: a tie, to the even 1 */
		{ 0x3f801001, 0x3c01 }, /* just above the tie */
		{ 0x3f803000, 0x3c02 }, /* 1 + 3 * 2^-11: a tie, to the even 1 + 2^-9 */
		{ 0x45001000, 0x6800 }, /* 2049: a tie between 2048 and 2050 */
		{ 0x45003000, 0x6802 }, /* 2051: a tie, to 2052 */
		{ 0x477fe000, 0x7bff }, /* 65504, the largest finite */
		{ 0x477fefff, 0x7bff }, /* just under 65520 */
		{ 0x477ff000, 0x7c00 }, /* 65520: the tie between 65504 and 65536 overflows */
		{ 0x47800000, 0x7c00 }, /* 65536 */
		{ 0x7f7fffff, 0x7c00 }, /* FLT_MAX */
		{ 0xc7800000, 0xfc00 }, /* -65536 */
		{ 0x7f800000, 0x7c00 }, /* inf */
		{ 0xff800000, 0xfc00 }, /* -inf */
		{ 0x38800000, 0x0400 }, /* 2^-14, the smallest normal */
		{ 0x387fc000, 0x03ff }, /* 1023 * 2^-24, the largest subnormal */
		{ 0x387fe000, 0x0400 }, /* 1023.5 * 2^-24: a tie, to the even 0x400 */
		{ 0x387fdfff, 0x03ff }, /* just under it */
		{ 0x387f4000, 0x03fd }, /* 1021 * 2^-24 */
		{ 0x387fa000, 0x03fe }, /* 1022.5 * 2^-24: a tie, to 1022 */
		{ 0x33800000, 0x0001 }, /* 2^-24, the smallest subnormal */
		{ 0x33000000, 0x0000 }, /* 2^-25: a tie between 0 and 2^-24, to 0 */
		{ 0xb3000000, 0x8000 }, /* -2^-25: to -0 */
		{ 0x33000001, 0x0001 }, /* just above 2^-25 */
		{ 0x33c00000, 0x0002 }, /* 3 * 2^-25: a tie between 1 and 2, to 2 */
		{ 0x34200000, 0x0002 }, /* 5 * 2^-25: a tie between 2 and 3, to 2 */
		{ 0x32ffffff, 0x0000 }, /* just under 2^-25 */
		{ 0x322bcc77, 0x0000 }, /* 1e-8 */
		{ 0x00000001, 0x0000 }, /* the smallest fp32 subnormal */
		{ 0x80000001, 0x8000 },
		{ 0x7fc00000, 0x7e00 }, /* quiet NaN */
		{ 0xffc00000, 0xfe00 }, /* -NaN keeps its sign */
		{ 0x7fc02000, 0x7e01 }, /* the top payload bits are kept */
		{ 0x7f800001, 0x7e00 }, /* signalling NaN, payload only in low bits: quiet, not inf */
		{ 0x7fa00000, 0x7f00 }, /* signalling NaN: payload kept, quiet bit set */
		{ 0xffffffff, 0xffff },
	};
	struct tally t = { "fp32 -> fp16", 0 };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		expect_bits(&t, cases[i].in, kern_fp32_to_fp16(float_of(cases[i].in)), cases[i].want);
	finish(&t);
	/* the table's expectations agree with the double reference */
	struct tally r = { "table vs reference", 0 };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		expect_bits(&r, cases[i].in, ref_fp16(float_of(cases[i].in)), cases[i].want);
	finish(&r);
}

/* Every fp16 pattern decodes to the value of its definition, exactly, and
 * encodes back to itself (a NaN to itself with the quiet bit). */
static void test_fp16_every_pattern(void)
{
	struct tally dec = { "fp16 -> fp32", 0 }, back = { "fp16 -> fp32 -> fp16", 0 };
	long nans = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float x = kern_fp16_to_fp32((uint16_t)h);
		double want = ref_fp16_value((uint16_t)h);
		uint32_t u = bits_of(x);
		if (isnan(want)) {
			nans++;
			/* payload in the top significand bits, nothing else changed */
			expect_bits(&dec, h, u, ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
			expect_bits(&back, h, kern_fp32_to_fp16(x), h | 0x0200u);
		} else {
			if ((double)x != want || signbit(x) != signbit(want))
				expect_bits(&dec, h, u, bits_of((float)want));
			expect_bits(&back, h, kern_fp32_to_fp16(x), h);
		}
	}
	CHECK_INT_EQ(nans, 2 * 1023);
	finish(&dec);
	finish(&back);
}

/* The fp32 patterns nearest the rounding decisions: for every exponent
 * whose values round to a finite or just-overflowing fp16, significands
 * with the dropped bits at 0, 1, half - 1, half, half + 1 and all ones, for
 * even and odd kept bits across the binade, both signs. */
static void test_fp16_bf16_ties(void)
{
	struct tally f16 = { "fp16 ties vs reference", 0 }, gcc = { "fp16 ties vs _Float16", 0 };
	struct tally b16 = { "bf16 ties vs reference", 0 };
	long n = 0;
	for (uint32_t e = 90; e <= 145; e++) {
		/* fp16 drops max(13, 126 - e) bits of the 24-bit significand */
		int d = e >= 113 ? 13 : (int)(126 - e);
		if (d > 24)
			d = 24;
		/* kept bits k, the leading 1 included (none when d = 24) */
		uint32_t half = 1u << (d - 1), k_end = (1u << 24) >> d;
		uint32_t lows[] = { 0, 1, half - 1, half, half + 1, (half << 1) - 1 };
		for (uint32_t k = k_end / 2; k < k_end; k += k_end > 64 ? k_end / 64 + 1 : 1)
			for (int li = 0; li < 6; li++)
				for (int odd = 0; odd < 2; odd++) {
					uint32_t sig = (((k | (uint32_t)odd) << d) & 0xffffffu) | lows[li];
					if (sig < 0x800000u || sig > 0xffffffu)
						continue;
					uint32_t u = (e << 23) | (sig & 0x7fffffu);
					check_one(&f16, &gcc, &b16, u);
					check_one(&f16, &gcc, &b16, u | 0x80000000u);
					n += 2;
				}
	}
	/* bf16 drops 16 bits at every exponent, subnormals included */
	for (uint32_t e = 0; e <= 254; e++) {
		uint32_t lows[] = { 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff };
		for (uint32_t k = 0; k < 128; k += 9)
			for (int li = 0; li < 6; li++)
				for (int odd = 0; odd < 2; odd++) {
					uint32_t u = (e << 23) | ((k | (uint32_t)odd) << 16) | lows[li];
					check_one(&f16, &gcc, &b16, u);
					check_one(&f16, &gcc, &b16, u | 0x80000000u);
					n += 2;
				}
	}
	CHECK(n > 40000);
	finish(&f16);
	finish(&gcc);
	finish(&b16);
}

/* A stride through all 2^32 patterns (every exponent, NaNs included) and a
 * denser one through the fp16 range, against the references. */
static void test_fp16_bf16_sweep(void)
{
	struct tally f16 = { "fp16 sweep vs reference", 0 }, gcc = { "fp16 sweep vs _Float16", 0 };
	struct tally b16 = { "bf16 sweep vs reference", 0 };
	for (uint64_t u = 0; u <= 0xffffffffu; u += 4093)
		check_one(&f16, &gcc, &b16, (uint32_t)u);
	for (uint64_t u = 0x33000000u; u <= 0x47800000u; u += 257)
		check_one(&f16, &gcc, &b16, (uint32_t)u);
	finish(&f16);
	finish(&gcc);
	finish(&b16);
}

/* ---- bf16 ----------------------------------------------------------------- */

static void test_bf16_known(void)
{
	static const struct { uint32_t in; uint16_t want; } cases[] = {
		{ 0x00000000, 0x0000 }, /* 0 */
		{ 0x80000000, 0x8000 }, /* -0 */
		{ 0x3f800000, 0x3f80 }, /* 1 */
		{ 0x3f808000, 0x3f80 }, /* 1 + 2^-8: a tie, to the even 1 */
		{ 0x3f818000, 0x3f82 }, /* a tie, to the even 0x3f82 */
		{ 0x3f808001, 0x3f81 }, /* just above the tie */
		{ 0x3f807fff, 0x3f80 }, /* just under it */
		{ 0xbf808001, 0xbf81 }, /* negative: rounds the magnitude */
		{ 0x7f7f0000, 0x7f7f }, /* the largest finite bf16 */
		{ 0x7f7f7fff, 0x7f7f }, /* just under the tie with 2^128 */
		{ 0x7f7f8000, 0x7f80 }, /* the tie: 0x7f7f is odd, so inf */
		{ 0x7f7fffff, 0x7f80 }, /* FLT_MAX rounds to inf */
		{ 0xff7fffff, 0xff80 }, /* -FLT_MAX to -inf */
		{ 0x7f800000, 0x7f80 }, /* inf */
		{ 0xff800000, 0xff80 }, /* -inf */
		{ 0x00800000, 0x0080 }, /* FLT_MIN */
		{ 0x007fffff, 0x0080 }, /* the largest fp32 subnormal rounds up to FLT_MIN */
		{ 0x00010000, 0x0001 }, /* the smallest bf16 subnormal */
		{ 0x00008000, 0x0000 }, /* half of it: a tie, to 0 */
		{ 0x00018000, 0x0002 }, /* a tie, to the even 2 */
		{ 0x00008001, 0x0001 },
		{ 0x80008000, 0x8000 }, /* to -0 */
		{ 0x7fc00000, 0x7fc0 }, /* quiet NaN */
		{ 0xffc00000, 0xffc0 }, /* -NaN keeps its sign */
		{ 0x7f800001, 0x7fc0 }, /* signalling NaN: would round to inf, is quieted */
		{ 0x7f808000, 0x7fc0 }, /* would round to inf too */
		{ 0x7fffffff, 0x7fff }, /* would carry into the sign bit */
		{ 0xffffffff, 0xffff },
		{ 0x7f810000, 0x7fc1 }, /* payload kept, quiet bit set */
	};
	struct tally t = { "fp32 -> bf16", 0 }, r = { "table vs reference", 0 };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		float x = float_of(cases[i].in);
		expect_bits(&t, cases[i].in, kern_fp32_to_bf16(x), cases[i].want);
		expect_bits(&r, cases[i].in, ref_bf16(x), cases[i].want);
	}
	finish(&t);
	finish(&r);
}

/* bf16 -> fp32 is the 16 bits shifted up, and every non-NaN pattern comes
 * back from fp32 unchanged. */
static void test_bf16_every_pattern(void)
{
	struct tally dec = { "bf16 -> fp32", 0 }, back = { "bf16 -> fp32 -> bf16", 0 };
	for (uint32_t h = 0; h < 65536; h++) {
		float x = kern_bf16_to_fp32((uint16_t)h);
		expect_bits(&dec, h, bits_of(x), h << 16);
		expect_bits(&back, h, kern_fp32_to_bf16(x), isnan(x) ? h | 0x0040u : h);
	}
	finish(&dec);
	finish(&back);
}

/* ---- arrays --------------------------------------------------------------- */

static const long sizes[] = { 0, 1, 7, 33, 257, 40000 /* crosses the threading threshold */, 100003 };

/* The _cpu versions give the scalar functions' bits on random patterns
 * (every exponent, NaNs and infs included). */
static void test_arrays_match_scalar(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		long n = sizes[s];
		size_t cap = (size_t)(n > 0 ? n : 1);
		float *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
		float *r16 = malloc(cap * sizeof *r16), *rb = malloc(cap * sizeof *rb);
		uint16_t *h = malloc(cap * sizeof *h), *b = malloc(cap * sizeof *b);
		uint16_t *hr = malloc(cap * sizeof *hr);
		for (long i = 0; i < n; i++) {
			uint64_t r = check_rand_u64(&rng);
			/* half of them in or near the fp16 range */
			uint32_t u = (uint32_t)r;
			if (r >> 63)
				u = (u & 0x807fffffu) | ((uint32_t)(100 + (r >> 40) % 46) << 23);
			x[i] = float_of(u);
			hr[i] = (uint16_t)(r >> 32);
		}
		memcpy(r16, x, (size_t)n * sizeof *x);
		memcpy(rb, x, (size_t)n * sizeof *x);
		kern_fp32_to_fp16_cpu(h, x, n);
		kern_fp32_to_bf16_cpu(b, x, n);
		kern_round_fp16_cpu(r16, n);
		kern_round_bf16_cpu(rb, n);
		struct tally t16 = { "kern_fp32_to_fp16_cpu", 0 }, tb = { "kern_fp32_to_bf16_cpu", 0 };
		struct tally tr16 = { "kern_round_fp16_cpu", 0 }, trb = { "kern_round_bf16_cpu", 0 };
		for (long i = 0; i < n; i++) {
			uint32_t u = bits_of(x[i]);
			expect_bits(&t16, u, h[i], kern_fp32_to_fp16(x[i]));
			expect_bits(&tb, u, b[i], kern_fp32_to_bf16(x[i]));
			expect_bits(&tr16, u, bits_of(r16[i]),
			            bits_of(kern_fp16_to_fp32(kern_fp32_to_fp16(x[i]))));
			expect_bits(&trb, u, bits_of(rb[i]),
			            bits_of(kern_bf16_to_fp32(kern_fp32_to_bf16(x[i]))));
		}
		kern_fp16_to_fp32_cpu(y, hr, n);
		struct tally d16 = { "kern_fp16_to_fp32_cpu", 0 }, db = { "kern_bf16_to_fp32_cpu", 0 };
		for (long i = 0; i < n; i++)
			expect_bits(&d16, hr[i], bits_of(y[i]), bits_of(kern_fp16_to_fp32(hr[i])));
		kern_bf16_to_fp32_cpu(y, hr, n);
		for (long i = 0; i < n; i++)
			expect_bits(&db, hr[i], bits_of(y[i]), bits_of(kern_bf16_to_fp32(hr[i])));
		/* the copying roundings: the same bits, the source left as it was */
		struct tally c16 = { "kern_round_fp16_to_cpu", 0 }, cb = { "kern_round_bf16_to_cpu", 0 };
		float *src = malloc(cap * sizeof *src);
		memcpy(src, x, (size_t)n * sizeof *x);
		kern_round_fp16_to_cpu(y, src, n);
		for (long i = 0; i < n; i++)
			expect_bits(&c16, bits_of(x[i]), bits_of(y[i]), bits_of(r16[i]));
		kern_round_bf16_to_cpu(y, src, n);
		for (long i = 0; i < n; i++)
			expect_bits(&cb, bits_of(x[i]), bits_of(y[i]), bits_of(rb[i]));
		CHECK_MSG(memcmp(src, x, (size_t)n * sizeof *x) == 0, "n %ld: the source changed", n);
		free(src);
		finish(&t16), finish(&tb), finish(&tr16), finish(&trb), finish(&d16), finish(&db);
		finish(&c16), finish(&cb);
		free(x), free(y), free(r16), free(rb), free(h), free(b), free(hr);
	}
}

static void test_nonfinite(void)
{
	CHECK_INT_EQ(kern_nonfinite_cpu(NULL, 0), 0);
	float edge[] = { 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, float_of(1), 65504.0f };
	CHECK_INT_EQ(kern_nonfinite_cpu(edge, 7), 0);
	const float bad[] = { INFINITY, -INFINITY, NAN, -NAN, float_of(0x7f800001u) };
	for (size_t s = 1; s < sizeof sizes / sizeof sizes[0]; s++) {
		long n = sizes[s];
		float *x = malloc((size_t)n * sizeof *x);
		check_fill(x, n, -1e30f, 1e30f, &rng);
		CHECK_MSG(kern_nonfinite_cpu(x, n) == 0, "finite n=%ld reported non-finite", n);
		long at[] = { 0, n / 2, n - 1 };
		for (int a = 0; a < 3; a++)
			for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
				float keep = x[at[a]];
				x[at[a]] = bad[k];
				CHECK_MSG(kern_nonfinite_cpu(x, n) == 1, "n=%ld: 0x%08x at %ld missed", n,
				          bits_of(bad[k]), at[a]);
				x[at[a]] = keep;
			}
		free(x);
	}
}

int main(void)
{
	CHECK_RUN(test_fp16_known);
	CHECK_RUN(test_fp16_every_pattern);
	CHECK_RUN(test_fp16_bf16_ties);
	CHECK_RUN(test_fp16_bf16_sweep);
	CHECK_RUN(test_bf16_known);
	CHECK_RUN(test_bf16_every_pattern);
	CHECK_RUN(test_arrays_match_scalar);
	CHECK_RUN(test_nonfinite);
	return check_finish();
}
