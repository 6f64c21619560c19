/* tests/unit/test_kern_quant8.c - kernels/quant8_cpu.c: the code tables, the
 * block-wise round trip, and the fused int8 updates against the fp32 ones.
 *
 * Tolerances:
 *   round trip, per value: |x - dq(q(x))| <= scale * gap / 2 * (1 + 2^-20)
 *     + 2^-149, scale the block's absmax, gap kern_q8_max_gap (dynamic:
 *     0.0140625 signed, 0.0070313 unsigned); the
 *     2^-149 is decoding's rounding when the scale is subnormal. An
 *     unsigned positive value lifted to code 1 is off by at most
 *     value(1) * scale instead.
 *   _cpu vs _ref quantization: the same codes and scales (bits).
 *   fused update vs dequantize -> fp32 update (_ref) -> quantize: the same
 *     bits for w, codes and scales: the same per-element code runs on the
 *     same values.
 *   fused update vs the fp32 update of the unquantized state: SGD and LARS
 *     move w by lr * mu * dm and mu * dm, so |dw| <= (lr) mu scale_m gap / 2
 *     (+ 2.5e-7 for w's own rounding); AdamW and LAMB divide by sqrt(v):
 *     the update's rms error over the update's rms is <= 4% with the
 *     dynamic map, for m spread over three decades and v over six (measured
 *     2.5%; an affine map gave 41%).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/optimizer.h"
#include "kernels/parallel.h"
#include "kernels/quant8.h"

static uint64_t rng = 23;
/* tails, one block, several, and past the threading threshold */
static const long sizes[] = { 1, 7, 2047, 2048, 2049, 5000, 70001 };

