/* tests/unit/test_kern_layernorm.c - kernels/layernorm_cpu.c: the reference
 * backward against finite differences, the CPU version against the
 * reference, accumulation into gradients, the _set backward (dinp
 * overwritten, dweight and dbias still accumulated), and run-to-run
 * determinism. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/layernorm.h"
#include "kernels/parallel.h"

struct ln {
	int n, c;
	float *inp, *weight, *bias, *out, *mean, *rstd, *dout;
	float *dinp, *dweight, *dbias;
};

static float *fvec(long n)
{
	float *p = calloc((size_t)n, sizeof(float));
	if (!p)
		abort();
	return p;
}

/* Inputs off-centre (mean ~0.5) so the variance pass matters; weights near 1. */
static void ln_init(struct ln *s, int n, int c, uint64_t seed)
{
	uint64_t rng = seed;
	long nc = (long)n * c;
	s->n = n;
	s->c = c;
	s->inp = fvec(nc);
	s->out = fvec(nc);
	s->dout = fvec(nc);
	s->dinp = fvec(nc);
	s->weight = fvec(c);
	s->bias = fvec(c);
	s->dweight = fvec(c);
	s->dbias = fvec(c);
	s->mean = fvec(n);
	s->rstd = fvec(n);
	check_fill(s->inp, nc, -2, 3, &rng);
	check_fill(s->dout, nc, -1, 1, &rng);
	check_fill(s->weight, c, 0.5f, 1.5f, &rng);
	check_fill(s->bias, c, -0.5f, 0.5f, &rng);
}

static void ln_free(struct ln *s)
{
	free(s->inp);
	free(s->out);
	free(s->dout);
	free(s->dinp);
	free(s->weight);
	free(s->bias);
	free(s->dweight);
	free(s->dbias);
	free(s->mean);
	free(s->rstd);
}

static void zero_grads(struct ln *s)
{
	memset(s->dinp, 0, sizeof(float) * s->n * s->c);
	memset(s->dweight, 0, sizeof(float) * s->c);
	memset(s->dbias, 0, sizeof(float) * s->c);
}

static void run_bwd(struct ln *s, int cpu)
{
	(cpu ? kern_layernorm_bwd_cpu : kern_layernorm_bwd_ref)(s->dinp, s->dweight, s->dbias,
		s->dout, s->inp, s->weight, s->mean, s->rstd, s->n, s->c);
}

static void run_fwd(struct ln *s, int cpu)
{
	(cpu ? kern_layernorm_fwd_cpu : kern_layernorm_fwd_ref)(s->out, s->mean, s->rstd,
		s->inp, s->weight, s->bias, s->n, s->c);
}

/* loss = sum(out * dout): its gradient is the backward with dout as given */
static double ln_loss(void *ctx)
{
	struct ln *s = ctx;
	run_fwd(s, 0);
	double l = 0;
	for (long i = 0; i < (long)s->n * s->c; i++)
		l += (double)s->out[i] * s->dout[i];
	return l;
}

static void test_ref_grad(void)
{
	struct ln s;
	ln_init(&s, 3, 7, 11);
	run_fwd(&s, 0);
	zero_grads(&s);
	run_bwd(&s, 0);
	/* eps 1e-3: the float-rounded outputs add ~1e-7 noise to the loss, i.e.
	 * up to ~1e-4 to the difference quotient (7e-5 seen); gradients are O(1) */
	check_grad("dinp", s.inp, 21, s.dinp, ln_loss, &s, 1e-3, 3e-4, 2e-3, 100);
	check_grad("dweight", s.weight, 7, s.dweight, ln_loss, &s, 1e-3, 3e-4, 2e-3, 100);
	check_grad("dbias", s.bias, 7, s.dbias, ln_loss, &s, 1e-3, 3e-4, 2e-3, 100);
	ln_free(&s);
}

