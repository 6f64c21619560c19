/* tests/gpu/test_cuda_attention.c - kernels/attention_cuda.cu against the
 * reference (attention_cpu.c): att and out forward, dqkv backward added into
 * random initial values, the _set backward over NaN, datt turned into
 * dpreatt, zeros above the diagonal, odd shapes, run-to-run determinism.
 *
 * Tolerances (want = _ref, in double), those of the CPU version:
 *   att 1e-6 + 1e-4 rel; out 1e-5 + 1e-4 rel; dqkv 2e-5 + 1e-4 rel;
 *   datt (= the reference's dpreatt) 1e-6 + 1e-4 rel.
 * The scores and products are fp32 GEMMs (sums of hs or t terms); exp turns
 * the scores' absolute error into relative error of att.
 * Backward runs on both sides from the reference's att.
 *
 * 16-bit operands (kern_cuda_gemm_operands bf16 and fp16, as a mixed-
 * precision model runs it), on qkv and dout rounded to 16 bits: the scores
 * are exact products summed in fp32; the probabilities (and their
 * gradients) are rounded to 16 bits for the products with v, q and k, a
 * relative error of u = 2^-9 (bf16) or 2^-12 (fp16) in each term, so out
 * and dqkv are held to a normwise relative error ||got - want|| / ||want||
 * <= 2u; att, left rounded, holds 16-bit values within 2u of the reference
 * (plus fp32's tolerance above: the rounding's error is half a spacing,
 * which is 2u relative just above a power of two); datt (dout v^T exact, then the fp32
 * softmax backward) elementwise as tight as in fp32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_test.h"
#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "kernels/cuda_common.h"
#include "kernels/precision.h"

static uint64_t rng = 91;

struct shape {
	int b, t, c, nh;
};

static const struct shape shapes[] = {
	{ 1, 1, 4, 1 }, { 2, 7, 12, 3 }, { 3, 33, 64, 4 }, { 2, 64, 128, 2 }, { 1, 257, 96, 6 },
	{ 2, 128, 768, 12 },
};

static void compare(struct shape s)
{
	char what[160];
	long btc = (long)s.b * s.t * s.c, tt = (long)s.b * s.nh * s.t * s.t;
	float *qkv = host_rand(3 * btc, -1, 1, &rng), *dout = host_rand(btc, -1, 1, &rng);
	float *dqkv0 = host_rand(3 * btc, -1, 1, &rng);
	float *d_qkv = dev_copy(qkv, 3 * btc), *d_dout = dev_copy(dout, btc);
	float *d_out = dev_alloc(btc), *d_att = dev_alloc(tt), *d_datt = dev_alloc(tt);
	float *d_dqkv = dev_alloc(3 * btc);

	float *out = host_zeros(btc), *preatt = host_zeros(tt), *att = host_zeros(tt);
	kern_attention_fwd_ref(out, preatt, att, qkv, s.b, s.t, s.c, s.nh);
	float *nan = host_nan(tt);
	dev_put(d_att, nan, tt); /* every element, the masked ones too, is written */
	kern_attention_fwd_cuda(d_out, NULL, d_att, d_qkv, s.b, s.t, s.c, s.nh);
	float *gout = dev_fetch(d_out, btc), *gatt = dev_fetch(d_att, tt);
	snprintf(what, sizeof what, "att b=%d t=%d c=%d nh=%d", s.b, s.t, s.c, s.nh);
	check_close(what, gatt, att, tt, 1e-6, 1e-4);
	snprintf(what, sizeof what, "out b=%d t=%d c=%d nh=%d", s.b, s.t, s.c, s.nh);
	check_close(what, gout, out, btc, 1e-5, 1e-4);

	/* backward from the reference's att */
	dev_put(d_att, att, tt);
	float *dqkv = host_copy(dqkv0, 3 * btc), *dpreatt = host_zeros(tt), *datt = host_zeros(tt);
	kern_attention_bwd_ref(dqkv, dpreatt, datt, dout, qkv, att, s.b, s.t, s.c, s.nh);
	dev_put(d_dqkv, dqkv0, 3 * btc);
	dev_put(d_datt, nan, tt);
	kern_attention_bwd_cuda(d_dqkv, NULL, d_datt, d_dout, d_qkv, d_att, s.b, s.t, s.c, s.nh);
	float *gdqkv = dev_fetch(d_dqkv, 3 * btc), *gdatt = dev_fetch(d_datt, tt);
	snprintf(what, sizeof what, "dqkv b=%d t=%d c=%d nh=%d", s.b, s.t, s.c, s.nh);
	check_close(what, gdqkv, dqkv, 3 * btc, 2e-5, 1e-4);
	snprintf(what, sizeof what, "datt = dpreatt b=%d t=%d c=%d nh=%d", s.b, s.t, s.c, s.nh);
	check_close(what, gdatt, dpreatt, tt, 1e-6, 1e-4);

	/* _set over NaN */
	float *sdqkv = host_zeros(3 * btc);
	kern_attention_bwd_set_ref(sdqkv, dpreatt, datt, dout, qkv, att, s.b, s.t, s.c, s.nh);
	float *nan3 = host_nan(3 * btc);
	dev_put(d_dqkv, nan3, 3 * btc);
	kern_attention_bwd_set_cuda(d_dqkv, NULL, d_datt, d_dout, d_qkv, d_att, s.b, s.t, s.c, s.nh);
	float *gsdqkv = dev_fetch(d_dqkv, 3 * btc);
	snprintf(what, sizeof what, "dqkv set b=%d t=%d c=%d nh=%d", s.b, s.t, s.c, s.nh);
	check_close(what, gsdqkv, sdqkv, 3 * btc, 2e-5, 1e-4);

	free(qkv), free(dout), free(dqkv0), free(out), free(preatt), free(att), free(nan);
	free(gout), free(gatt), free(dqkv), free(dpreatt), free(datt), free(gdqkv), free(gdatt);
	free(sdqkv), free(nan3), free(gsdqkv);
	kern_cuda_free(d_qkv), kern_cuda_free(d_dout), kern_cuda_free(d_out);
	kern_cuda_free(d_att), kern_cuda_free(d_datt), kern_cuda_free(d_dqkv);
}

