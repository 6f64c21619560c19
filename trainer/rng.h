/* trainer/rng.h - a small deterministic random number generator.
 *
 * xoshiro256** (Blackman & Vigna) seeded through splitmix64: the same seed
 * gives the same stream on every platform, and the state is four words that
 * checkpoints save and restore. Not for cryptography.
 */
#ifndef LARCH_TRAINER_RNG_H
#define LARCH_TRAINER_RNG_H

#include <stdint.h>

struct trn_rng {
	uint64_t s[4];
};

/* Seeds from (seed, stream): different streams of one seed are independent
 * (weight init, data order of epoch e, ...). */
void trn_rng_seed(struct trn_rng *r, uint64_t seed, uint64_t stream);

uint64_t trn_rng_u64(struct trn_rng *r);
/* uniform in [0, n), unbiased; n >= 1 */
uint64_t trn_rng_below(struct trn_rng *r, uint64_t n);
/* uniform in [0, 1) with 53 random bits */
double trn_rng_uniform(struct trn_rng *r);
/* standard normal (Box-Muller; no cached second value, so the state alone
 * determines the stream) */
double trn_rng_normal(struct trn_rng *r);

/* Advances r as n calls of trn_rng_u64 would, in O(log n): xoshiro's step is
 * linear over GF(2), so n steps are one 256 x 256 bit matrix, a product of
 * the step's powers 2^k (computed once). */
void trn_rng_jump(struct trn_rng *r, uint64_t n);

/* x[k] = (float)(std * the k-th trn_rng_normal of r) for k in [0, n), and r
 * advanced past them: the sequential loop's values, bit for bit, computed
 * by the threads in parts, each from r jumped to its first value (a
 * normal takes two steps). */
void trn_rng_fill_normal(struct trn_rng *r, float *x, long n, double std);

/* Fisher-Yates shuffle of idx[0..n) */
void trn_rng_shuffle(struct trn_rng *r, long *idx, long n);

#endif
