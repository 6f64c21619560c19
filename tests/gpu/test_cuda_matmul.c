/* tests/gpu/test_cuda_matmul.c - kernels/matmul_cuda.cu against the
 * reference (matmul_cpu.c): forward with the bias fused (cuBLASLt epilogue)
 * and unfused (cuBLAS, beta = 1) and without bias, on aligned and misaligned
 * buffers; backward adding into its outputs, with NULL dinp and dbias, the
 * _set backward over NaN; the c = 0 edge; run-to-run determinism; with
 * 16-bit activations, the bias gradient's column sum against double sums.
 *
 * Tolerances (want = _ref, in double):
 *   out, dinp, dweight: atol = rtol = 2e-7 (k + 1), k the length of the sum
 *     (c, oc or n), as for the CPU version: an fp32 sum of k products errs
 *     by up to ~k ulp in the worst case. cuBLAS runs plain FP32 here; TF32
 *     (10-bit mantissa) would fail this by orders of magnitude.
 *   dbias: atol 1e-7, rtol 1e-6 (summed in double like the reference; only
 *     the final rounding to float can differ).
 *   determinism: the same bits on two runs.
 *   fused bias gradient (16-bit dout, column sums over n rows added into
 *     dbias0): the separate sum against the double reference within 1e-6
 *     of |sum| + |dbias0| (rounded twice); the fused one, an fp32 sum in
 *     cuBLASLt's order, against the separate one within 1e-5 of the sum of
 *     the terms' magnitudes, sum |dout| + |dbias0|: above an fp32 sum's
 *     worst case over 4096 rows of such values (partial sums of ~40, half
 *     an ulp each step: 8e-3 against 2e-2), far below a missing row or a
 *     dbias0 overwritten instead of added to (~0.5). dweight, the same
 *     products summed by another kernel: 3e-5 of its largest magnitude
 *     (test_cuda_act16 holds 256-row sums to 1e-5; these run to 4096).
 *     dinp, the same GEMM both ways: the same bits.
 *   tuned GEMMs (kern_matmul_cuda_gemm_tune) against the untuned: 16-bit
 *     out and dinp within one 16-bit spacing (another algorithm's sums may
 *     round to the neighbour) or 3e-5 of the largest; dweight as above.
 *   the same-bits tuning (kern_matmul_cuda_gemm_same) against none: the
 *     same bits, every output.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/matmul.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"

static uint64_t rng = 41;

struct shape {
	int n, c, oc;
};

static const struct shape shapes[] = {
	{ 1, 1, 1 }, { 7, 13, 5 }, { 33, 64, 17 }, { 257, 129, 511 }, { 300, 1024, 10 },
	{ 1, 784, 1024 }, { 64, 768, 2304 }, { 128, 3072, 768 }, { 37, 256, 1000 },
};

static double tol(int k)
{
	return 2e-7 * (k + 1);
}

/* All device buffers of one case, allocated one float larger so that off = 1
 * gives misaligned views. */
struct mm {
	struct shape s;
	int off;
	float *inp, *weight, *bias, *dout, *dinp0, *dweight0, *dbias0;   /* host */
	float *d_inp, *d_weight, *d_bias, *d_out, *d_dout, *d_dinp, *d_dweight, *d_dbias;
};

static void mm_init(struct mm *m, struct shape s, int off)
{
	long nc = (long)s.n * s.c, no = (long)s.n * s.oc, oc_c = (long)s.oc * s.c;
	m->s = s;
	m->off = off;
	m->inp = host_rand(nc, -1, 1, &rng);
	m->weight = host_rand(oc_c, -1, 1, &rng);
	m->bias = host_rand(s.oc, -1, 1, &rng);
	m->dout = host_rand(no, -1, 1, &rng);
	m->dinp0 = host_rand(nc, -1, 1, &rng);
	m->dweight0 = host_rand(oc_c, -1, 1, &rng);
	m->dbias0 = host_rand(s.oc, -1, 1, &rng);
	m->d_inp = dev_alloc(nc + 1);
	m->d_weight = dev_alloc(oc_c + 1);
	m->d_bias = dev_alloc(s.oc + 1);
	m->d_out = dev_alloc(no + 1);
	m->d_dout = dev_alloc(no + 1);
	m->d_dinp = dev_alloc(nc + 1);
	m->d_dweight = dev_alloc(oc_c + 1);
	m->d_dbias = dev_alloc(s.oc + 1);
	dev_put(m->d_inp + off, m->inp, nc);
	dev_put(m->d_weight + off, m->weight, oc_c);
	dev_put(m->d_bias + off, m->bias, s.oc);
	dev_put(m->d_dout + off, m->dout, no);
}

static void mm_free(struct mm *m)
{
	free(m->inp), free(m->weight), free(m->bias), free(m->dout);
	free(m->dinp0), free(m->dweight0), free(m->dbias0);
	kern_cuda_free(m->d_inp), kern_cuda_free(m->d_weight), kern_cuda_free(m->d_bias);
	kern_cuda_free(m->d_out), kern_cuda_free(m->d_dout), kern_cuda_free(m->d_dinp);
	kern_cuda_free(m->d_dweight), kern_cuda_free(m->d_dbias);
}

/* forward with bias (fused or not) or without, against the reference */
static void check_fwd(struct mm *m, int with_bias, int fused)
{
	struct shape s = m->s;
	int off = m->off;
	long no = (long)s.n * s.oc;
	char what[160];
	float *want = host_zeros(no);
	kern_matmul_fwd_ref(want, m->inp, m->weight, with_bias ? m->bias : NULL, s.n, s.c, s.oc);
	float *nan = host_nan(no);
	dev_put(m->d_out + off, nan, no); /* out is written, never read */
	int prev = kern_matmul_cuda_fused_bias(fused);
	kern_matmul_fwd_cuda(m->d_out + off, m->d_inp + off, m->d_weight + off,
	                     with_bias ? m->d_bias + off : NULL, s.n, s.c, s.oc);
	kern_matmul_cuda_fused_bias(prev);
	float *got = dev_fetch(m->d_out + off, no);
	snprintf(what, sizeof what, "out n=%d c=%d oc=%d bias=%d fused=%d off=%d", s.n, s.c, s.oc,
	         with_bias, fused, off);
	check_close(what, got, want, no, tol(s.c), tol(s.c));
	free(want), free(got), free(nan);
}

