/* kernels/vecmath.h - float primitives that the optimised CPU kernels inline
 * into their vector loops (private to kernels/).
 *
 * This is the one header here with function bodies, on purpose: the loops
 * that call these vectorise only when the calls are inlined into them (and
 * into each of their target_clones variants), which a call into another file
 * would prevent. Sums use KERN_LANES partial sums added in a fixed pairwise
 * order, so results do not depend on the vector width the CPU offers.
 */
#ifndef LARCH_KERNELS_VECMATH_H
#define LARCH_KERNELS_VECMATH_H

#include <stdint.h>
#include <string.h>

enum { KERN_LANES = 16 };

/* exp(x) for the x <= ~0 of softmaxes, within 2 ulp; 0 below -87 (where
 * exp(x) < 1.7e-38), NaN for NaN. exp(x) = 2^k exp(r) with k = round(x / ln2)
 * and |r| <= ln2/2, where the degree-7 Taylor polynomial errs by < 1e-8.
 * glibc's expf does not vectorise. */
static inline float kern_exp_neg(float x)
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

/* The KERN_LANES partial sums in acc, added in a fixed pairwise order. */
static inline float kern_lanes_total(const float *acc)
{
	float t[KERN_LANES];
	memcpy(t, acc, sizeof t);
	for (int w = KERN_LANES / 2; w > 0; w /= 2)
		for (int l = 0; l < w; l++)
			t[l] += t[l + w];
	return t[0];
}

/* x[0] + ... + x[n-1], lane by lane. */
static inline float kern_row_sum(const float *x, int n)
{
	float acc[KERN_LANES] = { 0 };
	int j = 0;
	for (; j + KERN_LANES <= n; j += KERN_LANES)
		for (int l = 0; l < KERN_LANES; l++)
			acc[l] += x[j + l];
	for (int l = 0; j < n; j++, l++)
		acc[l] += x[j];
	return kern_lanes_total(acc);
}

#endif
