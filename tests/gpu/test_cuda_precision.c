/* tests/gpu/test_cuda_precision.c - kernels/precision_cuda.cu against
 * precision_cpu.c, and the 16-bit GEMM operands of matmul_cuda.cu
 * (kern_matmul_cuda_operands) against the reference.
 *
 * Conversions fp32 -> fp16 and fp32 -> bf16: every one of the 2^32 fp32
 * bit patterns (in chunks, through the 16-byte path), the same 16 bits as
 * the CPU, and off the 16-byte grid (the scalar path). Roundings in place:
 * the CPU's bits on random values, ties, subnormals, inf and NaN payloads,
 * on both paths.
 * The inf/NaN check: one bad value anywhere, or none.
 * 16-bit GEMMs: operands rounded to 16 bits first (as a mixed-precision
 * model holds them), so the products are exact and only the fp32 sums
 * differ from the reference's: atol = rtol = 8e-7 (k + 1), k the length of
 * the sum, four times test_cuda_matmul.c's FP32 bound (the tensor cores add
 * in their own order and may align the addends with fewer guard bits). Forward with and without
 * bias, backward dinp (set and add), dweight and dbias.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/matmul.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"
#include "kernels/precision_cuda.h"

static uint64_t rng = 73;

/* every fp32 pattern, 2^26 at a time, through both converters */
static void test_all_patterns(void)
{
	if (gpu_test_standin())
		return;                    /* the CPU's conversions against themselves */
	const long chunk = 1L << 26;
	uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)chunk);
	uint16_t *want = malloc(sizeof(uint16_t) * (size_t)chunk);
	uint16_t *got = malloc(sizeof(uint16_t) * (size_t)chunk);
	float *d_in = kern_cuda_malloc(sizeof(float) * (size_t)chunk);
	uint16_t *d_out = kern_cuda_malloc(sizeof(uint16_t) * (size_t)chunk);
	long bad[2] = { 0, 0 };
	uint32_t first[2] = { 0, 0 };
	for (uint64_t base = 0; base < (1ULL << 32); base += (uint64_t)chunk) {
		for (long i = 0; i < chunk; i++)
			bits[i] = (uint32_t)(base + (uint64_t)i);
		kern_cuda_upload(d_in, bits, sizeof(float) * (size_t)chunk);
		for (int k = 0; k < 2; k++) {
			if (k == 0) {
				kern_fp32_to_fp16_cpu(want, (const float *)bits, chunk);
				kern_fp32_to_fp16_cuda(d_out, d_in, chunk);
			} else {
				kern_fp32_to_bf16_cpu(want, (const float *)bits, chunk);
				kern_fp32_to_bf16_cuda(d_out, d_in, chunk);
			}
			kern_cuda_download(got, d_out, sizeof(uint16_t) * (size_t)chunk);
			for (long i = 0; i < chunk; i++)
				if (got[i] != want[i] && bad[k]++ == 0)
					first[k] = bits[i];
		}
	}
	CHECK_MSG(bad[0] == 0, "fp32 -> fp16: %ld patterns differ from the CPU (first 0x%08x)",
	          bad[0], first[0]);
	CHECK_MSG(bad[1] == 0, "fp32 -> bf16: %ld patterns differ from the CPU (first 0x%08x)",
	          bad[1], first[1]);
	free(bits), free(want), free(got);
	kern_cuda_free(d_in), kern_cuda_free(d_out);
}