/* backward (or _set) into the random initial gradients, against the
 * reference; want_dinp / want_dbias 0 pass NULL */
static void check_bwd(struct mm *m, int set, int want_dinp, int want_dbias)
{
	struct shape s = m->s;
	int off = m->off;
	long nc = (long)s.n * s.c, oc_c = (long)s.oc * s.c;
	char what[160];
	float *dinp = host_copy(m->dinp0, nc), *dweight = host_copy(m->dweight0, oc_c);
	float *dbias = host_copy(m->dbias0, s.oc);
	(set ? kern_matmul_bwd_set_ref : kern_matmul_bwd_ref)(
		want_dinp ? dinp : NULL, dweight, want_dbias ? dbias : NULL, m->dout, m->inp,
		m->weight, s.n, s.c, s.oc);
	float *nan = host_nan(nc);
	dev_put(m->d_dinp + off, set ? nan : m->dinp0, nc);
	dev_put(m->d_dweight + off, m->dweight0, oc_c);
	dev_put(m->d_dbias + off, m->dbias0, s.oc);
	(set ? kern_matmul_bwd_set_cuda : kern_matmul_bwd_cuda)(
		want_dinp ? m->d_dinp + off : NULL, m->d_dweight + off,
		want_dbias ? m->d_dbias + off : NULL, m->d_dout + off, m->d_inp + off,
		m->d_weight + off, s.n, s.c, s.oc);
	float *gi = dev_fetch(m->d_dinp + off, nc), *gw = dev_fetch(m->d_dweight + off, oc_c);
	float *gb = dev_fetch(m->d_dbias + off, s.oc);
	const char *name = set ? "bwd_set" : "bwd";
	if (want_dinp) {
		snprintf(what, sizeof what, "%s dinp n=%d c=%d oc=%d off=%d", name, s.n, s.c, s.oc, off);
		check_close(what, gi, dinp, nc, tol(s.oc), tol(s.oc));
	}
	snprintf(what, sizeof what, "%s dweight n=%d c=%d oc=%d off=%d", name, s.n, s.c, s.oc, off);
	check_close(what, gw, dweight, oc_c, tol(s.n), tol(s.n));
	snprintf(what, sizeof what, "%s dbias n=%d c=%d oc=%d off=%d", name, s.n, s.c, s.oc, off);
	check_close(what, gb, dbias, s.oc, 1e-7, 1e-6);
	free(dinp), free(dweight), free(dbias), free(nan), free(gi), free(gw), free(gb);
}

/* whether shape k runs: on the stand-in, whose GEMMs are the CPU's, not
 * GPT-2's layers (the reference's loops take tens of seconds there; the
 * test's logic is the same at the others) */
static int shape_runs(size_t k)
{
	return !gpu_test_standin() || (long)shapes[k].n * shapes[k].c * shapes[k].oc < 10000000L;
}

static void test_fwd(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int off = 0; off < 2 && shape_runs(k); off++) {
			struct mm m;
			mm_init(&m, shapes[k], off);
			check_fwd(&m, 1, 1);
			check_fwd(&m, 1, 0);
			check_fwd(&m, 0, 1);
			mm_free(&m);
		}
}

static void test_bwd(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int off = 0; off < 2 && shape_runs(k); off++) {
			struct mm m;
			mm_init(&m, shapes[k], off);
			check_bwd(&m, 0, 1, 1);
			check_bwd(&m, 0, 0, 0);
			check_bwd(&m, 1, 1, 1);
			mm_free(&m);
		}
}

/* c = 0: out is the bias (or 0); backward adds nothing but dbias */
static void test_empty_sum(void)
{
	struct shape s = { 5, 0, 7 };
	struct mm m;
	mm_init(&m, s, 0);
	check_fwd(&m, 1, 1);
	check_fwd(&m, 0, 1);
	check_bwd(&m, 0, 1, 1);
	mm_free(&m);
}

static void test_deterministic(void)
{
	struct shape s = { 1024, 768, 2304 };
	struct mm m;
	mm_init(&m, s, 0);
	long no = (long)s.n * s.oc, nc = (long)s.n * s.c, oc_c = (long)s.oc * s.c;
	float *out[2], *dinp[2], *dw[2], *db[2];
	for (int r = 0; r < 2; r++) {
		kern_matmul_fwd_cuda(m.d_out, m.d_inp, m.d_weight, m.d_bias, s.n, s.c, s.oc);
		dev_put(m.d_dinp, m.dinp0, nc);
		dev_put(m.d_dweight, m.dweight0, oc_c);
		dev_put(m.d_dbias, m.dbias0, s.oc);
		kern_matmul_bwd_cuda(m.d_dinp, m.d_dweight, m.d_dbias, m.d_dout, m.d_inp, m.d_weight,
		                     s.n, s.c, s.oc);
		out[r] = dev_fetch(m.d_out, no);
		dinp[r] = dev_fetch(m.d_dinp, nc);
		dw[r] = dev_fetch(m.d_dweight, oc_c);
		db[r] = dev_fetch(m.d_dbias, s.oc);
	}
	check_same_bits("out", out[0], out[1], no);
	check_same_bits("dinp", dinp[0], dinp[1], nc);
	check_same_bits("dweight", dw[0], dw[1], oc_c);
	check_same_bits("dbias", db[0], db[1], s.oc);
	for (int r = 0; r < 2; r++)
		free(out[r]), free(dinp[r]), free(dw[r]), free(db[r]);
	mm_free(&m);
}

