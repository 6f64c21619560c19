/* tests/gpu/test_cuda_gelu.c - kernels/gelu_cuda.cu against the reference
 * (gelu_cpu.c) on the same inputs: forward, backward, the _set backward,
 * accumulation, in-place use, the unaligned (scalar) path, determinism.
 *
 * Tolerances (|got - want| <= atol + rtol |want|, want = _ref in double):
 *   out:  atol 1e-12, rtol 8e-6. Twice the CPU version's (test_kern_gelu.c):
 *         the fp32 rounding of -2u is magnified by exp(-2u) for x < 0 in
 *         both, and CUDA's expf adds up to 2 ulp.
 *   dinp: atol 4e-7, rtol 2e-6, twice the CPU's for the same reason (the
 *         two terms of gelu' cancel near x = -0.75: absolute error there).
 *   _set vs adding, in place, and run to run: the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/gelu.h"
#include "kernels/gelu_cuda.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"

#define OUT_ATOL 1e-12
#define OUT_RTOL 8e-6
#define DINP_ATOL 4e-7
#define DINP_RTOL 2e-6

static uint64_t rng = 11;

static const long sizes[] = { 1, 3, 7, 33, 257, 4096, 100003, (1L << 20) + 5 };

/* off = 1 runs on views one float past cudaMalloc's alignment (scalar path) */
static void compare(long n, float lo, float hi, int off)
{
	char what[128];
	float *inp = host_rand(n, lo, hi, &rng), *dout = host_rand(n, -1, 1, &rng);
	float *dinp0 = host_rand(n, -1, 1, &rng);
	float *d_inp = dev_alloc(n + off), *d_dout = dev_alloc(n + off);
	float *d_out = dev_alloc(n + off), *d_dinp = dev_alloc(n + off);
	dev_put(d_inp + off, inp, n);
	dev_put(d_dout + off, dout, n);

	float *want = host_zeros(n);
	kern_gelu_fwd_ref(want, inp, n);
	kern_gelu_fwd_cuda(d_out + off, d_inp + off, n);
	float *got = dev_fetch(d_out + off, n);
	snprintf(what, sizeof what, "out n=%ld x in [%g, %g] off=%d", n, lo, hi, off);
	check_close(what, got, want, n, OUT_ATOL, OUT_RTOL);

	/* backward adds into dinp0 */
	float *dwant = host_copy(dinp0, n);
	kern_gelu_bwd_ref(dwant, inp, dout, n);
	dev_put(d_dinp + off, dinp0, n);
	kern_gelu_bwd_cuda(d_dinp + off, d_inp + off, d_dout + off, n);
	float *dgot = dev_fetch(d_dinp + off, n);
	snprintf(what, sizeof what, "dinp n=%ld x in [%g, %g] off=%d", n, lo, hi, off);
	check_close(what, dgot, dwant, n, DINP_ATOL, DINP_RTOL);

	/* _set over NaN against the reference, and adding = dinp0 + set */
	float *nan = host_nan(n);
	dev_put(d_dinp + off, nan, n);
	kern_gelu_bwd_set_cuda(d_dinp + off, d_inp + off, d_dout + off, n);
	float *sgot = dev_fetch(d_dinp + off, n);
	float *swant = host_zeros(n);
	kern_gelu_bwd_set_ref(swant, inp, dout, n);
	snprintf(what, sizeof what, "dinp set n=%ld off=%d", n, off);
	check_close(what, sgot, swant, n, DINP_ATOL, DINP_RTOL);
	for (long i = 0; i < n; i++)
		swant[i] = dinp0[i] + sgot[i];
	snprintf(what, sizeof what, "adding == dinp0 + set, n=%ld off=%d", n, off);
	check_same_bits(what, dgot, swant, n);

	/* in place: out == inp, and the _set backward with dinp == dout */
	dev_put(d_out + off, inp, n);
	kern_gelu_fwd_cuda(d_out + off, d_out + off, n);
	float *ip = dev_fetch(d_out + off, n);
	snprintf(what, sizeof what, "fwd in place n=%ld off=%d", n, off);
	check_same_bits(what, ip, got, n);
	free(ip);
	dev_put(d_dinp + off, dout, n);
	kern_gelu_bwd_set_cuda(d_dinp + off, d_inp + off, d_dinp + off, n);
	ip = dev_fetch(d_dinp + off, n);
	snprintf(what, sizeof what, "bwd set in place n=%ld off=%d", n, off);
	check_same_bits(what, ip, sgot, n);

	free(ip), free(inp), free(dout), free(dinp0), free(want), free(got), free(dwant);
	free(dgot), free(nan), free(sgot), free(swant);
	kern_cuda_free(d_inp), kern_cuda_free(d_dout), kern_cuda_free(d_out), kern_cuda_free(d_dinp);
}