static float *falloc(long n)
{
	return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

static float *copy(const float *x, long n)
{
	float *y = falloc(n);
	memcpy(y, x, sizeof(float) * (size_t)n);
	return y;
}

/* Values spread over decades: sign * 10^uniform(lo_exp, hi_exp); with
 * every 17th value 0. */
static void fill_log(float *x, long n, double lo_exp, double hi_exp, int sign)
{
	for (long i = 0; i < n; i++) {
		double e = check_rand_uniform(&rng, (float)lo_exp, (float)hi_exp);
		double s = sign ? sign : (check_rand_u64(&rng) & 1 ? 1 : -1);
		x[i] = i % 17 == 5 ? 0.0f : (float)(s * pow(10.0, e));
	}
}

/* ---- tables --------------------------------------------------------------- */

static void test_tables(void)
{
	const float *s = kern_q8_values_s(), *u = kern_q8_values_u();
	CHECK_MSG(s[0] == 0 && s[127] == 1 && s[129] == -1 && u[0] == 0 && u[255] == 1, "ends");
	for (int q = 1; q < 128; q++) {
		CHECK_MSG(s[q] > s[q - 1], "signed values ascend at %d", q);
		CHECK_MSG(s[256 - q] == -s[q], "symmetric at %d", q);
	}
	for (int q = 1; q < 256; q++)
		CHECK_MSG(u[q] > u[q - 1], "unsigned values ascend at %d", q);
	/* the dynamic tree's finest decade: 64 (signed) and 128 (unsigned) steps over [0.1, 1] */
	CHECK(fabs(kern_q8_max_gap(0) - 0.9 / 64) < 1e-6);
	CHECK(fabs(kern_q8_max_gap(1) - 0.9 / 128) < 1e-6);
	/* the dynamic values reach down to ~1e-6 of the scale */
	CHECK(s[1] < 1e-5f);
	CHECK(u[1] < 1e-6f);
}

/* The fast encoding against the plain count where it is most likely to
 * slip: at every midpoint and its float neighbours, and at the ends of the
 * buckets it indexes (2^-24 to 1, 128 per octave), at scale 1 (each block
 * of the test starts with a 1). */
static void test_encode_edges(void)
{
	enum { N_MID = 127 + 255, N = N_MID * 5 + 25 * 128 * 2 };
	float *list = falloc(N), x[KERN_Q8_BLOCK], sc[2];
	int8_t q1[KERN_Q8_BLOCK], q2[KERN_Q8_BLOCK];
	uint8_t u1[KERN_Q8_BLOCK], u2[KERN_Q8_BLOCK];
	const float *s = kern_q8_values_s(), *u = kern_q8_values_u();
	long n = 0;
	for (int j = 0; j < N_MID; j++) {
		float mid = j < 127 ? (float)(((double)s[j] + s[j + 1]) / 2.0)
		                    : (float)(((double)u[j - 127] + u[j - 126]) / 2.0);
		list[n++] = mid;
		list[n++] = nextafterf(mid, 0);
		list[n++] = nextafterf(nextafterf(mid, 0), 0);
		list[n++] = nextafterf(mid, 2);
		list[n++] = fminf(nextafterf(nextafterf(mid, 2), 2), 1);
	}
	for (int e = -24; e < 0; e++)
		for (int j = 0; j < 128; j++) {
			float lo = ldexpf(1.0f + j / 128.0f, e);
			list[n++] = lo;
			list[n++] = nextafterf(lo, 0);
		}
	int same_s = 1, same_u = 1;
	for (long at = 0; at < n; at += KERN_Q8_BLOCK - 1) {
		long len = n - at < KERN_Q8_BLOCK - 1 ? n - at : KERN_Q8_BLOCK - 1;
		x[0] = 1.0f;
		memcpy(x + 1, list + at, sizeof(float) * (size_t)len);
		kern_q8_quantize_s_ref(x, len + 1, q1, sc);
		kern_q8_quantize_s_cpu(x, len + 1, q2, sc + 1);
		same_s &= memcmp(q1, q2, (size_t)len + 1) == 0 && sc[0] == 1 && sc[1] == 1;
		kern_q8_quantize_u_ref(x, len + 1, u1, sc);
		kern_q8_quantize_u_cpu(x, len + 1, u2, sc + 1);
		same_u &= memcmp(u1, u2, (size_t)len + 1) == 0;
	}
	CHECK_MSG(same_s && same_u, "codes at the edges: signed %s, unsigned %s",
	          same_s ? "same" : "differ", same_u ? "same" : "differ");
	free(list);
}

/* ---- round trip ----------------------------------------------------------- */

static int round_trip_ok(const char *what, int is_u, const float *x, long n,
                         const float *scale, const uint8_t *ucodes)
{
	double half = kern_q8_max_gap(is_u) / 2 * (1 + 0x1p-20);
	float *y = falloc(n);
	int8_t *q = malloc((size_t)n + 1);
	float *sc = falloc(kern_q8_blocks(n));
	if (is_u) {
		kern_q8_dequantize_u_cpu(ucodes, scale, n, y);
	} else {
		kern_q8_quantize_s_cpu(x, n, q, sc);
		kern_q8_dequantize_s_cpu(q, sc, n, y);
		scale = sc;
	}
	long worst = -1;
	double worst_err = 0;
	for (long i = 0; i < n; i++) {
		double s = scale[i / KERN_Q8_BLOCK];
		double bound = s * half + 0x1p-149;
		if (is_u && ucodes[i] == 1)
			bound = s * kern_q8_values_u()[1] + 0x1p-149;
		double err = fabs((double)x[i] - y[i]);
		if (err > bound && (worst < 0 || err - bound > worst_err)) {
			worst = i;
			worst_err = err - bound;
		}
	}
	CHECK_MSG(worst < 0, "%s n=%ld: x[%ld] = %.9g comes back %.9g (scale %.9g)", what, n,
	          worst, worst < 0 ? 0.0 : x[worst],
	          worst < 0 ? 0.0 : y[worst], worst < 0 ? 0.0 : scale[worst / KERN_Q8_BLOCK]);
	free(y), free(q), free(sc);
	return worst < 0;
}

/* quantize_*_cpu against _ref (codes and scales), the scales against the
 * blocks' absmax, and the round trip within its bound. */
static void round_trip(const char *what, const float *x, long n)
{
	long nb = kern_q8_blocks(n);
	int8_t *q1 = malloc((size_t)n), *q2 = malloc((size_t)n);
	uint8_t *u1 = malloc((size_t)n), *u2 = malloc((size_t)n);
	float *s1 = falloc(nb), *s2 = falloc(nb), *xa = falloc(n);
	for (long i = 0; i < n; i++)
		xa[i] = fabsf(x[i]);
	kern_q8_quantize_s_ref(x, n, q1, s1);
	kern_q8_quantize_s_cpu(x, n, q2, s2);
	CHECK_MSG(memcmp(q1, q2, (size_t)n) == 0 && memcmp(s1, s2, sizeof(float) * nb) == 0,
	          "%s n=%ld: signed _cpu differs from _ref", what, n);
	for (long b = 0; b < nb; b++) {
		long lo = b * KERN_Q8_BLOCK, len = n - lo < KERN_Q8_BLOCK ? n - lo : KERN_Q8_BLOCK;
		CHECK_MSG(s2[b] == kern_q8_absmax(x + lo, len), "%s n=%ld: scale of block %ld",
		          what, n, b);
	}
	round_trip_ok(what, 0, x, n, NULL, NULL);

	kern_q8_quantize_u_ref(xa, n, u1, s1);
	kern_q8_quantize_u_cpu(xa, n, u2, s2);
	CHECK_MSG(memcmp(u1, u2, (size_t)n) == 0 && memcmp(s1, s2, sizeof(float) * nb) == 0,
	          "%s n=%ld: unsigned _cpu differs from _ref", what, n);
	round_trip_ok(what, 1, xa, n, s2, u2);
	for (long i = 0; i < n; i++)
		if (xa[i] > 0 && u2[i] == 0) {
			CHECK_MSG(0, "%s n=%ld: v[%ld] = %g > 0 rounds to 0", what, n, i, xa[i]);
			break;
		}
	free(q1), free(q2), free(u1), free(u2), free(s1), free(s2), free(xa);
}

static void test_round_trip(void)
{
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		long n = sizes[k];
		float *x = falloc(n);
		check_fill(x, n, -1, 1, &rng);
		round_trip("uniform", x, n);
		fill_log(x, n, -7, 0, 0);
		round_trip("six decades", x, n);
		fill_log(x, n, -3, 0, -1);
		round_trip("negative", x, n);
		fill_log(x, n, 36, 38.5, 0);
		round_trip("huge", x, n);
		fill_log(x, n, -44, -38, 0);
		round_trip("subnormal", x, n);
		free(x);
	}
}

