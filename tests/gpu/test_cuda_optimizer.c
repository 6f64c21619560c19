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
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_cuda.h"

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

int main(void)
{
	gpu_test_init("test_cuda_optimizer");
	CHECK_RUN(test_updates);
	CHECK_RUN(test_norms);
	return check_finish();
}
