/* tests/gpu/test_cuda_matmul.c - kernels/matmul_cuda.cu against the
 * reference (matmul_cpu.c): forward with the bias fused (cuBLASLt epilogue)
 * and unfused (cuBLAS, beta = 1) and without bias, on aligned and misaligned
 * buffers; backward adding into its outputs, with NULL dinp and dbias, the
 * _set backward over NaN; the c = 0 edge; run-to-run determinism.
 *
 * Tolerances (want = _ref, in double):
 *   out, dinp, dweight: atol = rtol = 2e-7 (k + 1), k the length of the sum
 *     (c, oc or n), as for the CPU version: an fp32 sum of k products errs
 *     by up to ~k ulp in the worst case. cuBLAS runs plain FP32 here; TF32
 *     (10-bit mantissa) would fail this by orders of magnitude.
 *   dbias: atol 1e-7, rtol 1e-6 (summed in double like the reference; only
 *     the final rounding to float can differ).
 *   determinism: the same bits on two runs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/matmul.h"
#include "kernels/matmul_cuda.h"

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

static void test_fwd(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int off = 0; off < 2; off++) {
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
		for (int off = 0; off < 2; off++) {
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

int main(void)
{
	gpu_test_init("test_cuda_matmul");
	CHECK_RUN(test_strided);
	CHECK_RUN(test_fwd);
	CHECK_RUN(test_bwd);
	CHECK_RUN(test_empty_sum);
	CHECK_RUN(test_deterministic);
	return check_finish();
}
