/* tests/gpu/test_cuda_optimizer.c - kernels/optimizer_cuda.cu against the
 * reference (optimizer_cpu.c): every update on the same w, m, v, g, norms,
 * the _dev norms, determinism of the norms.
 *
 * Tolerances (want = _ref):
 *   updates (scale, sgd with and without momentum and Nesterov, adamw,
 *   lars, the lamb moments and lamb apply): exact. The kernels evaluate the
 *   reference's formulas operation for operation without FMA contraction;
 *   IEEE +, -, *, / and sqrtf round the same on both sides.
 *   norms (sumsq, lamb's ||u||^2): rtol 2.2e-16 n. The squares are exact in
 *   double; only the order of the n - 1 double additions differs.
 *   _dev norms: the same bits as the returning ones; two runs: the same bits.
 *   int8 state (kernels/quant8_cuda.cu against quant8_cpu.c): the weights,
 *   codes and block scales of every fused update, and the LAMB norm as a
 *   double, bit for bit; sizes with a short last block and
 *   more blocks than the norm's chunks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_cuda.h"
#include "kernels/quant8.h"
#include "kernels/quant8_cuda.h"

static uint64_t rng = 71;

static const long sizes[] = { 1, 7, 8191, 8193, 100003, (3L << 20) + 1 };

struct opt {
	long n;
	float *w, *m, *v, *g;          /* host, reference state */
	float *d_w, *d_m, *d_v, *d_g;  /* device state */
};

static void opt_init(struct opt *o, long n)
{
	o->n = n;
	o->w = host_rand(n, -1, 1, &rng);
	o->m = host_rand(n, -0.1f, 0.1f, &rng);
	o->v = host_rand(n, 0, 0.01f, &rng);
	o->g = host_rand(n, -1, 1, &rng);
	o->d_w = dev_copy(o->w, n);
	o->d_m = dev_copy(o->m, n);
	o->d_v = dev_copy(o->v, n);
	o->d_g = dev_copy(o->g, n);
}

static void opt_free(struct opt *o)
{
	free(o->w), free(o->m), free(o->v), free(o->g);
	kern_cuda_free(o->d_w), kern_cuda_free(o->d_m), kern_cuda_free(o->d_v);
	kern_cuda_free(o->d_g);
}

/* the device copy of host (n floats) must equal host bit for bit */
static void same(const char *what, const char *arr, const float *dev, const float *host, long n)
{
	char buf[128];
	float *got = dev_fetch(dev, n);
	snprintf(buf, sizeof buf, "%s %s n=%ld", what, arr, n);
	check_close(buf, got, host, n, 0, 0);
	free(got);
}

static void close_norm(const char *what, double got, double want, long n)
{
	double tol = 2.2e-16 * (double)n * fabs(want);
	CHECK_MSG(fabs(got - want) <= tol, "%s n=%ld: got %.17g want %.17g (tol %.3g)", what, n,
	          got, want, tol);
}