/* Output rows ld apart (kern_matmul_fwd_ld_cuda, kern_matmul_bwd_set_ld_cuda):
 * the forward leaves the padding columns alone (or, with 16-bit operands
 * and no bias, writes zeros there), the backward never uses them (NaN
 * there), and both equal the unpadded reference; also with 16-bit operands,
 * against the unpadded 16-bit GEMMs (the same products, summed in an order
 * that may differ). */
static void check_strided(struct shape s, int ld, int dtype)
{
	long nc = (long)s.n * s.c, oc_c = (long)s.oc * s.c, no = (long)s.n * s.oc;
	long nl = (long)s.n * ld;
	char what[160];
	float *inp = host_rand(nc, -1, 1, &rng), *weight = host_rand(oc_c, -1, 1, &rng);
	float *bias = host_rand(s.oc, -1, 1, &rng), *dout = host_rand(no, -1, 1, &rng);
	float *padded = host_nan(nl), *sentinel = host_zeros(nl);
	for (long k = 0; k < nl; k++)
		sentinel[k] = 12345.0f;
	for (int r = 0; r < s.n; r++)
		memcpy(padded + (long)r * ld, dout + (long)r * s.oc, sizeof(float) * (size_t)s.oc);
	float *d_inp = dev_copy(inp, nc), *d_w = dev_copy(weight, oc_c), *d_b = dev_copy(bias, s.oc);
	float *d_out = dev_copy(sentinel, nl), *d_out1 = dev_alloc(no);
	float *d_dout = dev_copy(padded, nl), *d_dout1 = dev_copy(dout, no);
	float *d_dinp = dev_alloc(nc), *d_dw = dev_alloc(oc_c), *d_db = dev_alloc(s.oc);
	float *d_dinp1 = dev_alloc(nc), *d_dw1 = dev_alloc(oc_c), *d_db1 = dev_alloc(s.oc);
	float *zw = host_zeros(oc_c), *zb = host_zeros(s.oc);
	dev_put(d_dw, zw, oc_c), dev_put(d_db, zb, s.oc);
	dev_put(d_dw1, zw, oc_c), dev_put(d_db1, zb, s.oc);

	int prev = kern_matmul_cuda_operands(dtype);
	for (int with_bias = 1; with_bias >= 0; with_bias--) {
		const float *b = with_bias ? d_b : NULL;
		dev_put(d_out, sentinel, nl);
		kern_matmul_fwd_ld_cuda(d_out, ld, d_inp, d_w, b, s.n, s.c, s.oc);
		kern_matmul_fwd_cuda(d_out1, d_inp, d_w, b, s.n, s.c, s.oc);
		float *got = dev_fetch(d_out, nl), *want = dev_fetch(d_out1, no);
		float *rows = host_zeros(no);
		float pad = dtype != KERN_MM_FP32 && !with_bias && ld % 8 == 0 ? 0.0f : 12345.0f;
		int kept = 1;
		for (int r = 0; r < s.n; r++) {
			memcpy(rows + (long)r * s.oc, got + (long)r * ld, sizeof(float) * (size_t)s.oc);
			for (int j = s.oc; j < ld; j++)
				kept &= got[(long)r * ld + j] == pad;
		}
		CHECK_MSG(kept, "fwd ld=%d n=%d oc=%d dtype=%d bias=%d: the padding does not hold %g",
		          ld, s.n, s.oc, dtype, with_bias, pad);
		if (dtype == KERN_MM_FP32) {
			free(want);
			want = host_zeros(no);
			kern_matmul_fwd_ref(want, inp, weight, with_bias ? bias : NULL, s.n, s.c, s.oc);
		}
		snprintf(what, sizeof what, "fwd ld=%d n=%d c=%d oc=%d dtype=%d bias=%d", ld, s.n, s.c,
		         s.oc, dtype, with_bias);
		check_close(what, rows, want, no, tol(s.c), tol(s.c));
		free(got), free(want), free(rows);
	}
	kern_matmul_bwd_set_ld_cuda(d_dinp, d_dw, d_db, d_dout, ld, d_inp, d_w, s.n, s.c, s.oc);
	kern_matmul_bwd_set_cuda(d_dinp1, d_dw1, d_db1, d_dout1, d_inp, d_w, s.n, s.c, s.oc);
	kern_matmul_cuda_operands(prev);

	float *gi = dev_fetch(d_dinp, nc), *gw = dev_fetch(d_dw, oc_c), *gb = dev_fetch(d_db, s.oc);
	float *wi = dev_fetch(d_dinp1, nc), *ww = dev_fetch(d_dw1, oc_c), *wb = dev_fetch(d_db1, s.oc);
	snprintf(what, sizeof what, "bwd ld=%d n=%d c=%d oc=%d dtype=%d dinp", ld, s.n, s.c, s.oc,
	         dtype);
	check_close(what, gi, wi, nc, tol(s.oc), tol(s.oc));
	snprintf(what, sizeof what, "bwd ld=%d n=%d c=%d oc=%d dtype=%d dweight", ld, s.n, s.c, s.oc,
	         dtype);
	check_close(what, gw, ww, oc_c, tol(s.n), tol(s.n));
	snprintf(what, sizeof what, "bwd ld=%d n=%d c=%d oc=%d dtype=%d dbias", ld, s.n, s.c, s.oc,
	         dtype);
	check_same_bits(what, gb, wb, s.oc);

	free(inp), free(weight), free(bias), free(dout), free(padded), free(sentinel);
	free(zw), free(zb);
	free(gi), free(gw), free(gb), free(wi), free(ww), free(wb);
	kern_cuda_free(d_inp), kern_cuda_free(d_w), kern_cuda_free(d_b);
	kern_cuda_free(d_out), kern_cuda_free(d_out1), kern_cuda_free(d_dout), kern_cuda_free(d_dout1);
	kern_cuda_free(d_dinp), kern_cuda_free(d_dw), kern_cuda_free(d_db);
	kern_cuda_free(d_dinp1), kern_cuda_free(d_dw1), kern_cuda_free(d_db1);
}