static void test_zeros_and_signs(void)
{
	const long n = 3000;
	float *x = falloc(n), *y = falloc(n), sc[2];
	int8_t q[3000];
	uint8_t u[3000];
	for (long i = 0; i < n; i++)
		x[i] = i % 2 ? -0.0f : 0.0f;
	kern_q8_quantize_s_cpu(x, n, q, sc);
	CHECK(sc[0] == 0 && sc[1] == 0);
	kern_q8_dequantize_s_cpu(q, sc, n, y);
	int zero = 1;
	for (long i = 0; i < n; i++)
		zero &= q[i] == 0 && y[i] == 0;
	CHECK_MSG(zero, "zeros stay zeros");
	kern_q8_quantize_u_cpu(x, n, u, sc);
	CHECK(sc[0] == 0 && u[0] == 0 && u[n - 1] == 0);
	/* the absmax itself is exact, with either sign; -x codes as -(code of x) */
	float z[4] = { 0.25f, -3.0f, 1e-3f, -1e-3f };
	kern_q8_quantize_s_cpu(z, 4, q, sc);
	kern_q8_dequantize_s_cpu(q, sc, 4, y);
	CHECK(sc[0] == 3.0f && q[1] == -127 && y[1] == -3.0f && q[2] == -q[3] && q[2] > 0);
	/* a NaN or an inf poisons its own block (decodes as NaN), not the next */
	for (int k = 0; k < 2; k++) {
		check_fill(x, n, -1, 1, &rng);
		x[k ? 2100 : 3] = k ? INFINITY : NAN;
		kern_q8_quantize_s_cpu(x, n, q, sc);
		kern_q8_dequantize_s_cpu(q, sc, n, y);
		int bad = 1, good = 1;
		for (long i = 0; i < n; i++) {
			if ((i < KERN_Q8_BLOCK) == !k)
				bad &= isnan(y[i]);
			else
				good &= isfinite(y[i]);
		}
		CHECK_MSG(bad && good, "%s: the block with it decodes as NaN, the other as before",
		          k ? "inf" : "NaN");
	}
	/* one tiny v next to a large one keeps a nonzero code */
	float v[2] = { 1.0f, 1e-20f };
	kern_q8_quantize_u_cpu(v, 2, u, sc);
	CHECK(u[0] == 255 && u[1] == 1);
	free(x), free(y);
}

