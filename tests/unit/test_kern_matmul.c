/* tests/unit/test_kern_matmul.c - kernels/matmul_cpu.c: the reference's
 * gradients against finite differences, the BLAS version against the
 * reference, accumulation into the gradients, the _set backward (dinp
 * overwritten, dweight and dbias still accumulated), and run-to-run
 * determinism.
 *
 * Tolerances (inputs uniform in [-1, 1]):
 *   finite differences: eps 1e-2 (the loss is linear in each input, so there
 *     is no truncation error and a large eps keeps fp32 rounding of out small),
 *     atol 1e-4, rtol 1e-3.
 *   _cpu vs _ref: atol = rtol = 2e-7 * (k + 1) for a sum of k products
 *     (fp32 GEMM against a double-accumulated reference). Each fp32 addition
 *     rounds a partial sum of size ~sqrt(k)/3, and k such errors add up like
 *     a random walk, so the error grows like k * eps; the bound is about 4x
 *     the largest error seen. k = c for out, oc for dinp, n for dweight and
 *     dbias.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/blas.h"
#include "kernels/matmul.h"

static uint64_t rng = 42;

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

static float *copy(const float *x, long n)
{
	float *y = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	memcpy(y, x, sizeof(float) * (size_t)n);
	return y;
}

static double tol(long k)
{
	return 2e-7 * ((double)k + 1);
}

/* ---- gradient check ------------------------------------------------------- */

struct mm_ctx {
	float *out, *inp, *weight, *bias, *r;
	int n, c, oc;
};

/* loss = sum(out * r), so dloss/dout = r */
static double mm_loss(void *p)
{
	struct mm_ctx *x = p;
	kern_matmul_fwd_ref(x->out, x->inp, x->weight, x->bias, x->n, x->c, x->oc);
	double s = 0;
	for (long i = 0; i < (long)x->n * x->oc; i++)
		s += (double)x->out[i] * x->r[i];
	return s;
}

static void test_ref_grad(void)
{
	struct mm_ctx x = { .n = 5, .c = 7, .oc = 3 };
	long ni = (long)x.n * x.c, nw = (long)x.oc * x.c, no = (long)x.n * x.oc;
	x.inp = rnd(ni);
	x.weight = rnd(nw);
	x.bias = rnd(x.oc);
	x.r = rnd(no);
	x.out = zeros(no);
	float *dinp = zeros(ni), *dw = zeros(nw), *db = zeros(x.oc);
	kern_matmul_bwd_ref(dinp, dw, db, x.r, x.inp, x.weight, x.n, x.c, x.oc);
	check_grad("dinp", x.inp, ni, dinp, mm_loss, &x, 1e-2, 1e-4, 1e-3, 100);
	check_grad("dweight", x.weight, nw, dw, mm_loss, &x, 1e-2, 1e-4, 1e-3, 100);
	check_grad("dbias", x.bias, x.oc, db, mm_loss, &x, 1e-2, 1e-4, 1e-3, 100);
	free(x.inp), free(x.weight), free(x.bias), free(x.r), free(x.out);
	free(dinp), free(dw), free(db);
}

/* ---- _cpu against _ref ------------------------------------------------------ */

static const int shapes[][3] = {
	/* n, c, oc */
	{ 1, 1, 1 }, { 1, 7, 33 }, { 7, 33, 1 }, { 33, 257, 7 }, { 4, 0, 5 },
	{ 257, 33, 129 },  /* n * oc = 33153 crosses the threading threshold */
	{ 300, 64, 300 },
};

