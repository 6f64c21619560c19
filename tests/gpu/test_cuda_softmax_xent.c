/* tests/gpu/test_cuda_softmax_xent.c - kernels/softmax_xent_cuda.cu against
 * the reference (softmax_xent_cpu.c): losses and lse, ignored rows (negative
 * targets), logits far from 0, GPT-2's vocabulary (50257); backward adding
 * into dlogits, the _set backward over NaN, accumulation (adding gives
 * exactly the initial values + what _set gives), determinism; the two in
 * one pass, the same bits as one after the other.
 *
 * Tolerances (want = _ref, exp and sums in double), those of the CPU version:
 *   losses, lse: 1e-5 + 1e-5 rel. The fp32 sum of v exps (per thread, then a
 *     fixed tree) errs by ~1e-6 relative, i.e. ~1e-6 absolute in lse; lse
 *     itself is rounded to fp32 (ulp 2e-6 at 20, 8e-6 at 70).
 *   dlogits: 1e-8 + 1e-5 rel, both sides from the same lse: p =
 *     2^(x log2(e) - lse log2(e)) (fast_exp2) errs by the rounding of
 *     lse log2(e) (2.6e-6 relative at lse 77, the far case below) and
 *     ex2.approx's 2 ulp.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"
#include "kernels/precision_cuda.h"
#include "kernels/softmax_xent.h"
#include "kernels/softmax_xent_cuda.h"

static uint64_t rng = 61;

struct shape {
	int n, v;
};

static const struct shape shapes[] = {
	{ 1, 1 }, { 3, 7 }, { 5, 33 }, { 33, 1000 }, { 17, 10 }, { 8, 50257 }, { 40, 50257 },
	{ 3, 100003 },
};

static int *rand_targets(int n, int v, int ignore_every)
{
	int *t = malloc(sizeof(int) * (size_t)n);
	for (int i = 0; i < n; i++) {
		t[i] = (int)(check_rand_u64(&rng) % (uint64_t)v);
		if (ignore_every && i % ignore_every == ignore_every - 1)
			t[i] = -1;
	}
	return t;
}

static void compare(int n, int v, float lo, float hi, int ignore_every)
{
	char what[128];
	long nv = (long)n * v;
	float *logits = host_rand(nv, lo, hi, &rng);
	int *targets = rand_targets(n, v, ignore_every);
	float *d_logits = dev_copy(logits, nv);
	int *d_targets = kern_cuda_dup(targets, sizeof(int) * (size_t)n);
	float *d_losses = dev_alloc(n), *d_lse = dev_alloc(n), *d_dl = dev_alloc(nv);

	float *losses = host_zeros(n), *lse = host_zeros(n);
	kern_softmax_xent_fwd_ref(losses, lse, logits, targets, n, v);
	kern_softmax_xent_fwd_cuda(d_losses, d_lse, d_logits, d_targets, n, v);
	float *glosses = dev_fetch(d_losses, n), *glse = dev_fetch(d_lse, n);
	snprintf(what, sizeof what, "losses n=%d v=%d x in [%g, %g]", n, v, lo, hi);
	check_close(what, glosses, losses, n, 1e-5, 1e-5);
	snprintf(what, sizeof what, "lse n=%d v=%d x in [%g, %g]", n, v, lo, hi);
	check_close(what, glse, lse, n, 1e-5, 1e-5);

	/* backward from the reference's lse */
	dev_put(d_lse, lse, n);
	const float dloss = 1.0f / (float)n;
	float *dl0 = host_rand(nv, -1e-3f, 1e-3f, &rng);
	float *dl = host_copy(dl0, nv);
	kern_softmax_xent_bwd_ref(dl, dloss, logits, lse, targets, n, v);
	dev_put(d_dl, dl0, nv);
	kern_softmax_xent_bwd_cuda(d_dl, dloss, d_logits, d_lse, d_targets, n, v);
	float *gdl = dev_fetch(d_dl, nv);
	snprintf(what, sizeof what, "dlogits n=%d v=%d", n, v);
	check_close(what, gdl, dl, nv, 1e-8, 1e-5);

	float *nan = host_nan(nv), *sdl = host_zeros(nv);
	kern_softmax_xent_bwd_set_ref(sdl, dloss, logits, lse, targets, n, v);
	dev_put(d_dl, nan, nv);
	kern_softmax_xent_bwd_set_cuda(d_dl, dloss, d_logits, d_lse, d_targets, n, v);
	float *gsdl = dev_fetch(d_dl, nv);
	snprintf(what, sizeof what, "dlogits set n=%d v=%d", n, v);
	check_close(what, gsdl, sdl, nv, 1e-8, 1e-5);

	for (long i = 0; i < nv; i++)
		gsdl[i] += dl0[i];
	snprintf(what, sizeof what, "adds into dlogits n=%d v=%d", n, v);
	check_same_bits(what, gdl, gsdl, nv);

	free(logits), free(targets), free(losses), free(lse), free(glosses), free(glse);
	free(dl0), free(dl), free(gdl), free(nan), free(sdl), free(gsdl);
	kern_cuda_free(d_logits), kern_cuda_free(d_targets), kern_cuda_free(d_losses);
	kern_cuda_free(d_lse), kern_cuda_free(d_dl);
}

