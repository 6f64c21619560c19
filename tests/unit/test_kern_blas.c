/* tests/unit/test_kern_blas.c - kernels/blas.c: the run-time loaded GEMM
 * against a plain triple loop, for every transpose combination. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kernels/blas.h"
#include "kernels/parallel.h"

static void naive(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                  const float *b, float beta, float *c)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double s = 0;
			for (int p = 0; p < k; p++) {
				float x = ta ? a[p * m + i] : a[i * k + p];
				float y = tb ? b[j * k + p] : b[p * n + j];
				s += (double)x * y;
			}
			c[i * n + j] = (float)(alpha * s + beta * c[i * n + j]);
		}
}

static void test_sgemm_all_transposes(void)
{
	uint64_t rng = 7;
	const int m = 37, n = 53, k = 71;
	float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
	float *c = malloc(sizeof(float) * m * n), *want = malloc(sizeof(float) * m * n);
	check_fill(a, (long)m * k, -1, 1, &rng);
	check_fill(b, (long)k * n, -1, 1, &rng);
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			check_fill(c, (long)m * n, -1, 1, &rng);
			for (long i = 0; i < (long)m * n; i++)
				want[i] = c[i];
			naive(ta, tb, m, n, k, 0.5f, a, b, 2.0f, want);
			kern_sgemm(ta ? KERN_TRANS : KERN_NO_TRANS, tb ? KERN_TRANS : KERN_NO_TRANS,
			           m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 2.0f, c, n);
			char what[64];
			snprintf(what, sizeof what, "sgemm ta=%d tb=%d", ta, tb);
			/* fp32 sums of 71 products of magnitude <= 1 */
			check_close(what, c, want, (long)m * n, 1e-5, 1e-5);
		}
	free(a);
	free(b);
	free(c);
	free(want);
}

int main(void)
{
	char err[512];
	if (kern_blas_init(err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	fprintf(stderr, "blas: %s\n", kern_blas_describe());
	CHECK_RUN(test_sgemm_all_transposes);
	return check_finish();
}
