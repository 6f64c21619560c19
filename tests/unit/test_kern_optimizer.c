/* tests/unit/test_kern_optimizer.c - kernels/optimizer_cpu.c: hand-computed
 * steps of SGD, AdamW and LARS; LAMB's two passes against a direct
 * computation; the threaded versions against the reference on each
 * instruction set (optimizer_simd.h: plain loops, AVX2, AVX-512, as far as
 * this CPU has them), at sizes around the vector widths, the block and the
 * threading threshold, on misaligned buffers; determinism.
 *
 * Tolerances:
 *   hand-computed steps (exact decimal arithmetic) vs fp32 kernels: atol 1e-6
 *     (AdamW's v: rtol 2e-5, see test_adamw_by_hand).
 *   LAMB against a direct computation in double from the same fp32 inputs:
 *     norms rtol 1e-5, weights atol 1e-6 (fp32 rounding of m, v, u).
 *   _cpu vs _ref, updates: exact on every instruction set, since all run the
 *     reference's float operations in its order (no FMA, exact division and
 *     square root). Norms: rtol 2.2e-16 * n, the worst-case error of summing
 *     n positive doubles in a different order; and the same bits on every
 *     instruction set and thread count.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_simd.h"
#include "kernels/parallel.h"

static uint64_t rng = 11;

static float *rnd(long n, float lo, float hi)
{
	float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	check_fill(x, n, lo, hi, &rng);
	return x;
}

static float *copy(const float *x, long n)
{
	float *y = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	memcpy(y, x, sizeof(float) * (size_t)n);
	return y;
}

static int close_rel(double got, double want, double rtol)
{
	return fabs(got - want) <= rtol * fabs(want);
}

/* ---- closed-form steps ---------------------------------------------------- */

static void test_sgd_by_hand(void)
{
	/* w = 1, g = 0.5 twice, lr 0.1, mu 0.9, wd 0.01.
	 * nesterov: d = 0.51, m = 0.51, w = 1 - 0.1 (0.51 + 0.459) = 0.9031;
	 *   d = 0.509031, m = 0.459 + 0.509031 = 0.968031,
	 *   w = 0.9031 - 0.1 (0.509031 + 0.8712279) = 0.76507411.
	 * plain: w = 1 - 0.051 = 0.949; d = 0.50949, m = 0.96849,
	 *   w = 0.949 - 0.096849 = 0.852151.
	 * no momentum: w = 1 - 0.1 * 0.51 = 0.949. */
	const float g = 0.5f;
	for (int cpu = 0; cpu < 2; cpu++) {
		void (*sgd)(float *, float *, const float *, long, float, float, float, int) =
			cpu ? kern_sgd_update_cpu : kern_sgd_update_ref;
		float w = 1, m = 0;
		sgd(&w, &m, &g, 1, 0.1f, 0.9f, 0.01f, 1);
		CHECK_MSG(fabsf(w - 0.9031f) < 1e-6f && fabsf(m - 0.51f) < 1e-6f,
		          "nesterov step 1 (cpu=%d): w %.9g m %.9g", cpu, w, m);
		sgd(&w, &m, &g, 1, 0.1f, 0.9f, 0.01f, 1);
		CHECK_MSG(fabsf(w - 0.76507411f) < 1e-6f && fabsf(m - 0.968031f) < 1e-6f,
		          "nesterov step 2 (cpu=%d): w %.9g m %.9g", cpu, w, m);
		w = 1, m = 0;
		sgd(&w, &m, &g, 1, 0.1f, 0.9f, 0.01f, 0);
		sgd(&w, &m, &g, 1, 0.1f, 0.9f, 0.01f, 0);
		CHECK_MSG(fabsf(w - 0.852151f) < 1e-6f && fabsf(m - 0.96849f) < 1e-6f,
		          "momentum step 2 (cpu=%d): w %.9g m %.9g", cpu, w, m);
		w = 1;
		sgd(&w, NULL, &g, 1, 0.1f, 0.0f, 0.01f, 1); /* mu = 0: m may be NULL */
		CHECK_MSG(fabsf(w - 0.949f) < 1e-6f, "no momentum (cpu=%d): w %.9g", cpu, w);
	}
}