static void test_round_in_place(void)
{
	const long n = 1 << 20;
	float *x = host_rand(n, -70000.0f, 70000.0f, &rng);
	/* ties, subnormals of both formats, the largest values, inf, NaNs */
	const uint32_t special[] = { 0x3f808000u, 0x3f818000u, 0x00000001u, 0x80000001u,
		                     0x33800000u, 0x33000000u, 0x387fe000u, 0x477ff000u,
		                     0x477fefffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
		                     0x7fc00001u, 0x7f800001u, 0xffbfffffu, 0x80000000u };
	for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
		memcpy(&x[i * 997], &special[i], sizeof(float));
	for (long i = 0; i < n; i += 5)
		x[i] *= 1e-6f;                       /* small: fp16 subnormals */
	/* aligned (16-byte accesses), and a view one float off with an odd
	 * length (the scalar loop) */
	for (int off = 0; off < 2; off++) {
		long len = off ? n - 3 : n;
		for (int k = 0; k < 2; k++) {
			float *want = host_copy(x, len);
			float *d = dev_alloc(n + 1);
			dev_put(d + off, x, len);
			if (k == 0) {
				kern_round_fp16_cpu(want, len);
				kern_round_fp16_cuda(d + off, len);
			} else {
				kern_round_bf16_cpu(want, len);
				kern_round_bf16_cuda(d + off, len);
			}
			float *got = dev_fetch(d + off, len);
			char what[64];
			snprintf(what, sizeof what, "round %s off=%d n=%ld", k ? "bf16" : "fp16", off, len);
			check_same_bits(what, got, want, len);
			free(want), free(got);
			kern_cuda_free(d);
		}
	}
	free(x);
}

/* The converters on a view one float off with an odd length (the scalar
 * loop; test_all_patterns runs the 16-byte one over every pattern). */
static void test_convert_unaligned(void)
{
	const long n = 100003;
	float *x = host_rand(n + 1, -70000.0f, 70000.0f, &rng);
	float *d = dev_copy(x, n + 1);
	uint16_t *d_out = kern_cuda_malloc(sizeof(uint16_t) * (size_t)(n + 1));
	uint16_t *want = malloc(sizeof(uint16_t) * (size_t)n), *got = malloc(sizeof(uint16_t) * (size_t)n);
	for (int k = 0; k < 2; k++) {
		if (k == 0) {
			kern_fp32_to_fp16_cpu(want, x + 1, n);
			kern_fp32_to_fp16_cuda(d_out, d + 1, n);
		} else {
			kern_fp32_to_bf16_cpu(want, x + 1, n);
			kern_fp32_to_bf16_cuda(d_out + 1, d + 1, n);
		}
		kern_cuda_download(got, d_out + k, sizeof(uint16_t) * (size_t)n);
		CHECK_MSG(memcmp(got, want, sizeof(uint16_t) * (size_t)n) == 0,
		          "fp32 -> %s off the 16-byte grid differs from the CPU", k ? "bf16" : "fp16");
	}
	free(x), free(want), free(got);
	kern_cuda_free(d), kern_cuda_free(d_out);
}

static void test_nonfinite(void)
{
	const long n = 3000001;
	float *x = host_rand(n, -1e30f, 1e30f, &rng);
	float *d = dev_copy(x, n);
	CHECK(kern_nonfinite_cuda(d, n) == 0);
	const long at[] = { 0, 31, 32, 4097, n - 1 };
	const float bad[] = { INFINITY, -INFINITY, NAN };
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
		for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
			dev_put(d + at[i], &bad[j], 1);
			CHECK_MSG(kern_nonfinite_cuda(d, n) == 1, "a %g at %ld is not seen", bad[j], at[i]);
			dev_put(d + at[i], &x[at[i]], 1);
		}
	CHECK(kern_nonfinite_cuda(d, n) == 0);
	CHECK(kern_nonfinite_cuda(d, 0) == 0);
	free(x);
	kern_cuda_free(d);
}

static double tol(int k)
{
	return 8e-7 * (k + 1);
}

/* a host buffer of n values rounded to the 16-bit type */
static float *rand16(long n, float lo, float hi, int bf16)
{
	return host_rand16(n, lo, hi, bf16, &rng);
}

