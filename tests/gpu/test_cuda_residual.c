/* tests/gpu/test_cuda_residual.c - kernels/residual_cuda.cu against the
 * reference (residual_cpu.c): forward (also with out == a), backward adding
 * into both gradients, the unaligned (scalar) path.
 *
 * Tolerance: exact (one add per element, as in the reference).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"
#include "kernels/residual.h"
#include "kernels/residual_cuda.h"

static uint64_t rng = 31;

static const long sizes[] = { 1, 3, 7, 33, 257, 4096, 100003, (1L << 20) + 5 };

static void compare(long n, int off)
{
	char what[128];
	float *a = host_rand(n, -1, 1, &rng), *b = host_rand(n, -1, 1, &rng);
	float *dout = host_rand(n, -1, 1, &rng);
	float *da0 = host_rand(n, -1, 1, &rng), *db0 = host_rand(n, -1, 1, &rng);
	float *d_a = dev_alloc(n + off), *d_b = dev_alloc(n + off), *d_out = dev_alloc(n + off);
	float *d_dout = dev_alloc(n + off);
	dev_put(d_a + off, a, n);
	dev_put(d_b + off, b, n);
	dev_put(d_dout + off, dout, n);

	float *want = host_zeros(n);
	kern_residual_fwd_ref(want, a, b, n);
	kern_residual_fwd_cuda(d_out + off, d_a + off, d_b + off, n);
	float *got = dev_fetch(d_out + off, n);
	snprintf(what, sizeof what, "out n=%ld off=%d", n, off);
	check_close(what, got, want, n, 0, 0);

	/* out == a */
	kern_residual_fwd_cuda(d_a + off, d_a + off, d_b + off, n);
	float *ip = dev_fetch(d_a + off, n);
	snprintf(what, sizeof what, "out == a n=%ld off=%d", n, off);
	check_same_bits(what, ip, got, n);

	float *da = host_copy(da0, n), *db = host_copy(db0, n);
	kern_residual_bwd_ref(da, db, dout, n);
	dev_put(d_a + off, da0, n);
	dev_put(d_b + off, db0, n);
	kern_residual_bwd_cuda(d_a + off, d_b + off, d_dout + off, n);
	float *ga = dev_fetch(d_a + off, n), *gb = dev_fetch(d_b + off, n);
	snprintf(what, sizeof what, "da n=%ld off=%d", n, off);
	check_close(what, ga, da, n, 0, 0);
	snprintf(what, sizeof what, "db n=%ld off=%d", n, off);
	check_close(what, gb, db, n, 0, 0);

	free(a), free(b), free(dout), free(da0), free(db0), free(want), free(got), free(ip);
	free(da), free(db), free(ga), free(gb);
	kern_cuda_free(d_a), kern_cuda_free(d_b), kern_cuda_free(d_out), kern_cuda_free(d_dout);
}

static void test_vs_ref(void)
{
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		compare(sizes[s], 0);
		compare(sizes[s], 1);
	}
}

/* With bf16 operands the forward reads its inputs as bf16 values and the
 * outputs are stored so: the reference's (one add of the rounded inputs)
 * rounded, bit for bit, on both paths. */
static void test_bf16_stores(void)
{
	for (int off = 0; off < 2; off++) {
		long n = 100003;
		float *a = host_rand(n, -1, 1, &rng), *b = host_rand(n, -1, 1, &rng);
		float *dout = host_rand(n, -1, 1, &rng);
		float *d_a = dev_alloc(n + off), *d_b = dev_alloc(n + off), *d_out = dev_alloc(n + off);
		float *d_dout = dev_alloc(n + off);
		dev_put(d_a + off, a, n);
		dev_put(d_b + off, b, n);
		dev_put(d_dout + off, dout, n);
		float *want = host_zeros(n), *da = host_copy(a, n), *db = host_copy(b, n);
		float *a16 = host_copy(a, n), *b16 = host_copy(b, n);
		kern_round_bf16_cpu(a16, n);
		kern_round_bf16_cpu(b16, n);
		kern_residual_fwd_ref(want, a16, b16, n);
		free(a16), free(b16);
		kern_residual_bwd_ref(da, db, dout, n);
		kern_matmul_cuda_operands(KERN_MM_BF16);
		kern_residual_fwd_cuda(d_out + off, d_a + off, d_b + off, n);
		kern_residual_bwd_cuda(d_a + off, d_b + off, d_dout + off, n);
		kern_matmul_cuda_operands(KERN_MM_FP32);
		float *got = dev_fetch(d_out + off, n), *ga = dev_fetch(d_a + off, n);
		float *gb = dev_fetch(d_b + off, n);
		check_stored_bf16(off ? "bf16 out (scalar path)" : "bf16 out", got, want, n, 0, 0);
		check_stored_bf16(off ? "bf16 da (scalar path)" : "bf16 da", ga, da, n, 0, 0);
		check_stored_bf16(off ? "bf16 db (scalar path)" : "bf16 db", gb, db, n, 0, 0);
		free(a), free(b), free(dout), free(want), free(da), free(db), free(got), free(ga);
		free(gb);
		kern_cuda_free(d_a), kern_cuda_free(d_b), kern_cuda_free(d_out);
		kern_cuda_free(d_dout);
	}
}

int main(void)
{
	gpu_test_init("test_cuda_residual");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_bf16_stores);
	return check_finish();
}
