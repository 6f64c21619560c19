/* tests/unit/test_api_study_fit.c - api/study_fit.c: exact recovery of the
 * McCandlish et al. curve from synthetic points, a noisy fit, and the
 * inputs it refuses. */
#include <math.h>
#include <stdint.h>

#include "api/study_fit.h"
#include "check.h"

static const double sizes[] = { 64, 256, 1024, 4096, 16384 };
#define N (sizeof sizes / sizeof sizes[0])

static double rel(double got, double want)
{
	return fabs(got - want) / fabs(want);
}

/* S = S_min (1 + b/B) exactly: S_min, b_crit, E_min back, residuals zero. */
static void test_exact(void)
{
	static const double bcrits[] = { 300, 2000, 40 };
	for (size_t k = 0; k < sizeof bcrits / sizeof bcrits[0]; k++) {
		double smin = 150, steps[N];
		for (size_t i = 0; i < N; i++)
			steps[i] = smin * (1 + bcrits[k] / sizes[i]);
		struct api_study_fit f;
		CHECK(api_study_fit(sizes, steps, N, &f) == 0);
		CHECK_MSG(rel(f.b_crit, bcrits[k]) < 1e-6, "b_crit %g want %g", f.b_crit, bcrits[k]);
		CHECK_MSG(rel(f.s_min, smin) < 1e-6, "s_min %g want %g", f.s_min, smin);
		CHECK_MSG(rel(f.e_min, smin * bcrits[k]) < 1e-6, "e_min %g", f.e_min);
		CHECK(!f.at_edge);
		for (size_t i = 0; i < N; i++)
			CHECK_MSG(fabs(f.residuals[i]) < 1e-6, "residual %zu: %g", i, f.residuals[i]);
		/* the hyperbola itself: (S/S_min - 1)(E/E_min - 1) = 1 */
		for (size_t i = 0; i < N; i++) {
			double e = steps[i] * sizes[i];
			CHECK(fabs((steps[i] / f.s_min - 1) * (e / f.e_min - 1) - 1) < 1e-5);
		}
	}
}

/* Multiplicative noise of a few percent (fixed draws): b_crit within a
 * factor of 1.5, the residuals those of the noise's size. */
static void test_noisy(void)
{
	static const double noise[N] = { 0.04, -0.03, 0.02, -0.05, 0.03 };
	double smin = 80, bcrit = 1000, steps[N];
	for (size_t i = 0; i < N; i++)
		steps[i] = smin * (1 + bcrit / sizes[i]) * exp(noise[i]);
	struct api_study_fit f;
	CHECK(api_study_fit(sizes, steps, N, &f) == 0);
	CHECK_MSG(f.b_crit > bcrit / 1.5 && f.b_crit < bcrit * 1.5, "b_crit %g", f.b_crit);
	CHECK_MSG(f.s_min > smin / 1.2 && f.s_min < smin * 1.2, "s_min %g", f.s_min);
	CHECK(f.rms > 0.005 && f.rms < 0.06);
	double sum = 0;
	for (size_t i = 0; i < N; i++)
		sum += f.residuals[i];
	CHECK_MSG(fabs(sum) < 1e-9, "residuals sum to %g (log S_min is their mean)", sum);
}

/* Steps that do not fall with B: b_crit at the low edge of the search. */
static void test_flat(void)
{
	double steps[N] = { 100, 100, 100, 100, 100 };
	struct api_study_fit f;
	CHECK(api_study_fit(sizes, steps, N, &f) == 0);
	CHECK(f.at_edge);
	CHECK(f.b_crit < sizes[0] / 1000);
}

static void test_refused(void)
{
	struct api_study_fit f;
	double one[1] = { 10 }, bad[2] = { 10, 0 }, b2[2] = { 64, 128 };
	CHECK(api_study_fit(sizes, one, 1, &f) == -1);
	CHECK(api_study_fit(b2, bad, 2, &f) == -1);
	double nan_steps[2] = { NAN, 5 };
	CHECK(api_study_fit(b2, nan_steps, 2, &f) == -1);
}

int main(void)
{
	CHECK_RUN(test_exact);
	CHECK_RUN(test_noisy);
	CHECK_RUN(test_flat);
	CHECK_RUN(test_refused);
	return check_finish();
}
