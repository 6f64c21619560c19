/* kernels/optimizer_simd.c - the optimizer's vector loops (optimizer_simd.h).
 *
 * Built twice by kernels/CMakeLists.txt, with -mavx512f (kern_optim_loops_avx512,
 * 16 floats a vector) and with -mavx2 (kern_optim_loops_avx2, 8): the width and the
 * few instructions that differ are picked below, the loops are written once.
 * The formulas are those of optimizer_cpu.c's per-element functions, on
 * vectors through GCC's vector operators (a scalar operand is broadcast), so
 * they read the same and run the same float operations: -ffp-contract=off
 * keeps multiplies and adds apart, the square root is the correctly rounded
 * vsqrtps. A span's last n % width elements go through masked loads and
 * stores, with the same code. The sums of squares keep OPT_LANES lanes in
 * OPT_LANES / 8 (AVX-512) or / 4 (AVX2) double accumulators, a chain of adds
 * each, which the core runs side by side.
 */
#include "optimizer_simd.h"

#include <immintrin.h>

#if defined(__AVX512F__)

#define OPT_LOOPS kern_optim_loops_avx512
#define VW 16                     /* floats a vector */
#define VD 8                      /* doubles a vector */
typedef __m512 vf;
typedef __m512d vd;
typedef __mmask16 vmask;          /* the lanes of a partial vector */

static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf x) { _mm512_storeu_ps(p, x); }
static inline vmask v_first(long r) { return (vmask)((1u << r) - 1); }
static inline vf v_load_part(const float *p, vmask k) { return _mm512_maskz_loadu_ps(k, p); }
static inline void v_store_part(float *p, vmask k, vf x) { _mm512_mask_storeu_ps(p, k, x); }
static inline vf v_keep(vmask k, vf x) { return _mm512_maskz_mov_ps(k, x); }
static inline vf v_sqrt(vf x) { return _mm512_sqrt_ps(x); }
/* floats 0-7 and 8-15 in double */
static inline vd v_lo_pd(vf x) { return _mm512_cvtps_pd(_mm512_castps512_ps256(x)); }
static inline vd v_hi_pd(vf x)
{
	return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
static inline vd vd_zero(void) { return _mm512_setzero_pd(); }
static inline void vd_store(double *p, vd x) { _mm512_storeu_pd(p, x); }

#elif defined(__AVX2__)

#define OPT_LOOPS kern_optim_loops_avx2
#define VW 8
#define VD 4
typedef __m256 vf;
typedef __m256d vd;
typedef __m256i vmask;

static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
static inline vmask v_first(long r)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf v_load_part(const float *p, vmask k) { return _mm256_maskload_ps(p, k); }
static inline void v_store_part(float *p, vmask k, vf x) { _mm256_maskstore_ps(p, k, x); }
static inline vf v_keep(vmask k, vf x) { return _mm256_and_ps(x, _mm256_castsi256_ps(k)); }
static inline vf v_sqrt(vf x) { return _mm256_sqrt_ps(x); }
static inline vd v_lo_pd(vf x) { return _mm256_cvtps_pd(_mm256_castps256_ps128(x)); }
static inline vd v_hi_pd(vf x) { return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)); }
static inline vd vd_zero(void) { return _mm256_setzero_pd(); }
static inline void vd_store(double *p, vd x) { _mm256_storeu_pd(p, x); }

#else
#error "optimizer_simd.c is built with -mavx512f or -mavx2 (see kernels/CMakeLists.txt)"
#endif

/* ---- whole and partial vectors -------------------------------------------- */

/* The loops run a vector body over the span's whole vectors, then once more
 * on the last r = n % VW elements. v_get and v_put take the elements left
 * from p, r: r >= VW is a whole vector (plain loads and stores once inlined
 * with r = VW), fewer go through a mask (the other lanes load as zero, and
 * what they compute is not stored). */
static inline vf v_get(const float *p, long r)
{
	return r >= VW ? v_load(p) : v_load_part(p, v_first(r));
}

static inline void v_put(float *p, long r, vf x)
{
	if (r >= VW)
		v_store(p, x);
	else
		v_store_part(p, v_first(r), x);
}

/* x with its lanes from r on cleared */
static inline vf v_first_of(long r, vf x)
{
	return r >= VW ? x : v_keep(v_first(r), x);
}

/* ---- sums of squares in OPT_LANES double lanes ----------------------------- */

