/* kernels/optimizer_cpu.c - parameter updates and norms (see optimizer.h).
 *
 * Each update's per-element formula is written once here, as an inline
 * function that follows the header literally in float; the reference runs it
 * in a plain loop. The optimised versions split a tensor among the OpenMP
 * threads and run each piece through one instruction set's loops
 * (optimizer_simd.h): AVX-512 or AVX2 vectors (optimizer_simd.c, the same
 * formulas on vectors) or the plain loops below, chosen at run time. All of
 * them give the reference's bits: the same float operations in the same
 * order, no FMA contraction (-ffp-contract=off), exact division and a
 * correctly rounded square root. lamb_apply recomputes u with the function
 * lamb_moments uses.
 *
 * Updates are elementwise: the same bits for any thread count. Norms are
 * summed in double over chunks whose layout depends only on n, the chunk
 * sums combined in chunk order: the same bits for any thread count and
 * instruction set too.
 */
#include "optimizer.h"
#include "optimizer_simd.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements a pass runs on one thread (a parallel region
 * costs a few microseconds, about what one thread takes for 32 Ki elements
 * of AdamW); above it, threads take OPT_BLOCK-element blocks, a contiguous
 * run of them each (static schedule). */
#define OPT_PAR_MIN 32768L
#define OPT_BLOCK 8192L
/* Norm chunks: at least CHUNK_MIN elements, at most MAX_CHUNKS of them (the
 * partial sums live on the stack). */
#define CHUNK_MIN 8192L
#define MAX_CHUNKS 1024L

/* ---- per-element formulas: the reference and the plain loops -------------- *
 * (optimizer_simd.c has the same on vectors) */

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

/* ---- plain loops: any CPU -------------------------------------------------- */

static double lanes_total(const double acc[OPT_LANES])
{
	double s = 0;
	for (int j = 0; j < OPT_LANES; j++)
		s += acc[j];
	return s;
}

/* element i goes to lane i % OPT_LANES, as in the vector loops */
static double sumsq_plain(const float *x, long n)
{
	double acc[OPT_LANES] = { 0 };
	long i = 0;
	for (; i + OPT_LANES <= n; i += OPT_LANES)
		for (int j = 0; j < OPT_LANES; j++)
			acc[j] += (double)x[i + j] * x[i + j];
	for (int j = 0; i < n; i++, j++)
		acc[j] += (double)x[i] * x[i];
	return lanes_total(acc);
}

static void scale_plain(float *x, long n, float s)
{
	for (long i = 0; i < n; i++)
		x[i] *= s;
}