static void test_adamw_by_hand(void)
{
	/* w = 1, lr 0.1, b1 0.9, b2 0.999, eps 1e-8, wd 0.01; g = 0.5 then -0.25.
	 * step 1: m = 0.05, v = 0.00025, bc1 = 0.1, bc2 = 0.001: m/bc1 = 0.5,
	 *   sqrt(v/bc2) = 0.5, w = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.899000002.
	 * step 2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225,
	 *   bc1 = 0.19, bc2 = 0.001999:
	 *   w = 0.899000002 * 0.999 - 0.1 * (0.02/0.19) / (sqrt(0.00031225/0.001999) + 1e-8)
	 *     = 0.871467299.
	 * The kernel forms 1 - b2 in float, and 0.999f = 0.99900001: v comes out
	 * 1.3e-5 relative below the decimal value. The bias corrections are made
	 * from the same float betas, as a caller should, so that m/bc1 and v/bc2
	 * stay consistent and w matches the decimal values to 1e-6. */
	const float b1 = 0.9f, b2 = 0.999f;
	for (int cpu = 0; cpu < 2; cpu++) {
		void (*adamw)(float *, float *, float *, const float *, long, float, float, float,
		              float, float, float, float) =
			cpu ? kern_adamw_update_cpu : kern_adamw_update_ref;
		float w = 1, m = 0, v = 0, g = 0.5f;
		adamw(&w, &m, &v, &g, 1, 0.1f, b1, b2, 1e-8f, 0.01f,
		      (float)(1 - (double)b1), (float)(1 - (double)b2));
		CHECK_MSG(fabsf(w - 0.899000002f) < 1e-6f && fabsf(m - 0.05f) < 1e-7f &&
		          close_rel(v, 0.00025, 2e-5),
		          "step 1 (cpu=%d): w %.9g m %.9g v %.9g", cpu, w, m, v);
		g = -0.25f;
		adamw(&w, &m, &v, &g, 1, 0.1f, b1, b2, 1e-8f, 0.01f,
		      (float)(1 - (double)b1 * b1), (float)(1 - (double)b2 * b2));
		CHECK_MSG(fabsf(w - 0.871467299f) < 1e-6f && fabsf(m - 0.02f) < 1e-7f &&
		          close_rel(v, 0.00031225, 2e-5),
		          "step 2 (cpu=%d): w %.9g m %.9g v %.9g", cpu, w, m, v);
	}
}

static void test_lars_by_hand(void)
{
	/* w = (3, 4), g = (0.6, 0.8), lr 1, trust 0.001, wd 5e-4, mu 0.9.
	 * step 1: local_lr = 0.001 * 5 / (1 + 5e-4 * 5) = 0.00498753117,
	 *   m = local_lr * (0.6015, 0.802) = (0.003, 0.004), w = (2.997, 3.996).
	 * step 2 (same g): ||w|| = 4.995, local_lr = 0.004995 / 1.0024975
	 *   = 0.00498255607, m = 0.9 (0.003, 0.004) + local_lr (0.6014985, 0.801998)
	 *   = (0.005697, 0.007596), w = (2.991303, 3.988404). */
	const float want_w[2][2] = { { 2.997f, 3.996f }, { 2.991303f, 3.988404f } };
	const float want_m[2][2] = { { 0.003f, 0.004f }, { 0.005697f, 0.007596f } };
	for (int cpu = 0; cpu < 2; cpu++) {
		float w[2] = { 3, 4 }, m[2] = { 0, 0 }, g[2] = { 0.6f, 0.8f };
		for (int s = 0; s < 2; s++) {
			double wn = sqrt(cpu ? kern_sumsq_cpu(w, 2) : kern_sumsq_ref(w, 2));
			double gn = sqrt(cpu ? kern_sumsq_cpu(g, 2) : kern_sumsq_ref(g, 2));
			float step = (float)(1.0 * 0.001 * wn / (gn + 5e-4 * wn));
			if (cpu)
				kern_lars_update_cpu(w, m, g, 2, step, 0.9f, 5e-4f);
			else
				kern_lars_update_ref(w, m, g, 2, step, 0.9f, 5e-4f);
			char what[64];
			snprintf(what, sizeof what, "w step %d cpu=%d", s + 1, cpu);
			check_close(what, w, want_w[s], 2, 1e-6, 0);
			snprintf(what, sizeof what, "m step %d cpu=%d", s + 1, cpu);
			check_close(what, m, want_m[s], 2, 1e-6, 0);
		}
	}
}

