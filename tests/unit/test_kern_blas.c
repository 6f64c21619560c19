/* tests/unit/test_kern_blas.c - kernels/blas.c: the run-time loaded GEMM
 * against a plain triple loop, for every transpose combination; the GEMM
 * trace records calls from serial code and from parallel regions and
 * replays them with the same results. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Eight GEMMs of one shape: out[i] = a[i] @ b (beta 0), so that a replay
 * recomputes exactly what the recorded calls wrote. */
enum { TR_N = 8, TR_M = 24, TR_K = 40 };

static void trace_calls(float *const *a, const float *b, float *const *out, int parallel)
{
	if (!parallel) {
		for (int i = 0; i < TR_N; i++)
			kern_sgemm(KERN_NO_TRANS, KERN_NO_TRANS, TR_M, TR_M, TR_K, 1.0f, a[i], TR_K, b,
			           TR_M, 0.0f, out[i], TR_M);
		return;
	}
#pragma omp parallel for schedule(static) num_threads(4)
	for (int i = 0; i < TR_N; i++)
		kern_sgemm(KERN_NO_TRANS, KERN_NO_TRANS, TR_M, TR_M, TR_K, 1.0f, a[i], TR_K, b,
		           TR_M, 0.0f, out[i], TR_M);
}

static void test_trace_replay(void)
{
	uint64_t rng = 3;
	long na = (long)TR_M * TR_K, nb = (long)TR_K * TR_M, no = (long)TR_M * TR_M;
	float *a[TR_N], *out[TR_N], *want[TR_N];
	float *b = malloc(sizeof(float) * nb);
	check_fill(b, nb, -1, 1, &rng);
	for (int i = 0; i < TR_N; i++) {
		a[i] = malloc(sizeof(float) * na);
		out[i] = malloc(sizeof(float) * no);
		want[i] = malloc(sizeof(float) * no);
		check_fill(a[i], na, -1, 1, &rng);
	}
	for (int parallel = 0; parallel < 2; parallel++) {
		double flops = -1;
		kern_sgemm_trace_start();
		trace_calls(a, b, out, parallel);
		/* a serial call after the parallel region closes its group */
		trace_calls(a, b, out, 0);
		long calls = kern_sgemm_trace_stop(&flops);
		CHECK_INT_EQ(calls, 2 * TR_N);
		CHECK(flops == 2 * TR_N * 2.0 * TR_M * TR_M * TR_K);
		for (int i = 0; i < TR_N; i++) {
			memcpy(want[i], out[i], sizeof(float) * no);
			for (long j = 0; j < no; j++)
				out[i][j] = -7.0f;
		}
		kern_sgemm_trace_replay();
		for (int i = 0; i < TR_N; i++) {
			char what[64];
			snprintf(what, sizeof what, "replay parallel=%d out[%d]", parallel, i);
			check_close(what, out[i], want[i], no, 0, 0);
		}
		/* stopping again records nothing more; clear empties the trace */
		CHECK_INT_EQ(kern_sgemm_trace_stop(NULL), 2 * TR_N);
		kern_sgemm_trace_clear();
		CHECK_INT_EQ(kern_sgemm_trace_stop(NULL), 0);
		for (int i = 0; i < TR_N; i++)
			out[i][0] = -7.0f;
		kern_sgemm_trace_replay();
		CHECK(out[0][0] == -7.0f);
	}
	for (int i = 0; i < TR_N; i++)
		free(a[i]), free(out[i]), free(want[i]);
	free(b);
}

int main(void)
{
	char err[512];
	if (kern_blas_init(NULL, err, sizeof err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	fprintf(stderr, "blas: %s\n", kern_blas_describe());
	CHECK_RUN(test_sgemm_all_transposes);
	CHECK_RUN(test_trace_replay);
	return check_finish();
}