static void test_cpu_matches_ref(void)
{
	/* odd and even sizes, c = 1 (zero variance), several partial chunks (n = 300) */
	static const int shapes[][2] = { { 1, 7 }, { 3, 1 }, { 5, 33 }, { 17, 768 }, { 300, 77 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int n = shapes[k][0], c = shapes[k][1];
		struct ln r, g;
		ln_init(&r, n, c, 100 + k);
		ln_init(&g, n, c, 100 + k);
		run_fwd(&r, 0);
		run_fwd(&g, 1);
		/* fp32 two-pass statistics against double: a few ulp of O(1) values */
		CHECK_MSG(check_close("out", g.out, r.out, (long)n * c, 1e-5, 1e-5), "n %d c %d", n, c);
		CHECK_MSG(check_close("mean", g.mean, r.mean, n, 1e-6, 1e-5), "n %d c %d", n, c);
		CHECK_MSG(check_close("rstd", g.rstd, r.rstd, n, 0, 1e-5), "n %d c %d", n, c);
		/* both backwards from the reference's statistics */
		run_bwd(&r, 0);
		memcpy(g.mean, r.mean, sizeof(float) * n);
		memcpy(g.rstd, r.rstd, sizeof(float) * n);
		run_bwd(&g, 1);
		/* dinp: fp32 row means of O(1) terms; dweight/dbias: fp32 sums over n rows */
		CHECK_MSG(check_close("dinp", g.dinp, r.dinp, (long)n * c, 1e-5, 1e-4), "n %d c %d", n, c);
		CHECK_MSG(check_close("dweight", g.dweight, r.dweight, c, 1e-4, 1e-4), "n %d c %d", n, c);
		CHECK_MSG(check_close("dbias", g.dbias, r.dbias, c, 1e-4, 1e-4), "n %d c %d", n, c);
		ln_free(&r);
		ln_free(&g);
	}
}

static void test_bwd_accumulates(void)
{
	for (int cpu = 0; cpu < 2; cpu++) {
		struct ln s;
		ln_init(&s, 40, 19, 5);
		run_fwd(&s, 0);
		zero_grads(&s);
		run_bwd(&s, cpu);
		long nc = 40L * 19;
		float *g_inp = fvec(nc), *g_w = fvec(19), *g_b = fvec(19);
		memcpy(g_inp, s.dinp, sizeof(float) * nc);
		memcpy(g_w, s.dweight, sizeof(float) * 19);
		memcpy(g_b, s.dbias, sizeof(float) * 19);
		/* start from arbitrary gradients: the result must be start + gradient */
		uint64_t rng = 9;
		check_fill(s.dinp, nc, -1, 1, &rng);
		check_fill(s.dweight, 19, -1, 1, &rng);
		check_fill(s.dbias, 19, -1, 1, &rng);
		for (long i = 0; i < nc; i++)
			g_inp[i] += s.dinp[i];
		for (int j = 0; j < 19; j++) {
			g_w[j] += s.dweight[j];
			g_b[j] += s.dbias[j];
		}
		run_bwd(&s, cpu);
		CHECK_MSG(check_close("dinp", s.dinp, g_inp, nc, 1e-6, 1e-6), "cpu %d", cpu);
		CHECK_MSG(check_close("dweight", s.dweight, g_w, 19, 1e-5, 1e-6), "cpu %d", cpu);
		CHECK_MSG(check_close("dbias", s.dbias, g_b, 19, 1e-5, 1e-6), "cpu %d", cpu);
		free(g_inp);
		free(g_w);
		free(g_b);
		ln_free(&s);
	}
}

static void run_bwd_set(struct ln *s, int cpu)
{
	(cpu ? kern_layernorm_bwd_set_cpu : kern_layernorm_bwd_set_ref)(s->dinp, s->dweight,
		s->dbias, s->dout, s->inp, s->weight, s->mean, s->rstd, s->n, s->c);
}

/* The _set backward, dinp starting as NaN and dweight, dbias nonzero, gives
 * what the adding backward gives with dinp zeroed: exactly, since both run
 * the same arithmetic; _set_cpu against _set_ref as in test_cpu_matches_ref. */
static void test_bwd_set(void)
{
	static const int shapes[][2] = { { 1, 7 }, { 5, 33 }, { 300, 77 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int n = shapes[k][0], c = shapes[k][1];
		long nc = (long)n * c;
		float *r_inp = fvec(nc), *r_w = fvec(c), *r_b = fvec(c);
		for (int cpu = 0; cpu < 2; cpu++) {
			struct ln a, s;
			ln_init(&a, n, c, 200 + k);
			ln_init(&s, n, c, 200 + k);
			run_fwd(&a, 0);
			run_fwd(&s, 0);
			uint64_t rng = 4;
			check_fill(a.dweight, c, -1, 1, &rng);
			check_fill(a.dbias, c, -1, 1, &rng);
			memcpy(s.dweight, a.dweight, sizeof(float) * (size_t)c);
			memcpy(s.dbias, a.dbias, sizeof(float) * (size_t)c);
			for (long i = 0; i < nc; i++)
				s.dinp[i] = NAN;
			run_bwd(&a, cpu);
			run_bwd_set(&s, cpu);
			CHECK_MSG(check_close("set dinp", s.dinp, a.dinp, nc, 0, 0), "cpu %d n %d c %d",
			          cpu, n, c);
			CHECK_MSG(check_close("set dweight", s.dweight, a.dweight, c, 0, 0),
			          "cpu %d n %d c %d", cpu, n, c);
			CHECK_MSG(check_close("set dbias", s.dbias, a.dbias, c, 0, 0), "cpu %d n %d c %d",
			          cpu, n, c);
			if (!cpu) {
				memcpy(r_inp, s.dinp, sizeof(float) * (size_t)nc);
				memcpy(r_w, s.dweight, sizeof(float) * (size_t)c);
				memcpy(r_b, s.dbias, sizeof(float) * (size_t)c);
			} else {
				CHECK_MSG(check_close("set cpu dinp", s.dinp, r_inp, nc, 1e-5, 1e-4),
				          "n %d c %d", n, c);
				CHECK_MSG(check_close("set cpu dweight", s.dweight, r_w, c, 1e-4, 1e-4),
				          "n %d c %d", n, c);
				CHECK_MSG(check_close("set cpu dbias", s.dbias, r_b, c, 1e-4, 1e-4),
				          "n %d c %d", n, c);
			}
			ln_free(&a);
			ln_free(&s);
		}
		free(r_inp);
		free(r_w);
		free(r_b);
	}
}

static void test_cpu_deterministic(void)
{
	struct ln a, b;
	ln_init(&a, 1000, 96, 21);
	ln_init(&b, 1000, 96, 21);
	run_fwd(&a, 1);
	run_fwd(&b, 1);
	run_bwd(&a, 1);
	run_bwd(&b, 1);
	long nc = 1000L * 96;
	CHECK(memcmp(a.out, b.out, sizeof(float) * nc) == 0);
	CHECK(memcmp(a.rstd, b.rstd, sizeof(float) * 1000) == 0);
	CHECK(memcmp(a.dinp, b.dinp, sizeof(float) * nc) == 0);
	CHECK(memcmp(a.dweight, b.dweight, sizeof(float) * 96) == 0);
	CHECK(memcmp(a.dbias, b.dbias, sizeof(float) * 96) == 0);
	ln_free(&a);
	ln_free(&b);
}

int main(void)
{
	/* threads must actually split the work for the determinism case */
	if (kern_threads() < 2)
		kern_set_threads(2);
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_matches_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_bwd_set);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