static void test_sumsq_known(void)
{
	/* 1^2 + ... + n^2 = n (n + 1) (2n + 1) / 6, exact in double here */
	const long n = 100003;
	float *x = malloc(sizeof(float) * n);
	for (long i = 0; i < n; i++)
		x[i] = (float)(i + 1);
	double want = (double)n * (n + 1) * (2 * n + 1) / 6;
	CHECK(kern_sumsq_ref(x, n) == want);
	CHECK(kern_sumsq_cpu(x, n) == want);
	CHECK(kern_sumsq_ref(x, 0) == 0 && kern_sumsq_cpu(x, 0) == 0);
	free(x);
}

/* ---- LAMB against a direct computation ------------------------------------ */

static void lamb_direct(long n, int cpu)
{
	const float b1 = 0.9f, b2 = 0.999f, eps = 1e-6f, wd = 0.01f, lr = 0.01f;
	const int t = 3;
	const float bc1 = (float)(1 - pow(b1, t)), bc2 = (float)(1 - pow(b2, t));
	float *w = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
	double *u = malloc(sizeof(double) * (size_t)n);
	float *want_w = malloc(sizeof(float) * (size_t)n);
	double un2 = 0, wn2 = 0;
	for (long i = 0; i < n; i++) {
		double mi = (double)b1 * m[i] + (1 - (double)b1) * g[i];
		double vi = (double)b2 * v[i] + (1 - (double)b2) * g[i] * g[i];
		u[i] = (mi / bc1) / (sqrt(vi / bc2) + eps) + (double)wd * w[i];
		un2 += u[i] * u[i];
		wn2 += (double)w[i] * w[i];
	}
	double step = lr * sqrt(wn2) / sqrt(un2);
	for (long i = 0; i < n; i++)
		want_w[i] = (float)(w[i] - step * u[i]);

	double got_un2 = cpu ? kern_lamb_moments_cpu(m, v, g, w, n, b1, b2, eps, wd, bc1, bc2)
	                     : kern_lamb_moments_ref(m, v, g, w, n, b1, b2, eps, wd, bc1, bc2);
	double got_wn2 = cpu ? kern_sumsq_cpu(w, n) : kern_sumsq_ref(w, n);
	CHECK_MSG(close_rel(got_un2, un2, 1e-5), "||u||^2 n=%ld cpu=%d: %.12g want %.12g",
	          n, cpu, got_un2, un2);
	CHECK_MSG(close_rel(got_wn2, wn2, 1e-6), "||w||^2 n=%ld cpu=%d: %.12g want %.12g",
	          n, cpu, got_wn2, wn2);
	float got_step = (float)(lr * sqrt(got_wn2) / sqrt(got_un2));
	if (cpu)
		kern_lamb_apply_cpu(w, m, v, n, got_step, eps, wd, bc1, bc2);
	else
		kern_lamb_apply_ref(w, m, v, n, got_step, eps, wd, bc1, bc2);
	char what[64];
	snprintf(what, sizeof what, "w n=%ld cpu=%d", n, cpu);
	check_close(what, w, want_w, n, 1e-6, 0);
	free(w), free(g), free(m), free(v), free(u), free(want_w);
}

static void test_lamb_direct(void)
{
	lamb_direct(1000, 0);
	lamb_direct(1000, 1);
	lamb_direct(100003, 1);
}

/* ---- _cpu against _ref, on each instruction set ------------------------------ */

/* Sizes: vectors of 8 and 16 and partial ones (1 to 33), the norms' lane
 * groups of 32 and partial ones (47 to 65), a block (8192) and the threading
 * threshold (32768) and either side of them, and sizes that leave partial
 * vectors after many blocks over many threads. */
static const long sizes[] = { 1,    7,    8,     15,    16,    17,    31,    32,    33,    47,
                              63,   64,   65,    257,   8191,  8192,  8193,  32767, 32768, 32769,
                              40000, 100003 };

static void bits_equal(const char *what, enum kern_isa isa, long n, const float *a,
                       const float *b)
{
	CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)n) == 0,
	          "%s n=%ld isa=%s: _cpu differs from _ref", what, n, kern_isa_name(isa));
}

/* Buffers of n floats at offset floats past a malloc'd block (misaligned
 * for offset 1), filled from the same stream whatever the offset. */
struct bufs {
	float *base[7];
	float *w, *g, *m, *v, *w1, *m1, *v1;
};

static void bufs_init(struct bufs *b, long n, int offset)
{
	float **p[] = { &b->w, &b->g, &b->m, &b->v, &b->w1, &b->m1, &b->v1 };
	for (int i = 0; i < 7; i++) {
		b->base[i] = malloc(sizeof(float) * (size_t)(n + offset));
		*p[i] = b->base[i] + offset;
	}
	check_fill(b->w, n, -1, 1, &rng);
	check_fill(b->g, n, -1, 1, &rng);
	check_fill(b->m, n, -0.1f, 0.1f, &rng);
	check_fill(b->v, n, 0, 0.01f, &rng);
}

