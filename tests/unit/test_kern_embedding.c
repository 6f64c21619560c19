/* tests/unit/test_kern_embedding.c - kernels/embedding_cpu.c: the
 * reference's gradients against finite differences, the threaded version
 * against the reference, accumulation into dwte and dwpe, and determinism
 * (also across thread counts, which the channel split gives for free).
 *
 * Tolerances:
 *   finite differences: eps 1e-2; the op is linear, so only the fp32
 *     rounding of out counts, about ulp(out) / (2 eps) ~ 1e-5 for |out| < 2:
 *     atol 5e-5, rtol 1e-4.
 *   _cpu vs _ref: exact. The forward copies or adds the same values; the
 *     backward adds each position's gradient in the reference's order.
 *   backward twice vs 2 x once: atol = rtol = 1e-5. With tokens repeating,
 *     the second call adds onto partial sums, which rounds differently: a
 *     few ulp of sums of up to ~10 terms of size <= 1 (worst seen 1e-6).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/embedding.h"
#include "kernels/parallel.h"

static uint64_t rng = 5;

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

static int *tokens_new(long n, int vocab)
{
	int *t = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
	for (long i = 0; i < n; i++)
		t[i] = (int)(check_rand_u64(&rng) % (uint64_t)vocab);
	return t;
}

/* ---- gradient check ------------------------------------------------------- */

struct emb_ctx {
	float *out, *wte, *wpe, *r;
	int *tokens;
	int b, t, c;
};

/* loss = sum(out * r), so dloss/dout = r */
static double emb_loss(void *p)
{
	struct emb_ctx *x = p;
	kern_embedding_fwd_ref(x->out, x->tokens, x->wte, x->wpe, x->b, x->t, x->c);
	double s = 0;
	for (long i = 0; i < (long)x->b * x->t * x->c; i++)
		s += (double)x->out[i] * x->r[i];
	return s;
}

static void test_ref_grad(void)
{
	/* more positions than vocabulary rows, so tokens repeat */
	struct emb_ctx x = { .b = 2, .t = 5, .c = 3 };
	const int vocab = 4;
	long no = (long)x.b * x.t * x.c;
	x.tokens = tokens_new((long)x.b * x.t, vocab);
	x.wte = rnd((long)vocab * x.c);
	x.wpe = rnd((long)x.t * x.c);
	x.r = rnd(no);
	x.out = zeros(no);
	float *dwte = zeros((long)vocab * x.c), *dwpe = zeros((long)x.t * x.c);
	kern_embedding_bwd_ref(dwte, dwpe, x.r, x.tokens, x.b, x.t, x.c, vocab);
	check_grad("dwte", x.wte, (long)vocab * x.c, dwte, emb_loss, &x, 1e-2, 5e-5, 1e-4, 100);
	check_grad("dwpe", x.wpe, (long)x.t * x.c, dwpe, emb_loss, &x, 1e-2, 5e-5, 1e-4, 100);
	free(x.tokens), free(x.wte), free(x.wpe), free(x.r), free(x.out), free(dwte), free(dwpe);
}

/* ---- _cpu against _ref ------------------------------------------------------ */

static const int shapes[][4] = {
	/* b, t, c, vocab */
	{ 1, 1, 1, 1 }, { 2, 7, 33, 5 }, { 3, 33, 7, 257 }, { 1, 257, 1, 3 },
	{ 4, 64, 257, 50 },  /* b * t * c = 65792 crosses the threading threshold */
	{ 2, 40, 1000, 7 },  /* wide rows: every thread gets a slice */
};

/* variant 0: wpe and both gradients; 1: no wpe, no dwpe; 2: no dwte */
static void compare_one(int b, int t, int c, int vocab, int variant)
{
	long no = (long)b * t * c, nte = (long)vocab * c, npe = (long)t * c;
	int *tok = tokens_new((long)b * t, vocab);
	float *wte = rnd(nte), *wpe = variant == 1 ? NULL : rnd(npe), *dout = rnd(no);
	float *out_r = zeros(no), *out_c = rnd(no);
	char what[96];

	kern_embedding_fwd_ref(out_r, tok, wte, wpe, b, t, c);
	kern_embedding_fwd_cpu(out_c, tok, wte, wpe, b, t, c);
	snprintf(what, sizeof what, "out b=%d t=%d c=%d v=%d", b, t, c, variant);
	check_close(what, out_c, out_r, no, 0, 0);

	/* from nonzero gradients, which the backward must add to */
	float *dte0 = rnd(nte), *dpe0 = rnd(npe);
	float *dte_r = copy(dte0, nte), *dpe_r = copy(dpe0, npe);
	float *dte_c = copy(dte0, nte), *dpe_c = copy(dpe0, npe);
	float *te_r = variant == 2 ? NULL : dte_r, *te_c = variant == 2 ? NULL : dte_c;
	float *pe_r = variant == 1 ? NULL : dpe_r, *pe_c = variant == 1 ? NULL : dpe_c;
	kern_embedding_bwd_ref(te_r, pe_r, dout, tok, b, t, c, vocab);
	kern_embedding_bwd_cpu(te_c, pe_c, dout, tok, b, t, c, vocab);
	snprintf(what, sizeof what, "dwte b=%d t=%d c=%d v=%d", b, t, c, variant);
	check_close(what, dte_c, dte_r, nte, 0, 0);
	snprintf(what, sizeof what, "dwpe b=%d t=%d c=%d v=%d", b, t, c, variant);
	check_close(what, dpe_c, dpe_r, npe, 0, 0);
	if (variant == 1)
		CHECK(memcmp(dpe_c, dpe0, sizeof(float) * (size_t)npe) == 0);
	if (variant == 2)
		CHECK(memcmp(dte_c, dte0, sizeof(float) * (size_t)nte) == 0);

	free(tok), free(wte), free(wpe), free(dout), free(out_r), free(out_c);
	free(dte0), free(dpe0), free(dte_r), free(dpe_r), free(dte_c), free(dpe_c);
}

