/* kernels/optimizer_cpu.c - parameter updates and norms (see optimizer.h).
 *
 * Each update's per-element formula is written once, as an inline function
 * that follows the header literally in float; the reference runs it in a
 * plain loop, the optimised version in a threaded one, so the two agree bit
 * for bit (ISO C mode: no FMA contraction). lamb_apply recomputes u with the
 * same function lamb_moments uses.
 *
 * Norms are summed in double over chunks whose layout depends only on n; the
 * chunk sums are combined in chunk order, so the result is the same for any
 * thread count. Loops with sqrtf stay scalar (errno handling stops GCC from
 * vectorising them); these passes are bound by memory traffic anyway.
 */
#include "optimizer.h"

#include <math.h>
#include <stddef.h>

/* Below this many elements a pass runs on one thread; above it, threads
 * take blocks of OPT_BLOCK elements. */
#define OPT_PAR_MIN 32768L
#define OPT_BLOCK 8192L
/* Norm chunks: at least CHUNK_MIN elements, at most MAX_CHUNKS of them (the
 * partial sums live on the stack). */
#define CHUNK_MIN 8192L
#define MAX_CHUNKS 1024L
/* Independent double accumulators per chunk, which lets the loop vectorise
 * without reordering any sum. */
#define LANES 8

/* ---- per-element formulas, shared by _ref and _cpu ---------------------- */

static inline void sgd_step(float *w, float *m, float g, float lr, float mu, float wd,
                            int nesterov)
{
	float d = g + wd * *w;
	*m = mu * *m + d;
	*w -= lr * (nesterov ? d + mu * *m : *m);
}

static inline void sgd_step_nomomentum(float *w, float g, float lr, float wd)
{
	float d = g + wd * *w;
	*w -= lr * d;
}

static inline void adamw_step(float *w, float *m, float *v, float g, float lr, float b1,
                              float b2, float eps, float wd, float bc1, float bc2)
{
	*w -= lr * wd * *w;
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
	*w -= lr * (*m / bc1) / (sqrtf(*v / bc2) + eps);
}

static inline void lars_step(float *w, float *m, float g, float step, float mu, float wd)
{
	*m = mu * *m + step * (g + wd * *w);
	*w -= *m;
}

static inline void lamb_moments_step(float *m, float *v, float g, float b1, float b2)
{
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
}

static inline float lamb_u(float m, float v, float w, float eps, float wd, float bc1,
                           float bc2)
{
	return (m / bc1) / (sqrtf(v / bc2) + eps) + wd * w;
}

/* ---- reference ------------------------------------------------------------ */

