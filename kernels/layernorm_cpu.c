/* kernels/layernorm_cpu.c - LayerNorm forward and backward: the plain
 * reference and the threaded CPU version; see layernorm.h.
 *
 * The CPU version threads over rows. Row sums use KERN_LANES independent float
 * accumulators combined in a fixed order: the compiler turns them into vector
 * adds (it may not reorder a single float sum by itself), and the result does
 * not depend on the thread count or on which vector width the CPU has.
 * dweight and dbias, sums over rows, go through per-chunk partials whose
 * chunking depends only on n, added up in chunk order.
 */
#include "layernorm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vecmath.h"

/* ---- reference ------------------------------------------------------------ */

void kern_layernorm_fwd_ref(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int n, int c)
{
	for (int i = 0; i < n; i++) {
		const float *x = inp + (size_t)i * c;
		double s = 0;
		for (int j = 0; j < c; j++)
			s += x[j];
		double m = s / c;
		double v = 0;
		for (int j = 0; j < c; j++)
			v += (x[j] - m) * (x[j] - m);
		double r = 1.0 / sqrt(v / c + KERN_LAYERNORM_EPS);
		float *y = out + (size_t)i * c;
		for (int j = 0; j < c; j++)
			y[j] = (float)((x[j] - m) * r * weight[j] + bias[j]);
		mean[i] = (float)m;
		rstd[i] = (float)r;
	}
}