/* A group is OPT_LANES elements, GROUP_VECS vectors: vector q's elements go
 * to lanes q*VW .. q*VW + VW-1, kept in accumulators 2q (its lower half) and
 * 2q + 1; each accumulator sees one add a group, so the adds of a group run
 * side by side. */
#define GROUP_VECS (OPT_LANES / VW)

typedef struct {
	vd r[OPT_LANES / VD];
} vacc;

static inline void acc_add_squares(vacc *a, int q, vf x)
{
	vd lo = v_lo_pd(x), hi = v_hi_pd(x);
	a->r[2 * q] = a->r[2 * q] + lo * lo;
	a->r[2 * q + 1] = a->r[2 * q + 1] + hi * hi;
}

static double acc_total(const vacc *a)
{
	double lane[OPT_LANES], s = 0;
	for (int k = 0; k < OPT_LANES / VD; k++)
		vd_store(lane + k * VD, a->r[k]);
	for (int j = 0; j < OPT_LANES; j++)
		s += lane[j];
	return s;
}

static inline vacc acc_zero(void)
{
	vacc a;
	for (int k = 0; k < OPT_LANES / VD; k++)
		a.r[k] = vd_zero();
	return a;
}

/* ---- per-vector formulas, as optimizer_cpu.c's per-element ones ---------- */

static inline void sgd_v(vf *w, vf *m, vf g, float lr, float mu, float wd, int nesterov)
{
	vf d = g + wd * *w;
	*m = mu * *m + d;
	if (nesterov)
		*w -= lr * (d + mu * *m);
	else
		*w -= lr * *m;
}

static inline void sgd_nomomentum_v(vf *w, vf g, float lr, float wd)
{
	vf d = g + wd * *w;
	*w -= lr * d;
}

static inline void adamw_v(vf *w, vf *m, vf *v, vf g, float lr, float b1, float b2, float eps,
                           float wd, float bc1, float bc2)
{
	*w -= lr * wd * *w;
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
	*w -= lr * (*m / bc1) / (v_sqrt(*v / bc2) + eps);
}

static inline void lars_v(vf *w, vf *m, vf g, float step, float mu, float wd)
{
	*m = mu * *m + step * (g + wd * *w);
	*w -= *m;
}

static inline void lamb_moments_v(vf *m, vf *v, vf g, float b1, float b2)
{
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
}

static inline vf lamb_u_v(vf m, vf v, vf w, float eps, float wd, float bc1, float bc2)
{
	return (m / bc1) / (v_sqrt(v / bc2) + eps) + wd * w;
}

/* ---- loops ----------------------------------------------------------------- */

/* the group at x, r elements of it (OPT_LANES but at the end of a span) */
static inline void sumsq_group(vacc *acc, const float *x, long r)
{
#pragma GCC unroll 4
	for (int q = 0; q < GROUP_VECS; q++)
		if (q * VW < r)
			acc_add_squares(acc, q, v_get(x + q * VW, r - q * VW));
}

static double sumsq(const float *x, long n)
{
	vacc acc = acc_zero();
	long i = 0;
	for (; i + OPT_LANES <= n; i += OPT_LANES)
		sumsq_group(&acc, x + i, OPT_LANES);
	if (i < n)
		sumsq_group(&acc, x + i, n - i);
	return acc_total(&acc);
}

static void scale(float *x, long n, float s)
{
	long i = 0;
	for (; i + VW <= n; i += VW)
		v_put(x + i, VW, v_get(x + i, VW) * s);
	if (i < n)
		v_put(x + i, n - i, v_get(x + i, n - i) * s);
}

static inline void sgd_vec(float *w, float *m, const float *g, long r, float lr, float mu,
                           float wd, int nesterov)
{
	vf wi = v_get(w, r);
	if (mu != 0) {
		vf mi = v_get(m, r);
		sgd_v(&wi, &mi, v_get(g, r), lr, mu, wd, nesterov);
		v_put(m, r, mi);
	} else {
		sgd_nomomentum_v(&wi, v_get(g, r), lr, wd);
	}
	v_put(w, r, wi);
}

/* mu and nesterov are constants where this is inlined: a loop per variant */
static inline void sgd_loop(float *w, float *m, const float *g, long n, float lr, float mu,
                            float wd, int nesterov)
{
	long i = 0;
	for (; i + VW <= n; i += VW)
		sgd_vec(w + i, m ? m + i : NULL, g + i, VW, lr, mu, wd, nesterov);
	if (i < n)
		sgd_vec(w + i, m ? m + i : NULL, g + i, n - i, lr, mu, wd, nesterov);
}