/* variant 0: bias, dinp and dbias given; 1: all three NULL */
static void compare_one(int n, int c, int oc, int variant)
{
	long ni = (long)n * c, nw = (long)oc * c, no = (long)n * oc;
	float *inp = rnd(ni), *w = rnd(nw), *bias = variant ? NULL : rnd(oc), *dout = rnd(no);
	float *out_ref = zeros(no), *out_cpu = rnd(no); /* _cpu must overwrite garbage */
	char what[96];

	kern_matmul_fwd_ref(out_ref, inp, w, bias, n, c, oc);
	kern_matmul_fwd_cpu(out_cpu, inp, w, bias, n, c, oc);
	snprintf(what, sizeof what, "out n=%d c=%d oc=%d v=%d", n, c, oc, variant);
	check_close(what, out_cpu, out_ref, no, tol(c), tol(c));

	/* backward from nonzero gradients, which it must add to */
	float *dinp0 = rnd(ni), *dw0 = rnd(nw), *db0 = rnd(oc);
	float *dinp_r = copy(dinp0, ni), *dw_r = copy(dw0, nw), *db_r = copy(db0, oc);
	float *dinp_c = copy(dinp0, ni), *dw_c = copy(dw0, nw), *db_c = copy(db0, oc);
	kern_matmul_bwd_ref(variant ? NULL : dinp_r, dw_r, variant ? NULL : db_r, dout, inp, w,
	                    n, c, oc);
	kern_matmul_bwd_cpu(variant ? NULL : dinp_c, dw_c, variant ? NULL : db_c, dout, inp, w,
	                    n, c, oc);
	snprintf(what, sizeof what, "dinp n=%d c=%d oc=%d v=%d", n, c, oc, variant);
	check_close(what, dinp_c, dinp_r, ni, tol(oc), tol(oc));
	snprintf(what, sizeof what, "dweight n=%d c=%d oc=%d v=%d", n, c, oc, variant);
	check_close(what, dw_c, dw_r, nw, tol(n), tol(n));
	snprintf(what, sizeof what, "dbias n=%d c=%d oc=%d v=%d", n, c, oc, variant);
	check_close(what, db_c, db_r, oc, tol(n), tol(n));
	if (variant) {
		/* NULL outputs: the caller's arrays are not touched */
		CHECK(memcmp(dinp_c, dinp0, sizeof(float) * (size_t)ni) == 0);
		CHECK(memcmp(db_c, db0, sizeof(float) * (size_t)oc) == 0);
	} else if (no > 0 && c > 0) {
		/* the initial values are really in there */
		CHECK(memcmp(dinp_c, dinp0, sizeof(float) * (size_t)ni) != 0);
	}

	free(inp), free(w), free(bias), free(dout), free(out_ref), free(out_cpu);
	free(dinp0), free(dw0), free(db0), free(dinp_r), free(dw_r), free(db_r);
	free(dinp_c), free(dw_c), free(db_c);
}

static void test_cpu_vs_ref(void)
{
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int v = 0; v < 2; v++)
			compare_one(shapes[s][0], shapes[s][1], shapes[s][2], v);
}

/* ---- backward accumulates ----------------------------------------------- */

typedef void (*bwd_fn)(float *, float *, float *, const float *, const float *,
                       const float *, int, int, int);

static void twice_is_double(const char *name, bwd_fn bwd, int n, int c, int oc)
{
	long ni = (long)n * c, nw = (long)oc * c, no = (long)n * oc;
	float *inp = rnd(ni), *w = rnd(nw), *dout = rnd(no);
	float *g1[3] = { zeros(ni), zeros(nw), zeros(oc) };
	float *g2[3] = { zeros(ni), zeros(nw), zeros(oc) };
	long len[3] = { ni, nw, oc }, k[3] = { oc, n, n };
	const char *names[3] = { "dinp", "dweight", "dbias" };
	bwd(g1[0], g1[1], g1[2], dout, inp, w, n, c, oc);
	bwd(g2[0], g2[1], g2[2], dout, inp, w, n, c, oc);
	bwd(g2[0], g2[1], g2[2], dout, inp, w, n, c, oc);
	for (int t = 0; t < 3; t++) {
		for (long i = 0; i < len[t]; i++)
			g1[t][i] *= 2;
		char what[64];
		snprintf(what, sizeof what, "%s %s twice", name, names[t]);
		check_close(what, g2[t], g1[t], len[t], 2 * tol(k[t]), 2 * tol(k[t]));
	}
	free(inp), free(w), free(dout);
	for (int t = 0; t < 3; t++)
		free(g1[t]), free(g2[t]);
}

static void test_bwd_accumulates(void)
{
	twice_is_double("ref", kern_matmul_bwd_ref, 9, 17, 13);
	twice_is_double("cpu", kern_matmul_bwd_cpu, 9, 17, 13);
	twice_is_double("cpu", kern_matmul_bwd_cpu, 257, 33, 129);
}

/* ---- _set backward: dinp overwritten ----------------------------------- */

static float *nans(long n)
{
	float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	for (long i = 0; i < n; i++)
		x[i] = NAN;
	return x;
}

/* dinp starts as NaN and must come out as the adding backward's result on
 * zeros; dweight and dbias start nonzero and must still be added into. */