static void bufs_release(struct bufs *b)
{
	for (int i = 0; i < 7; i++)
		free(b->base[i]);
}

static void compare_one(enum kern_isa isa, long n, int offset)
{
	struct bufs b;
	bufs_init(&b, n, offset);
	float *w = b.w, *g = b.g, *m = b.m, *v = b.v;
	float *w1 = b.w1, *m1 = b.m1, *v1 = b.v1;
	float *w2 = copy(w, n), *m2 = copy(m, n), *v2 = copy(v, n);
	const float bc1 = 1 - 0.9f * 0.9f, bc2 = 1 - 0.999f * 0.999f;
	const size_t bytes = sizeof(float) * (size_t)n;
#define RESET(x1, x2, x) memcpy(x1, x, bytes), memcpy(x2, x, bytes)

	double r = kern_sumsq_ref(g, n), c = kern_sumsq_cpu(g, n);
	CHECK_MSG(close_rel(c, r, 2.2e-16 * n), "sumsq n=%ld isa=%s: %.17g vs %.17g", n,
	          kern_isa_name(isa), c, r);

	RESET(w1, w2, w);
	kern_scale_ref(w1, n, 0.37f);
	kern_scale_cpu(w2, n, 0.37f);
	bits_equal("scale", isa, n, w1, w2);

	for (int variant = 0; variant < 4; variant++) {
		/* nesterov, plain momentum, no momentum, no momentum and no m */
		float mu = variant >= 2 ? 0.0f : 0.9f;
		RESET(w1, w2, w), RESET(m1, m2, m);
		kern_sgd_update_ref(w1, variant == 3 ? NULL : m1, g, n, 0.1f, mu, 1e-4f, variant == 0);
		kern_sgd_update_cpu(w2, variant == 3 ? NULL : m2, g, n, 0.1f, mu, 1e-4f, variant == 0);
		bits_equal("sgd w", isa, n, w1, w2);
		bits_equal("sgd m", isa, n, m1, m2);
	}

	RESET(w1, w2, w), RESET(m1, m2, m), RESET(v1, v2, v);
	kern_adamw_update_ref(w1, m1, v1, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, bc1, bc2);
	kern_adamw_update_cpu(w2, m2, v2, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, bc1, bc2);
	bits_equal("adamw w", isa, n, w1, w2);
	bits_equal("adamw m", isa, n, m1, m2);
	bits_equal("adamw v", isa, n, v1, v2);

	RESET(w1, w2, w), RESET(m1, m2, m);
	kern_lars_update_ref(w1, m1, g, n, 0.02f, 0.9f, 1e-4f);
	kern_lars_update_cpu(w2, m2, g, n, 0.02f, 0.9f, 1e-4f);
	bits_equal("lars w", isa, n, w1, w2);
	bits_equal("lars m", isa, n, m1, m2);

	/* LAMB twice: with eps = 0 the lanes past n of a partial vector compute
	 * 0/0, which must not reach the norm */
	for (int e = 0; e < 2; e++) {
		float eps = e ? 0.0f : 1e-6f;
		RESET(w1, w2, w), RESET(m1, m2, m), RESET(v1, v2, v);
		r = kern_lamb_moments_ref(m1, v1, g, w1, n, 0.9f, 0.999f, eps, 0.01f, bc1, bc2);
		c = kern_lamb_moments_cpu(m2, v2, g, w2, n, 0.9f, 0.999f, eps, 0.01f, bc1, bc2);
		CHECK_MSG(close_rel(c, r, 2.2e-16 * n), "lamb ||u||^2 n=%ld isa=%s eps=%g: %.17g vs %.17g",
		          n, kern_isa_name(isa), eps, c, r);
		bits_equal("lamb m", isa, n, m1, m2);
		bits_equal("lamb v", isa, n, v1, v2);
		kern_lamb_apply_ref(w1, m1, v1, n, 0.003f, eps, 0.01f, bc1, bc2);
		kern_lamb_apply_cpu(w2, m2, v2, n, 0.003f, eps, 0.01f, bc1, bc2);
		bits_equal("lamb w", isa, n, w1, w2);
	}
#undef RESET
	bufs_release(&b);
	free(w2), free(m2), free(v2);
}