double kern_sumsq_ref(const float *x, long n)
{
	double s = 0;
	for (long i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return s;
}

void kern_scale_ref(float *x, long n, float s)
{
	for (long i = 0; i < n; i++)
		x[i] *= s;
}

void kern_sgd_update_ref(float *w, float *m, const float *g, long n,
                         float lr, float mu, float wd, int nesterov)
{
	for (long i = 0; i < n; i++) {
		if (mu == 0)
			sgd_step_nomomentum(&w[i], g[i], lr, wd);
		else
			sgd_step(&w[i], &m[i], g[i], lr, mu, wd, nesterov);
	}
}

void kern_adamw_update_ref(float *w, float *m, float *v, const float *g, long n,
                           float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2)
{
	for (long i = 0; i < n; i++)
		adamw_step(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, bc1, bc2);
}

void kern_lars_update_ref(float *w, float *m, const float *g, long n,
                          float step, float mu, float wd)
{
	for (long i = 0; i < n; i++)
		lars_step(&w[i], &m[i], g[i], step, mu, wd);
}

double kern_lamb_moments_ref(float *m, float *v, const float *g, const float *w, long n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	double s = 0;
	for (long i = 0; i < n; i++) {
		lamb_moments_step(&m[i], &v[i], g[i], b1, b2);
		float u = lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
		s += (double)u * u;
	}
	return s;
}

void kern_lamb_apply_ref(float *w, const float *m, const float *v, long n, float step,
                         float eps, float wd, float bc1, float bc2)
{
	for (long i = 0; i < n; i++)
		w[i] -= step * lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
}

/* ---- optimised ------------------------------------------------------------ */

/* Chunk length for the norms of an n-element tensor: a function of n alone,
 * a multiple of LANES, and at most MAX_CHUNKS chunks. */
static long chunk_len(long n)
{
	long len = (n + MAX_CHUNKS - 1) / MAX_CHUNKS;
	if (len < CHUNK_MIN)
		len = CHUNK_MIN;
	return (len + LANES - 1) / LANES * LANES;
}

static double lanes_total(const double acc[LANES])
{
	double s = 0;
	for (int j = 0; j < LANES; j++)
		s += acc[j];
	return s;
}

/* The streaming loops for CPUs with wider vector units, picked at load
 * time; every variant runs the same per-element float code (no FMA
 * contraction in ISO C) and the same lanes, so they give the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OPT_CLONES
#endif

/* Sum of squares of one chunk: element i goes to lane i % LANES. */
OPT_CLONES
static double chunk_sumsq(const float *x, long n)
{
	double acc[LANES] = { 0 };
	long i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int j = 0; j < LANES; j++)
			acc[j] += (double)x[i + j] * x[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += (double)x[i] * x[i];
	return lanes_total(acc);
}

double kern_sumsq_cpu(const float *x, long n)
{
	if (n <= 0)
		return 0;
	long len = chunk_len(n), nchunks = (n + len - 1) / len;
	double part[MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long k = 0; k < nchunks; k++) {
		long lo = k * len;
		part[k] = chunk_sumsq(x + lo, n - lo < len ? n - lo : len);
	}
	double s = 0;
	for (long k = 0; k < nchunks; k++)
		s += part[k];
	return s;
}

void kern_scale_cpu(float *x, long n, float s)
{
#pragma omp parallel for simd schedule(static) if (n > OPT_PAR_MIN)
	for (long i = 0; i < n; i++)
		x[i] *= s;
}

OPT_CLONES
static void sgd_span(float *w, float *m, const float *g, long n, float lr, float mu, float wd,
                     int nesterov)
{
	if (mu == 0) {
		for (long i = 0; i < n; i++)
			sgd_step_nomomentum(&w[i], g[i], lr, wd);
	} else if (nesterov) {
		for (long i = 0; i < n; i++)
			sgd_step(&w[i], &m[i], g[i], lr, mu, wd, 1);
	} else {
		for (long i = 0; i < n; i++)
			sgd_step(&w[i], &m[i], g[i], lr, mu, wd, 0);
	}
}

/* Each thread updates one contiguous range of the buffer (a static split of
 * OPT_BLOCK-element blocks). */
void kern_sgd_update_cpu(float *w, float *m, const float *g, long n,
                         float lr, float mu, float wd, int nesterov)
{
	long nblk = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * OPT_BLOCK, len = n - lo < OPT_BLOCK ? n - lo : OPT_BLOCK;
		sgd_span(w + lo, m ? m + lo : NULL, g + lo, len, lr, mu, wd, nesterov);
	}
}

void kern_adamw_update_cpu(float *w, float *m, float *v, const float *g, long n,
                           float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2)
{
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long i = 0; i < n; i++)
		adamw_step(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, bc1, bc2);
}

void kern_lars_update_cpu(float *w, float *m, const float *g, long n,
                          float step, float mu, float wd)
{
#pragma omp parallel for simd schedule(static) if (n > OPT_PAR_MIN)
	for (long i = 0; i < n; i++)
		lars_step(&w[i], &m[i], g[i], step, mu, wd);
}

double kern_lamb_moments_cpu(float *m, float *v, const float *g, const float *w, long n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	if (n <= 0)
		return 0;
	long len = chunk_len(n), nchunks = (n + len - 1) / len;
	double part[MAX_CHUNKS];
	/* one pass: update the moments and sum u^2, chunked as kern_sumsq_cpu */
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long k = 0; k < nchunks; k++) {
		long lo = k * len, hi = n - lo < len ? n : lo + len;
		double acc[LANES] = { 0 };
		for (long i = lo; i < hi; i++) {
			lamb_moments_step(&m[i], &v[i], g[i], b1, b2);
			float u = lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
			acc[(i - lo) % LANES] += (double)u * u;
		}
		part[k] = lanes_total(acc);
	}
	double s = 0;
	for (long k = 0; k < nchunks; k++)
		s += part[k];
	return s;
}

void kern_lamb_apply_cpu(float *w, const float *m, const float *v, long n, float step,
                         float eps, float wd, float bc1, float bc2)
{
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long i = 0; i < n; i++)
		w[i] -= step * lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
}
