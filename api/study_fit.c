/* api/study_fit.c - the McCandlish et al. fit of a batch-scaling study; see
 * study_fit.h. */
#include "study_fit.h"

#include <math.h>
#include <string.h>

#define GRID 400
#define DECADES 4.0            /* the search spans B_min / 10^4 .. B_max * 10^4 */

/* The sum of squared residuals at log b_crit = lb; *ls gets log S_min. */
static double cost(const double *batch, const double *steps, size_t n, double lb, double *ls)
{
	double b = exp(lb), sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += log(steps[i]) - log1p(b / batch[i]);
	double mean = sum / (double)n, sq = 0;
	for (size_t i = 0; i < n; i++) {
		double r = log(steps[i]) - log1p(b / batch[i]) - mean;
		sq += r * r;
	}
	*ls = mean;
	return sq;
}

int api_study_fit(const double *batch, const double *steps, size_t n, struct api_study_fit *out)
{
	memset(out, 0, sizeof *out);
	if (n < 2 || n > API_STUDY_FIT_MAX)
		return -1;
	double bmin = INFINITY, bmax = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(batch[i] > 0) || !(steps[i] > 0) || !isfinite(batch[i]) || !isfinite(steps[i]))
			return -1;
		bmin = fmin(bmin, batch[i]);
		bmax = fmax(bmax, batch[i]);
	}
	double lo = log(bmin) - DECADES * log(10), hi = log(bmax) + DECADES * log(10);
	double h = (hi - lo) / GRID, ls, best = INFINITY;
	int at = 0;
	for (int k = 0; k <= GRID; k++) {
		double c = cost(batch, steps, n, lo + h * k, &ls);
		if (c < best) {
			best = c;
			at = k;
		}
	}
	out->at_edge = at == 0 || at == GRID;
	/* golden section on the grid's neighbours of the best */
	double a = lo + h * (at > 0 ? at - 1 : 0), b = lo + h * (at < GRID ? at + 1 : GRID);
	const double g = (sqrt(5.0) - 1) / 2;
	double x1 = b - g * (b - a), x2 = a + g * (b - a);
	double f1 = cost(batch, steps, n, x1, &ls), f2 = cost(batch, steps, n, x2, &ls);
	for (int it = 0; it < 200 && b - a > 1e-13; it++) {
		if (f1 <= f2) {
			b = x2;
			x2 = x1;
			f2 = f1;
			x1 = b - g * (b - a);
			f1 = cost(batch, steps, n, x1, &ls);
		} else {
			a = x1;
			x1 = x2;
			f1 = f2;
			x2 = a + g * (b - a);
			f2 = cost(batch, steps, n, x2, &ls);
		}
	}
	double lb = (a + b) / 2;
	double sq = cost(batch, steps, n, lb, &ls);
	out->b_crit = exp(lb);
	out->s_min = exp(ls);
	out->e_min = out->s_min * out->b_crit;
	for (size_t i = 0; i < n; i++)
		out->residuals[i] = log(steps[i]) - ls - log1p(out->b_crit / batch[i]);
	out->rms = sqrt(sq / (double)n);
	return 0;
}