static void test_vs_ref(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		compare(shapes[k]);
}

/* ||got - want||_2 / ||want||_2 <= rel */
static void check_normwise(const char *what, const float *got, const float *want, long n,
                           double rel)
{
	double num = 0, den = 0;
	for (long i = 0; i < n; i++) {
		double d = (double)got[i] - want[i];
		num += d * d;
		den += (double)want[i] * want[i];
	}
	double err = den > 0 ? sqrt(num / den) : sqrt(num);
	CHECK_MSG(err <= rel, "%s: normwise relative error %.3g > %.3g", what, err, rel);
}

static void compare16(struct shape s, int bf16)
{
	char what[160];
	const char *ty = bf16 ? "bf16" : "fp16";
	double u = bf16 ? 1.0 / 512 : 1.0 / 4096;
	long btc = (long)s.b * s.t * s.c, tt = (long)s.b * s.nh * s.t * s.t;
	float *qkv = host_rand(3 * btc, -1, 1, &rng), *dout = host_rand(btc, -1, 1, &rng);
	void (*round16)(float *, long) = bf16 ? kern_round_bf16_cpu : kern_round_fp16_cpu;
	round16(qkv, 3 * btc);
	round16(dout, btc);
	float *d_qkv = dev_copy(qkv, 3 * btc), *d_dout = dev_copy(dout, btc);
	float *d_out = dev_alloc(btc), *d_att = dev_alloc(tt), *d_datt = dev_alloc(tt);
	float *d_dqkv = dev_alloc(3 * btc);
	float *out = host_zeros(btc), *preatt = host_zeros(tt), *att = host_zeros(tt);
	kern_attention_fwd_ref(out, preatt, att, qkv, s.b, s.t, s.c, s.nh);
	kern_cuda_set_gemm_operands(bf16 ? 2 : 1);
	kern_attention_fwd_cuda(d_out, NULL, d_att, d_qkv, s.b, s.t, s.c, s.nh);
	float *gout = dev_fetch(d_out, btc), *gatt = dev_fetch(d_att, tt);
	snprintf(what, sizeof what, "%s att b=%d t=%d c=%d nh=%d", ty, s.b, s.t, s.c, s.nh);
	check_close(what, gatt, att, tt, 1e-6, 1e-4 + 2 * u);
	float *gatt16 = host_copy(gatt, tt);
	round16(gatt16, tt);
	snprintf(what, sizeof what, "%s att left in 16 bits b=%d t=%d c=%d nh=%d", ty, s.b, s.t, s.c,
	         s.nh);
	check_same_bits(what, gatt, gatt16, tt);
	free(gatt16);
	snprintf(what, sizeof what, "%s out b=%d t=%d c=%d nh=%d", ty, s.b, s.t, s.c, s.nh);
	check_normwise(what, gout, out, btc, 2 * u);
	dev_put(d_att, att, tt);
	float *dqkv = host_zeros(3 * btc), *dpreatt = host_zeros(tt), *datt = host_zeros(tt);
	kern_attention_bwd_set_ref(dqkv, dpreatt, datt, dout, qkv, att, s.b, s.t, s.c, s.nh);
	kern_attention_bwd_set_cuda(d_dqkv, NULL, d_datt, d_dout, d_qkv, d_att, s.b, s.t, s.c, s.nh);
	kern_cuda_set_gemm_operands(0);
	float *gdqkv = dev_fetch(d_dqkv, 3 * btc), *gdatt = dev_fetch(d_datt, tt);
	snprintf(what, sizeof what, "%s dqkv b=%d t=%d c=%d nh=%d", ty, s.b, s.t, s.c, s.nh);
	check_normwise(what, gdqkv, dqkv, 3 * btc, 2 * u);
	snprintf(what, sizeof what, "%s datt = dpreatt b=%d t=%d c=%d nh=%d", ty, s.b, s.t, s.c, s.nh);
	check_close(what, gdatt, dpreatt, tt, 1e-6, 1e-4);
	free(qkv), free(dout), free(out), free(preatt), free(att), free(gout), free(gatt);
	free(dqkv), free(dpreatt), free(datt), free(gdqkv), free(gdatt);
	kern_cuda_free(d_qkv), kern_cuda_free(d_dout), kern_cuda_free(d_out);
	kern_cuda_free(d_att), kern_cuda_free(d_datt), kern_cuda_free(d_dqkv);
}

