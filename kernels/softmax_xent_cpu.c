/* kernels/softmax_xent_cpu.c - fused softmax + cross-entropy: the plain
 * reference and the threaded CPU version; see softmax_xent.h.
 *
 * With GPT-2's 50257-word vocabulary the work is ~2 exp per logit (one in
 * forward, one in backward). glibc's expf is scalar (~4.5 ns); the CPU version
 * uses its own exp written in plain arithmetic so that the compiler vectorises
 * it (~0.5 ns with AVX-512), and is compiled for AVX-512, AVX2 and baseline
 * x86-64, picked at load time. Sums use KERN_LANES accumulators added in a fixed
 * order, and GCC in C11 mode does not contract a * b + c into an FMA, so the
 * three variants give the same bits, whatever the thread count.
 */
#include "softmax_xent.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vecmath.h"

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


/* One row's log-sum-exp. Called once per row from the threaded loop, so the
 * per-ISA dispatch costs one indirect call per row. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static float row_lse(const float *x, int v)
{
	float mx[KERN_LANES];
	for (int l = 0; l < KERN_LANES; l++)
		mx[l] = x[0];
	int j = 0;
	for (; j + KERN_LANES <= v; j += KERN_LANES)
		for (int l = 0; l < KERN_LANES; l++)
			mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];
	for (int l = 0; j < v; j++, l++)
		mx[l] = x[j] > mx[l] ? x[j] : mx[l];
	float m = mx[0];
	for (int l = 1; l < KERN_LANES; l++)
		m = mx[l] > m ? mx[l] : m;
	/* an all -inf row would give -inf - -inf = NaN below; its lse is -inf */
	if (isinf(m))
		return m;

	float acc[KERN_LANES] = { 0 };
	for (j = 0; j + KERN_LANES <= v; j += KERN_LANES)
		for (int l = 0; l < KERN_LANES; l++)
			acc[l] += kern_exp_neg(x[j + l] - m);
	for (int l = 0; j < v; j++, l++)
		acc[l] += kern_exp_neg(x[j] - m);
	return m + logf(kern_lanes_total(acc));
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static void row_grad(float *dx, const float *x, float lse, float dloss, int v)
{
	for (int j = 0; j < v; j++)
		dx[j] += dloss * kern_exp_neg(x[j] - lse);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static void row_grad_set(float *dx, const float *x, float lse, float dloss, int v)
{
	for (int j = 0; j < v; j++)
		dx[j] = dloss * kern_exp_neg(x[j] - lse);
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