static void sgd_plain(float *w, float *m, const float *g, long n, float lr, float mu, float wd,
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

static void adamw_plain(float *w, float *m, float *v, const float *g, long n,
                        const struct opt_adam *a)
{
	const float lr = a->lr, b1 = a->b1, b2 = a->b2, eps = a->eps, wd = a->wd;
	const float bc1 = a->bc1, bc2 = a->bc2;
	for (long i = 0; i < n; i++)
		adamw_step(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, bc1, bc2);
}

static void lars_plain(float *w, float *m, const float *g, long n, float step, float mu,
                       float wd)
{
	for (long i = 0; i < n; i++)
		lars_step(&w[i], &m[i], g[i], step, mu, wd);
}

static double lamb_moments_plain(float *m, float *v, const float *g, const float *w, long n,
                                 const struct opt_adam *a)
{
	const float b1 = a->b1, b2 = a->b2, eps = a->eps, wd = a->wd, bc1 = a->bc1, bc2 = a->bc2;
	double acc[OPT_LANES] = { 0 };
	for (long i = 0; i < n; i++) {
		lamb_moments_step(&m[i], &v[i], g[i], b1, b2);
		float u = lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
		acc[i % OPT_LANES] += (double)u * u;
	}
	return lanes_total(acc);
}

static void lamb_apply_plain(float *w, const float *m, const float *v, long n, float step,
                             const struct opt_adam *a)
{
	const float eps = a->eps, wd = a->wd, bc1 = a->bc1, bc2 = a->bc2;
	for (long i = 0; i < n; i++)
		w[i] -= step * lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
}

static const struct opt_loops opt_loops_plain = {
	.sumsq = sumsq_plain,
	.scale = scale_plain,
	.sgd = sgd_plain,
	.adamw = adamw_plain,
	.lars = lars_plain,
	.lamb_moments = lamb_moments_plain,
	.lamb_apply = lamb_apply_plain,
};

/* ---- the instruction set ---------------------------------------------------- */

static const char *const isa_names[KERN_ISA_COUNT] = {
	[KERN_ISA_SCALAR] = "scalar",
	[KERN_ISA_AVX2] = "avx2",
	[KERN_ISA_AVX512] = "avx512",
};

static const struct opt_loops *const isa_loops[KERN_ISA_COUNT] = {
	[KERN_ISA_SCALAR] = &opt_loops_plain,
#ifdef LARCH_OPT_SIMD
	[KERN_ISA_AVX2] = &kern_optim_loops_avx2,
	[KERN_ISA_AVX512] = &kern_optim_loops_avx512,
#endif
};

/* the set in force, -1 until the first call decides */
static atomic_int isa_now = -1;

const char *kern_isa_name(enum kern_isa isa)
{
	return (int)isa >= 0 && isa < KERN_ISA_COUNT ? isa_names[isa] : "?";
}

int kern_isa_parse(const char *name)
{
	for (int i = 0; i < KERN_ISA_COUNT; i++)
		if (strcmp(name, isa_names[i]) == 0)
			return i;
	return -1;
}

int kern_isa_supported(enum kern_isa isa)
{
	if ((int)isa < 0 || isa >= KERN_ISA_COUNT || !isa_loops[isa])
		return 0;
#ifdef LARCH_OPT_SIMD
	__builtin_cpu_init();
	if (isa == KERN_ISA_AVX512)
		return __builtin_cpu_supports("avx512f");
	if (isa == KERN_ISA_AVX2)
		return __builtin_cpu_supports("avx2");
#endif
	return 1;
}

enum kern_isa kern_isa_widest(void)
{
	for (int i = KERN_ISA_COUNT - 1; i > KERN_ISA_SCALAR; i--)
		if (kern_isa_supported((enum kern_isa)i))
			return (enum kern_isa)i;
	return KERN_ISA_SCALAR;
}

enum kern_isa kern_optim_isa(void)
{
	int isa = atomic_load_explicit(&isa_now, memory_order_relaxed);
	if (isa < 0) {
		int first = -1;
		isa = kern_isa_widest();
		/* two threads may both decide: the first one's answer stands */
		if (!atomic_compare_exchange_strong(&isa_now, &first, isa))
			isa = first;
	}
	return (enum kern_isa)isa;
}

int kern_optim_set_isa(enum kern_isa isa)
{
	if (!kern_isa_supported(isa))
		return -1;
	atomic_store(&isa_now, (int)isa);
	return 0;
}

static const struct opt_loops *loops(void)
{
	return isa_loops[kern_optim_isa()];
}

const struct opt_loops *kern_optim_loops(void)
{
	return loops();
}

/* ---- optimised: threads over the loops ---------------------------------------- */

/* Chunk length for the norms of an n-element tensor: a function of n alone,
 * a multiple of 16 (whole vectors of either width), and at most MAX_CHUNKS
 * chunks. */
static long chunk_len(long n)
{
	long len = (n + MAX_CHUNKS - 1) / MAX_CHUNKS;
	if (len < CHUNK_MIN)
		len = CHUNK_MIN;
	return (len + 15) / 16 * 16;
}

/* elements of the block or chunk at lo: len, or what is left of n */
static long part_len(long n, long lo, long len)
{
	return n - lo < len ? n - lo : len;
}

static long n_blocks(long n)
{
	return (n + OPT_BLOCK - 1) / OPT_BLOCK;
}

double kern_sumsq_cpu(const float *x, long n)
{
	if (n <= 0)
		return 0;
	const struct opt_loops *L = loops();
	long len = chunk_len(n), nchunks = (n + len - 1) / len;
	double part[MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long k = 0; k < nchunks; k++)
		part[k] = L->sumsq(x + k * len, part_len(n, k * len, len));
	double s = 0;
	for (long k = 0; k < nchunks; k++)
		s += part[k];
	return s;
}

void kern_scale_cpu(float *x, long n, float s)
{
	const struct opt_loops *L = loops();
	long nblk = n_blocks(n);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++)
		L->scale(x + b * OPT_BLOCK, part_len(n, b * OPT_BLOCK, OPT_BLOCK), s);
}

void kern_sgd_update_cpu(float *w, float *m, const float *g, long n,
                         float lr, float mu, float wd, int nesterov)
{
	const struct opt_loops *L = loops();
	long nblk = n_blocks(n);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * OPT_BLOCK;
		L->sgd(w + lo, m ? m + lo : NULL, g + lo, part_len(n, lo, OPT_BLOCK), lr, mu, wd,
		       nesterov);
	}
}

void kern_adamw_update_cpu(float *w, float *m, float *v, const float *g, long n,
                           float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2)
{
	const struct opt_loops *L = loops();
	const struct opt_adam a = { lr, b1, b2, eps, wd, bc1, bc2 };
	long nblk = n_blocks(n);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * OPT_BLOCK;
		L->adamw(w + lo, m + lo, v + lo, g + lo, part_len(n, lo, OPT_BLOCK), &a);
	}
}

void kern_lars_update_cpu(float *w, float *m, const float *g, long n,
                          float step, float mu, float wd)
{
	const struct opt_loops *L = loops();
	long nblk = n_blocks(n);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * OPT_BLOCK;
		L->lars(w + lo, m + lo, g + lo, part_len(n, lo, OPT_BLOCK), step, mu, wd);
	}
}

/* one pass: update the moments and sum u^2, chunked as kern_sumsq_cpu */
double kern_lamb_moments_cpu(float *m, float *v, const float *g, const float *w, long n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	if (n <= 0)
		return 0;
	const struct opt_loops *L = loops();
	const struct opt_adam a = { 0, b1, b2, eps, wd, bc1, bc2 };
	long len = chunk_len(n), nchunks = (n + len - 1) / len;
	double part[MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long k = 0; k < nchunks; k++) {
		long lo = k * len;
		part[k] = L->lamb_moments(m + lo, v + lo, g + lo, w + lo, part_len(n, lo, len), &a);
	}
	double s = 0;
	for (long k = 0; k < nchunks; k++)
		s += part[k];
	return s;
}

void kern_lamb_apply_cpu(float *w, const float *m, const float *v, long n, float step,
                         float eps, float wd, float bc1, float bc2)
{
	const struct opt_loops *L = loops();
	const struct opt_adam a = { 0, 0, 0, eps, wd, bc1, bc2 };
	long nblk = n_blocks(n);
#pragma omp parallel for schedule(static) if (n > OPT_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * OPT_BLOCK;
		L->lamb_apply(w + lo, m + lo, v + lo, part_len(n, lo, OPT_BLOCK), step, &a);
	}
}