static void gemm16(int n, int c, int oc, int bf16)
{
	char what[160];
	const char *t = bf16 ? "bf16" : "fp16";
	long nc = (long)n * c, oc_c = (long)oc * c, noc = (long)n * oc;
	float *inp = rand16(nc, -1, 1, bf16), *w = rand16(oc_c, -1, 1, bf16);
	float *bias = host_rand(oc, -1, 1, &rng), *dout = rand16(noc, -1, 1, bf16);
	float *d_inp = dev_copy(inp, nc), *d_w = dev_copy(w, oc_c), *d_bias = dev_copy(bias, oc);
	float *d_dout = dev_copy(dout, noc), *d_out = dev_alloc(noc);
	int prev = kern_matmul_cuda_operands(bf16 ? KERN_MM_BF16 : KERN_MM_FP16);
	/* the bias in cuBLASLt's epilogue (fused) or added by the GEMM onto it */
	for (int with_bias = 0; with_bias < 3; with_bias++) {
		int fused = kern_matmul_cuda_fused_bias(with_bias != 2);
		float *want = host_zeros(noc);
		kern_matmul_fwd_ref(want, inp, w, with_bias ? bias : NULL, n, c, oc);
		kern_matmul_fwd_cuda(d_out, d_inp, d_w, with_bias ? d_bias : NULL, n, c, oc);
		kern_matmul_cuda_fused_bias(fused);
		float *got = dev_fetch(d_out, noc);
		snprintf(what, sizeof what, "%s forward%s n=%d c=%d oc=%d", t,
		         with_bias == 1 ? " +bias (epilogue)" : with_bias ? " +bias" : "", n, c, oc);
		check_close(what, got, want, noc, tol(c), tol(c));
		free(want), free(got);
	}
	/* backward adding into random starting values */
	float *dinp0 = host_rand(nc, -1, 1, &rng), *dw0 = host_rand(oc_c, -1, 1, &rng);
	float *db0 = host_rand(oc, -1, 1, &rng);
	float *dinp = host_copy(dinp0, nc), *dw = host_copy(dw0, oc_c), *db = host_copy(db0, oc);
	kern_matmul_bwd_ref(dinp, dw, db, dout, inp, w, n, c, oc);
	float *d_dinp = dev_copy(dinp0, nc), *d_dw = dev_copy(dw0, oc_c), *d_db = dev_copy(db0, oc);
	kern_matmul_bwd_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, n, c, oc);
	float *g_dinp = dev_fetch(d_dinp, nc), *g_dw = dev_fetch(d_dw, oc_c), *g_db = dev_fetch(d_db, oc);
	snprintf(what, sizeof what, "%s dinp n=%d c=%d oc=%d", t, n, c, oc);
	check_close(what, g_dinp, dinp, nc, tol(oc), tol(oc));
	snprintf(what, sizeof what, "%s dweight n=%d c=%d oc=%d", t, n, c, oc);
	check_close(what, g_dw, dw, oc_c, tol(n), tol(n));
	snprintf(what, sizeof what, "%s dbias n=%d c=%d oc=%d", t, n, c, oc);
	check_close(what, g_db, db, oc, 1e-7, 1e-6);
	/* the _set backward over NaN */
	float *nan = host_nan(nc), *sdinp = host_zeros(nc);
	float *sdw = host_copy(dw0, oc_c), *sdb = host_copy(db0, oc);
	kern_matmul_bwd_set_ref(sdinp, sdw, sdb, dout, inp, w, n, c, oc);
	dev_put(d_dinp, nan, nc);
	dev_put(d_dw, dw0, oc_c);
	dev_put(d_db, db0, oc);
	kern_matmul_bwd_set_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, n, c, oc);
	float *gs = dev_fetch(d_dinp, nc);
	snprintf(what, sizeof what, "%s dinp set n=%d c=%d oc=%d", t, n, c, oc);
	check_close(what, gs, sdinp, nc, tol(oc), tol(oc));
	kern_matmul_cuda_operands(prev);

	free(inp), free(w), free(bias), free(dout), free(dinp0), free(dw0), free(db0);
	free(dinp), free(dw), free(db), free(g_dinp), free(g_dw), free(g_db);
	free(nan), free(sdinp), free(sdw), free(sdb), free(gs);
	kern_cuda_free(d_inp), kern_cuda_free(d_w), kern_cuda_free(d_bias), kern_cuda_free(d_dout);
	kern_cuda_free(d_out), kern_cuda_free(d_dinp), kern_cuda_free(d_dw), kern_cuda_free(d_db);
}