static void test_updates(void)
{
	/* bias corrections for step 3, as the trainer computes them */
	const float b1 = 0.9f, b2 = 0.999f;
	const float bc1 = (float)(1 - pow(b1, 3)), bc2 = (float)(1 - pow(b2, 3));
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		long n = sizes[k];
		struct opt o;
		opt_init(&o, n);

		kern_scale_ref(o.g, n, 0.37f);
		kern_scale_cuda(o.d_g, n, 0.37f);
		same("scale", "x", o.d_g, o.g, n);

		for (int nesterov = 0; nesterov < 2; nesterov++) {
			kern_sgd_update_ref(o.w, o.m, o.g, n, 0.05f, 0.9f, 5e-4f, nesterov);
			kern_sgd_update_cuda(o.d_w, o.d_m, o.d_g, n, 0.05f, 0.9f, 5e-4f, nesterov);
			same(nesterov ? "sgd nesterov" : "sgd", "w", o.d_w, o.w, n);
			same(nesterov ? "sgd nesterov" : "sgd", "m", o.d_m, o.m, n);
		}
		kern_sgd_update_ref(o.w, NULL, o.g, n, 0.05f, 0.0f, 5e-4f, 0);
		kern_sgd_update_cuda(o.d_w, NULL, o.d_g, n, 0.05f, 0.0f, 5e-4f, 0);
		same("sgd no momentum", "w", o.d_w, o.w, n);

		kern_adamw_update_ref(o.w, o.m, o.v, o.g, n, 1e-3f, b1, b2, 1e-8f, 0.1f, bc1, bc2);
		kern_adamw_update_cuda(o.d_w, o.d_m, o.d_v, o.d_g, n, 1e-3f, b1, b2, 1e-8f, 0.1f, bc1,
		                       bc2);
		same("adamw", "w", o.d_w, o.w, n);
		same("adamw", "m", o.d_m, o.m, n);
		same("adamw", "v", o.d_v, o.v, n);

		kern_lars_update_ref(o.w, o.m, o.g, n, 0.013f, 0.9f, 1e-4f);
		kern_lars_update_cuda(o.d_w, o.d_m, o.d_g, n, 0.013f, 0.9f, 1e-4f);
		same("lars", "w", o.d_w, o.w, n);
		same("lars", "m", o.d_m, o.m, n);

		double want = kern_lamb_moments_ref(o.m, o.v, o.g, o.w, n, b1, b2, 1e-6f, 0.01f, bc1,
		                                    bc2);
		double got = kern_lamb_moments_cuda(o.d_m, o.d_v, o.d_g, o.d_w, n, b1, b2, 1e-6f,
		                                    0.01f, bc1, bc2);
		same("lamb moments", "m", o.d_m, o.m, n);
		same("lamb moments", "v", o.d_v, o.v, n);
		close_norm("lamb ||u||^2", got, want, n);

		kern_lamb_apply_ref(o.w, o.m, o.v, n, 2e-3f, 1e-6f, 0.01f, bc1, bc2);
		kern_lamb_apply_cuda(o.d_w, o.d_m, o.d_v, n, 2e-3f, 1e-6f, 0.01f, bc1, bc2);
		same("lamb apply", "w", o.d_w, o.w, n);

		/* sumsq of the updated w */
		close_norm("sumsq", kern_sumsq_cuda(o.d_w, n), kern_sumsq_ref(o.w, n), n);
		opt_free(&o);
	}
}

static void test_norms(void)
{
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		long n = sizes[k];
		float *x = host_rand(n, -3, 3, &rng);
		float *d_x = dev_copy(x, n);
		double want = kern_sumsq_ref(x, n);
		double a = kern_sumsq_cuda(d_x, n), b = kern_sumsq_cuda(d_x, n);
		close_norm("sumsq", a, want, n);
		CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "sumsq n=%ld: two runs differ", n);
		double *d_r = kern_cuda_malloc(sizeof(double)), r = 0;
		kern_sumsq_cuda_dev(d_r, d_x, n);
		kern_cuda_download(&r, d_r, sizeof r);
		CHECK_MSG(memcmp(&a, &r, sizeof a) == 0, "sumsq_dev n=%ld: %.17g vs %.17g", n, r, a);
		kern_cuda_free(d_r);
		kern_cuda_free(d_x);
		free(x);
	}
	CHECK(kern_sumsq_cuda(NULL, 0) == 0);
}

/* ---- int8 state --------------------------------------------------------------- */

/* n bytes: host to a new device buffer, and back into a new host buffer */
static void *dev_bytes(const void *host, size_t n)
{
	void *d = kern_cuda_malloc(n ? n : 1);
	kern_cuda_upload(d, host, n);
	return d;
}

static void *fetch_bytes(const void *dev, size_t n)
{
	void *h = malloc(n ? n : 1);
	if (!h)
		abort();
	kern_cuda_download(h, dev, n);
	return h;
}

static void same_bytes(const char *what, const void *dev, const void *host, size_t n)
{
	void *got = fetch_bytes(dev, n);
	size_t i = 0;
	while (i < n && ((const unsigned char *)got)[i] == ((const unsigned char *)host)[i])
		i++;
	CHECK_MSG(i == n, "%s: byte %zu of %zu differs from the CPU's", what, i, n);
	free(got);
}

/* state of n values quantized by the CPU (m of both signs, v positive and
 * spread over decades), the CPU's update against the GPU's, op: 0 sgd, 1
 * sgd nesterov, 2 adamw, 3 lars, 4 lamb (norm pass, then update) */
