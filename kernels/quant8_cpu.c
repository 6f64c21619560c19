/* kernels/quant8_cpu.c - 8-bit block-wise optimizer state (see quant8.h).
 *
 * The code map's table is built once, in double from exact decimal steps
 * and then rounded to float, so it is the same bits on every machine. Encoding
 * counts the float midpoints below a = |x| / scale: the reference one by
 * one; the fast version starts from a table indexed by a's exponent and
 * top mantissa bits (the count below the bucket's lower end) and adds the
 * one midpoint a bucket may hold if it lies below a, without a branch:
 * the same count at a fraction of a bisection's cost (the map has its
 * smallest midpoint above 2^-24, below which the count is 0). The fused
 * updates run the fp32 updates' loops (optimizer_simd.h: the widest
 * instruction set's, bit for bit the _ref updates of optimizer.h) on one
 * dequantized block at a time: the per-element arithmetic is written once,
 * in optimizer_cpu.c. LAMB's norm adds its squares in element order, as the
 * GPU kernel does (kern_lamb_moments_ref).
 */
#include "quant8.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "optimizer.h"
#include "optimizer_simd.h"

/* Below this many values a pass runs on one thread. */
#define Q8_PAR_MIN 32768L
/* Encoding buckets: a in [2^-24, 2) by exponent and BUCKET_BITS mantissa
 * bits; smaller a (and NaN) count no midpoint. */
#define BUCKET_BITS 7
#define BUCKET_EXP_MIN (-24)
#define N_BUCKETS ((1 - BUCKET_EXP_MIN) << BUCKET_BITS)
#define BUCKET_BASE ((uint32_t)(127 + BUCKET_EXP_MIN) << BUCKET_BITS)
/* Midpoints a bucket may hold: the buckets (2^-8 wide just below 1, and
 * narrower further down) are finer than the map's steps; the unit test
 * checks the codes against the plain count at every midpoint and its
 * neighbours. */
#define ENC_STEPS 1

/* The encoding loops for CPUs with gathers, picked at load time; the
 * variants compute the same integers. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define Q8_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define Q8_CLONES
#endif

struct q8_table {
	float s[256];                  /* signed values by (uint8_t)q */
	float mag[128];                /* signed magnitudes, ascending: mag[q] = s[q] */
	float mid_s[128];              /* midpoints of mag, then +inf */
	float u[256];                  /* unsigned values, ascending */
	float mid_u[256];              /* midpoints of u, then +inf (a stop for the count) */
	int32_t start_s[N_BUCKETS];    /* per bucket: the midpoints below its lower end */
	int32_t start_u[N_BUCKETS];
};

static struct q8_table the_table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* 2^(i + shift) means of linspace(0.1, 1, 2^(i + shift) + 1) times
 * 10^(i - 6), for i = first..6, ascending, into out; returns the count. */
static int dynamic_values(float *out, int first, int shift)
{
	int k = 0;
	for (int i = first; i <= 6; i++) {
		double decade = 1.0;
		for (int e = i; e < 6; e++)
			decade *= 10.0;
		long count = 1L << (i + shift);
		for (long j = 0; j < count; j++) {
			double lo = 0.1 + 0.9 * (double)j / (double)count;
			double hi = 0.1 + 0.9 * (double)(j + 1) / (double)count;
			out[k++] = (float)((lo + hi) / 2.0 / decade);
		}
	}
	return k;
}

static void build_table(void)
{
	struct q8_table *t = &the_table;
	t->mag[0] = 0.0f;
	int k = 1 + dynamic_values(t->mag + 1, 1, 0);       /* 126 */
	t->mag[k] = 1.0f;
	t->u[0] = 0.0f;
	k = 1 + dynamic_values(t->u + 1, 0, 1);            /* 254 */
	t->u[k] = 1.0f;
	for (int q = 0; q < 128; q++) {
		t->s[q] = t->mag[q];
		if (q)
			t->s[256 - q] = -t->mag[q];
	}
	t->s[128] = -1.0f;
	for (int q = 0; q < 127; q++)
		t->mid_s[q] = (float)(((double)t->mag[q] + t->mag[q + 1]) / 2.0);
	for (int q = 0; q < 255; q++)
		t->mid_u[q] = (float)(((double)t->u[q] + t->u[q + 1]) / 2.0);
	t->mid_s[127] = t->mid_u[255] = INFINITY;
	for (uint32_t b = 0; b < N_BUCKETS; b++) {
		uint32_t bits = (b + BUCKET_BASE) << (23 - BUCKET_BITS);
		float lo;
		memcpy(&lo, &bits, sizeof lo);
		int ks = 0, ku = 0;
		while (t->mid_s[ks] < lo)
			ks++;
		while (t->mid_u[ku] < lo)
			ku++;
		t->start_s[b] = ks;
		t->start_u[b] = ku;
	}
}