static void test_strided(void)
{
	static const struct shape odd[] = { { 7, 13, 5 }, { 33, 64, 17 }, { 257, 129, 1001 },
		                            { 64, 768, 5025 } };
	for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) {
		int ld = (odd[k].oc + 63) / 64 * 64;
		check_strided(odd[k], ld, KERN_MM_FP32);
		check_strided(odd[k], ld + 3, KERN_MM_FP32);
		check_strided(odd[k], ld, KERN_MM_BF16);
		check_strided(odd[k], ld, KERN_MM_FP16);
		check_strided(odd[k], ld + 3, KERN_MM_BF16);
	}
}

/* ---- the 16-bit bias gradient ------------------------------------------------ */

/* n random values of the 16-bit type (bf16 or fp16) in [lo, hi), as floats */
static float *rand16(long n, float lo, float hi, int bf16)
{
	return host_rand16(n, lo, hi, bf16, &rng);
}

static uint16_t *fetch_raw16(const void *d, long n)
{
	uint16_t *h = malloc(sizeof *h * (size_t)(n > 0 ? n : 1));
	if (!h)
		abort();
	kern_cuda_download(h, d, sizeof *h * (size_t)n);
	return h;
}

static void check_same16(const char *what, const uint16_t *got, const uint16_t *want, long n)
{
	for (long i = 0; i < n; i++)
		if (got[i] != want[i]) {
			CHECK_MSG(0, "%s: [%ld] %#06x, against %#06x", what, i, got[i], want[i]);
			return;
		}
}

/* |got - want| <= tol[i] for every i; the first miss reported */
static void check_within(const char *what, const float *got, const double *want,
                         const double *tol, long n)
{
	for (long i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= tol[i])) {
			CHECK_MSG(0, "%s: [%ld] %.9g, against %.9g (tolerance %.3g)", what, i, got[i],
			          want[i], tol[i]);
			return;
		}
}

/* One 16-bit backward problem (kern_matmul_bwd_set_ld_act_cuda): x [n, c],
 * w [oc, c] and dout [n, ldd] (its padding zero, as the GPT keeps it)
 * random 16-bit values on the device, dout also on the host; dweight and
 * dbias start from dw0 and db0 at each run. */
struct bwd16 {
	int bf16, n, c, oc, ldd;
	long nc, oc_c;
	float *dy, *dw0, *db0;             /* host */
	void *x16, *dy16, *di16;
	float *d_w, *d_dw, *d_db;
};

static void bwd16_init(struct bwd16 *b, int dtype, int n, int c, int oc, int ldd)
{
	*b = (struct bwd16){ .bf16 = dtype == KERN_MM_BF16, .n = n, .c = c, .oc = oc, .ldd = ldd,
	                     .nc = (long)n * c, .oc_c = (long)oc * c };
	float *x = rand16(b->nc, -1, 1, b->bf16), *w = rand16(b->oc_c, -0.2f, 0.2f, b->bf16);
	b->dy = rand16((long)n * ldd, -1, 1, b->bf16);
	for (int i = 0; i < n; i++)
		for (int j = oc; j < ldd; j++)
			b->dy[(long)i * ldd + j] = 0.0f;
	b->dw0 = host_rand(b->oc_c, -1, 1, &rng);
	b->db0 = host_rand(oc, -1, 1, &rng);
	b->x16 = dev_copy16(x, b->nc, b->bf16);
	b->dy16 = dev_copy16(b->dy, (long)n * ldd, b->bf16);
	b->di16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)b->nc);
	b->d_w = dev_copy(w, b->oc_c);
	b->d_dw = dev_alloc(b->oc_c);
	b->d_db = dev_alloc(oc);
	free(x), free(w);
}

/* One run from dw0 and db0: dinp's raw 16-bit values, dweight, dbias. */
static void bwd16_run(const struct bwd16 *b, uint16_t **gi, float **gw, float **gb)
{
	dev_put(b->d_dw, b->dw0, b->oc_c);
	dev_put(b->d_db, b->db0, b->oc);
	kern_matmul_bwd_set_ld_act_cuda(KERN_ACT_16, b->di16, b->d_dw, b->d_db, b->dy16, b->ldd,
	                                b->x16, b->d_w, b->n, b->c, b->oc);
	*gi = fetch_raw16(b->di16, b->nc);
	*gw = dev_fetch(b->d_dw, b->oc_c);
	*gb = dev_fetch(b->d_db, b->oc);
}

/* Another way's run (how) against a reference run: dweight within 3e-5 of
 * the reference's largest value (fp32 sums in another order), dinp the
 * same bits (the same GEMM either way). */
static void check_dweight_dinp(const struct bwd16 *b, const char *how, const float *gw,
                               const float *gw_ref, const uint16_t *gi, const uint16_t *gi_ref)
{
	char what[160];
	const char *ty = b->bf16 ? "bf16" : "fp16";
	double big = 0;
	for (long i = 0; i < b->oc_c; i++)
		big = fmax(big, fabs(gw_ref[i]));
	snprintf(what, sizeof what, "%s %s dweight n=%d c=%d oc=%d ldd=%d", ty, how, b->n, b->c,
	         b->oc, b->ldd);
	check_close(what, gw, gw_ref, b->oc_c, 3e-5 * big, 0);
	snprintf(what, sizeof what, "%s %s dinp n=%d c=%d oc=%d ldd=%d", ty, how, b->n, b->c, b->oc,
	         b->ldd);
	check_same16(what, gi, gi_ref, b->nc);
}

static void bwd16_free(struct bwd16 *b)
{
	free(b->dy), free(b->dw0), free(b->db0);
	kern_cuda_free(b->x16), kern_cuda_free(b->dy16), kern_cuda_free(b->di16);
	kern_cuda_free(b->d_w), kern_cuda_free(b->d_dw), kern_cuda_free(b->d_db);
}

