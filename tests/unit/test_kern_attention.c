/* tests/unit/test_kern_attention.c - kernels/attention_cpu.c: the reference
 * backward against finite differences, the CPU version against the reference
 * on odd and tiled shapes, accumulation into dqkv, the overwriting _set
 * backward, determinism, causality. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/attention.h"
#include "kernels/blas.h"
#include "kernels/parallel.h"

struct at {
	int b, t, c, nh;
	float *qkv, *out, *preatt, *att, *dout, *dqkv, *dpreatt, *datt;
};

static float *fvec(long n)
{
	float *p = calloc((size_t)n, sizeof(float));
	if (!p)
		abort();
	return p;
}

static void at_init(struct at *s, int b, int t, int c, int nh, uint64_t seed)
{
	uint64_t rng = seed;
	long btc = (long)b * t * c, tt = (long)b * nh * t * t;
	*s = (struct at){ .b = b, .t = t, .c = c, .nh = nh };
	s->qkv = fvec(3 * btc);
	s->dqkv = fvec(3 * btc);
	s->out = fvec(btc);
	s->dout = fvec(btc);
	s->preatt = fvec(tt);
	s->att = fvec(tt);
	s->dpreatt = fvec(tt);
	s->datt = fvec(tt);
	/* q, k of this size give scores of a few units: peaked but not one-hot */
	check_fill(s->qkv, 3 * btc, -1.5f, 1.5f, &rng);
	check_fill(s->dout, btc, -1, 1, &rng);
	/* outputs and scratch start as NaN: a kernel that reads them before
	 * writing them (e.g. a GEMM with beta 1) poisons its results */
	for (long i = 0; i < tt; i++)
		s->preatt[i] = s->att[i] = s->dpreatt[i] = s->datt[i] = NAN;
	for (long i = 0; i < btc; i++)
		s->out[i] = NAN;
}

static void at_free(struct at *s)
{
	free(s->qkv);
	free(s->dqkv);
	free(s->out);
	free(s->dout);
	free(s->preatt);
	free(s->att);
	free(s->dpreatt);
	free(s->datt);
}

static void run_fwd(struct at *s, int cpu)
{
	(cpu ? kern_attention_fwd_cpu : kern_attention_fwd_ref)(s->out, s->preatt, s->att,
		s->qkv, s->b, s->t, s->c, s->nh);
}

static void run_bwd(struct at *s, int cpu)
{
	(cpu ? kern_attention_bwd_cpu : kern_attention_bwd_ref)(s->dqkv, s->dpreatt, s->datt,
		s->dout, s->qkv, s->att, s->b, s->t, s->c, s->nh);
}

/* loss = sum(out * dout) */
static double at_loss(void *ctx)
{
	struct at *s = ctx;
	run_fwd(s, 0);
	double l = 0;
	for (long i = 0; i < (long)s->b * s->t * s->c; i++)
		l += (double)s->out[i] * s->dout[i];
	return l;
}

static void test_ref_grad(void)
{
	struct at s;
	at_init(&s, 2, 5, 6, 2, 13);
	run_fwd(&s, 0);
	run_bwd(&s, 0);
	/* every element of dqkv (180). eps 1e-2: the float-rounded outputs put
	 * ~3e-5 of noise in the quotient, the O(eps^2) truncation ~1e-5; 3e-5 seen */
	check_grad("dqkv", s.qkv, 180, s.dqkv, at_loss, &s, 1e-2, 2e-4, 2e-3, 1000);
	at_free(&s);
}

static int upper_zero(const float *att, int pairs, int t)
{
	for (long p = 0; p < pairs; p++)
		for (int i = 0; i < t; i++)
			for (int j = i + 1; j < t; j++)
				if (att[(p * t + i) * t + j] != 0)
					return 0;
	return 1;
}

static void test_cpu_matches_ref(void)
{
	/* b, t, c, nh: t = 1; t = 7 with hs = 4 and hs = 10; t = 65 and 130 span
	 * two and three 64-row tiles with a partial last one; b * nh = 8 items */
	static const int shapes[][4] = {
		{ 1, 1, 4, 1 }, { 2, 7, 12, 3 }, { 1, 7, 10, 1 },
		{ 2, 65, 24, 2 }, { 1, 130, 36, 3 }, { 2, 192, 96, 4 },
	};
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int b = shapes[k][0], t = shapes[k][1], c = shapes[k][2], nh = shapes[k][3];
		long btc = (long)b * t * c, tt = (long)b * nh * t * t;
		struct at r, g;
		at_init(&r, b, t, c, nh, 70 + k);
		at_init(&g, b, t, c, nh, 70 + k);
		run_fwd(&r, 0);
		run_fwd(&g, 1);
		/* fp32 GEMMs of <= 192 terms and the own exp against double: ~1e-6 */
		CHECK_MSG(check_close("att", g.att, r.att, tt, 1e-6, 1e-4), "shape %zu", k);
		CHECK_MSG(check_close("out", g.out, r.out, btc, 1e-5, 1e-4), "shape %zu", k);
		CHECK_MSG(upper_zero(g.att, b * nh, t), "shape %zu: att above the diagonal", k);
		/* both backwards from the reference's att */
		memcpy(g.att, r.att, sizeof(float) * tt);
		run_bwd(&r, 0);
		run_bwd(&g, 1);
		CHECK_MSG(check_close("dqkv", g.dqkv, r.dqkv, 3 * btc, 2e-5, 1e-4), "shape %zu", k);
		at_free(&r);
		at_free(&g);
	}
}