static const struct q8_table *table(void)
{
	pthread_once(&table_once, build_table);
	return &the_table;
}

const float *kern_q8_values_s(void)
{
	return table()->s;
}

const float *kern_q8_values_u(void)
{
	return table()->u;
}

const float *kern_q8_midpoints_s(void)
{
	return table()->mid_s;
}

const float *kern_q8_midpoints_u(void)
{
	return table()->mid_u;
}

double kern_q8_max_gap(int u)
{
	const struct q8_table *t = table();
	const float *x = u ? t->u : t->mag;
	int n = u ? 256 : 128;
	double gap = 0;
	for (int q = 0; q + 1 < n; q++)
		if ((double)x[q + 1] - x[q] > gap)
			gap = (double)x[q + 1] - x[q];
	return gap;
}

long kern_q8_blocks(long n)
{
	return n > 0 ? (n + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK : 0;
}

/* On the bits: |x| orders as its bit pattern does, and an integer max
 * vectorises where a float one may not; a NaN wins. */
Q8_CLONES
float kern_q8_absmax(const float *x, long n)
{
	uint32_t m = 0;
	for (long i = 0; i < n; i++) {
		uint32_t bits;
		memcpy(&bits, &x[i], sizeof bits);
		bits &= 0x7fffffffu;
		m = bits > m ? bits : m;
	}
	float a;
	memcpy(&a, &m, sizeof a);
	return a;
}

/* ---- one value -------------------------------------------------------- */

/* a's bucket: 0 below 2^-24 and for NaN (bucket 0 starts at no midpoint
 * and holds none), the last one from 2 up. */
static inline int32_t bucket(float a)
{
	int32_t bits, b;
	memcpy(&bits, &a, sizeof bits);
	b = (bits >> (23 - BUCKET_BITS)) - (int32_t)BUCKET_BASE;
	b = b < N_BUCKETS ? b : N_BUCKETS - 1;
	return a >= 0x1p-24f ? b : 0;
}

/* The code of x at scale > 0: the midpoints below |x| / scale. */
static inline int8_t enc_s(const struct q8_table *t, float x, float scale)
{
	float a = fabsf(x) / scale;
	int k = t->start_s[bucket(a)];
	for (int j = 0; j < ENC_STEPS; j++)
		k += t->mid_s[k] < a;
	return (int8_t)(x < 0 ? -k : k);
}

static inline uint8_t enc_u(const struct q8_table *t, float x, float scale)
{
	float a = x / scale;
	int k = t->start_u[bucket(a)];
	for (int j = 0; j < ENC_STEPS; j++)
		k += t->mid_u[k] < a;
	k += (k == 0) & (a > 0);
	return (uint8_t)k;
}

/* ---- one block at a given scale ------------------------------------------ */

Q8_CLONES
static void encode_s(const struct q8_table *restrict t, const float *restrict x, long n,
                     float scale, int8_t *restrict q)
{
	if (!(scale > 0)) {
		for (long i = 0; i < n; i++)
			q[i] = 0;
		return;
	}
	for (long i = 0; i < n; i++)
		q[i] = enc_s(t, x[i], scale);
}

Q8_CLONES
static void encode_u(const struct q8_table *restrict t, const float *restrict x, long n,
                     float scale, uint8_t *restrict q)
{
	if (!(scale > 0)) {
		for (long i = 0; i < n; i++)
			q[i] = 0;
		return;
	}
	for (long i = 0; i < n; i++)
		q[i] = enc_u(t, x[i], scale);
}

Q8_CLONES
static void decode_s(const struct q8_table *restrict t, const int8_t *restrict q, long n,
                     float scale, float *restrict x)
{
	for (long i = 0; i < n; i++)
		x[i] = t->s[(uint8_t)q[i]] * scale;
}

Q8_CLONES
static void decode_u(const struct q8_table *restrict t, const uint8_t *restrict q, long n,
                     float scale, float *restrict x)
{
	for (long i = 0; i < n; i++)
		x[i] = t->u[q[i]] * scale;
}

/* Quantizes one block at its own absmax; returns the scale. */
static float quantize_block_s(const struct q8_table *t, const float *x, long n, int8_t *q)
{
	float scale = kern_q8_absmax(x, n);
	encode_s(t, x, n, scale, q);
	return scale;
}

static float quantize_block_u(const struct q8_table *t, const float *x, long n, uint8_t *q)
{
	float scale = kern_q8_absmax(x, n);
	encode_u(t, x, n, scale, q);
	return scale;
}

void kern_q8_encode_s(const float *x, long n, float scale, int8_t *q)
{
	encode_s(table(), x, n, scale, q);
}

void kern_q8_encode_u(const float *x, long n, float scale, uint8_t *q)
{
	encode_u(table(), x, n, scale, q);
}

void kern_q8_decode_s(const int8_t *q, long n, float scale, float *x)
{
	decode_s(table(), q, n, scale, x);
}

void kern_q8_decode_u(const uint8_t *q, long n, float scale, float *x)
{
	decode_u(table(), q, n, scale, x);
}

/* ---- block-wise buffers ------------------------------------------------ */

static long block_len(long n, long b)
{
	long lo = b * KERN_Q8_BLOCK;
	return n - lo < KERN_Q8_BLOCK ? n - lo : KERN_Q8_BLOCK;
}

void kern_q8_quantize_s_ref(const float *x, long n, int8_t *q, float *scale)
{
	const struct q8_table *t = table();
	for (long b = 0; b < kern_q8_blocks(n); b++) {
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		float s = 0;
		for (long i = lo; i < lo + len; i++)
			s = fabsf(x[i]) > s ? fabsf(x[i]) : s;
		scale[b] = s;
		for (long i = lo; i < lo + len; i++) {
			int k = 0;
			if (s > 0)
				for (int j = 0; j < 127; j++)
					k += t->mid_s[j] < fabsf(x[i]) / s;
			q[i] = (int8_t)(x[i] < 0 ? -k : k);
		}
	}
}

void kern_q8_quantize_u_ref(const float *x, long n, uint8_t *q, float *scale)
{
	const struct q8_table *t = table();
	for (long b = 0; b < kern_q8_blocks(n); b++) {
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		float s = 0;
		for (long i = lo; i < lo + len; i++)
			s = fabsf(x[i]) > s ? fabsf(x[i]) : s;
		scale[b] = s;
		for (long i = lo; i < lo + len; i++) {
			int k = 0;
			if (s > 0) {
				for (int j = 0; j < 255; j++)
					k += t->mid_u[j] < x[i] / s;
				if (k == 0 && x[i] / s > 0)
					k = 1;
			}
			q[i] = (uint8_t)k;
		}
	}
}

void kern_q8_quantize_s_cpu(const float *x, long n, int8_t *q, float *scale)
{
	const struct q8_table *t = table();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		long lo = b * KERN_Q8_BLOCK;
		scale[b] = quantize_block_s(t, x + lo, block_len(n, b), q + lo);
	}
}