/* The 16-bit backward (kern_matmul_bwd_set_ld_act_cuda, dout's rows ldd
 * apart, its padding zero) twice from the same dweight0 and dbias0: the
 * column sum against double sums, and the same bits again. Tolerances at
 * the top of the file. */
static void dbias_case(int dtype, int n, int c, int oc, int ldd)
{
	struct bwd16 b;
	bwd16_init(&b, dtype, n, c, oc, ldd);
	const char *ty = b.bf16 ? "bf16" : "fp16";
	const float *dy = b.dy, *db0 = b.db0;
	char what[160];

	int prev_ops = kern_matmul_cuda_operands(dtype);
	uint16_t *gi[2];
	float *gw[2], *gb[2];
	for (int r = 0; r < 2; r++)
		bwd16_run(&b, &gi[r], &gw[r], &gb[r]);
	kern_matmul_cuda_operands(prev_ops);

	/* the reference: dbias0 + the column sums, in double */
	double *want = malloc(sizeof *want * (size_t)oc), *tol = malloc(sizeof *tol * (size_t)oc);
	if (!want || !tol)
		abort();
	for (int o = 0; o < oc; o++) {
		double s = 0;
		for (int i = 0; i < n; i++)
			s += dy[(long)i * ldd + o];
		want[o] = db0[o] + s;
		tol[o] = 1e-6 * (fabs(s) + fabs(db0[o]));
	}
	snprintf(what, sizeof what, "%s dbias n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_within(what, gb[0], want, tol, oc);
	snprintf(what, sizeof what, "%s run to run dbias n=%d c=%d oc=%d", ty, n, c, oc);
	check_same_bits(what, gb[1], gb[0], oc);

	for (int r = 0; r < 2; r++)
		free(gi[r]), free(gw[r]), free(gb[r]);
	free(want), free(tol);
	bwd16_free(&b);
}

/* n = 0 rows: nothing to add, dweight and dbias keep their bits */
static void dbias_empty(int dtype)
{
	int bf16 = dtype == KERN_MM_BF16, c = 64, oc = 96;
	long oc_c = (long)oc * c;
	float *dw0 = host_rand(oc_c, -1, 1, &rng), *db0 = host_rand(oc, -1, 1, &rng);
	float *d_w = dev_copy(dw0, oc_c), *d_dw = dev_copy(dw0, oc_c), *d_db = dev_copy(db0, oc);
	void *x16 = dev_copy16(dw0, 1, bf16), *dy16 = dev_copy16(dw0, 1, bf16);
	void *di16 = dev_copy16(dw0, 1, bf16);
	int prev_ops = kern_matmul_cuda_operands(dtype);
	kern_matmul_bwd_set_act_cuda(KERN_ACT_16, di16, d_dw, d_db, dy16, x16, d_w, 0, c, oc);
	kern_matmul_cuda_operands(prev_ops);
	float *gw = dev_fetch(d_dw, oc_c), *gb = dev_fetch(d_db, oc);
	check_same_bits(bf16 ? "bf16 dweight n=0" : "fp16 dweight n=0", gw, dw0, oc_c);
	check_same_bits(bf16 ? "bf16 dbias n=0" : "fp16 dbias n=0", gb, db0, oc);
	free(dw0), free(db0), free(gw), free(gb);
	kern_cuda_free(d_w), kern_cuda_free(d_dw), kern_cuda_free(d_db);
	kern_cuda_free(x16), kern_cuda_free(dy16), kern_cuda_free(di16);
}

static void test_dbias16(void)
{
	/* odd sizes (cuBLASLt may refuse: the fallback), dout's rows padded,
	 * a GPT-2 qkv at 256 rows (where the stand-in, whose GEMMs are the
	 * CPU's, stops), then GPT-2's layers (qkv, attn proj, fc, fc proj) at
	 * one sequence and fc at four */
	static const int cases[][4] = {   /* n, c, oc, ldd */
		{ 37, 40, 77, 77 },       { 64, 64, 250, 256 },     { 256, 768, 2304, 2304 },
		{ 1024, 768, 2304, 2304 }, { 1024, 768, 768, 768 }, { 1024, 768, 3072, 3072 },
		{ 1024, 3072, 768, 768 }, { 4096, 768, 3072, 3072 },
	};
	static const int dtypes[] = { KERN_MM_BF16, KERN_MM_FP16 };
	size_t count = gpu_test_standin() ? 3 : sizeof cases / sizeof cases[0];
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		for (size_t k = 0; k < count; k++)
			dbias_case(dtypes[t], cases[k][0], cases[k][1], cases[k][2], cases[k][3]);
		dbias_empty(dtypes[t]);
	}
}

/* The 16-bit backward's weight gradient with an odd output count in two
 * GEMMs (kern_matmul_cuda_split_odd, off by default) against one, from the
 * same dweight0: within the fp32 sums' error of each other (each column's
 * sum over the rows is the same problem; only the algorithm differs), dinp
 * the same bits (its GEMM is not split), and the dbias the same bits. */