static void sgd(float *w, float *m, const float *g, long n, float lr, float mu, float wd,
                int nesterov)
{
	if (mu == 0)
		sgd_loop(w, NULL, g, n, lr, 0, wd, 0);
	else if (nesterov)
		sgd_loop(w, m, g, n, lr, mu, wd, 1);
	else
		sgd_loop(w, m, g, n, lr, mu, wd, 0);
}

static inline void adamw_vec(float *w, float *m, float *v, const float *g, long r,
                             const struct opt_adam *a)
{
	vf wi = v_get(w, r), mi = v_get(m, r), vi = v_get(v, r);
	adamw_v(&wi, &mi, &vi, v_get(g, r), a->lr, a->b1, a->b2, a->eps, a->wd, a->bc1, a->bc2);
	v_put(w, r, wi), v_put(m, r, mi), v_put(v, r, vi);
}

static void adamw(float *w, float *m, float *v, const float *g, long n, const struct opt_adam *ap)
{
	const struct opt_adam a = *ap; /* a local copy: the stores cannot change it */
	long i = 0;
	for (; i + VW <= n; i += VW)
		adamw_vec(w + i, m + i, v + i, g + i, VW, &a);
	if (i < n)
		adamw_vec(w + i, m + i, v + i, g + i, n - i, &a);
}

static inline void lars_vec(float *w, float *m, const float *g, long r, float step, float mu,
                            float wd)
{
	vf wi = v_get(w, r), mi = v_get(m, r);
	lars_v(&wi, &mi, v_get(g, r), step, mu, wd);
	v_put(w, r, wi), v_put(m, r, mi);
}

static void lars(float *w, float *m, const float *g, long n, float step, float mu, float wd)
{
	long i = 0;
	for (; i + VW <= n; i += VW)
		lars_vec(w + i, m + i, g + i, VW, step, mu, wd);
	if (i < n)
		lars_vec(w + i, m + i, g + i, n - i, step, mu, wd);
}

/* The lanes past the end of a span are cleared before u^2 is summed: with
 * eps = 0 their u is 0/0. */
static inline void lamb_moments_group(vacc *acc, float *m, float *v, const float *g,
                                      const float *w, long r, const struct opt_adam *a)
{
#pragma GCC unroll 4
	for (int q = 0; q < GROUP_VECS; q++) {
		long o = q * VW, rq = r - o;
		if (rq <= 0)
			break;
		vf mi = v_get(m + o, rq), vi = v_get(v + o, rq);
		lamb_moments_v(&mi, &vi, v_get(g + o, rq), a->b1, a->b2);
		v_put(m + o, rq, mi), v_put(v + o, rq, vi);
		vf u = lamb_u_v(mi, vi, v_get(w + o, rq), a->eps, a->wd, a->bc1, a->bc2);
		acc_add_squares(acc, q, v_first_of(rq, u));
	}
}

static double lamb_moments(float *m, float *v, const float *g, const float *w, long n,
                           const struct opt_adam *ap)
{
	const struct opt_adam a = *ap;
	vacc acc = acc_zero();
	long i = 0;
	for (; i + OPT_LANES <= n; i += OPT_LANES)
		lamb_moments_group(&acc, m + i, v + i, g + i, w + i, OPT_LANES, &a);
	if (i < n)
		lamb_moments_group(&acc, m + i, v + i, g + i, w + i, n - i, &a);
	return acc_total(&acc);
}

static inline void lamb_apply_vec(float *w, const float *m, const float *v, long r, float step,
                                  const struct opt_adam *a)
{
	vf wi = v_get(w, r);
	vf u = lamb_u_v(v_get(m, r), v_get(v, r), wi, a->eps, a->wd, a->bc1, a->bc2);
	v_put(w, r, wi - step * u);
}

static void lamb_apply(float *w, const float *m, const float *v, long n, float step,
                       const struct opt_adam *ap)
{
	const struct opt_adam a = *ap;
	long i = 0;
	for (; i + VW <= n; i += VW)
		lamb_apply_vec(w + i, m + i, v + i, VW, step, &a);
	if (i < n)
		lamb_apply_vec(w + i, m + i, v + i, n - i, step, &a);
}

const struct opt_loops OPT_LOOPS = {
	.sumsq = sumsq,
	.scale = scale,
	.sgd = sgd,
	.adamw = adamw,
	.lars = lars,
	.lamb_moments = lamb_moments,
	.lamb_apply = lamb_apply,
};