static void test_bwd_accumulates(void)
{
	for (int cpu = 0; cpu < 2; cpu++) {
		struct at s;
		at_init(&s, 2, 70, 24, 3, 5);
		long n = 3L * 2 * 70 * 24;
		run_fwd(&s, 0);
		run_bwd(&s, cpu);
		float *want = fvec(n);
		memcpy(want, s.dqkv, sizeof(float) * n);
		uint64_t rng = 12;
		check_fill(s.dqkv, n, -1, 1, &rng);
		for (long i = 0; i < n; i++)
			want[i] += s.dqkv[i];
		run_bwd(&s, cpu);
		/* BLAS may add into C in several k-blocks: a few ulp, not one */
		CHECK_MSG(check_close("dqkv", s.dqkv, want, n, 1e-6, 1e-5), "cpu %d", cpu);
		free(want);
		at_free(&s);
	}
}

/* The _set backward on a dqkv full of NaN: the reference's equals the adding
 * reference on zeros exactly; the CPU version matches the reference as in
 * test_cpu_matches_ref (every element is written, or a NaN would remain)
 * and the adding CPU version on zeros within a few ulp (BLAS with beta 0
 * rather than 1). */
static void test_bwd_set(void)
{
	static const int shapes[][4] = { { 1, 1, 4, 1 }, { 2, 7, 12, 3 }, { 1, 130, 36, 3 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		int b = shapes[k][0], t = shapes[k][1], c = shapes[k][2], nh = shapes[k][3];
		long n = 3L * b * t * c, tt = (long)b * nh * t * t;
		struct at a, s;
		at_init(&a, b, t, c, nh, 90 + k);
		at_init(&s, b, t, c, nh, 90 + k);
		run_fwd(&a, 0);
		memcpy(s.att, a.att, sizeof(float) * tt);
		float *ref = fvec(n);
		for (int cpu = 0; cpu < 2; cpu++) {
			memset(a.dqkv, 0, sizeof(float) * n);
			run_bwd(&a, cpu);
			for (long i = 0; i < n; i++)
				s.dqkv[i] = NAN;
			(cpu ? kern_attention_bwd_set_cpu : kern_attention_bwd_set_ref)(s.dqkv, s.dpreatt,
				s.datt, s.dout, s.qkv, s.att, b, t, c, nh);
			if (!cpu) {
				CHECK_MSG(check_close("set ref dqkv", s.dqkv, a.dqkv, n, 0, 0), "shape %zu", k);
				memcpy(ref, s.dqkv, sizeof(float) * n);
			} else {
				CHECK_MSG(check_close("set cpu dqkv", s.dqkv, a.dqkv, n, 1e-6, 1e-5),
				          "shape %zu", k);
				CHECK_MSG(check_close("set cpu vs ref dqkv", s.dqkv, ref, n, 2e-5, 1e-4),
				          "shape %zu", k);
			}
		}
		free(ref);
		at_free(&a);
		at_free(&s);
	}
}

static void test_cpu_deterministic(void)
{
	struct at a, b;
	at_init(&a, 3, 150, 48, 4, 33);
	at_init(&b, 3, 150, 48, 4, 33);
	long btc = 3L * 150 * 48, tt = 3L * 4 * 150 * 150;
	run_fwd(&a, 1);
	run_fwd(&b, 1);
	run_bwd(&a, 1);
	run_bwd(&b, 1);
	CHECK(memcmp(a.out, b.out, sizeof(float) * btc) == 0);
	CHECK(memcmp(a.att, b.att, sizeof(float) * tt) == 0);
	CHECK(memcmp(a.dqkv, b.dqkv, sizeof(float) * 3 * btc) == 0);
	at_free(&a);
	at_free(&b);
}

static void test_causal(void)
{
	/* Changing token f's q, k and v (all heads, batch 0) must leave every
	 * earlier position's output bit-identical, in the same tile (f = 40) and
	 * in a later one (f = 66), and the other sequence entirely. */
	enum { B = 2, T = 70, C = 24, NH = 2 };
	static const int future[] = { 40, 66 };
	for (int cpu = 0; cpu < 2; cpu++)
		for (size_t k = 0; k < sizeof future / sizeof future[0]; k++) {
			int f = future[k];
			struct at a, b;
			at_init(&a, B, T, C, NH, 44);
			at_init(&b, B, T, C, NH, 44);
			uint64_t rng = 99;
			check_fill(b.qkv + (long)f * 3 * C, 3 * C, -3, 3, &rng);
			run_fwd(&a, cpu);
			run_fwd(&b, cpu);
			CHECK_MSG(memcmp(a.out, b.out, sizeof(float) * f * C) == 0, "cpu %d f %d", cpu, f);
			CHECK_MSG(memcmp(a.out + (long)T * C, b.out + (long)T * C,
			                 sizeof(float) * T * C) == 0, "cpu %d f %d: batch 1", cpu, f);
			/* and the change is seen from f on */
			CHECK_MSG(memcmp(a.out + (long)f * C, b.out + (long)f * C, sizeof(float) * C) != 0,
			          "cpu %d f %d", cpu, f);
			at_free(&a);
			at_free(&b);
		}
}

int main(void)
{
	char err[512];
	if (kern_blas_init(NULL, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	/* threads must actually split the work for the determinism case */
	if (kern_threads() < 2)
		kern_set_threads(2);
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_matches_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_bwd_set);
	CHECK_RUN(test_cpu_deterministic);
	CHECK_RUN(test_causal);
	return check_finish();
}