static void test_cpu_vs_ref(void)
{
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
		for (int v = 0; v < 3; v++)
			compare_one(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], v);
}

/* ---- backward accumulates ----------------------------------------------- */

typedef void (*bwd_fn)(float *, float *, const float *, const int *, int, int, int, int);

static void twice_is_double(const char *name, bwd_fn bwd, int b, int t, int c, int vocab)
{
	long no = (long)b * t * c, nte = (long)vocab * c, npe = (long)t * c;
	int *tok = tokens_new((long)b * t, vocab);
	float *dout = rnd(no);
	float *te1 = zeros(nte), *pe1 = zeros(npe), *te2 = zeros(nte), *pe2 = zeros(npe);
	bwd(te1, pe1, dout, tok, b, t, c, vocab);
	bwd(te2, pe2, dout, tok, b, t, c, vocab);
	bwd(te2, pe2, dout, tok, b, t, c, vocab);
	for (long i = 0; i < nte; i++)
		te1[i] *= 2;
	for (long i = 0; i < npe; i++)
		pe1[i] *= 2;
	char what[64];
	snprintf(what, sizeof what, "%s dwte twice", name);
	check_close(what, te2, te1, nte, 1e-5, 1e-5);
	snprintf(what, sizeof what, "%s dwpe twice", name);
	check_close(what, pe2, pe1, npe, 1e-5, 1e-5);
	free(tok), free(dout), free(te1), free(pe1), free(te2), free(pe2);
}

static void test_bwd_accumulates(void)
{
	twice_is_double("ref", kern_embedding_bwd_ref, 2, 7, 33, 5);
	twice_is_double("cpu", kern_embedding_bwd_cpu, 2, 7, 33, 5);
	twice_is_double("cpu threaded", kern_embedding_bwd_cpu, 4, 64, 257, 50);
}

/* ---- determinism ------------------------------------------------------- */

static void run_bwd(float *dwte, float *dwpe, const float *dout, const int *tok,
                    int b, int t, int c, int vocab)
{
	memset(dwte, 0, sizeof(float) * (size_t)vocab * c);
	memset(dwpe, 0, sizeof(float) * (size_t)t * c);
	kern_embedding_bwd_cpu(dwte, dwpe, dout, tok, b, t, c, vocab);
}

static void test_cpu_deterministic(void)
{
	const int b = 4, t = 64, c = 257, vocab = 50;
	long no = (long)b * t * c, nte = (long)vocab * c, npe = (long)t * c;
	int *tok = tokens_new((long)b * t, vocab);
	float *wte = rnd(nte), *wpe = rnd(npe), *dout = rnd(no);
	float *o1 = zeros(no), *o2 = zeros(no);
	kern_embedding_fwd_cpu(o1, tok, wte, wpe, b, t, c);
	kern_embedding_fwd_cpu(o2, tok, wte, wpe, b, t, c);
	CHECK(memcmp(o1, o2, sizeof(float) * (size_t)no) == 0);

	float *te1 = zeros(nte), *pe1 = zeros(npe), *te2 = zeros(nte), *pe2 = zeros(npe);
	run_bwd(te1, pe1, dout, tok, b, t, c, vocab);
	run_bwd(te2, pe2, dout, tok, b, t, c, vocab);
	CHECK(memcmp(te1, te2, sizeof(float) * (size_t)nte) == 0);
	CHECK(memcmp(pe1, pe2, sizeof(float) * (size_t)npe) == 0);

	/* and with another thread count */
	int threads = kern_threads();
	kern_set_threads(3);
	run_bwd(te2, pe2, dout, tok, b, t, c, vocab);
	kern_set_threads(threads);
	CHECK(memcmp(te1, te2, sizeof(float) * (size_t)nte) == 0);
	CHECK(memcmp(pe1, pe2, sizeof(float) * (size_t)npe) == 0);

	free(tok), free(wte), free(wpe), free(dout), free(o1), free(o2);
	free(te1), free(pe1), free(te2), free(pe2);
}

int main(void)
{
	CHECK_RUN(test_ref_grad);
	CHECK_RUN(test_cpu_vs_ref);
	CHECK_RUN(test_bwd_accumulates);
	CHECK_RUN(test_cpu_deterministic);
	return check_finish();
}
