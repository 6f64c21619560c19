/* api/study_fit.h - the critical batch size of a batch-scaling study.
 *
 * McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training"):
 * the steps S and examples E that reach a target at batch B follow
 * (S/S_min - 1)(E/E_min - 1) = 1 with E = S B, that is
 *     S(B) = S_min (1 + b_crit / B),   E(B) = E_min (1 + B / b_crit),
 *     b_crit = E_min / S_min.
 * The fit minimises the squared residuals of log S. Given b_crit, log S_min
 * is the mean of log S - log(1 + b_crit / B) (linear least squares), so
 * the fit is a 1-D search over log b_crit: a grid over [B_min / 10^4,
 * B_max * 10^4], then golden-section refinement around the grid's best.
 * Exact points are recovered to ~1e-9 relative.
 *
 * Pure arithmetic: no allocation, no I/O.
 */
#ifndef LARCH_API_STUDY_FIT_H
#define LARCH_API_STUDY_FIT_H

#include <stddef.h>

#define API_STUDY_FIT_MAX 64   /* points at most */

struct api_study_fit {
	double s_min, e_min, b_crit;
	double residuals[API_STUDY_FIT_MAX];   /* log S - log S_fit, per point, in input order */
	double rms;                /* root mean square of the residuals */
	int at_edge;               /* 1: the best b_crit is at the end of the search range
	                              (S hardly depends on B, or falls as 1/B throughout) */
};

/* Fits batch[i], steps[i] (i < n; every value > 0; 2 <= n <=
 * API_STUDY_FIT_MAX) into out. 0, or -1 for input it cannot fit. */
int api_study_fit(const double *batch, const double *steps, size_t n, struct api_study_fit *out);

#endif