static void split_odd_case(int dtype, int n, int c, int oc, int ldd)
{
	struct bwd16 b;
	bwd16_init(&b, dtype, n, c, oc, ldd);
	char what[160];
	int prev_ops = kern_matmul_cuda_operands(dtype);
	uint16_t *gi[2];
	float *gw[2], *gb[2];
	for (int r = 0; r < 2; r++) {    /* split, whole */
		int prev = kern_matmul_cuda_split_odd(r == 0);
		bwd16_run(&b, &gi[r], &gw[r], &gb[r]);
		kern_matmul_cuda_split_odd(prev);
	}
	kern_matmul_cuda_operands(prev_ops);
	check_dweight_dinp(&b, "split", gw[0], gw[1], gi[0], gi[1]);
	const char *ty = b.bf16 ? "bf16" : "fp16";
	snprintf(what, sizeof what, "%s split dbias n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_same_bits(what, gb[0], gb[1], oc);
	for (int r = 0; r < 2; r++)
		free(gi[r]), free(gw[r]), free(gb[r]);
	bwd16_free(&b);
}

static void test_split_odd(void)
{
	/* an odd count with padded rows, one just over 64, and GPT-2's
	 * vocabulary at 128 rows (where the stand-in, whose GEMMs are the
	 * CPU's, stops after the first two) */
	static const int cases[][4] = {   /* n, c, oc, ldd */
		{ 64, 64, 250, 256 }, { 33, 48, 65, 72 }, { 128, 768, 50257, 50304 },
	};
	static const int dtypes[] = { KERN_MM_BF16, KERN_MM_FP16 };
	size_t count = gpu_test_standin() ? 2 : sizeof cases / sizeof cases[0];
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++)
		for (size_t k = 0; k < count; k++)
			split_odd_case(dtypes[t], cases[k][0], cases[k][1], cases[k][2], cases[k][3]);
}

/* raw 16-bit values as floats */
static float *from16(const uint16_t *h, long n, int bf16)
{
	float *f = malloc(sizeof *f * (size_t)(n > 0 ? n : 1));
	if (!f)
		abort();
	if (bf16)
		kern_bf16_to_fp32_cpu(f, h, n);
	else
		kern_fp16_to_fp32_cpu(f, h, n);
	return f;
}

/* 16-bit results of another algorithm's fp32 sums against the reference
 * run's: within one 16-bit spacing of the value (2^-7 relative for bf16,
 * 2^-10 for fp16: the sums may round to the neighbour) or 3e-5 of the
 * largest magnitude (a small value from cancellation). With bias (a value
 * per column, cols columns a row), also within a spacing of the product
 * before the bias: some of cuBLASLt's algorithms round the product to the
 * output's type before the epilogue adds the bias, and round again, so
 * where the bias cancels most of the product the two may differ by more
 * than a spacing of the value. */
static void check_near16(const char *what, const uint16_t *got, const uint16_t *want, long n,
                         int bf16, const float *bias, int cols)
{
	float *g = from16(got, n, bf16), *w = from16(want, n, bf16);
	double big = 0, rel = bf16 ? 0x1p-7 : 0x1p-10;
	for (long i = 0; i < n; i++)
		big = fmax(big, fabs(w[i]));
	for (long i = 0; i < n; i++) {
		double prod = bias ? fabs(w[i] - bias[i % cols]) : 0;
		if (!(fabs(g[i] - w[i]) <= fmax(rel * (fabs(w[i]) + prod), 3e-5 * big))) {
			CHECK_MSG(0, "%s: [%ld] %.9g, against %.9g", what, i, g[i], w[i]);
			break;
		}
	}
	free(g), free(w);
}

/* One 16-bit forward (kern_matmul_fwd_ld_act_cuda: with bias, the bias
 * epilogue; without, the padded GEMM the GPT's logits take) into out16,
 * its raw values */
static uint16_t *fwd16_run(void *out16, int ldo, const void *x16, const float *d_w,
                           const float *d_b, int n, int c, int oc)
{
	kern_matmul_fwd_ld_act_cuda(KERN_ACT_16, out16, ldo, x16, d_w, d_b, n, c, oc);
	return fetch_raw16(out16, (long)n * ldo);
}

/* A layer's 16-bit forward and _set backward with the GEMMs tuned
 * (kern_matmul_cuda_gemm_tune) against the same untuned, from the same
 * start: out, dinp and dweight within another algorithm's sums
 * (check_near16, check_dweight_dinp's 3e-5), dbias the same bits (the
 * separate column sum either way); a second tuned run the same bits as the
 * first (a problem keeps its pick). On a GPU, the tuned runs timed at least
 * one problem's candidates (cuBLASLt gives several for these shapes). */
