/* trainer/rng.c - see rng.h.
 *
 * xoshiro256** from the published description (Blackman & Vigna, "Scrambled
 * linear pseudorandom number generators", 2018); splitmix64 turns (seed,
 * stream) into the four state words.
 */
#include "rng.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define TWO_PI 6.283185307179586476925286766559

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *x)
{
	*x += GOLDEN;
	return mix64(*x);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

void trn_rng_seed(struct trn_rng *r, uint64_t seed, uint64_t stream)
{
	/* mix64 is a bijection, so distinct streams of one seed start splitmix64
	 * at distinct points, far apart in its sequence */
	uint64_t x = seed ^ mix64(stream + GOLDEN);
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
	if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
		r->s[0] = GOLDEN;      /* the one state xoshiro cannot leave */
}

uint64_t trn_rng_u64(struct trn_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

uint64_t trn_rng_below(struct trn_rng *r, uint64_t n)
{
	if (n <= 1)
		return 0;
	/* reject the lowest 2^64 mod n values so that every residue has the same
	 * number of preimages */
	uint64_t threshold = (0 - n) % n;
	for (;;) {
		uint64_t x = trn_rng_u64(r);
		if (x >= threshold)
			return x % n;
	}
}

double trn_rng_uniform(struct trn_rng *r)
{
	return (double)(trn_rng_u64(r) >> 11) * 0x1.0p-53;
}

double trn_rng_normal(struct trn_rng *r)
{
	double u1 = 1.0 - trn_rng_uniform(r);   /* (0, 1]: log stays finite */
	double u2 = trn_rng_uniform(r);
	return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

/* ---- jumps ---------------------------------------------------------------------- */

/* A 256 x 256 matrix over GF(2) by columns: col[j] is the image of state
 * bit j (word j / 64, bit j % 64), four words each. */
struct gf2_matrix {
	uint64_t col[256][4];
};

/* y = a x over GF(2): the XOR of a's columns where x has a bit set */
static void gf2_apply(const struct gf2_matrix *a, const uint64_t x[4], uint64_t y[4])
{
	uint64_t acc[4] = { 0, 0, 0, 0 };
	for (int j = 0; j < 256; j++) {
		if (!((x[j / 64] >> (j % 64)) & 1))
			continue;
		for (int w = 0; w < 4; w++)
			acc[w] ^= a->col[j][w];
	}
	memcpy(y, acc, sizeof acc);
}

/* powers[k] = the step matrix to the 2^k (k < 64) */
static struct gf2_matrix *powers;
static pthread_once_t powers_once = PTHREAD_ONCE_INIT;

static void make_powers(void)
{
	struct gf2_matrix *p = malloc(sizeof *p * 64);
	if (!p)
		abort();
	for (int j = 0; j < 256; j++) {      /* the step's image of each state bit */
		struct trn_rng e = { .s = { 0, 0, 0, 0 } };
		e.s[j / 64] = 1ULL << (j % 64);
		trn_rng_u64(&e);
		memcpy(p[0].col[j], e.s, sizeof e.s);
	}
	for (int k = 1; k < 64; k++)          /* squares: column j of A A is A (A e_j) */
		for (int j = 0; j < 256; j++)
			gf2_apply(&p[k - 1], p[k - 1].col[j], p[k].col[j]);
	powers = p;
}

void trn_rng_jump(struct trn_rng *r, uint64_t n)
{
	if (n < 64) {                        /* a few steps: step them */
		while (n--)
			trn_rng_u64(r);
		return;
	}
	pthread_once(&powers_once, make_powers);
	for (int k = 0; k < 64; k++)
		if ((n >> k) & 1)
			gf2_apply(&powers[k], r->s, r->s);
}

/* below this many values a fill runs on one thread */
#define FILL_PAR_MIN (1L << 16)

void trn_rng_fill_normal(struct trn_rng *r, float *x, long n, double std)
{
	if (n <= 0)
		return;
	const struct trn_rng start = *r;
#pragma omp parallel if (n >= FILL_PAR_MIN)
	{
		int parts = omp_get_num_threads(), t = omp_get_thread_num();
		long a = n / parts * t + (t < n % parts ? t : n % parts);
		long b = a + n / parts + (t < n % parts);
		struct trn_rng mine = start;
		trn_rng_jump(&mine, 2 * (uint64_t)a);
		for (long k = a; k < b; k++)
			x[k] = (float)(std * trn_rng_normal(&mine));
	}
	trn_rng_jump(r, 2 * (uint64_t)n);
}

void trn_rng_shuffle(struct trn_rng *r, long *idx, long n)
{
	for (long i = n - 1; i > 0; i--) {
		long j = (long)trn_rng_below(r, (uint64_t)i + 1);
		long t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
	}
}
