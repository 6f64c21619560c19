/* tests/unit/test_kern_gelu.c - kernels/gelu_cpu.c: known values, the
 * reference's gradient against finite differences, the vectorised version
 * against the reference, accumulation into dinp, the overwriting _set
 * backward, and determinism.
 *
 * Tolerances:
 *   known values (tanh formula evaluated in double by hand): rtol 1e-6.
 *   finite differences: eps 1e-3, inputs in [-4, 4]; truncation error is
 *     ~eps^2 |gelu'''| / 6 < 1e-6 and fp32 rounding of out ~ulp(out) / (2 eps)
 *     < 1e-4 at |x| = 4: atol 3e-4, rtol 1e-3.
 *   _cpu vs _ref, out: atol 1e-12, rtol 4e-6. For x < 0 the fp32 rounding of
 *     -2u = -2 sqrt(2/pi)(x + 0.044715 x^3) is magnified by exp(-2u): the
 *     relative error is ~|2u| * 1e-7, 1e-6 at x = -3, 2e-6 at x = -4.5
 *     (out = -5e-6), beyond which out < 1e-10 and atol takes over; there the
 *     reference itself is off (1 + tanh u cancels even in double and gives 0
 *     from x = -7.6). On a dense sweep of [-15, 15] the worst error is 0.4 of
 *     this bound. (GPT-2's fp32 formula, 0.5 x (1 + tanhf(u)), is off by
 *     ~2e-5 relative already at x = -3.)
 *   _cpu vs _ref, dinp: atol 2e-7, rtol 1e-6. The two terms of gelu' cancel
 *     near x = -0.75, so the error there is absolute, a few ulp of 0.5; worst
 *     seen 0.3 of the bound.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/gelu.h"

static uint64_t rng = 3;

static float *rnd(long n, float lo, float hi)
{
	float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	check_fill(x, n, lo, hi, &rng);
	return x;
}

static float *zeros(long n)
{
	return calloc((size_t)(n > 0 ? n : 1), sizeof(float));
}

static void test_known_values(void)
{
	/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in double */
	float inp[6] = { 0, 1, -1, 2, -3, 0.5f };
	float want[6] = { 0, 0.8411919906082768f, -0.15880800939172324f, 1.954597694087775f,
	                  -0.0036373920817729943f, 0.34571400982514394f };
	float out[6];
	kern_gelu_fwd_ref(out, inp, 6);
	check_close("ref", out, want, 6, 0, 1e-6);
	kern_gelu_fwd_cpu(out, inp, 6);
	check_close("cpu", out, want, 6, 0, 1e-6);
}

struct gelu_ctx {
	float *out, *inp, *r;
	long n;
};

/* loss = sum(out * r), so dloss/dout = r */
static double gelu_loss(void *p)
{
	struct gelu_ctx *x = p;
	kern_gelu_fwd_ref(x->out, x->inp, x->n);
	double s = 0;
	for (long i = 0; i < x->n; i++)
		s += (double)x->out[i] * x->r[i];
	return s;
}

static void test_ref_grad(void)
{
	struct gelu_ctx x = { .n = 97 };
	x.inp = rnd(x.n, -4, 4);
	x.r = rnd(x.n, -1, 1);
	x.out = zeros(x.n);
	float *dinp = zeros(x.n);
	kern_gelu_bwd_ref(dinp, x.inp, x.r, x.n);
	check_grad("dinp", x.inp, x.n, dinp, gelu_loss, &x, 1e-3, 3e-4, 1e-3, 97);
	free(x.inp), free(x.r), free(x.out), free(dinp);
}

static const long sizes[] = { 1, 7, 33, 257, 40000 /* crosses the threading threshold */, 100003 };

static void compare(long n, float lo, float hi)
{
	float *inp = rnd(n, lo, hi), *dout = rnd(n, -1, 1);
	float *out_r = zeros(n), *out_c = rnd(n, -1, 1);
	kern_gelu_fwd_ref(out_r, inp, n);
	kern_gelu_fwd_cpu(out_c, inp, n);
	char what[96];
	snprintf(what, sizeof what, "out n=%ld x in [%g, %g]", n, lo, hi);
	check_close(what, out_c, out_r, n, 1e-12, 4e-6);

	float *d_r = zeros(n), *d_c = zeros(n);
	kern_gelu_bwd_ref(d_r, inp, dout, n);
	kern_gelu_bwd_cpu(d_c, inp, dout, n);
	snprintf(what, sizeof what, "dinp n=%ld x in [%g, %g]", n, lo, hi);
	check_close(what, d_c, d_r, n, 2e-7, 1e-6);

	/* in place */
	kern_gelu_fwd_cpu(inp, inp, n);
	snprintf(what, sizeof what, "in place n=%ld", n);
	check_close(what, inp, out_c, n, 0, 0);
	free(inp), free(dout), free(out_r), free(out_c), free(d_r), free(d_c);
}