static void q8_case(long n, int op)
{
	long nb = kern_q8_blocks(n);
	float *w = host_rand(n, -1, 1, &rng), *g = host_rand(n, -1, 1, &rng);
	float *m = host_rand(n, -0.01f, 0.01f, &rng), *v = host_rand(n, 0, 1, &rng);
	for (long i = 0; i < n; i++)
		v[i] = 1e-4f * powf(10.0f, -6.0f * v[i]);
	int8_t *mq = malloc((size_t)n);
	uint8_t *vq = malloc((size_t)n);
	float *ms = malloc(sizeof(float) * (size_t)nb), *vs = malloc(sizeof(float) * (size_t)nb);
	if (!mq || !vq || !ms || !vs)
		abort();
	kern_q8_quantize_s_cpu(m, n, mq, ms);
	kern_q8_quantize_u_cpu(v, n, vq, vs);
	float *d_w = dev_copy(w, n), *d_g = dev_copy(g, n);
	int8_t *d_mq = dev_bytes(mq, (size_t)n);
	uint8_t *d_vq = dev_bytes(vq, (size_t)n);
	float *d_ms = dev_copy(ms, nb), *d_vs = dev_copy(vs, nb);
	static const char *const names[] = { "sgd", "sgd nesterov", "adamw", "lars", "lamb" };
	char what[128];
	snprintf(what, sizeof what, "int8 %s n=%ld", names[op], n);
	const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, bc1 = 0.1f, bc2 = 0.001f;
	switch (op) {
	case 0:
	case 1:
		kern_sgd_update_q8_cpu(w, mq, ms, g, n, 0.01f, 0.9f, wd, op);
		kern_sgd_update_q8_cuda(d_w, d_mq, d_ms, d_g, n, 0.01f, 0.9f, wd, op);
		break;
	case 2:
		kern_adamw_update_q8_cpu(w, mq, ms, vq, vs, g, n, 1e-3f, b1, b2, eps, wd, bc1, bc2);
		kern_adamw_update_q8_cuda(d_w, d_mq, d_ms, d_vq, d_vs, d_g, n, 1e-3f, b1, b2, eps, wd,
		                          bc1, bc2);
		break;
	case 3:
		kern_lars_update_q8_cpu(w, mq, ms, g, n, 0.3f, 0.9f, wd);
		kern_lars_update_q8_cuda(d_w, d_mq, d_ms, d_g, n, 0.3f, 0.9f, wd);
		break;
	default: {
		double want = kern_lamb_norm_q8_cpu(mq, ms, vq, vs, g, w, n, b1, b2, eps, wd, bc1, bc2);
		double got = kern_lamb_norm_q8_cuda(d_mq, d_ms, d_vq, d_vs, d_g, d_w, n, b1, b2, eps,
		                                    wd, bc1, bc2);
		CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "%s norm: %.17g, the CPU's %.17g",
		          what, got, want);
		kern_lamb_update_q8_cpu(w, mq, ms, vq, vs, g, n, 0.02f, b1, b2, eps, wd, bc1, bc2);
		kern_lamb_update_q8_cuda(d_w, d_mq, d_ms, d_vq, d_vs, d_g, n, 0.02f, b1, b2, eps, wd,
		                         bc1, bc2);
	}
	}
	int has_v = op == 2 || op == 4;
	float *got_w = dev_fetch(d_w, n);
	check_same_bits(what, got_w, w, n);
	free(got_w);
	same_bytes(what, d_mq, mq, (size_t)n);
	same_bytes(what, d_ms, ms, sizeof(float) * (size_t)nb);
	if (has_v) {
		same_bytes(what, d_vq, vq, (size_t)n);
		same_bytes(what, d_vs, vs, sizeof(float) * (size_t)nb);
	}
	free(w), free(g), free(m), free(v), free(mq), free(vq), free(ms), free(vs);
	kern_cuda_free(d_w), kern_cuda_free(d_g), kern_cuda_free(d_mq), kern_cuda_free(d_vq);
	kern_cuda_free(d_ms), kern_cuda_free(d_vs);
}

static void test_int8(void)
{
	static const long q8_sizes[] = { 1, 2048, 3 * 2048 + 37, 1030L * 2048 - 100 };
	for (size_t k = 0; k < sizeof q8_sizes / sizeof q8_sizes[0]; k++)
		for (int op = 0; op < 5; op++)
			q8_case(q8_sizes[k], op);
}

int main(void)
{
	gpu_test_init("test_cuda_optimizer");
	CHECK_RUN(test_updates);
	CHECK_RUN(test_norms);
	CHECK_RUN(test_int8);
	return check_finish();
}