void kern_layernorm_bwd_ref(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int n, int c)
{
	for (int i = 0; i < n; i++) {
		const float *x = inp + (size_t)i * c, *dy = dout + (size_t)i * c;
		double m = mean[i], r = rstd[i];
		/* dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
		double sum_dn = 0, sum_dn_norm = 0;
		for (int j = 0; j < c; j++) {
			double norm = (x[j] - m) * r, dn = (double)dy[j] * weight[j];
			sum_dn += dn;
			sum_dn_norm += dn * norm;
		}
		double mean_dn = sum_dn / c, mean_dn_norm = sum_dn_norm / c;
		float *dx = dinp + (size_t)i * c;
		for (int j = 0; j < c; j++) {
			double norm = (x[j] - m) * r, dn = (double)dy[j] * weight[j];
			dx[j] += (float)(r * (dn - mean_dn - norm * mean_dn_norm));
			dweight[j] += (float)(dy[j] * norm);
			dbias[j] += dy[j];
		}
	}
}

void kern_layernorm_bwd_set_ref(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int n, int c)
{
	if (n > 0 && c > 0)
		memset(dinp, 0, sizeof(float) * (size_t)n * (size_t)c);
	kern_layernorm_bwd_ref(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
}

/* ---- optimised CPU version -------------------------------------------------- */


static inline float row_sq_dev(const float *x, float m, int c)
{
	float acc[KERN_LANES] = { 0 };
	int j = 0;
	for (; j + KERN_LANES <= c; j += KERN_LANES)
		for (int l = 0; l < KERN_LANES; l++) {
			float d = x[j + l] - m;
			acc[l] += d * d;
		}
	for (int l = 0; j < c; j++, l++) {
		float d = x[j] - m;
		acc[l] += d * d;
	}
	return kern_lanes_total(acc);
}

/* Row loops for the CPUs with wider vector units, picked at load time. The
 * variants give the same bits: fixed lanes, and no FMA contraction in ISO C. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LN_CLONES
#endif

LN_CLONES
static void ln_fwd_row(float *y, float *mean, float *rstd, const float *x, const float *weight,
                       const float *bias, int c)
{
	/* two passes: the one-pass E[x^2] - E[x]^2 cancels badly when |mean| >> std */
	float m = kern_row_sum(x, c) / c;
	float r = 1.0f / sqrtf(row_sq_dev(x, m, c) / c + KERN_LAYERNORM_EPS);
#pragma omp simd
	for (int j = 0; j < c; j++)
		y[j] = (x[j] - m) * r * weight[j] + bias[j];
	*mean = m;
	*rstd = r;
}

void kern_layernorm_fwd_cpu(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int n, int c)
{
#pragma omp parallel for schedule(static)
	for (int i = 0; i < n; i++)
		ln_fwd_row(out + (size_t)i * c, &mean[i], &rstd[i], inp + (size_t)i * c, weight, bias,
		           c);
}

/* Rows per dweight/dbias partial: at least MIN_ROWS, and at most MAX_CHUNKS
 * partials, so that the partials stay small next to the [n, c] inputs. */
enum { MIN_ROWS = 16, MAX_CHUNKS = 256 };

/* Rows [i0, i1) of the backward: dinp (= when set, else +=), and their
 * dweight and dbias sums into the partials pw and pb. */
LN_CLONES
static void ln_bwd_rows(float *dinp, float *pw, float *pb, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int i0,
                        int i1, int c, int set)
{
	memset(pw, 0, sizeof(float) * (size_t)c);
	memset(pb, 0, sizeof(float) * (size_t)c);
	for (int i = i0; i < i1; i++) {
		const float *x = inp + (size_t)i * c, *dy = dout + (size_t)i * c;
		float *dx = dinp + (size_t)i * c;
		float m = mean[i], r = rstd[i];
		float a_dn[KERN_LANES] = { 0 }, a_dnn[KERN_LANES] = { 0 };
		int j = 0;
		for (; j + KERN_LANES <= c; j += KERN_LANES)
			for (int l = 0; l < KERN_LANES; l++) {
				float norm = (x[j + l] - m) * r, dn = dy[j + l] * weight[j + l];
				a_dn[l] += dn;
				a_dnn[l] += dn * norm;
			}
		for (int l = 0; j < c; j++, l++) {
			float norm = (x[j] - m) * r, dn = dy[j] * weight[j];
			a_dn[l] += dn;
			a_dnn[l] += dn * norm;
		}
		float mean_dn = kern_lanes_total(a_dn) / c, mean_dnn = kern_lanes_total(a_dnn) / c;
		if (set) {
#pragma omp simd
			for (j = 0; j < c; j++) {
				float norm = (x[j] - m) * r, dn = dy[j] * weight[j];
				dx[j] = r * (dn - mean_dn - norm * mean_dnn);
				pw[j] += dy[j] * norm;
				pb[j] += dy[j];
			}
		} else {
#pragma omp simd
			for (j = 0; j < c; j++) {
				float norm = (x[j] - m) * r, dn = dy[j] * weight[j];
				dx[j] += r * (dn - mean_dn - norm * mean_dnn);
				pw[j] += dy[j] * norm;
				pb[j] += dy[j];
			}
		}
	}
}

/* set: dinp = rather than += */
static void layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int n, int c, int set)
{
	if (n <= 0 || c <= 0)
		return;
	int nchunk = (n + MIN_ROWS - 1) / MIN_ROWS;
	if (nchunk > MAX_CHUNKS)
		nchunk = MAX_CHUNKS;
	/* part[k] holds chunk k's dweight sums, then its dbias sums */
	float *part = malloc(sizeof(float) * 2 * (size_t)c * nchunk);
	if (!part) {
		fprintf(stderr, "larch: layernorm backward: out of memory (%d x %d partials)\n",
		        nchunk, 2 * c);
		abort();
	}

#pragma omp parallel for schedule(static)
	for (int k = 0; k < nchunk; k++) {
		int i0 = (int)((long long)n * k / nchunk), i1 = (int)((long long)n * (k + 1) / nchunk);
		float *pw = part + (size_t)2 * c * k;
		ln_bwd_rows(dinp, pw, pw + c, dout, inp, weight, mean, rstd, i0, i1, c, set);
	}

	/* combine the partials in chunk order, threads split the columns */
#pragma omp parallel for schedule(static)
	for (int j0 = 0; j0 < c; j0 += 64) {
		int j1 = j0 + 64 < c ? j0 + 64 : c;
		float sw[64] = { 0 }, sb[64] = { 0 };
		for (int k = 0; k < nchunk; k++) {
			const float *pw = part + (size_t)2 * c * k, *pb = pw + c;
			for (int j = j0; j < j1; j++) {
				sw[j - j0] += pw[j];
				sb[j - j0] += pb[j];
			}
		}
		for (int j = j0; j < j1; j++) {
			dweight[j] += sw[j - j0];
			dbias[j] += sb[j - j0];
		}
	}
	free(part);
}

void kern_layernorm_bwd_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int n, int c)
{
	layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 0);
}

void kern_layernorm_bwd_set_cpu(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int n, int c)
{
	layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 1);
}
