/* tests/gpu/test_cuda_relu.c - kernels/relu_cuda.cu against the reference
 * (relu_cpu.c): forward, backward, the _set backward, accumulation, in-place
 * use, inf/NaN in dout where the unit is off, the unaligned (scalar) path.
 *
 * Tolerance: exact everywhere (the same selects and adds as the reference).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/relu.h"
#include "kernels/relu_cuda.h"

static uint64_t rng = 21;

static const long sizes[] = { 1, 3, 7, 33, 257, 4096, 100003, (1L << 20) + 5 };

static void compare(long n, int off)
{
	char what[128];
	float *inp = host_rand(n, -1, 1, &rng), *dout = host_rand(n, -1, 1, &rng);
	float *dinp0 = host_rand(n, -1, 1, &rng);
	/* inf and NaN in dout where the unit is off must not leak */
	for (long i = 0; i < n; i += 5)
		if (inp[i] <= 0)
			dout[i] = (i / 5) % 2 ? INFINITY : NAN;
	float *d_inp = dev_alloc(n + off), *d_dout = dev_alloc(n + off);
	float *d_out = dev_alloc(n + off), *d_dinp = dev_alloc(n + off);
	dev_put(d_inp + off, inp, n);
	dev_put(d_dout + off, dout, n);

	float *want = host_zeros(n);
	kern_relu_fwd_ref(want, inp, n);
	kern_relu_fwd_cuda(d_out + off, d_inp + off, n);
	float *got = dev_fetch(d_out + off, n);
	snprintf(what, sizeof what, "out n=%ld off=%d", n, off);
	check_close(what, got, want, n, 0, 0);

	float *dwant = host_copy(dinp0, n);
	kern_relu_bwd_ref(dwant, inp, dout, n);
	dev_put(d_dinp + off, dinp0, n);
	kern_relu_bwd_cuda(d_dinp + off, d_inp + off, d_dout + off, n);
	float *dgot = dev_fetch(d_dinp + off, n);
	snprintf(what, sizeof what, "dinp n=%ld off=%d", n, off);
	check_close(what, dgot, dwant, n, 0, 0);

	float *nan = host_nan(n), *swant = host_zeros(n);
	kern_relu_bwd_set_ref(swant, inp, dout, n);
	dev_put(d_dinp + off, nan, n);
	kern_relu_bwd_set_cuda(d_dinp + off, d_inp + off, d_dout + off, n);
	float *sgot = dev_fetch(d_dinp + off, n);
	snprintf(what, sizeof what, "dinp set n=%ld off=%d", n, off);
	check_close(what, sgot, swant, n, 0, 0);

	/* in place */
	dev_put(d_out + off, inp, n);
	kern_relu_fwd_cuda(d_out + off, d_out + off, n);
	float *ip = dev_fetch(d_out + off, n);
	snprintf(what, sizeof what, "fwd in place n=%ld off=%d", n, off);
	check_same_bits(what, ip, got, n);
	free(ip);
	dev_put(d_dinp + off, dout, n);
	kern_relu_bwd_set_cuda(d_dinp + off, d_inp + off, d_dinp + off, n);
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
		compare(sizes[s], 0);
		compare(sizes[s], 1);
	}
}

static void test_deterministic(void)
{
	const long n = 100003;
	float *inp = host_rand(n, -1, 1, &rng), *dout = host_rand(n, -1, 1, &rng);
	float *d_inp = dev_copy(inp, n), *d_dout = dev_copy(dout, n), *d_out = dev_alloc(n);
	float *res[2];
	for (int r = 0; r < 2; r++) {
		kern_relu_fwd_cuda(d_out, d_inp, n);
		kern_relu_bwd_cuda(d_out, d_inp, d_dout, n);
		res[r] = dev_fetch(d_out, n);
	}
	check_same_bits("two runs", res[0], res[1], n);
	free(res[0]), free(res[1]), free(inp), free(dout);
	kern_cuda_free(d_inp), kern_cuda_free(d_dout), kern_cuda_free(d_out);
}

int main(void)
{
	gpu_test_init("test_cuda_relu");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_deterministic);
	return check_finish();
}