void kern_q8_quantize_u_cpu(const float *x, long n, uint8_t *q, float *scale)
{
	const struct q8_table *t = table();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		long lo = b * KERN_Q8_BLOCK;
		scale[b] = quantize_block_u(t, x + lo, block_len(n, b), q + lo);
	}
}

void kern_q8_dequantize_s_cpu(const int8_t *q, const float *scale, long n, float *x)
{
	const struct q8_table *t = table();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		long lo = b * KERN_Q8_BLOCK;
		decode_s(t, q + lo, block_len(n, b), scale[b], x + lo);
	}
}

void kern_q8_dequantize_u_cpu(const uint8_t *q, const float *scale, long n, float *x)
{
	const struct q8_table *t = table();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		long lo = b * KERN_Q8_BLOCK;
		decode_u(t, q + lo, block_len(n, b), scale[b], x + lo);
	}
}

/* ---- fused updates ------------------------------------------------------ */

void kern_sgd_update_q8_cpu(float *w, int8_t *mq, float *ms, const float *g, long n,
                            float lr, float mu, float wd, int nesterov)
{
	const struct q8_table *t = table();
	const struct opt_loops *L = kern_optim_loops();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		float m[KERN_Q8_BLOCK];
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		decode_s(t, mq + lo, len, ms[b], m);
		L->sgd(w + lo, m, g + lo, len, lr, mu, wd, nesterov);
		ms[b] = quantize_block_s(t, m, len, mq + lo);
	}
}

