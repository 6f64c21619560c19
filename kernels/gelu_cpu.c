/* kernels/gelu_cpu.c - GELU, GPT-2's tanh approximation (see gelu.h).
 *
 * The reference evaluates the tanh formula and its derivative in double with
 * libm. The optimised version uses the identities
 *   0.5 (1 + tanh u) = 1 / (1 + e),  sech^2 u = 4 e / (1 + e)^2,  e = exp(-2u),
 * which are the same function and the same derivative, with an exp of our own
 * made of + and * only, so that the compiler vectorises the loops (libm's
 * tanhf is a scalar call). */
#include "gelu.h"

#include <math.h>
#include <string.h>

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_A 0.044715

/* Below this many elements the loop runs on one thread; above it, each task
 * handles one block. */
#define GELU_PAR_MIN 32768L
#define GELU_BLOCK 8192L

/* Vector loops for the CPUs that have wider units; the resolver picks one at
 * load time. Results are the same on every variant: no FMA contraction in ISO
 * C mode, and only +, *, / and conversions. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GELU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GELU_CLONES
#endif

void kern_gelu_fwd_ref(float *out, const float *inp, long n)
{
	for (long i = 0; i < n; i++) {
		double x = inp[i];
		double u = GELU_S * (x + GELU_A * x * x * x);
		out[i] = (float)(0.5 * x * (1.0 + tanh(u)));
	}
}

/* gelu'(x) in double, for the references */
static double gelu_grad_ref(double x)
{
	double u = GELU_S * (x + GELU_A * x * x * x);
	double ch = cosh(u);
	double sech2 = 1.0 / (ch * ch);
	return 0.5 * (1.0 + tanh(u)) + 0.5 * x * sech2 * GELU_S * (1.0 + 3.0 * GELU_A * x * x);
}

void kern_gelu_bwd_ref(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		dinp[i] += (float)(gelu_grad_ref(inp[i]) * dout[i]);
}

void kern_gelu_bwd_set_ref(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		dinp[i] = (float)(gelu_grad_ref(inp[i]) * dout[i]);
}

/* exp(z) for |z| <= 87: z = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor
 * series to degree 7 (truncation below 1e-8), 2^k from the exponent bits.
 * ln2 is split in two so that kf * ln2_hi is exact. About 2 ulp. */
static inline float exp_small(float z)
{
	const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
	const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-6f;
	float kf = (z * 1.44269504088896341f + round_magic) - round_magic;
	float r = (z - kf * ln2_hi) - kf * ln2_lo;
	float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 +
	          r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
	int bits = ((int)kf + 127) << 23;
	float two_k;
	memcpy(&two_k, &bits, sizeof two_k);
	return p * two_k;
}

/* exp(-2u) with -2u clamped to [-87, 87], where 2^k stays a normal float.
 * The clamp is written with fabsf/copysignf because a clamp to a constant
 * lets GCC split the loop body into branches, which stops vectorisation.
 * The clamp only acts for |x| > 9.9, where gelu is x or 0 and gelu' is 1 or
 * 0 to float precision. */
static inline float exp_m2u(float x)
{
	/* -2u = x (-2s - 2sa x^2): four roundings, the fewest we found; exp
	 * turns their absolute error in -2u into relative error in e */
	float z = x * ((float)(-2 * GELU_S) + (float)(-2 * GELU_S * GELU_A) * (x * x));
	z = fabsf(z) < 87.0f ? z : copysignf(87.0f, z);
	return exp_small(z);
}

GELU_CLONES
static void gelu_fwd_span(float *out, const float *inp, long n)
{
	for (long i = 0; i < n; i++) {
		float x = inp[i];
		out[i] = x / (1.0f + exp_m2u(x));
	}
}

/* gelu'(x) in float, vectorisable */
static inline float gelu_grad(float x)
{
	float e = exp_m2u(x);
	float sg = 1.0f / (1.0f + e);       /* 0.5 (1 + tanh u) */
	float sech2_4 = (e * sg) * sg;      /* sech^2(u) / 4, no overflow */
	/* x * x overflows past |x| = 1.8e19 and the gradient becomes inf or
	 * NaN; activations that large mean training has diverged anyway */
	return sg + 2.0f * x * sech2_4 * (float)GELU_S * (1.0f + 3.0f * (float)GELU_A * x * x);
}

GELU_CLONES
static void gelu_bwd_span(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		dinp[i] += gelu_grad(inp[i]) * dout[i];
}

GELU_CLONES
static void gelu_bwd_set_span(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		dinp[i] = gelu_grad(inp[i]) * dout[i];
}

/* Elementwise, so in-place use (out == inp) is fine. */
void kern_gelu_fwd_cpu(float *out, const float *inp, long n)
{
	long nblk = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) if (n > GELU_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * GELU_BLOCK;
		gelu_fwd_span(out + lo, inp + lo, n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK);
	}
}

void kern_gelu_bwd_cpu(float *dinp, const float *inp, const float *dout, long n)
{
	long nblk = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) if (n > GELU_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * GELU_BLOCK;
		gelu_bwd_span(dinp + lo, inp + lo, dout + lo,
		              n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK);
	}
}

/* Elementwise, so in-place use (dinp == dout) is fine. */
void kern_gelu_bwd_set_cpu(float *dinp, const float *inp, const float *dout, long n)
{
	long nblk = (n + GELU_BLOCK - 1) / GELU_BLOCK;
#pragma omp parallel for schedule(static) if (n > GELU_PAR_MIN)
	for (long b = 0; b < nblk; b++) {
		long lo = b * GELU_BLOCK;
		gelu_bwd_set_span(dinp + lo, inp + lo, dout + lo,
		                  n - lo < GELU_BLOCK ? n - lo : GELU_BLOCK);
	}
}