static void tuned_case(int dtype, int n, int c, int oc, int ldd, int bias)
{
	struct bwd16 b;
	bwd16_init(&b, dtype, n, c, oc, ldd);
	const char *ty = b.bf16 ? "bf16" : "fp16";
	char what[160];
	float *bh = rand16(oc, -1, 1, b.bf16);
	float *d_b = bias ? dev_copy(bh, oc) : NULL;
	void *out16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)n * (size_t)ldd);
	int prev_ops = kern_matmul_cuda_operands(dtype);
	long tuned0 = kern_matmul_cuda_gemm_tuned(NULL);
	uint16_t *go[3], *gi[3];
	float *gw[3], *gb[3];
	for (int r = 0; r < 3; r++) {    /* untuned, tuned, tuned again */
		int prev = kern_matmul_cuda_gemm_tune(r > 0 ? 8 : 0);
		go[r] = fwd16_run(out16, ldd, b.x16, b.d_w, d_b, n, c, oc);
		bwd16_run(&b, &gi[r], &gw[r], &gb[r]);
		kern_matmul_cuda_gemm_tune(prev);
	}
	long tuned = kern_matmul_cuda_gemm_tuned(NULL) - tuned0;
	kern_matmul_cuda_operands(prev_ops);

	snprintf(what, sizeof what, "%s tuned n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	if (!gpu_test_standin())
		CHECK_MSG(tuned > 0, "%s: no problem was tuned", what);
	printf("  %s: %ld problems tuned\n", what, tuned);
	fflush(stdout);
	/* the forward's padding columns: zeros without bias (zero weight
	 * rows), left as they were with it; compared over the first oc */
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < n; i++)
			memmove(go[r] + (long)i * oc, go[r] + (long)i * ldd, sizeof(uint16_t) * (size_t)oc);
	snprintf(what, sizeof what, "%s tuned out n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_near16(what, go[1], go[0], (long)n * oc, b.bf16, bias ? bh : NULL, oc);
	snprintf(what, sizeof what, "%s tuned dinp n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_near16(what, gi[1], gi[0], b.nc, b.bf16, NULL, 0);
	double big = 0;
	for (long i = 0; i < b.oc_c; i++)
		big = fmax(big, fabs(gw[0][i]));
	snprintf(what, sizeof what, "%s tuned dweight n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_close(what, gw[1], gw[0], b.oc_c, 3e-5 * big, 0);
	snprintf(what, sizeof what, "%s tuned dbias n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	check_same_bits(what, gb[1], gb[0], oc);
	snprintf(what, sizeof what, "%s tuned run to run n=%d c=%d oc=%d", ty, n, c, oc);
	check_same16(what, go[2], go[1], (long)n * oc);
	check_same16(what, gi[2], gi[1], b.nc);
	check_same_bits(what, gw[2], gw[1], b.oc_c);

	for (int r = 0; r < 3; r++)
		free(go[r]), free(gi[r]), free(gw[r]), free(gb[r]);
	free(bh);
	kern_cuda_free(d_b), kern_cuda_free(out16);
	bwd16_free(&b);
}

/* The tuning cases' layers, in bf16 and fp16: odd sizes, the padded
 * logits' (no bias, rows ldd apart), then GPT-2's qkv and fc at one
 * sequence and its lm_head (where the stand-in, whose GEMMs are the CPU's,
 * stops after the first two) */
static void for_tuning_layers(void (*one)(int dtype, int n, int c, int oc, int ldd, int bias))
{
	static const int cases[][5] = {   /* n, c, oc, ldd, bias */
		{ 37, 40, 77, 77, 1 }, { 64, 64, 250, 256, 0 }, { 1024, 768, 2304, 2304, 1 },
		{ 1024, 768, 3072, 3072, 1 }, { 512, 768, 50257, 50304, 0 },
	};
	static const int dtypes[] = { KERN_MM_BF16, KERN_MM_FP16 };
	size_t count = gpu_test_standin() ? 2 : sizeof cases / sizeof cases[0];
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++)
		for (size_t k = 0; k < count; k++)
			one(dtypes[t], cases[k][0], cases[k][1], cases[k][2], cases[k][3], cases[k][4]);
}

static void test_tuned(void)
{
	for_tuning_layers(tuned_case);
}

/* The tuned GEMMs' picks kept in a file (kern_matmul_cuda_gemm_tune_file):
 * a layer's forward and backward tuned with the file set, then again after
 * setting it anew (the plans dropped, as in a new run): the second takes
 * every pick from the file, times nothing, and gives the first's bits. */
static void test_tune_file(void)
{
	char dir[4096], path[4200];
	snprintf(dir, sizeof dir, "%s", check_tmpdir("tune_file"));
	snprintf(path, sizeof path, "%s/picks.txt", dir);
	int prev_ops = kern_matmul_cuda_operands(KERN_MM_BF16), prev = kern_matmul_cuda_gemm_tune(8);
	CHECK_INT_EQ(kern_matmul_cuda_gemm_tune_file(path), 0);
	struct bwd16 b;
	bwd16_init(&b, KERN_MM_BF16, 1024, 768, 2304, 2304);
	float *bh = rand16(2304, -1, 1, 1), *d_b = dev_copy(bh, 2304);
	void *out16 = kern_cuda_malloc(sizeof(uint16_t) * 1024 * 2304);
	uint16_t *go[2], *gi[2];
	float *gw[2], *gb[2];
	long tuned0 = kern_matmul_cuda_gemm_tuned(NULL), reused0 = kern_matmul_cuda_gemm_tune_reused();
	int picks = 0;
	for (int r = 0; r < 2; r++) {
		if (r == 1)
			picks = kern_matmul_cuda_gemm_tune_file(path);   /* as a new run would */
		go[r] = fwd16_run(out16, 2304, b.x16, b.d_w, d_b, 1024, 768, 2304);
		bwd16_run(&b, &gi[r], &gw[r], &gb[r]);
		if (r == 0)
			tuned0 = kern_matmul_cuda_gemm_tuned(NULL) - tuned0;
	}
	long reused = kern_matmul_cuda_gemm_tune_reused() - reused0;
	kern_matmul_cuda_gemm_tune_file(NULL);
	kern_matmul_cuda_gemm_tune(prev);
	kern_matmul_cuda_operands(prev_ops);
	if (!gpu_test_standin()) {
		CHECK_MSG(tuned0 > 0 && picks == tuned0, "%ld problems tuned, %d picks read back",
		          tuned0, picks);
		CHECK_MSG(reused == picks, "%ld problems took their pick from the file, of %d", reused,
		          picks);
	}
	check_same16("tune file out", go[1], go[0], 1024L * 2304);
	check_same16("tune file dinp", gi[1], gi[0], b.nc);
	check_same_bits("tune file dweight", gw[1], gw[0], b.oc_c);
	check_same_bits("tune file dbias", gb[1], gb[0], 2304);
	for (int r = 0; r < 2; r++)
		free(go[r]), free(gi[r]), free(gw[r]), free(gb[r]);
	free(bh);
	kern_cuda_free(d_b), kern_cuda_free(out16);
	bwd16_free(&b);
	unlink(path);
	rmdir(dir);
}

/* The same-bits tuning (kern_matmul_cuda_gemm_same): a layer's 16-bit
 * forward (the bias epilogue, or the padded logits' GEMM without it), its
 * GELU forward (GELU_AUX_BIAS: out and pre) and its backwards (the _set
 * one, dinp without epilogue and dweight adding into fp32; the DGELU
 * one), on two
 * sets of operands, with the tuning off and then on (the first set's
 * calls check and time the problems' candidates, the second's take the
 * picks): every output the same bits either way, as the tuning promises
 * for any operands. On a GPU, the tuning checked problems. */
struct same_out {
	uint16_t *out, *gout, *gpre, *gi, *dpre;
	float *gw, *gb, *dw;
};

static void same_run_layer(struct bwd16 *b, const float *d_b, void *out16, void *pre16,
                           const void *pin16, struct same_out *o)
{
	int n = b->n, c = b->c, oc = b->oc, ldd = b->ldd;
	o->out = fwd16_run(out16, ldd, b->x16, b->d_w, d_b, n, c, oc);
	if (d_b && ldd == oc) {
		void *g16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)n * (size_t)oc);
		kern_matmul_gelu_fwd_act_cuda(KERN_ACT_16, g16, pre16, b->x16, b->d_w, d_b, n, c, oc);
		o->gout = fetch_raw16(g16, (long)n * oc);
		o->gpre = fetch_raw16(pre16, (long)n * oc);
		kern_cuda_free(g16);
		/* the layer after a GELU: its input b->x16 with pre pin16 [n, c] */
		void *dp16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)b->nc);
		dev_put(b->d_dw, b->dw0, b->oc_c);
		dev_put(b->d_db, b->db0, oc);
		kern_matmul_bwd_set_dgelu_act_cuda(KERN_ACT_16, dp16, b->d_dw, b->d_db, b->dy16, b->x16,
		                                   b->d_w, pin16, n, c, oc);
		o->dpre = fetch_raw16(dp16, b->nc);
		o->dw = dev_fetch(b->d_dw, b->oc_c);
		kern_cuda_free(dp16);
	}
	bwd16_run(b, &o->gi, &o->gw, &o->gb);
}