static void test_vs_ref(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		compare(shapes[k].n, shapes[k].v, -8, 8, 0);
		compare(shapes[k].n, shapes[k].v, -8, 8, 3);
	}
	compare(16, 50257, 60, 70, 0);     /* far from 0: lse ~ 77 */
	compare(16, 50257, -1e-3f, 1e-3f, 5); /* nearly uniform */
}

static void test_deterministic(void)
{
	const int n = 64, v = 50257;
	long nv = (long)n * v;
	float *logits = host_rand(nv, -8, 8, &rng);
	int *targets = rand_targets(n, v, 7);
	float *d_logits = dev_copy(logits, nv);
	int *d_targets = kern_cuda_dup(targets, sizeof(int) * (size_t)n);
	float *d_losses = dev_alloc(n), *d_lse = dev_alloc(n), *d_dl = dev_alloc(nv);
	float *lse[2], *dl[2];
	for (int r = 0; r < 2; r++) {
		kern_softmax_xent_fwd_cuda(d_losses, d_lse, d_logits, d_targets, n, v);
		kern_cuda_zero(d_dl, sizeof(float) * (size_t)nv);
		kern_softmax_xent_bwd_cuda(d_dl, 0.5f, d_logits, d_lse, d_targets, n, v);
		lse[r] = dev_fetch(d_lse, n);
		dl[r] = dev_fetch(d_dl, nv);
	}
	check_same_bits("lse", lse[0], lse[1], n);
	check_same_bits("dlogits", dl[0], dl[1], nv);
	for (int r = 0; r < 2; r++)
		free(lse[r]), free(dl[r]);
	free(logits), free(targets);
	kern_cuda_free(d_logits), kern_cuda_free(d_targets), kern_cuda_free(d_losses);
	kern_cuda_free(d_lse), kern_cuda_free(d_dl);
}

/* the scan trn_model_score runs over a row of logits */
static int scan_best(const float *row, int v)
{
	int best = 0;
	for (int j = 1; j < v; j++)
		if (row[j] > row[best])
			best = j;
	return best;
}

/* kern_argmax_rows_cuda: the scan's index on random rows, on rows with
 * repeated maxima (coarse values), and on NaNs in and out of column 0. */
static void test_argmax(void)
{
	const int shapes_v[] = { 1, 7, 10, 513, 50257 };
	for (size_t k = 0; k < sizeof shapes_v / sizeof shapes_v[0]; k++) {
		int n = 37, v = shapes_v[k];
		long nv = (long)n * v;
		float *x = host_rand(nv, -4, 4, &rng);
		for (long i = 0; i < nv; i++) {
			if (i % (2 * n) >= n)           /* every other row: few distinct values, ties */
				x[i] = (float)(int)(x[i]);
			if (i % 97 == 5)
				x[i] = NAN;
		}
		x[0] = NAN;                             /* row 0: a NaN first is never beaten */
		if (v > 3)
			x[(long)v + 2] = INFINITY;
		float *d_x = dev_copy(x, nv);
		int *d_best = kern_cuda_malloc(sizeof(int) * (size_t)n);
		kern_argmax_rows_cuda(d_best, d_x, n, v);
		int *best = malloc(sizeof(int) * (size_t)n);
		kern_cuda_download(best, d_best, sizeof(int) * (size_t)n);
		int same = 1, first = -1;
		for (int r = 0; r < n; r++)
			if (best[r] != scan_best(x + (long)r * v, v) && first < 0) {
				same = 0;
				first = r;
			}
		CHECK_MSG(same, "argmax v=%d: row %d: %d, the scan %d", v, first,
		          first >= 0 ? best[first] : 0, first >= 0 ? scan_best(x + (long)first * v, v) : 0);
		free(x), free(best);
		kern_cuda_free(d_x), kern_cuda_free(d_best);
	}
}

