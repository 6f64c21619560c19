/* tests/unit/test_kern_relu.c - kernels/relu_cpu.c: the reference's gradient
 * against finite differences, the threaded version against the reference,
 * accumulation into dinp, the overwriting _set backward, and run-to-run
 * determinism.
 *
 * Tolerances:
 *   finite differences: eps 1e-3 with inputs kept at least 0.05 from the kink
 *     at 0; relu is linear there, so the difference is exact up to rounding:
 *     atol 1e-6, rtol 1e-5.
 *   _cpu vs _ref: exact (both evaluate the same select).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/relu.h"

static uint64_t rng = 1;

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

struct relu_ctx {
	float *out, *inp, *r;
	long n;
};

/* loss = sum(out * r), so dloss/dout = r */
static double relu_loss(void *p)
{
	struct relu_ctx *x = p;
	kern_relu_fwd_ref(x->out, x->inp, x->n);
	double s = 0;
	for (long i = 0; i < x->n; i++)
		s += (double)x->out[i] * x->r[i];
	return s;
}

static void test_ref_grad(void)
{
	struct relu_ctx x = { .n = 64 };
	x.inp = rnd(x.n, -2, 2);
	for (long i = 0; i < x.n; i++)
		if (fabsf(x.inp[i]) < 0.05f)
			x.inp[i] = x.inp[i] < 0 ? -0.05f : 0.05f;
	x.r = rnd(x.n, -1, 1);
	x.out = zeros(x.n);
	float *dinp = zeros(x.n);
	kern_relu_bwd_ref(dinp, x.inp, x.r, x.n);
	check_grad("dinp", x.inp, x.n, dinp, relu_loss, &x, 1e-3, 1e-6, 1e-5, 64);
	free(x.inp), free(x.r), free(x.out), free(dinp);
}

static void test_known_values(void)
{
	float inp[4] = { -1.5f, 0.0f, 2.5f, -0.0f }, out[4], want[4] = { 0, 0, 2.5f, 0 };
	kern_relu_fwd_cpu(out, inp, 4);
	check_close("relu", out, want, 4, 0, 0);
	/* where the unit is off, nothing from dout gets through, not even inf */
	float dout[4] = { INFINITY, 7, 3, NAN }, dinp[4] = { 1, 1, 1, 1 }, dwant[4] = { 1, 1, 4, 1 };
	kern_relu_bwd_cpu(dinp, inp, dout, 4);
	check_close("relu bwd cpu", dinp, dwant, 4, 0, 0);
	float dref[4] = { 1, 1, 1, 1 };
	kern_relu_bwd_ref(dref, inp, dout, 4);
	check_close("relu bwd ref", dref, dwant, 4, 0, 0);
}

static const long sizes[] = { 1, 7, 33, 257, 40000 /* crosses the threading threshold */, 100003 };

static void test_cpu_vs_ref(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		long n = sizes[s];
		float *inp = rnd(n, -1, 1), *dout = rnd(n, -1, 1);
		float *out_r = zeros(n), *out_c = rnd(n, -1, 1);
		kern_relu_fwd_ref(out_r, inp, n);
		kern_relu_fwd_cpu(out_c, inp, n);
		char what[64];
		snprintf(what, sizeof what, "out n=%ld", n);
		check_close(what, out_c, out_r, n, 0, 0);

		float *d_r = rnd(n, -1, 1), *d_c = malloc(sizeof(float) * (size_t)n);
		memcpy(d_c, d_r, sizeof(float) * (size_t)n);
		kern_relu_bwd_ref(d_r, inp, dout, n);
		kern_relu_bwd_cpu(d_c, inp, dout, n);
		snprintf(what, sizeof what, "dinp n=%ld", n);
		check_close(what, d_c, d_r, n, 0, 0);

		/* in place */
		kern_relu_fwd_cpu(inp, inp, n);
		snprintf(what, sizeof what, "in place n=%ld", n);
		check_close(what, inp, out_r, n, 0, 0);
		free(inp), free(dout), free(out_r), free(out_c), free(d_r), free(d_c);
	}
}

typedef void (*bwd_fn)(float *, const float *, const float *, long);

static void twice_is_double(const char *what, bwd_fn bwd, long n)
{
	float *inp = rnd(n, -1, 1), *dout = rnd(n, -1, 1), *once = zeros(n), *twice = zeros(n);
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
	twice_is_double("ref", kern_relu_bwd_ref, 257);
	twice_is_double("cpu", kern_relu_bwd_cpu, 257);
	twice_is_double("cpu threaded", kern_relu_bwd_cpu, 100003);
}

/* The _set backward overwrites dinp: on a buffer full of NaN it gives what
 * the adding backward gives on zeros, bit for bit (both evaluate the same
 * per-element expression), also in place (dinp == dout); _cpu against _ref
 * with the tolerance of dinp above. */
static void set_one(const char *name, bwd_fn add, bwd_fn set, long n)
{
	float *inp = rnd(n, -1, 1), *dout = rnd(n, -1, 1);
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
		set_one("ref", kern_relu_bwd_ref, kern_relu_bwd_set_ref, n);
		set_one("cpu", kern_relu_bwd_cpu, kern_relu_bwd_set_cpu, n);
		float *inp = rnd(n, -1, 1), *dout = rnd(n, -1, 1), *r = zeros(n), *c = zeros(n);
		kern_relu_bwd_set_ref(r, inp, dout, n);
		kern_relu_bwd_set_cpu(c, inp, dout, n);
		char what[64];
		snprintf(what, sizeof what, "set cpu vs ref n=%ld", n);
		check_close(what, c, r, n, 0, 0);
		free(inp), free(dout), free(r), free(c);
	}
}

static void test_cpu_deterministic(void)
{
	const long n = 100003;
	float *inp = rnd(n, -1, 1), *dout = rnd(n, -1, 1);
	float *a = zeros(n), *b = zeros(n);
	kern_relu_fwd_cpu(a, inp, n);
	kern_relu_fwd_cpu(b, inp, n);
	CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
	memset(a, 0, sizeof(float) * (size_t)n);
	memset(b, 0, sizeof(float) * (size_t)n);
	kern_relu_bwd_cpu(a, inp, dout, n);
	kern_relu_bwd_cpu(b, inp, dout, n);
	CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
	free(inp), free(dout), free(a), free(b);
}

int main(void)
{
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_known_values);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_bwd_set);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