/* Small values keep their precision: the mean relative error over four
 * decades (an affine map's is several times larger). */
static void test_small_values_keep_precision(void)
{
	const long n = 20000;
	float *x = falloc(n), *y = falloc(n), *sc = falloc(kern_q8_blocks(n));
	int8_t *q = malloc((size_t)n);
	double rel = 0;
	fill_log(x, n, -4, 0, 0);
	kern_q8_quantize_s_cpu(x, n, q, sc);
	kern_q8_dequantize_s_cpu(q, sc, n, y);
	for (long i = 0; i < n; i++)
		if (x[i] != 0)
			rel += fabs((double)y[i] - x[i]) / fabs(x[i]) / (double)n;
	CHECK_MSG(rel < 0.1, "mean relative error %g", rel);
	free(x), free(y), free(sc), free(q);
}

/* ---- fused updates -------------------------------------------------------- */

enum opt { SGD, NESTEROV, ADAMW, LARS, LAMB };
static const char *const opt_names[] = { "sgd", "nesterov", "adamw", "lars", "lamb" };
#define LR 0.01f
#define MU 0.9f
#define WD 0.01f
#define B1 0.9f
#define B2 0.999f
#define EPS 1e-8f

struct q8_state {
	long n, nb;
	int8_t *mq;
	uint8_t *vq;
	float *ms, *vs;
};

static void q8_alloc(struct q8_state *s, long n)
{
	s->n = n;
	s->nb = kern_q8_blocks(n);
	s->mq = malloc((size_t)n);
	s->vq = malloc((size_t)n);
	s->ms = falloc(s->nb);
	s->vs = falloc(s->nb);
}

static void q8_copy(struct q8_state *d, const struct q8_state *s)
{
	q8_alloc(d, s->n);
	memcpy(d->mq, s->mq, (size_t)s->n);
	memcpy(d->vq, s->vq, (size_t)s->n);
	memcpy(d->ms, s->ms, sizeof(float) * (size_t)s->nb);
	memcpy(d->vs, s->vs, sizeof(float) * (size_t)s->nb);
}

static void q8_free(struct q8_state *s)
{
	free(s->mq), free(s->vq), free(s->ms), free(s->vs);
}

static int q8_equal(const struct q8_state *a, const struct q8_state *b, int with_v)
{
	return memcmp(a->mq, b->mq, (size_t)a->n) == 0 &&
	       memcmp(a->ms, b->ms, sizeof(float) * (size_t)a->nb) == 0 &&
	       (!with_v || (memcmp(a->vq, b->vq, (size_t)a->n) == 0 &&
	                    memcmp(a->vs, b->vs, sizeof(float) * (size_t)a->nb) == 0));
}

static const float bc1 = 1 - 0.9f * 0.9f * 0.9f, bc2 = 1 - 0.999f * 0.999f * 0.999f;

/* The fp32 step of optimizer o on (w, m, v); the step size of LARS and LAMB
 * is LR. Returns LAMB's ||u||^2. */