/* The _ld versions over rows ld apart equal the packed ones bit for bit,
 * with NaN in the padding (never read) and the padding of dlogits left as
 * it was (never written); where ld is a multiple of 8 (the GPT's padded
 * logits) the kernels read and write eight elements an access and sum lse
 * in another order: within 1e-6 then. */
static void test_strided(void)
{
	const int shapes_v[][3] = { { 5, 33, 3 }, { 16, 50257, 3 }, { 5, 33, 0 }, { 16, 50257, 0 } };
	for (size_t k = 0; k < sizeof shapes_v / sizeof shapes_v[0]; k++) {
		int n = shapes_v[k][0], v = shapes_v[k][1], ld = (v + 63) / 64 * 64 + shapes_v[k][2];
		int vec = ld % 8 == 0;
		long nv = (long)n * v, nl = (long)n * ld;
		float *x = host_rand(nv, -8, 8, &rng), *xl = host_nan(nl);
		for (int r = 0; r < n; r++)
			memcpy(xl + (long)r * ld, x + (long)r * v, sizeof(float) * (size_t)v);
		int *targets = rand_targets(n, v, 3);
		float *d_x = dev_copy(x, nv), *d_xl = dev_copy(xl, nl);
		int *d_t = kern_cuda_dup(targets, sizeof(int) * (size_t)n);
		float *d_loss = dev_alloc(n), *d_lse = dev_alloc(n), *d_dl = dev_alloc(nv);
		float *d_loss_l = dev_alloc(n), *d_lse_l = dev_alloc(n), *d_dl_l = dev_copy(xl, nl);
		int *d_best = kern_cuda_malloc(sizeof(int) * (size_t)n);
		int *d_best_l = kern_cuda_malloc(sizeof(int) * (size_t)n);
		kern_softmax_xent_fwd_cuda(d_loss, d_lse, d_x, d_t, n, v);
		kern_softmax_xent_fwd_ld_cuda(d_loss_l, d_lse_l, d_xl, ld, d_t, n, v);
		kern_softmax_xent_bwd_set_cuda(d_dl, 0.25f, d_x, d_lse, d_t, n, v);
		kern_softmax_xent_bwd_set_ld_cuda(d_dl_l, 0.25f, d_xl, ld, d_lse_l, d_t, n, v);
		kern_argmax_rows_cuda(d_best, d_x, n, v);
		kern_argmax_rows_ld_cuda(d_best_l, d_xl, ld, n, v);
		float *loss = dev_fetch(d_loss, n), *loss_l = dev_fetch(d_loss_l, n);
		float *lse = dev_fetch(d_lse, n), *lse_l = dev_fetch(d_lse_l, n);
		float *dl = dev_fetch(d_dl, nv), *dl_l = dev_fetch(d_dl_l, nl), *rows = host_zeros(nv);
		int kept = 1;
		for (int r = 0; r < n; r++) {
			memcpy(rows + (long)r * v, dl_l + (long)r * ld, sizeof(float) * (size_t)v);
			for (int j = v; j < ld; j++)
				kept &= isnan(dl_l[(long)r * ld + j]);
		}
		int best[16], best_l[16];
		kern_cuda_download(best, d_best, sizeof(int) * (size_t)n);
		kern_cuda_download(best_l, d_best_l, sizeof(int) * (size_t)n);
		char what[96];
		snprintf(what, sizeof what, "strided n=%d v=%d ld=%d losses", n, v, ld);
		if (vec)
			check_close(what, loss_l, loss, n, 1e-6, 1e-6);
		else
			check_same_bits(what, loss_l, loss, n);
		snprintf(what, sizeof what, "strided n=%d v=%d ld=%d lse", n, v, ld);
		if (vec)
			check_close(what, lse_l, lse, n, 1e-6, 1e-6);
		else
			check_same_bits(what, lse_l, lse, n);
		snprintf(what, sizeof what, "strided n=%d v=%d ld=%d dlogits", n, v, ld);
		if (vec)
			check_close(what, rows, dl, nv, 1e-9, 1e-5);
		else
			check_same_bits(what, rows, dl, nv);
		CHECK_MSG(kept, "strided n=%d v=%d: the backward wrote into the padding", n, v);
		CHECK_MSG(memcmp(best, best_l, sizeof(int) * (size_t)n) == 0,
		          "strided n=%d v=%d: argmax differs", n, v);
		free(x), free(xl), free(targets), free(loss), free(loss_l), free(lse), free(lse_l);
		free(dl), free(dl_l), free(rows);
		kern_cuda_free(d_x), kern_cuda_free(d_xl), kern_cuda_free(d_t), kern_cuda_free(d_loss);
		kern_cuda_free(d_lse), kern_cuda_free(d_dl), kern_cuda_free(d_loss_l);
		kern_cuda_free(d_lse_l), kern_cuda_free(d_dl_l), kern_cuda_free(d_best);
		kern_cuda_free(d_best_l);
	}
}

