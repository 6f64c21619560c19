/* tests/unit/test_kern_softmax_xent.c - kernels/softmax_xent_cpu.c: the
 * reference backward against finite differences, the CPU version against the
 * reference (up to GPT-2's vocabulary), accumulation, the overwriting _set
 * backward, determinism, huge logits and ignored rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/parallel.h"
#include "kernels/softmax_xent.h"

struct sx {
	int n, v;
	float *logits, *losses, *lse, *dlogits;
	int *targets;
};

static float *fvec(long n)
{
	float *p = calloc((size_t)n, sizeof(float));
	if (!p)
		abort();
	return p;
}

/* Logits in [-4, 4]; targets random, every fifth row ignored (-1). */
static void sx_init(struct sx *s, int n, int v, uint64_t seed)
{
	uint64_t rng = seed;
	s->n = n;
	s->v = v;
	s->logits = fvec((long)n * v);
	s->dlogits = fvec((long)n * v);
	s->losses = fvec(n);
	s->lse = fvec(n);
	s->targets = malloc(sizeof(int) * (size_t)n);
	if (!s->targets)
		abort();
	check_fill(s->logits, (long)n * v, -4, 4, &rng);
	for (int i = 0; i < n; i++)
		s->targets[i] = i % 5 == 4 ? -1 : (int)(check_rand_u64(&rng) % (uint64_t)v);
}

static void sx_free(struct sx *s)
{
	free(s->logits);
	free(s->dlogits);
	free(s->losses);
	free(s->lse);
	free(s->targets);
}

static void run_fwd(struct sx *s, int cpu)
{
	(cpu ? kern_softmax_xent_fwd_cpu : kern_softmax_xent_fwd_ref)(s->losses, s->lse,
		s->logits, s->targets, s->n, s->v);
}

static void run_bwd(struct sx *s, float dloss, int cpu)
{
	(cpu ? kern_softmax_xent_bwd_cpu : kern_softmax_xent_bwd_ref)(s->dlogits, dloss,
		s->logits, s->lse, s->targets, s->n, s->v);
}

static const float DLOSS = 0.7f;

static double sx_loss(void *ctx)
{
	struct sx *s = ctx;
	run_fwd(s, 0);
	double l = 0;
	for (int i = 0; i < s->n; i++)
		l += s->losses[i];
	return DLOSS * l;
}

static void test_ref_grad(void)
{
	struct sx s;
	sx_init(&s, 5, 9, 3); /* row 4 ignored */
	run_fwd(&s, 0);
	run_bwd(&s, DLOSS, 0);
	/* eps 1e-2: the float-rounded losses (<= 2.4e-7 each) put <= 2.5e-5 of
	 * noise in the quotient, the O(eps^2) truncation about 1e-5; 1.2e-5 seen,
	 * on gradients of 1e-3 to 0.7 */
	check_grad("dlogits", s.logits, 45, s.dlogits, sx_loss, &s, 1e-2, 5e-5, 1e-3, 100);
	sx_free(&s);
}

static void test_cpu_matches_ref(void)
{
	/* v = 1 (loss 0), odd sizes, GPT-2's vocabulary, and 64 rows over the threads */
	static const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 100 }, { 4, 50257 }, { 64, 1000 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int n = shapes[k][0], v = shapes[k][1];
		struct sx r, g;
		sx_init(&r, n, v, 40 + k);
		sx_init(&g, n, v, 40 + k);
		run_fwd(&r, 0);
		run_fwd(&g, 1);
		/* losses ~ log(v) <= 15: fp32 sums of the own exp (2 ulp) against double */
		CHECK_MSG(check_close("losses", g.losses, r.losses, n, 1e-5, 1e-5), "n %d v %d", n, v);
		CHECK_MSG(check_close("lse", g.lse, r.lse, n, 1e-5, 1e-5), "n %d v %d", n, v);
		run_bwd(&r, 0.25f, 0);
		run_bwd(&g, 0.25f, 1);
		/* probabilities from the same lse: a few ulp of each; -dloss at the target */
		CHECK_MSG(check_close("dlogits", g.dlogits, r.dlogits, (long)n * v, 1e-8, 1e-5),
		          "n %d v %d", n, v);
		sx_free(&r);
		sx_free(&g);
	}
}

static void test_bwd_accumulates(void)
{
	for (int cpu = 0; cpu < 2; cpu++) {
		struct sx s;
		sx_init(&s, 7, 33, 8);
		long nv = 7L * 33;
		run_fwd(&s, 0);
		run_bwd(&s, 1.0f, cpu);
		float *want = fvec(nv);
		memcpy(want, s.dlogits, sizeof(float) * nv);
		uint64_t rng = 2;
		check_fill(s.dlogits, nv, -1, 1, &rng);
		for (long i = 0; i < nv; i++)
			want[i] += s.dlogits[i];
		run_bwd(&s, 1.0f, cpu);
		CHECK_MSG(check_close("dlogits", s.dlogits, want, nv, 1e-7, 1e-6), "cpu %d", cpu);
		free(want);
		sx_free(&s);
	}
}

/* The _set backward on a dlogits full of NaN gives what the adding one gives
 * on zeros (the same per-element expression: exactly), ignored rows 0
 * included; _set_cpu against _set_ref as in test_cpu_matches_ref. */