static void test_vs_ref(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		compare(sizes[s], -6, 6, 0);
		compare(sizes[s], -6, 6, 1);
	}
	compare(100003, -0.01f, 0.01f, 0);
	compare(100003, -30, 30, 0); /* the clamp of exp in both directions */
	compare(10001, -1e4f, 1e4f, 1);
}

static void test_deterministic(void)
{
	const long n = (1L << 20) + 3;
	float *inp = host_rand(n, -6, 6, &rng), *dout = host_rand(n, -1, 1, &rng);
	float *d_inp = dev_copy(inp, n), *d_dout = dev_copy(dout, n), *d_out = dev_alloc(n);
	float *res[2];
	for (int r = 0; r < 2; r++) {
		kern_gelu_fwd_cuda(d_out, d_inp, n);
		kern_gelu_bwd_cuda(d_out, d_inp, d_dout, n);
		res[r] = dev_fetch(d_out, n);
	}
	check_same_bits("two runs", res[0], res[1], n);
	free(res[0]), free(res[1]), free(inp), free(dout);
	kern_cuda_free(d_inp), kern_cuda_free(d_dout), kern_cuda_free(d_out);
}

static void test_empty(void)
{
	/* n = 0 launches nothing and touches nothing */
	kern_gelu_fwd_cuda(NULL, NULL, 0);
	kern_gelu_bwd_cuda(NULL, NULL, NULL, 0);
	kern_gelu_bwd_set_cuda(NULL, NULL, NULL, 0);
	kern_cuda_sync();
	CHECK(1);
}

/* With bf16 operands inp and dout are read as bf16 values, and out and dinp
 * stored so: the reference's on the rounded inputs, rounded (within one
 * bf16 spacing), on both paths. */
static void test_bf16_stores(void)
{
	for (int off = 0; off < 2; off++) {
		long n = 100003;
		float *inp = host_rand(n, -4, 4, &rng), *dout = host_rand(n, -1, 1, &rng);
		float *d_inp = dev_alloc(n + off), *d_dout = dev_alloc(n + off);
		float *d_out = dev_alloc(n + off), *d_dinp = dev_alloc(n + off);
		dev_put(d_inp + off, inp, n);
		dev_put(d_dout + off, dout, n);
		float *want = host_zeros(n), *dwant = host_zeros(n);
		float *inp16 = host_copy(inp, n), *dout16 = host_copy(dout, n);
		kern_round_bf16_cpu(inp16, n);
		kern_round_bf16_cpu(dout16, n);
		kern_gelu_fwd_ref(want, inp16, n);
		kern_gelu_bwd_set_ref(dwant, inp16, dout16, n);
		free(inp16), free(dout16);
		kern_matmul_cuda_operands(KERN_MM_BF16);
		kern_gelu_fwd_cuda(d_out + off, d_inp + off, n);
		kern_gelu_bwd_set_cuda(d_dinp + off, d_inp + off, d_dout + off, n);
		kern_matmul_cuda_operands(KERN_MM_FP32);
		float *got = dev_fetch(d_out + off, n), *dgot = dev_fetch(d_dinp + off, n);
		check_stored_bf16(off ? "bf16 out (scalar path)" : "bf16 out", got, want, n, 0, 0x1p-7);
		check_stored_bf16(off ? "bf16 dinp (scalar path)" : "bf16 dinp", dgot, dwant, n, 0, 0x1p-7);
		free(inp), free(dout), free(want), free(dwant), free(got), free(dgot);
		kern_cuda_free(d_inp), kern_cuda_free(d_dout), kern_cuda_free(d_out);
		kern_cuda_free(d_dinp);
	}
}

int main(void)
{
	gpu_test_init("test_cuda_gelu");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_bf16_stores);
	CHECK_RUN(test_deterministic);
	CHECK_RUN(test_empty);
	return check_finish();
}