static void same_out_free(struct same_out *o)
{
	free(o->out), free(o->gout), free(o->gpre), free(o->gi), free(o->dpre);
	free(o->gw), free(o->gb), free(o->dw);
}

static void same_case(int dtype, int n, int c, int oc, int ldd, int bias)
{
	struct bwd16 b[2];
	float *bh[2], *d_b[2], *pin[2];
	void *pin16[2];
	for (int k = 0; k < 2; k++) {
		bwd16_init(&b[k], dtype, n, c, oc, ldd);
		bh[k] = rand16(oc, -1, 1, b[k].bf16);
		d_b[k] = bias ? dev_copy(bh[k], oc) : NULL;
		pin[k] = rand16(b[k].nc, -3, 3, b[k].bf16);
		pin16[k] = dev_copy16(pin[k], b[k].nc, b[k].bf16);
	}
	const char *ty = b[0].bf16 ? "bf16" : "fp16";
	void *out16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)n * (size_t)ldd);
	void *pre16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)n * (size_t)oc);
	int prev_ops = kern_matmul_cuda_operands(dtype), prev_gelu = kern_matmul_cuda_fused_gelu(1);
	int prev_tune = kern_cuda_kernel_tune(1), prev_same = kern_matmul_cuda_gemm_same(-1);
	long checked0 = kern_matmul_cuda_gemm_same_checked(NULL);
	struct same_out o[2][2];           /* [tuning off, on][operands] */
	memset(o, 0, sizeof o);
	for (int on = 0; on < 2; on++) {
		kern_matmul_cuda_gemm_same(on);
		for (int k = 0; k < 2; k++)
			same_run_layer(&b[k], d_b[k], out16, pre16, pin16[k], &o[on][k]);
	}
	long other = 0, checked = kern_matmul_cuda_gemm_same_checked(&other) - checked0;
	kern_matmul_cuda_gemm_same(prev_same);
	kern_cuda_kernel_tune(prev_tune);
	kern_matmul_cuda_fused_gelu(prev_gelu);
	kern_matmul_cuda_operands(prev_ops);

	char what[160];
	snprintf(what, sizeof what, "%s same bits n=%d c=%d oc=%d ldd=%d", ty, n, c, oc, ldd);
	if (!gpu_test_standin())
		CHECK_MSG(checked > 0, "%s: no problem was checked", what);
	printf("  %s: %ld problems checked (%ld on another algorithm in all so far)\n", what,
	       checked, other);
	fflush(stdout);
	for (int k = 0; k < 2; k++) {
		const struct same_out *off = &o[0][k], *on = &o[1][k];
		snprintf(what, sizeof what, "%s same bits %s, n=%d c=%d oc=%d ldd=%d", ty,
		         k ? "operands after the picks" : "operands timed", n, c, oc, ldd);
		check_same16(what, on->out, off->out, (long)n * ldd);
		check_same16(what, on->gi, off->gi, b[k].nc);
		check_same_bits(what, on->gw, off->gw, b[k].oc_c);
		check_same_bits(what, on->gb, off->gb, oc);
		if (off->gout) {
			check_same16(what, on->gout, off->gout, (long)n * oc);
			check_same16(what, on->gpre, off->gpre, (long)n * oc);
			check_same16(what, on->dpre, off->dpre, b[k].nc);
			check_same_bits(what, on->dw, off->dw, b[k].oc_c);
		}
	}
	for (int on = 0; on < 2; on++)
		for (int k = 0; k < 2; k++)
			same_out_free(&o[on][k]);
	for (int k = 0; k < 2; k++) {
		free(bh[k]), free(pin[k]);
		kern_cuda_free(d_b[k]), kern_cuda_free(pin16[k]);
		bwd16_free(&b[k]);
	}
	kern_cuda_free(out16), kern_cuda_free(pre16);
}

static void test_same_bits(void)
{
	for_tuning_layers(same_case);
}

int main(void)
{
	gpu_test_init("test_cuda_matmul");
	CHECK_RUN(test_strided);
	CHECK_RUN(test_fwd);
	CHECK_RUN(test_bwd);
	CHECK_RUN(test_empty_sum);
	CHECK_RUN(test_deterministic);
	CHECK_RUN(test_dbias16);
	CHECK_RUN(test_split_odd);
	CHECK_RUN(test_tuned);
	CHECK_RUN(test_tune_file);
	CHECK_RUN(test_same_bits);
	return check_finish();
}