/* Unrounded operands: the GEMMs read them as 16-bit values (their operand
 * copies), and so does the bias gradient's sum of dout: the results of the
 * same operands rounded first. A GEMM's fp32 output can then go to the next
 * one without a rounding pass (cuda_common.h). */
static void test_gemm16_reads_16_bits(void)
{
	int n = 257, c = 129, oc = 511;
	long nc = (long)n * c, oc_c = (long)oc * c, noc = (long)n * oc;
	float *inp = host_rand(nc, -1, 1, &rng), *w = host_rand(oc_c, -1, 1, &rng);
	float *dout = host_rand(noc, -1, 1, &rng);
	float *inp16 = host_copy(inp, nc), *w16 = host_copy(w, oc_c), *dout16 = host_copy(dout, noc);
	kern_round_bf16_cpu(inp16, nc);
	kern_round_bf16_cpu(w16, oc_c);
	kern_round_bf16_cpu(dout16, noc);
	float *d_inp = dev_copy(inp, nc), *d_w = dev_copy(w, oc_c), *d_dout = dev_copy(dout, noc);
	float *out = host_zeros(noc), *dinp = host_zeros(nc), *dw = host_zeros(oc_c);
	float *db = host_zeros(oc);
	/* the _set backward adds into dweight and dbias (matmul.h): zeros */
	float *d_out = dev_alloc(noc), *d_dinp = dev_alloc(nc), *d_dw = dev_copy(dw, oc_c);
	float *d_db = dev_copy(db, oc);
	kern_matmul_fwd_ref(out, inp16, w16, NULL, n, c, oc);
	kern_matmul_bwd_set_ref(dinp, dw, db, dout16, inp16, w16, n, c, oc);
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	kern_matmul_fwd_cuda(d_out, d_inp, d_w, NULL, n, c, oc);
	kern_matmul_bwd_set_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, n, c, oc);
	kern_matmul_cuda_operands(prev);
	float *g_out = dev_fetch(d_out, noc), *g_dinp = dev_fetch(d_dinp, nc);
	float *g_dw = dev_fetch(d_dw, oc_c), *g_db = dev_fetch(d_db, oc);
	check_close("unrounded operands: forward", g_out, out, noc, tol(c), tol(c));
	check_close("unrounded operands: dinp", g_dinp, dinp, nc, tol(oc), tol(oc));
	check_close("unrounded operands: dweight", g_dw, dw, oc_c, tol(n), tol(n));
	check_close("unrounded operands: dbias", g_db, db, oc, 1e-7, 1e-6);
	free(inp), free(w), free(dout), free(inp16), free(w16), free(dout16);
	free(out), free(dinp), free(dw), free(db), free(g_out), free(g_dinp), free(g_dw), free(g_db);
	kern_cuda_free(d_inp), kern_cuda_free(d_w), kern_cuda_free(d_dout), kern_cuda_free(d_out);
	kern_cuda_free(d_dinp), kern_cuda_free(d_dw), kern_cuda_free(d_db);
}

static void test_gemm16(void)
{
	const int shapes[][3] = { { 1, 1, 1 }, { 7, 13, 5 }, { 257, 129, 511 }, { 64, 768, 2304 },
		                  { 128, 3072, 768 }, { 37, 256, 1000 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		for (int bf16 = 0; bf16 < 2; bf16++)
			/* (the stand-in, whose GEMMs are the CPU's, not GPT-2's) */
			if (!gpu_test_standin() || (long)shapes[k][0] * shapes[k][1] * shapes[k][2] < 10000000L)
				gemm16(shapes[k][0], shapes[k][1], shapes[k][2], bf16);
}

int main(void)
{
	gpu_test_init("test_cuda_precision");
	CHECK_RUN(test_all_patterns);
	CHECK_RUN(test_round_in_place);
	CHECK_RUN(test_convert_unaligned);
	CHECK_RUN(test_gemm16_reads_16_bits);
	CHECK_RUN(test_nonfinite);
	CHECK_RUN(test_gemm16);
	return check_finish();
}