static void set_one(int n, int c, int oc)
{
	long ni = (long)n * c, nw = (long)oc * c, no = (long)n * oc;
	float *inp = rnd(ni), *w = rnd(nw), *dout = rnd(no), *dw0 = rnd(nw), *db0 = rnd(oc);
	float *dinp_a = zeros(ni), *dw_a = copy(dw0, nw), *db_a = copy(db0, oc);
	float *dinp_r = nans(ni), *dw_r = copy(dw0, nw), *db_r = copy(db0, oc);
	float *dinp_c = nans(ni), *dw_c = copy(dw0, nw), *db_c = copy(db0, oc);
	char what[96];

	kern_matmul_bwd_ref(dinp_a, dw_a, db_a, dout, inp, w, n, c, oc);
	kern_matmul_bwd_set_ref(dinp_r, dw_r, db_r, dout, inp, w, n, c, oc);
	snprintf(what, sizeof what, "set ref dinp n=%d c=%d oc=%d", n, c, oc);
	check_close(what, dinp_r, dinp_a, ni, 0, 0);
	snprintf(what, sizeof what, "set ref dweight n=%d c=%d oc=%d", n, c, oc);
	check_close(what, dw_r, dw_a, nw, 0, 0);

	kern_matmul_bwd_set_cpu(dinp_c, dw_c, db_c, dout, inp, w, n, c, oc);
	snprintf(what, sizeof what, "set cpu dinp n=%d c=%d oc=%d", n, c, oc);
	check_close(what, dinp_c, dinp_r, ni, tol(oc), tol(oc));
	snprintf(what, sizeof what, "set cpu dweight n=%d c=%d oc=%d", n, c, oc);
	check_close(what, dw_c, dw_r, nw, tol(n), tol(n));
	snprintf(what, sizeof what, "set cpu dbias n=%d c=%d oc=%d", n, c, oc);
	check_close(what, db_c, db_r, oc, tol(n), tol(n));

	free(inp), free(w), free(dout), free(dw0), free(db0);
	free(dinp_a), free(dw_a), free(db_a), free(dinp_r), free(dw_r), free(db_r);
	free(dinp_c), free(dw_c), free(db_c);
}

static void test_bwd_set(void)
{
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		set_one(shapes[s][0], shapes[s][1], shapes[s][2]);
	set_one(6, 5, 0);  /* an empty sum: dinp = 0 */
}

/* ---- determinism ------------------------------------------------------- */

static void test_cpu_deterministic(void)
{
	const int n = 257, c = 96, oc = 129;
	long ni = (long)n * c, nw = (long)oc * c, no = (long)n * oc;
	float *inp = rnd(ni), *w = rnd(nw), *bias = rnd(oc), *dout = rnd(no);
	float *out1 = zeros(no), *out2 = zeros(no);
	kern_matmul_fwd_cpu(out1, inp, w, bias, n, c, oc);
	kern_matmul_fwd_cpu(out2, inp, w, bias, n, c, oc);
	CHECK(memcmp(out1, out2, sizeof(float) * (size_t)no) == 0);

	float *a[3] = { zeros(ni), zeros(nw), zeros(oc) }, *b[3] = { zeros(ni), zeros(nw), zeros(oc) };
	kern_matmul_bwd_cpu(a[0], a[1], a[2], dout, inp, w, n, c, oc);
	kern_matmul_bwd_cpu(b[0], b[1], b[2], dout, inp, w, n, c, oc);
	CHECK(memcmp(a[0], b[0], sizeof(float) * (size_t)ni) == 0);
	CHECK(memcmp(a[1], b[1], sizeof(float) * (size_t)nw) == 0);
	CHECK(memcmp(a[2], b[2], sizeof(float) * (size_t)oc) == 0);

	/* the column sums equal the reference's exactly (same order, in double) */
	float *r[3] = { zeros(ni), zeros(nw), zeros(oc) };
	kern_matmul_bwd_ref(r[0], r[1], r[2], dout, inp, w, n, c, oc);
	CHECK(memcmp(a[2], r[2], sizeof(float) * (size_t)oc) == 0);

	free(inp), free(w), free(bias), free(dout), free(out1), free(out2);
	for (int t = 0; t < 3; t++)
		free(a[t]), free(b[t]), free(r[t]);
}

int main(void)
{
	char err[512];
	if (kern_blas_init(NULL, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_bwd_set);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