static double fp32_step(enum opt o, float *w, float *m, float *v, const float *g, long n)
{
	switch (o) {
	case SGD:
	case NESTEROV:
		kern_sgd_update_ref(w, m, g, n, LR, MU, WD, o == NESTEROV);
		return 0;
	case ADAMW:
		kern_adamw_update_ref(w, m, v, g, n, LR, B1, B2, EPS, WD, bc1, bc2);
		return 0;
	case LARS:
		kern_lars_update_ref(w, m, g, n, LR, MU, WD);
		return 0;
	case LAMB: {
		double s = kern_lamb_moments_ref(m, v, g, w, n, B1, B2, EPS, WD, bc1, bc2);
		kern_lamb_apply_ref(w, m, v, n, LR, EPS, WD, bc1, bc2);
		return s;
	}
	}
	return 0;
}

static double q8_step(enum opt o, float *w, struct q8_state *s, const float *g)
{
	long n = s->n;
	double norm = 0;
	switch (o) {
	case SGD:
	case NESTEROV:
		kern_sgd_update_q8_cpu(w, s->mq, s->ms, g, n, LR, MU, WD, o == NESTEROV);
		break;
	case ADAMW:
		kern_adamw_update_q8_cpu(w, s->mq, s->ms, s->vq, s->vs, g, n, LR, B1, B2, EPS, WD, bc1,
		                         bc2);
		break;
	case LARS:
		kern_lars_update_q8_cpu(w, s->mq, s->ms, g, n, LR, MU, WD);
		break;
	case LAMB:
		norm = kern_lamb_norm_q8_cpu(s->mq, s->ms, s->vq, s->vs, g, w, n, B1, B2, EPS, WD, bc1,
		                             bc2);
		kern_lamb_update_q8_cpu(w, s->mq, s->ms, s->vq, s->vs, g, n, LR, B1, B2, EPS, WD, bc1,
		                        bc2);
		break;
	}
	return norm;
}

static void fused_one(enum opt o, long n)
{
	const char *name = opt_names[o];
	int with_v = o == ADAMW || o == LAMB;
	float *w = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
	check_fill(w, n, -1, 1, &rng);
	fill_log(g, n, -3, 0, 0);
	/* states as a few steps leave them: m ~ g, v ~ g^2, three decades */
	fill_log(m, n, -4, -1, 0);
	for (long i = 0; i < n; i++)
		v[i] = 1e-3f * m[i] * m[i] * 100 + 1e-12f;

	struct q8_state s, s1;
	q8_alloc(&s, n);
	kern_q8_quantize_s_cpu(m, n, s.mq, s.ms);
	kern_q8_quantize_u_cpu(v, n, s.vq, s.vs);

	/* the fused step */
	float *w_q8 = copy(w, n);
	q8_copy(&s1, &s);
	double norm_q8 = q8_step(o, w_q8, &s1, g);

	/* dequantize -> fp32 step -> quantize */
	float *w_c = copy(w, n), *m_c = falloc(n), *v_c = falloc(n);
	struct q8_state s2;
	q8_alloc(&s2, n);
	kern_q8_dequantize_s_cpu(s.mq, s.ms, n, m_c);
	kern_q8_dequantize_u_cpu(s.vq, s.vs, n, v_c);
	double norm_c = fp32_step(o, w_c, m_c, v_c, g, n);
	kern_q8_quantize_s_cpu(m_c, n, s2.mq, s2.ms);
	kern_q8_quantize_u_cpu(v_c, n, s2.vq, s2.vs);
	CHECK_MSG(memcmp(w_q8, w_c, sizeof(float) * (size_t)n) == 0,
	          "%s n=%ld: fused w differs from dequantize-update-quantize", name, n);
	CHECK_MSG(q8_equal(&s1, &s2, with_v), "%s n=%ld: fused state differs", name, n);
	if (o == LAMB)
		CHECK_MSG(fabs(norm_q8 - norm_c) <= 1e-12 * norm_c, "lamb n=%ld: ||u||^2 %.17g vs %.17g",
		          n, norm_q8, norm_c);

	/* against the fp32 step of the state before quantization */
	float *w_f = copy(w, n), *m_f = copy(m, n), *v_f = copy(v, n);
	fp32_step(o, w_f, m_f, v_f, g, n);
	if (o == SGD || o == NESTEROV || o == LARS) {
		double k = (o == LARS ? 1.0 : LR) * MU * (o == NESTEROV ? 2 : 1);
		double half = kern_q8_max_gap(0) / 2 * (1 + 0x1p-20);
		long bad = -1;
		for (long i = 0; i < n && bad < 0; i++)
			if (fabs((double)w_q8[i] - w_f[i]) > k * s.ms[i / KERN_Q8_BLOCK] * half + 2.5e-7)
				bad = i;
		CHECK_MSG(bad < 0, "%s n=%ld: w[%ld] %.9g vs fp32 %.9g", name, n, bad, bad < 0 ? 0.0 : w_q8[bad], bad < 0 ? 0.0 : w_f[bad]);
	} else {
		double err = 0, upd = 0;
		for (long i = 0; i < n; i++) {
			err += ((double)w_q8[i] - w_f[i]) * ((double)w_q8[i] - w_f[i]);
			upd += ((double)w_f[i] - w[i]) * ((double)w_f[i] - w[i]);
		}
		double rel = upd > 0 ? sqrt(err / upd) : 0;
		CHECK_MSG(rel <= 0.04, "%s n=%ld: update error %.4f of its rms", name, n, rel);
	}
	free(w), free(g), free(m), free(v), free(w_q8), free(w_c), free(m_c), free(v_c);
	free(w_f), free(m_f), free(v_f);
	q8_free(&s), q8_free(&s1), q8_free(&s2);
}