static void test_bwd_set(void)
{
	static const int shapes[][2] = { { 1, 1 }, { 5, 100 }, { 64, 1000 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int n = shapes[k][0], v = shapes[k][1];
		long nv = (long)n * v;
		struct sx s;
		sx_init(&s, n, v, 60 + k);
		run_fwd(&s, 0);
		float *want = fvec(nv), *ref = fvec(nv);
		for (int cpu = 0; cpu < 2; cpu++) {
			memset(s.dlogits, 0, sizeof(float) * (size_t)nv);
			run_bwd(&s, 0.3f, cpu);
			memcpy(want, s.dlogits, sizeof(float) * (size_t)nv);
			for (long i = 0; i < nv; i++)
				s.dlogits[i] = NAN;
			(cpu ? kern_softmax_xent_bwd_set_cpu : kern_softmax_xent_bwd_set_ref)(s.dlogits,
				0.3f, s.logits, s.lse, s.targets, n, v);
			CHECK_MSG(check_close("set dlogits", s.dlogits, want, nv, 0, 0), "cpu %d n %d v %d",
			          cpu, n, v);
			if (!cpu)
				memcpy(ref, s.dlogits, sizeof(float) * (size_t)nv);
		}
		CHECK_MSG(check_close("set cpu vs ref", s.dlogits, ref, nv, 1e-8, 1e-5), "n %d v %d", n,
		          v);
		free(want);
		free(ref);
		sx_free(&s);
	}
}

static void test_cpu_deterministic(void)
{
	struct sx a, b;
	sx_init(&a, 64, 5003, 17);
	sx_init(&b, 64, 5003, 17);
	run_fwd(&a, 1);
	run_fwd(&b, 1);
	run_bwd(&a, 0.1f, 1);
	run_bwd(&b, 0.1f, 1);
	CHECK(memcmp(a.losses, b.losses, sizeof(float) * 64) == 0);
	CHECK(memcmp(a.lse, b.lse, sizeof(float) * 64) == 0);
	CHECK(memcmp(a.dlogits, b.dlogits, sizeof(float) * 64 * 5003) == 0);
	sx_free(&a);
	sx_free(&b);
}

static int all_finite(const float *x, long n)
{
	for (long i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

static void test_huge_logits(void)
{
	/* Row 0: 1e4 + k/4, row 1: the same without the 1e4 (every value exact in
	 * float), so loss and probabilities must agree. Row 2: one logit 1e4, one
	 * -1e4 (the target), the rest 0: loss exactly 2e4. */
	enum { V = 1000 };
	for (int cpu = 0; cpu < 2; cpu++) {
		struct sx s;
		sx_init(&s, 3, V, 1);
		for (int j = 0; j < V; j++) {
			float k = (float)((j * 37) % 41) / 4;
			s.logits[j] = 1e4f + k;
			s.logits[V + j] = k;
			s.logits[2 * V + j] = 0;
		}
		s.logits[2 * V + 10] = 1e4f;
		s.logits[2 * V + 20] = -1e4f;
		s.targets[0] = s.targets[1] = 123;
		s.targets[2] = 20;
		run_fwd(&s, cpu);
		run_bwd(&s, 1.0f, cpu);
		CHECK_MSG(all_finite(s.losses, 3) && all_finite(s.lse, 3), "cpu %d", cpu);
		CHECK_MSG(all_finite(s.dlogits, 3L * V), "cpu %d", cpu);
		/* 1e4 in float has an ulp of 1e-3: lse and loss carry that much error */
		CHECK_MSG(fabsf(s.losses[0] - s.losses[1]) < 2e-3f, "cpu %d: loss %g vs %g", cpu,
		          s.losses[0], s.losses[1]);
		CHECK_MSG(check_close("probabilities", s.dlogits, s.dlogits + V, V, 1e-7, 5e-3),
		          "cpu %d", cpu);
		CHECK_MSG(s.losses[2] == 2e4f, "cpu %d: loss %g", cpu, s.losses[2]);
		CHECK_MSG(s.dlogits[2 * V + 10] == 1 && s.dlogits[2 * V + 20] == -1 &&
		          s.dlogits[2 * V] == 0, "cpu %d", cpu);
		sx_free(&s);
	}
}

static void test_ignored_rows(void)
{
	enum { N = 4, V = 50 };
	for (int cpu = 0; cpu < 2; cpu++) {
		struct sx s;
		sx_init(&s, N, V, 6);
		s.targets[0] = -1;
		s.targets[1] = 7;
		s.targets[2] = -100;
		s.targets[3] = -1;
		uint64_t rng = 4;
		check_fill(s.dlogits, (long)N * V, -1, 1, &rng);
		float *before = fvec((long)N * V);
		memcpy(before, s.dlogits, sizeof(float) * N * V);
		run_fwd(&s, cpu);
		run_bwd(&s, 1.0f, cpu);
		CHECK_MSG(s.losses[0] == 0 && s.losses[2] == 0 && s.losses[3] == 0, "cpu %d", cpu);
		CHECK_MSG(s.losses[1] > 0, "cpu %d", cpu);
		/* ignored rows' gradients untouched, the kept row's changed */
		CHECK_MSG(memcmp(before, s.dlogits, sizeof(float) * V) == 0, "cpu %d", cpu);
		CHECK_MSG(memcmp(before + 2 * V, s.dlogits + 2 * V, sizeof(float) * 2 * V) == 0,
		          "cpu %d", cpu);
		CHECK_MSG(memcmp(before + V, s.dlogits + V, sizeof(float) * V) != 0, "cpu %d", cpu);
		free(before);
		sx_free(&s);
	}
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
	CHECK_RUN(test_huge_logits);
	CHECK_RUN(test_ignored_rows);
	return check_finish();
}