void kern_adamw_update_q8_cpu(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                              const float *g, long n, float lr, float b1, float b2, float eps,
                              float wd, float bc1, float bc2)
{
	const struct q8_table *t = table();
	const struct opt_loops *L = kern_optim_loops();
	const struct opt_adam a = { lr, b1, b2, eps, wd, bc1, bc2 };
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		float m[KERN_Q8_BLOCK], v[KERN_Q8_BLOCK];
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		decode_s(t, mq + lo, len, ms[b], m);
		decode_u(t, vq + lo, len, vs[b], v);
		L->adamw(w + lo, m, v, g + lo, len, &a);
		ms[b] = quantize_block_s(t, m, len, mq + lo);
		vs[b] = quantize_block_u(t, v, len, vq + lo);
	}
}

void kern_lars_update_q8_cpu(float *w, int8_t *mq, float *ms, const float *g, long n,
                             float step, float mu, float wd)
{
	const struct q8_table *t = table();
	const struct opt_loops *L = kern_optim_loops();
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		float m[KERN_Q8_BLOCK];
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		decode_s(t, mq + lo, len, ms[b], m);
		L->lars(w + lo, m, g + lo, len, step, mu, wd);
		ms[b] = quantize_block_s(t, m, len, mq + lo);
	}
}

long kern_q8_norm_chunk(long blocks)
{
	return blocks > 0 ? (blocks + KERN_Q8_NORM_CHUNKS - 1) / KERN_Q8_NORM_CHUNKS : 1;
}

double kern_lamb_norm_q8_cpu(const int8_t *mq, const float *ms, const uint8_t *vq,
                             const float *vs, const float *g, const float *w, long n, float b1,
                             float b2, float eps, float wd, float bc1, float bc2)
{
	const struct q8_table *t = table();
	long nb = kern_q8_blocks(n);
	if (nb == 0)
		return 0;
	long per = kern_q8_norm_chunk(nb), nchunks = (nb + per - 1) / per;
	double part[KERN_Q8_NORM_CHUNKS];
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long c = 0; c < nchunks; c++) {
		float m[KERN_Q8_BLOCK], v[KERN_Q8_BLOCK];
		double s = 0;
		for (long b = c * per; b < (c + 1) * per && b < nb; b++) {
			long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
			decode_s(t, mq + lo, len, ms[b], m);
			decode_u(t, vq + lo, len, vs[b], v);
			s += kern_lamb_moments_ref(m, v, g + lo, w + lo, len, b1, b2, eps, wd, bc1, bc2);
		}
		part[c] = s;
	}
	double s = 0;
	for (long c = 0; c < nchunks; c++)
		s += part[c];
	return s;
}

void kern_lamb_update_q8_cpu(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                             const float *g, long n, float step, float b1, float b2, float eps,
                             float wd, float bc1, float bc2)
{
	const struct q8_table *t = table();
	const struct opt_loops *L = kern_optim_loops();
	const struct opt_adam a = { 0, b1, b2, eps, wd, bc1, bc2 };
	long nb = kern_q8_blocks(n);
#pragma omp parallel for schedule(static) if (n > Q8_PAR_MIN)
	for (long b = 0; b < nb; b++) {
		float m[KERN_Q8_BLOCK], v[KERN_Q8_BLOCK];
		long lo = b * KERN_Q8_BLOCK, len = block_len(n, b);
		decode_s(t, mq + lo, len, ms[b], m);
		decode_u(t, vq + lo, len, vs[b], v);
		L->lamb_moments(m, v, g + lo, w + lo, len, &a);   /* (its sum: the norm pass's) */
		L->lamb_apply(w + lo, m, v, len, step, &a);
		ms[b] = quantize_block_s(t, m, len, mq + lo);
		vs[b] = quantize_block_u(t, v, len, vq + lo);
	}
}