/* With bf16 operands the logits are read as bf16 values and dlogits is
 * stored so (the reference's on the rounded logits, rounded, within one
 * bf16 spacing), strided rows too; losses and lse stay fp32; the argmax
 * sees the rounded logits (two that differ only below bf16's precision
 * tie, and the lower index wins). */
static void test_bf16_stores(void)
{
	int n = 33, v = 1000, ld = 1024;
	long nv = (long)n * v;
	float *logits = host_rand(nv, -4, 4, &rng);
	int *targets = rand_targets(n, v, 7);
	for (int r = 0; r < n; r++) {        /* row r's top two: equal in bf16 */
		logits[(long)r * v + 10] = 9.0f;
		logits[(long)r * v + 20] = 9.0f + 0x1p-16f;
	}
	float *l16 = host_copy(logits, nv);
	kern_round_bf16_cpu(l16, nv);
	float *losses = host_zeros(n), *lse = host_zeros(n), *sdl = host_zeros(nv);
	kern_softmax_xent_fwd_ref(losses, lse, l16, targets, n, v);
	kern_softmax_xent_bwd_set_ref(sdl, 1.0f / (float)n, l16, lse, targets, n, v);
	float *d_logits = dev_alloc((long)n * ld), *d_dl = dev_alloc((long)n * ld);
	for (int r = 0; r < n; r++)
		dev_put(d_logits + (long)r * ld, logits + (long)r * v, v);
	int *d_targets = kern_cuda_dup(targets, sizeof(int) * (size_t)n);
	float *d_lse = dev_copy(lse, n), *d_losses = dev_alloc(n);
	kern_matmul_cuda_operands(KERN_MM_BF16);
	kern_softmax_xent_fwd_ld_cuda(d_losses, d_lse, d_logits, ld, d_targets, n, v);
	float *glse = dev_fetch(d_lse, n), *glosses = dev_fetch(d_losses, n);
	int *d_best = kern_cuda_malloc(sizeof(int) * (size_t)n), *best = malloc(sizeof(int) * (size_t)n);
	kern_argmax_rows_ld_cuda(d_best, d_logits, ld, n, v);
	kern_cuda_download(best, d_best, sizeof(int) * (size_t)n);
	dev_put(d_lse, lse, n);
	kern_softmax_xent_bwd_set_ld_cuda(d_dl, 1.0f / (float)n, d_logits, ld, d_lse, d_targets, n,
	                                  v);
	kern_matmul_cuda_operands(KERN_MM_FP32);
	float *all = dev_fetch(d_dl, (long)n * ld), *gdl = host_zeros(nv);
	for (int r = 0; r < n; r++)
		memcpy(gdl + (long)r * v, all + (long)r * ld, sizeof(float) * (size_t)v);
	check_stored_bf16("bf16 dlogits (rows 1024 apart)", gdl, sdl, nv, 0, 0x1p-7);
	check_close("lse of the rounded logits", glse, lse, n, 1e-5, 1e-5);
	check_close("losses of the rounded logits", glosses, losses, n, 1e-5, 1e-5);
	int ties = 1;
	for (int r = 0; r < n; r++)
		ties &= best[r] == 10;
	CHECK_MSG(ties, "argmax of logits equal in bf16: the lower index (row 0: %d)", best[0]);
	free(logits), free(targets), free(losses), free(lse), free(sdl), free(glse), free(all);
	free(gdl), free(l16), free(glosses), free(best);
	kern_cuda_free(d_best);
	kern_cuda_free(d_logits), kern_cuda_free(d_dl), kern_cuda_free(d_targets);
	kern_cuda_free(d_lse), kern_cuda_free(d_losses);
}

