/* kernels/matmul_cpu.c - fully connected layer (see matmul.h): the plain-C
 * reference and the optimised version, whose GEMMs go to the system BLAS
 * through kern_sgemm and whose bias gradient is a threaded column sum. */
#include "matmul.h"

#include <stddef.h>
#include <string.h>

#include "blas.h"

/* Below this many elements a pass over out or dout runs on one thread. */
#define MATMUL_PAR_MIN 32768L
/* Columns of dout summed together by one task of the bias gradient: a whole
 * number of cache lines, and enough tasks for the threads when oc >= 768. */
#define DBIAS_COLS 64

void kern_matmul_fwd_ref(float *out, const float *inp, const float *weight,
                         const float *bias, int n, int c, int oc)
{
	for (int i = 0; i < n; i++)
		for (int o = 0; o < oc; o++) {
			const float *x = inp + (size_t)i * c, *w = weight + (size_t)o * c;
			double s = bias ? bias[o] : 0.0;
			for (int j = 0; j < c; j++)
				s += (double)x[j] * w[j];
			out[(size_t)i * oc + o] = (float)s;
		}
}

void kern_matmul_bwd_ref(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int n, int c, int oc)
{
	if (dinp)
		for (int i = 0; i < n; i++)
			for (int j = 0; j < c; j++) {
				double s = 0;
				for (int o = 0; o < oc; o++)
					s += (double)dout[(size_t)i * oc + o] * weight[(size_t)o * c + j];
				dinp[(size_t)i * c + j] += (float)s;
			}
	for (int o = 0; o < oc; o++)
		for (int j = 0; j < c; j++) {
			double s = 0;
			for (int i = 0; i < n; i++)
				s += (double)dout[(size_t)i * oc + o] * inp[(size_t)i * c + j];
			dweight[(size_t)o * c + j] += (float)s;
		}
	if (dbias)
		for (int o = 0; o < oc; o++) {
			double s = 0;
			for (int i = 0; i < n; i++)
				s += dout[(size_t)i * oc + o];
			dbias[o] += (float)s;
		}
}

void kern_matmul_bwd_set_ref(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             int n, int c, int oc)
{
	if (dinp && n > 0 && c > 0)
		memset(dinp, 0, sizeof(float) * (size_t)n * (size_t)c);
	kern_matmul_bwd_ref(dinp, dweight, dbias, dout, inp, weight, n, c, oc);
}

void kern_matmul_fwd_cpu(float *out, const float *inp, const float *weight,
                         const float *bias, int n, int c, int oc)
{
	if (n <= 0 || oc <= 0)
		return;
	long total = (long)n * oc;
	/* The bias goes in first and the GEMM adds onto it (beta = 1), which
	 * saves a second pass over out. */
	if (bias) {
#pragma omp parallel for schedule(static) if (total > MATMUL_PAR_MIN)
		for (int i = 0; i < n; i++)
			memcpy(out + (size_t)i * oc, bias, sizeof(float) * (size_t)oc);
	} else if (c <= 0) {
		memset(out, 0, sizeof(float) * (size_t)total);
	}
	/* BLAS rejects k = 0 with lda = 0; out is already bias (or zero) then */
	if (c <= 0)
		return;
	kern_sgemm(KERN_NO_TRANS, KERN_TRANS, n, oc, c, 1.0f, inp, c, weight, c,
	           bias ? 1.0f : 0.0f, out, oc);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COLSUM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define COLSUM_CLONES
#endif

typedef float colsum_v8f __attribute__((vector_size(32)));
typedef double colsum_v8d __attribute__((vector_size(64)));

/* acc[j] = sum_i x[i, j] for DBIAS_COLS = 64 columns of rows with stride
 * ld, in double, rows in order. Eight vector accumulators of eight columns
 * each stay in registers (AVX-512: one zmm each); an array of 64 doubles
 * updated row by row was stored and reloaded every row instead. */
COLSUM_CLONES
static void colsum64(double *acc, const float *x, int n, int ld)
{
	colsum_v8d a[DBIAS_COLS / 8] = { 0 };
	for (int i = 0; i < n; i++) {
		const float *row = x + (size_t)i * ld;
		for (int k = 0; k < DBIAS_COLS / 8; k++) {
			colsum_v8f v;
			memcpy(&v, row + 8 * k, sizeof v);
			a[k] += __builtin_convertvector(v, colsum_v8d);
		}
	}
	memcpy(acc, a, sizeof a);
}

/* dbias[o] += sum_i dout[i, o]. Each task owns a block of columns and walks
 * the rows in order, summing in double as the reference does: the result
 * does not depend on the thread count and equals the reference bit for bit. */
static void dbias_colsum(float *dbias, const float *dout, int n, int oc)
{
	int nblk = (oc + DBIAS_COLS - 1) / DBIAS_COLS;
#pragma omp parallel for schedule(static) if ((long)n * oc > MATMUL_PAR_MIN)
	for (int b = 0; b < nblk; b++) {
		int o0 = b * DBIAS_COLS;
		int w = oc - o0 < DBIAS_COLS ? oc - o0 : DBIAS_COLS;
		double acc[DBIAS_COLS] = { 0 };
		if (w == DBIAS_COLS) {
			colsum64(acc, dout + o0, n, oc);
		} else {
			for (int i = 0; i < n; i++) {
				const float *row = dout + (size_t)i * oc + o0;
#pragma omp simd
				for (int j = 0; j < w; j++)
					acc[j] += row[j];
			}
		}
		for (int j = 0; j < w; j++)
			dbias[o0 + j] += (float)acc[j];
	}
}

/* dinp_beta: 1 adds into dinp, 0 overwrites it (BLAS's beta = 0 ignores
 * what dinp held, NaN included). */
static void matmul_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                       const float *inp, const float *weight, int n, int c, int oc,
                       float dinp_beta)
{
	if (n <= 0)
		return;
	if (oc <= 0) {
		/* an empty sum: dinp = 0 when overwriting, nothing to add otherwise */
		if (dinp && dinp_beta == 0.0f && c > 0)
			memset(dinp, 0, sizeof(float) * (size_t)n * (size_t)c);
		return;
	}
	if (c > 0) {
		/* dinp[n, c] (+)= dout[n, oc] @ weight[oc, c] */
		if (dinp)
			kern_sgemm(KERN_NO_TRANS, KERN_NO_TRANS, n, c, oc, 1.0f, dout, oc,
			           weight, c, dinp_beta, dinp, c);
		/* dweight[oc, c] += dout^T[oc, n] @ inp[n, c] */
		kern_sgemm(KERN_TRANS, KERN_NO_TRANS, oc, c, n, 1.0f, dout, oc,
		           inp, c, 1.0f, dweight, c);
	}
	if (dbias)
		dbias_colsum(dbias, dout, n, oc);
}

void kern_matmul_bwd_cpu(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int n, int c, int oc)
{
	matmul_bwd(dinp, dweight, dbias, dout, inp, weight, n, c, oc, 1.0f);
}

void kern_matmul_bwd_set_cpu(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             int n, int c, int oc)
{
	matmul_bwd(dinp, dweight, dbias, dout, inp, weight, n, c, oc, 0.0f);
}