static void test_16bit_operands(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		compare16(shapes[k], 1);
		compare16(shapes[k], 0);
	}
}

static void test_deterministic(void)
{
	struct shape s = { 4, 256, 768, 12 };
	long btc = (long)s.b * s.t * s.c, tt = (long)s.b * s.nh * s.t * s.t;
	float *qkv = host_rand(3 * btc, -1, 1, &rng), *dout = host_rand(btc, -1, 1, &rng);
	float *d_qkv = dev_copy(qkv, 3 * btc), *d_dout = dev_copy(dout, btc);
	float *d_out = dev_alloc(btc), *d_att = dev_alloc(tt), *d_datt = dev_alloc(tt);
	float *d_dqkv = dev_alloc(3 * btc);
	float *out[2], *dq[2];
	for (int r = 0; r < 2; r++) {
		kern_attention_fwd_cuda(d_out, NULL, d_att, d_qkv, s.b, s.t, s.c, s.nh);
		kern_cuda_zero(d_dqkv, sizeof(float) * 3 * (size_t)btc);
		kern_attention_bwd_cuda(d_dqkv, NULL, d_datt, d_dout, d_qkv, d_att, s.b, s.t, s.c, s.nh);
		out[r] = dev_fetch(d_out, btc);
		dq[r] = dev_fetch(d_dqkv, 3 * btc);
	}
	check_same_bits("out", out[0], out[1], btc);
	check_same_bits("dqkv", dq[0], dq[1], 3 * btc);
	for (int r = 0; r < 2; r++)
		free(out[r]), free(dq[r]);
	free(qkv), free(dout);
	kern_cuda_free(d_qkv), kern_cuda_free(d_dout), kern_cuda_free(d_out);
	kern_cuda_free(d_att), kern_cuda_free(d_datt), kern_cuda_free(d_dqkv);
}

int main(void)
{
	gpu_test_init("test_cuda_attention");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_16bit_operands);
	CHECK_RUN(test_deterministic);
	return check_finish();
}
