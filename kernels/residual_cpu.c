/* kernels/residual_cpu.c - residual connection (see residual.h): reference
 * and threaded, vectorised version; they agree bit for bit. */
#include "residual.h"

/* Below this many elements the loop runs on one thread. */
#define RESIDUAL_PAR_MIN 32768L

void kern_residual_fwd_ref(float *out, const float *a, const float *b, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

void kern_residual_bwd_ref(float *da, float *db, const float *dout, long n)
{
	for (long i = 0; i < n; i++) {
		da[i] += dout[i];
		db[i] += dout[i];
	}
}

/* Elementwise, so out may be a or b. */
void kern_residual_fwd_cpu(float *out, const float *a, const float *b, long n)
{
#pragma omp parallel for simd schedule(static) if (n > RESIDUAL_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

void kern_residual_bwd_cpu(float *da, float *db, const float *dout, long n)
{
#pragma omp parallel for simd schedule(static) if (n > RESIDUAL_PAR_MIN)
	for (long i = 0; i < n; i++) {
		da[i] += dout[i];
		db[i] += dout[i];
	}
}