/* The forward and the _set backward in one pass (kern_softmax_xent_fwd_
 * bwd_set_ld_act_cuda, a training step's) against the two kernels one
 * after the other: losses, lse and dlogits the same bits, in fp32 and with
 * packed 16-bit logits (KERN_ACT_16), rows padded (vec) and not, ignored
 * rows; the padding columns left as they were. */
static void test_one_pass(void)
{
	const int cases[][3] = { { 16, 50257, 50304 }, { 5, 33, 35 }, { 7, 1000, 1000 } };
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int a16 = 0; a16 < 2; a16++) {
			int n = cases[k][0], v = cases[k][1], ld = cases[k][2];
			long nl = (long)n * ld;
			size_t es = a16 ? sizeof(uint16_t) : sizeof(float);
			float *x = host_rand(nl, -8, 8, &rng);
			int *targets = rand_targets(n, v, 4);
			if (a16)
				kern_matmul_cuda_operands(KERN_MM_BF16);
			void *d_x = kern_cuda_malloc(es * (size_t)nl);
			float *d_xf = dev_copy(x, nl);
			if (a16)
				kern_fp32_to_bf16_cuda(d_x, d_xf, nl);
			else
				kern_cuda_copy(d_x, d_xf, es * (size_t)nl);
			int *d_t = kern_cuda_dup(targets, sizeof(int) * (size_t)n);
			float *d_l2 = dev_alloc(n), *d_s2 = dev_alloc(n), *d_l1 = dev_alloc(n);
			float *d_s1 = dev_alloc(n);
			void *d_d2 = kern_cuda_malloc(es * (size_t)nl), *d_d1 = kern_cuda_malloc(es * (size_t)nl);
			kern_cuda_zero(d_d2, es * (size_t)nl);
			kern_cuda_zero(d_d1, es * (size_t)nl);
			int act = a16 ? KERN_ACT_16 : KERN_ACT_F32;
			kern_softmax_xent_fwd_ld_act_cuda(act, d_l2, d_s2, d_x, ld, d_t, n, v);
			kern_softmax_xent_bwd_set_ld_act_cuda(act, d_d2, 0.3f, d_x, ld, d_s2, d_t, n, v);
			kern_softmax_xent_fwd_bwd_set_ld_act_cuda(act, d_l1, d_s1, d_d1, 0.3f, d_x, ld, d_t,
			                                          n, v);
			kern_matmul_cuda_operands(KERN_MM_FP32);
			float *l2 = dev_fetch(d_l2, n), *l1 = dev_fetch(d_l1, n);
			float *s2 = dev_fetch(d_s2, n), *s1 = dev_fetch(d_s1, n);
			unsigned char *dd2 = malloc(es * (size_t)nl), *dd1 = malloc(es * (size_t)nl);
			kern_cuda_download(dd2, d_d2, es * (size_t)nl);
			kern_cuda_download(dd1, d_d1, es * (size_t)nl);
			char what[96];
			snprintf(what, sizeof what, "one pass n=%d v=%d ld=%d a16=%d losses", n, v, ld, a16);
			check_same_bits(what, l1, l2, n);
			snprintf(what, sizeof what, "one pass n=%d v=%d ld=%d a16=%d lse", n, v, ld, a16);
			check_same_bits(what, s1, s2, n);
			CHECK_MSG(!memcmp(dd1, dd2, es * (size_t)nl),
			          "one pass n=%d v=%d ld=%d a16=%d: dlogits differ", n, v, ld, a16);
			free(x), free(targets), free(l2), free(l1), free(s2), free(s1), free(dd2), free(dd1);
			kern_cuda_free(d_x), kern_cuda_free(d_xf), kern_cuda_free(d_t);
			kern_cuda_free(d_l2), kern_cuda_free(d_s2), kern_cuda_free(d_l1);
			kern_cuda_free(d_s1), kern_cuda_free(d_d2), kern_cuda_free(d_d1);
		}
}

int main(void)
{
	gpu_test_init("test_cuda_softmax_xent");
	/* each case runs the kernels it names (the one pass, the two), not
	 * the fastest of them (kern_cuda_kernel_tune:
	 * test_cuda_act16's test_kernel_tune) */
	kern_cuda_kernel_tune(0);
	CHECK_RUN(test_strided);
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_deterministic);
	CHECK_RUN(test_argmax);
	CHECK_RUN(test_bf16_stores);
	CHECK_RUN(test_one_pass);
	return check_finish();
}