static void test_cpu_vs_ref(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		compare(sizes[s], -6, 6);
	compare(100003, -0.01f, 0.01f);
	compare(100003, -30, 30);  /* reaches the clamp of exp in both directions */
	compare(10000, -1e4f, 1e4f);
}

typedef void (*bwd_fn)(float *, const float *, const float *, long);

static void twice_is_double(const char *what, bwd_fn bwd, long n)
{
	float *inp = rnd(n, -4, 4), *dout = rnd(n, -1, 1), *once = zeros(n), *twice = zeros(n);
	bwd(once, inp, dout, n);
	bwd(twice, inp, dout, n);
	bwd(twice, inp, dout, n);
	for (long i = 0; i < n; i++)
		once[i] *= 2;
	check_close(what, twice, once, n, 0, 0);
	free(inp), free(dout), free(once), free(twice);
}

static void test_bwd_accumulates(void)
{
	twice_is_double("ref", kern_gelu_bwd_ref, 257);
	twice_is_double("cpu", kern_gelu_bwd_cpu, 257);
	twice_is_double("cpu threaded", kern_gelu_bwd_cpu, 100003);
}

/* The _set backward overwrites dinp: on a buffer full of NaN it gives what
 * the adding backward gives on zeros, bit for bit (both evaluate the same
 * per-element expression), also in place (dinp == dout); _cpu against _ref
 * with the tolerance of dinp above. */
static void set_one(const char *name, bwd_fn add, bwd_fn set, long n)
{
	float *inp = rnd(n, -6, 6), *dout = rnd(n, -1, 1);
	float *want = zeros(n), *got = malloc(sizeof(float) * (size_t)n);
	for (long i = 0; i < n; i++)
		got[i] = NAN;
	add(want, inp, dout, n);
	set(got, inp, dout, n);
	char what[96];
	snprintf(what, sizeof what, "%s set n=%ld", name, n);
	check_close(what, got, want, n, 0, 0);
	memcpy(got, dout, sizeof(float) * (size_t)n);
	set(got, inp, got, n);
	snprintf(what, sizeof what, "%s set in place n=%ld", name, n);
	check_close(what, got, want, n, 0, 0);
	free(inp), free(dout), free(want), free(got);
}

static void test_bwd_set(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		long n = sizes[s];
		set_one("ref", kern_gelu_bwd_ref, kern_gelu_bwd_set_ref, n);
		set_one("cpu", kern_gelu_bwd_cpu, kern_gelu_bwd_set_cpu, n);
		float *inp = rnd(n, -6, 6), *dout = rnd(n, -1, 1), *r = zeros(n), *c = zeros(n);
		kern_gelu_bwd_set_ref(r, inp, dout, n);
		kern_gelu_bwd_set_cpu(c, inp, dout, n);
		char what[64];
		snprintf(what, sizeof what, "set cpu vs ref n=%ld", n);
		check_close(what, c, r, n, 2e-7, 1e-6);
		free(inp), free(dout), free(r), free(c);
	}
}

static void test_cpu_deterministic(void)
{
	const long n = 100003;
	float *inp = rnd(n, -6, 6), *dout = rnd(n, -1, 1);
	float *a = zeros(n), *b = zeros(n);
	kern_gelu_fwd_cpu(a, inp, n);
	kern_gelu_fwd_cpu(b, inp, n);
	CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
	memset(a, 0, sizeof(float) * (size_t)n);
	memset(b, 0, sizeof(float) * (size_t)n);
	kern_gelu_bwd_cpu(a, inp, dout, n);
	kern_gelu_bwd_cpu(b, inp, dout, n);
	CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
	free(inp), free(dout), free(a), free(b);
}

int main(void)
{
	CHECK_RUN(test_known_values);
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_bwd_set);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