/* Runs fn on each instruction set this CPU has, then restores the default. */
static void for_each_isa(void (*fn)(enum kern_isa isa))
{
	enum kern_isa dflt = kern_optim_isa();
	int ran = 0;
	for (int i = 0; i < KERN_ISA_COUNT; i++) {
		if (kern_optim_set_isa((enum kern_isa)i) != 0) {
			fprintf(stderr, "  (no %s on this CPU or build)\n", kern_isa_name((enum kern_isa)i));
			continue;
		}
		CHECK(kern_optim_isa() == (enum kern_isa)i);
		fn((enum kern_isa)i);
		ran++;
	}
	CHECK(ran >= 1);
	CHECK(kern_optim_set_isa(dflt) == 0);
}

static void cpu_vs_ref(enum kern_isa isa)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		compare_one(isa, sizes[s], 0);
		compare_one(isa, sizes[s], 1);
	}
}

static void test_cpu_vs_ref(void)
{
	for_each_isa(cpu_vs_ref);
}

/* The norms and updates of one input on every instruction set, at 1 and 3
 * threads: all the same bits. */
static void test_isa_same_bits(void)
{
	const long n = 100003;
	float *w = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
	float *w0 = NULL, *m0 = NULL, *v0 = NULL;
	double s0 = 0, u0 = 0;
	enum kern_isa dflt = kern_optim_isa();
	int threads = kern_threads();
	for (int i = 0; i < KERN_ISA_COUNT; i++) {
		if (kern_optim_set_isa((enum kern_isa)i) != 0)
			continue;
		for (int t = 1; t <= 3; t += 2) {
			kern_set_threads(t);
			float *w1 = copy(w, n), *m1 = copy(m, n), *v1 = copy(v, n);
			double s = kern_sumsq_cpu(g, n);
			kern_adamw_update_cpu(w1, m1, v1, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.1f, 0.001f);
			double u = kern_lamb_moments_cpu(m1, v1, g, w1, n, 0.9f, 0.999f, 1e-6f, 0.01f, 0.19f, 0.002f);
			kern_lamb_apply_cpu(w1, m1, v1, n, 0.003f, 1e-6f, 0.01f, 0.19f, 0.002f);
			kern_sgd_update_cpu(w1, m1, g, n, 0.1f, 0.9f, 1e-4f, 1);
			kern_lars_update_cpu(w1, m1, g, n, 0.02f, 0.9f, 1e-4f);
			kern_scale_cpu(w1, n, 0.37f);
			if (!w0) {
				w0 = w1, m0 = m1, v0 = v1, s0 = s, u0 = u;
				continue;
			}
			CHECK_MSG(memcmp(&s, &s0, sizeof s) == 0 && memcmp(&u, &u0, sizeof u) == 0,
			          "isa=%s threads=%d: norms %.17g %.17g vs %.17g %.17g",
			          kern_isa_name((enum kern_isa)i), t, s, u, s0, u0);
			CHECK_MSG(memcmp(w1, w0, sizeof(float) * n) == 0 &&
			          memcmp(m1, m0, sizeof(float) * n) == 0 &&
			          memcmp(v1, v0, sizeof(float) * n) == 0,
			          "isa=%s threads=%d: updates differ", kern_isa_name((enum kern_isa)i), t);
			free(w1), free(m1), free(v1);
		}
	}
	kern_set_threads(threads);
	CHECK(kern_optim_set_isa(dflt) == 0);
	free(w), free(g), free(m), free(v), free(w0), free(m0), free(v0);
}

/* The widest set until the caller picks one; kern_optim_set_isa refuses
 * what it does not know. Runs first, before any optimizer call. */
static void test_isa_choice(void)
{
	CHECK_INT_EQ(kern_optim_isa(), kern_isa_widest());
	CHECK(kern_optim_set_isa(KERN_ISA_SCALAR) == 0);
	CHECK_INT_EQ(kern_optim_isa(), KERN_ISA_SCALAR);
	CHECK_INT_EQ(kern_isa_parse("avx512"), KERN_ISA_AVX512);
	CHECK_INT_EQ(kern_isa_parse("avx2"), KERN_ISA_AVX2);
	CHECK_INT_EQ(kern_isa_parse("scalar"), KERN_ISA_SCALAR);
	CHECK_INT_EQ(kern_isa_parse("sse2"), -1);
	CHECK(kern_isa_supported(KERN_ISA_SCALAR));
	CHECK(kern_optim_set_isa(KERN_ISA_COUNT) == -1);
	CHECK_INT_EQ(kern_optim_isa(), KERN_ISA_SCALAR);
	/* the rest of the tests start from the widest set this CPU has */
	for (int i = KERN_ISA_COUNT - 1; i >= 0; i--)
		if (kern_optim_set_isa((enum kern_isa)i) == 0)
			break;
	fprintf(stderr, "  optimizer loops: %s\n", kern_isa_name(kern_optim_isa()));
}

