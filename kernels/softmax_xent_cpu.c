/* kernels/softmax_xent_cpu.c - fused softmax + cross-entropy: the plain
 * reference and the threaded CPU version; see softmax_xent.h.
 *
 * With GPT-2's 50257-word vocabulary the work is ~2 exp per logit (one in
 * forward, one in backward). glibc's expf is scalar (~4.5 ns); the CPU version
 * uses its own exp written in plain arithmetic so that the compiler vectorises
 * it (~0.5 ns with AVX-512), and is compiled for AVX-512, AVX2 and baseline
 * x86-64, picked at load time. Sums use LANES accumulators added in a fixed
 * order, and GCC in C11 mode does not contract a * b + c into an FMA, so the
 * three variants give the same bits, whatever the thread count.
 */
#include "softmax_xent.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { LANES = 16 };
/* Below this many logits a pass runs on one thread: the mlp's [256, 10]
 * is not worth waking a team for. */
#define SX_PAR_MIN 32768L

/* ---- reference ------------------------------------------------------------ */

void kern_softmax_xent_fwd_ref(float *losses, float *lse, const float *logits,
                               const int *targets, int n, int v)
{
	for (int i = 0; i < n; i++) {
		const float *x = logits + (size_t)i * v;
		if (targets[i] < 0) {
			losses[i] = 0;
			lse[i] = 0;
			continue;
		}
		float mx = x[0];
		for (int j = 1; j < v; j++)
			if (x[j] > mx)
				mx = x[j];
		double s = 0;
		for (int j = 0; j < v; j++)
			s += exp((double)x[j] - mx);
		double l = mx + log(s);
		lse[i] = (float)l;
		losses[i] = (float)(l - x[targets[i]]);
	}
}

void kern_softmax_xent_bwd_ref(float *dlogits, float dloss, const float *logits,
                               const float *lse, const int *targets, int n, int v)
{
	for (int i = 0; i < n; i++) {
		if (targets[i] < 0)
			continue;
		const float *x = logits + (size_t)i * v;
		float *dx = dlogits + (size_t)i * v;
		for (int j = 0; j < v; j++) {
			double p = exp((double)x[j] - lse[i]);
			dx[j] += (float)(dloss * (p - (j == targets[i])));
		}
	}
}

void kern_softmax_xent_bwd_set_ref(float *dlogits, float dloss, const float *logits,
                                   const float *lse, const int *targets, int n, int v)
{
	if (n > 0 && v > 0)
		memset(dlogits, 0, sizeof(float) * (size_t)n * (size_t)v);
	kern_softmax_xent_bwd_ref(dlogits, dloss, logits, lse, targets, n, v);
}

/* ---- optimised CPU version -------------------------------------------------- */

/* exp(x) for the x <= ~0 this file needs, within 2 ulp; 0 below -87 (where
 * exp(x) < 1.7e-38), NaN for NaN. exp(x) = 2^k exp(r) with k = round(x / ln2)
 * and |r| <= ln2/2, where the degree-7 Taylor polynomial errs by < 1e-8. */
static inline float exp_approx(float x)
{
	const float lo = -87.0f, hi = 88.0f;
	float xc = x > lo ? x : lo; /* NaN goes to lo here, and through r below */
	xc = xc < hi ? xc : hi;
	/* adding and removing 1.5 * 2^23 rounds to the nearest integer */
	float kf = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
	/* ln2 in two parts: kf * 0.693359375 is exact for |k| < 2^15 */
	float r = (x - kf * 0.693359375f) - kf * -2.12194440e-4f;
	float p = 1.0f / 5040;
	p = p * r + 1.0f / 720;
	p = p * r + 1.0f / 120;
	p = p * r + 1.0f / 24;
	p = p * r + 1.0f / 6;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23;
	float scale;
	memcpy(&scale, &bits, sizeof scale);
	float y = p * scale;
	return x < lo ? 0.0f : y;
}

static float lanes_total(const float *acc)
{
	float t[LANES];
	memcpy(t, acc, sizeof t);
	for (int w = LANES / 2; w > 0; w /= 2)
		for (int l = 0; l < w; l++)
			t[l] += t[l + w];
	return t[0];
}

/* One row's log-sum-exp. Called once per row from the threaded loop, so the
 * per-ISA dispatch costs one indirect call per row. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static float row_lse(const float *x, int v)
{
	float mx[LANES];
	for (int l = 0; l < LANES; l++)
		mx[l] = x[0];
	int j = 0;
	for (; j + LANES <= v; j += LANES)
		for (int l = 0; l < LANES; l++)
			mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];
	for (int l = 0; j < v; j++, l++)
		mx[l] = x[j] > mx[l] ? x[j] : mx[l];
	float m = mx[0];
	for (int l = 1; l < LANES; l++)
		m = mx[l] > m ? mx[l] : m;
	/* an all -inf row would give -inf - -inf = NaN below; its lse is -inf */
	if (isinf(m))
		return m;

	float acc[LANES] = { 0 };
	for (j = 0; j + LANES <= v; j += LANES)
		for (int l = 0; l < LANES; l++)
			acc[l] += exp_approx(x[j + l] - m);
	for (int l = 0; j < v; j++, l++)
		acc[l] += exp_approx(x[j] - m);
	return m + logf(lanes_total(acc));
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static void row_grad(float *dx, const float *x, float lse, float dloss, int v)
{
	for (int j = 0; j < v; j++)
		dx[j] += dloss * exp_approx(x[j] - lse);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static void row_grad_set(float *dx, const float *x, float lse, float dloss, int v)
{
	for (int j = 0; j < v; j++)
		dx[j] = dloss * exp_approx(x[j] - lse);
}

void kern_softmax_xent_fwd_cpu(float *losses, float *lse, const float *logits,
                               const int *targets, int n, int v)
{
#pragma omp parallel for schedule(static) if ((long)n * v > SX_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *x = logits + (size_t)i * v;
		if (targets[i] < 0) {
			losses[i] = 0;
			lse[i] = 0;
			continue;
		}
		float l = row_lse(x, v);
		lse[i] = l;
		losses[i] = l - x[targets[i]];
	}
}

void kern_softmax_xent_bwd_cpu(float *dlogits, float dloss, const float *logits,
                               const float *lse, const int *targets, int n, int v)
{
#pragma omp parallel for schedule(static) if ((long)n * v > SX_PAR_MIN)
	for (int i = 0; i < n; i++) {
		if (targets[i] < 0)
			continue;
		float *dx = dlogits + (size_t)i * v;
		row_grad(dx, logits + (size_t)i * v, lse[i], dloss, v);
		dx[targets[i]] -= dloss;
	}
}

void kern_softmax_xent_bwd_set_cpu(float *dlogits, float dloss, const float *logits,
                                   const float *lse, const int *targets, int n, int v)
{
#pragma omp parallel for schedule(static) if ((long)n * v > SX_PAR_MIN)
	for (int i = 0; i < n; i++) {
		float *dx = dlogits + (size_t)i * v;
		if (targets[i] < 0) {
			memset(dx, 0, sizeof(float) * (size_t)v);
			continue;
		}
		row_grad_set(dx, logits + (size_t)i * v, lse[i], dloss, v);
		dx[targets[i]] -= dloss;
	}
}
