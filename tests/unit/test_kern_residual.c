/* tests/unit/test_kern_residual.c - kernels/residual_cpu.c: the reference's
 * gradients against finite differences, the threaded version against the
 * reference, accumulation into da and db, and run-to-run determinism.
 *
 * Tolerances:
 *   finite differences: eps 1e-2; the op is linear, so only the fp32
 *     rounding of out counts, about ulp(out) / (2 eps) ~ 6e-6: atol 3e-5,
 *     rtol 1e-4.
 *   _cpu vs _ref: exact (the same additions).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/residual.h"

static uint64_t rng = 2;

static float *rnd(long n)
{
	float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	check_fill(x, n, -1, 1, &rng);
	return x;
}

static float *zeros(long n)
{
	return calloc((size_t)(n > 0 ? n : 1), sizeof(float));
}

struct res_ctx {
	float *out, *a, *b, *r;
	long n;
};

/* loss = sum(out * r), so dloss/dout = r */
static double res_loss(void *p)
{
	struct res_ctx *x = p;
	kern_residual_fwd_ref(x->out, x->a, x->b, x->n);
	double s = 0;
	for (long i = 0; i < x->n; i++)
		s += (double)x->out[i] * x->r[i];
	return s;
}

static void test_ref_grad(void)
{
	struct res_ctx x = { .n = 33 };
	x.a = rnd(x.n);
	x.b = rnd(x.n);
	x.r = rnd(x.n);
	x.out = zeros(x.n);
	float *da = zeros(x.n), *db = zeros(x.n);
	kern_residual_bwd_ref(da, db, x.r, x.n);
	check_grad("da", x.a, x.n, da, res_loss, &x, 1e-2, 3e-5, 1e-4, 64);
	check_grad("db", x.b, x.n, db, res_loss, &x, 1e-2, 3e-5, 1e-4, 64);
	free(x.a), free(x.b), free(x.r), free(x.out), free(da), free(db);
}

static const long sizes[] = { 1, 7, 33, 257, 40000 /* crosses the threading threshold */, 100003 };

static void test_cpu_vs_ref(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		long n = sizes[s];
		size_t bytes = sizeof(float) * (size_t)n;
		float *a = rnd(n), *b = rnd(n), *dout = rnd(n);
		float *out_r = zeros(n), *out_c = rnd(n);
		kern_residual_fwd_ref(out_r, a, b, n);
		kern_residual_fwd_cpu(out_c, a, b, n);
		char what[64];
		snprintf(what, sizeof what, "out n=%ld", n);
		check_close(what, out_c, out_r, n, 0, 0);

		float *da_r = rnd(n), *db_r = rnd(n), *da_c = malloc(bytes), *db_c = malloc(bytes);
		memcpy(da_c, da_r, bytes);
		memcpy(db_c, db_r, bytes);
		kern_residual_bwd_ref(da_r, db_r, dout, n);
		kern_residual_bwd_cpu(da_c, db_c, dout, n);
		snprintf(what, sizeof what, "da n=%ld", n);
		check_close(what, da_c, da_r, n, 0, 0);
		snprintf(what, sizeof what, "db n=%ld", n);
		check_close(what, db_c, db_r, n, 0, 0);

		/* in place: out aliases a */
		kern_residual_fwd_cpu(a, a, b, n);
		snprintf(what, sizeof what, "in place n=%ld", n);
		check_close(what, a, out_r, n, 0, 0);
		free(a), free(b), free(dout), free(out_r), free(out_c);
		free(da_r), free(db_r), free(da_c), free(db_c);
	}
}

typedef void (*bwd_fn)(float *, float *, const float *, long);

static void twice_is_double(const char *name, bwd_fn bwd, long n)
{
	float *dout = rnd(n), *a1 = zeros(n), *b1 = zeros(n), *a2 = zeros(n), *b2 = zeros(n);
	bwd(a1, b1, dout, n);
	bwd(a2, b2, dout, n);
	bwd(a2, b2, dout, n);
	for (long i = 0; i < n; i++)
		a1[i] *= 2, b1[i] *= 2;
	char what[64];
	snprintf(what, sizeof what, "%s da twice", name);
	check_close(what, a2, a1, n, 0, 0);
	snprintf(what, sizeof what, "%s db twice", name);
	check_close(what, b2, b1, n, 0, 0);
	free(dout), free(a1), free(b1), free(a2), free(b2);
}

static void test_bwd_accumulates(void)
{
	twice_is_double("ref", kern_residual_bwd_ref, 257);
	twice_is_double("cpu", kern_residual_bwd_cpu, 257);
	twice_is_double("cpu threaded", kern_residual_bwd_cpu, 100003);
}

static void test_cpu_deterministic(void)
{
	const long n = 100003;
	size_t bytes = sizeof(float) * (size_t)n;
	float *a = rnd(n), *b = rnd(n), *o1 = zeros(n), *o2 = zeros(n);
	kern_residual_fwd_cpu(o1, a, b, n);
	kern_residual_fwd_cpu(o2, a, b, n);
	CHECK(memcmp(o1, o2, bytes) == 0);
	float *da1 = zeros(n), *db1 = zeros(n), *da2 = zeros(n), *db2 = zeros(n);
	kern_residual_bwd_cpu(da1, db1, a, n);
	kern_residual_bwd_cpu(da2, db2, a, n);
	CHECK(memcmp(da1, da2, bytes) == 0 && memcmp(db1, db2, bytes) == 0);
	free(a), free(b), free(o1), free(o2), free(da1), free(db1), free(da2), free(db2);
}

int main(void)
{
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