/* ---- determinism ------------------------------------------------------- */

/* The norms: bit-identical from call to call and for any thread count, also
 * past the size where chunks grow beyond their minimum (8.4M elements). */
static void test_norms_deterministic(void)
{
	const long n = 9000001;
	float *x = rnd(n, -1, 1);
	double a = kern_sumsq_cpu(x, n), b = kern_sumsq_cpu(x, n), r = kern_sumsq_ref(x, n);
	CHECK(memcmp(&a, &b, sizeof a) == 0);
	CHECK_MSG(close_rel(a, r, 2.2e-16 * n), "sumsq n=%ld: %.17g vs %.17g", n, a, r);

	const long nl = 100003;
	float *m = rnd(nl, -0.1f, 0.1f), *v = rnd(nl, 0, 0.01f);
	float *m1 = copy(m, nl), *v1 = copy(v, nl), *m2 = copy(m, nl), *v2 = copy(v, nl);
	double l1 = kern_lamb_moments_cpu(m1, v1, x, x + nl, nl, 0.9f, 0.999f, 1e-6f, 0.01f, 0.1f, 0.001f);

	int threads = kern_threads();
	kern_set_threads(3);
	double c = kern_sumsq_cpu(x, n);
	double l2 = kern_lamb_moments_cpu(m2, v2, x, x + nl, nl, 0.9f, 0.999f, 1e-6f, 0.01f, 0.1f, 0.001f);
	kern_set_threads(threads);
	CHECK(memcmp(&a, &c, sizeof a) == 0);
	CHECK(memcmp(&l1, &l2, sizeof l1) == 0);
	CHECK(memcmp(m1, m2, sizeof(float) * nl) == 0 && memcmp(v1, v2, sizeof(float) * nl) == 0);
	free(x), free(m), free(v), free(m1), free(v1), free(m2), free(v2);
}

static void test_updates_deterministic(void)
{
	const long n = 100003;
	float *w = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
	float *w1 = copy(w, n), *m1 = copy(m, n), *v1 = copy(v, n);
	float *w2 = copy(w, n), *m2 = copy(m, n), *v2 = copy(v, n);
	kern_adamw_update_cpu(w1, m1, v1, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.1f, 0.001f);
	kern_adamw_update_cpu(w2, m2, v2, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.1f, 0.001f);
	CHECK(memcmp(w1, w2, sizeof(float) * n) == 0);
	kern_sgd_update_cpu(w1, m1, g, n, 0.1f, 0.9f, 1e-4f, 1);
	kern_sgd_update_cpu(w2, m2, g, n, 0.1f, 0.9f, 1e-4f, 1);
	CHECK(memcmp(w1, w2, sizeof(float) * n) == 0);
	kern_lars_update_cpu(w1, m1, g, n, 0.02f, 0.9f, 1e-4f);
	kern_lars_update_cpu(w2, m2, g, n, 0.02f, 0.9f, 1e-4f);
	CHECK(memcmp(w1, w2, sizeof(float) * n) == 0);
	kern_lamb_apply_cpu(w1, m1, v1, n, 0.003f, 1e-6f, 0.01f, 0.1f, 0.001f);
	kern_lamb_apply_cpu(w2, m2, v2, n, 0.003f, 1e-6f, 0.01f, 0.1f, 0.001f);
	CHECK(memcmp(w1, w2, sizeof(float) * n) == 0);
	free(w), free(g), free(m), free(v), free(w1), free(m1), free(v1), free(w2), free(m2), free(v2);
}

int main(void)
{
	CHECK_RUN(test_isa_choice);
	CHECK_RUN(test_sgd_by_hand);
	CHECK_RUN(test_adamw_by_hand);
	CHECK_RUN(test_lars_by_hand);
	CHECK_RUN(test_sumsq_known);
	CHECK_RUN(test_lamb_direct);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_isa_same_bits);
	CHECK_RUN(test_norms_deterministic);
	CHECK_RUN(test_updates_deterministic);
	return check_finish();
}