static void test_fused_updates(void)
{
	for (int o = SGD; o <= LAMB; o++)
		for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
			fused_one((enum opt)o, sizes[j]);
}

/* The same bits on 1 and 2 threads; LAMB's pass 1 leaves the state alone. */
static void test_threads(void)
{
	const long n = 100003;
	float *w = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
	check_fill(w, n, -1, 1, &rng);
	check_fill(g, n, -1, 1, &rng);
	check_fill(m, n, -0.1f, 0.1f, &rng);
	check_fill(v, n, 0, 0.01f, &rng);
	int threads = kern_threads();
	for (int o = SGD; o <= LAMB; o++) {
		struct q8_state s[2];
		float *wt[2];
		double norm[2];
		for (int t = 0; t < 2; t++) {
			kern_set_threads(t + 1);
			q8_alloc(&s[t], n);
			kern_q8_quantize_s_cpu(m, n, s[t].mq, s[t].ms);
			kern_q8_quantize_u_cpu(v, n, s[t].vq, s[t].vs);
			wt[t] = copy(w, n);
			norm[t] = q8_step((enum opt)o, wt[t], &s[t], g);
		}
		CHECK_MSG(memcmp(wt[0], wt[1], sizeof(float) * (size_t)n) == 0 &&
		          q8_equal(&s[0], &s[1], 1) && norm[0] == norm[1],
		          "%s: 1 and 2 threads differ", opt_names[o]);
		for (int t = 0; t < 2; t++)
			q8_free(&s[t]), free(wt[t]);
	}
	struct q8_state s, s1;
	q8_alloc(&s, n);
	kern_q8_quantize_s_cpu(m, n, s.mq, s.ms);
	kern_q8_quantize_u_cpu(v, n, s.vq, s.vs);
	q8_copy(&s1, &s);
	kern_lamb_norm_q8_cpu(s.mq, s.ms, s.vq, s.vs, g, w, n, B1, B2, EPS, WD, bc1, bc2);
	CHECK(q8_equal(&s, &s1, 1));
	kern_set_threads(threads);
	q8_free(&s), q8_free(&s1);
	free(w), free(g), free(m), free(v);
}

int main(void)
{
	CHECK_RUN(test_tables);
	CHECK_RUN(test_encode_edges);
	CHECK_RUN(test_round_trip);
	CHECK_RUN(test_zeros_and_signs);
	CHECK_RUN(test_small_values_keep_precision);
	CHECK_RUN(test_fused_updates);
	CHECK_RUN(test_threads);
	return check_finish();
}
