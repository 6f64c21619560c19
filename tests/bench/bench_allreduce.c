/* tests/bench/bench_allreduce.c - the gradient averaging of larch-train's data
 * parallel path (trainer/dp.h: buckets of bucket_mb, non-blocking allreduce,
 * all started then waited) against one plain MPI_Allreduce of the same bytes,
 * side by side in A/B rounds. Run under mpirun:
 *
 *   mpirun -n 2 build/tests/bench/bench_allreduce [--mib 64] [--bucket-mib 25]
 *                                                  [--rounds 7] [--reps 5]
 *
 * Prints per round the GB/s of each ("bus bandwidth" as nccl-tests defines it
 * for allreduce: bytes x 2(n-1)/n / time) and the medians with their ratio.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/parallel.h"
#include "trainer/comm.h"
#include "trainer/dp.h"
#include "trainer/model.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
	double mib = 64, bucket_mib = 25;
	int rounds = 7, reps = 5;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mib"))
			mib = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--bucket-mib"))
			bucket_mib = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "bench_allreduce: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	struct trn_err err = { 0 };
	int launched = trn_comm_launched_size();
	/* one thread per rank, as larch-train --threads 1 runs in bench_dp.sh:
	 * the averaging pass's OpenMP team would otherwise spin on the core the
	 * other rank needs */
	kern_set_threads(1);
	struct trn_comm *comm = trn_comm_open(launched > 0 ? launched : 1, NULL, NULL, &err);
	if (!comm) {
		fprintf(stderr, "bench_allreduce: %s\n", err.text);
		return 1;
	}
	/* a model-shaped buffer: 64 parameters of equal size, as backward gives them */
	long n = (long)(mib * 1024 * 1024 / sizeof(float));
	enum { NP = 64 };
	struct trn_param params[NP];
	long per = n / NP;
	for (int p = 0; p < NP; p++) {
		snprintf(params[p].name, sizeof params[p].name, "p%d", p);
		params[p].ndim = 1;
		params[p].shape[0] = (int)per;
		params[p].numel = per;
		params[p].offset = (long)p * per;
	}
	n = per * NP;
	float *g = malloc(sizeof(float) * (size_t)n);
	if (!g)
		return 1;
	struct trn_model m = { .params = params, .n_params = NP, .n_floats = n, .g = g };
	struct trn_dp dp;
	if (trn_dp_init(&dp, comm, &m, (long)(bucket_mib * 1024 * 1024), 0, &err) != 0) {
		fprintf(stderr, "bench_allreduce: %s\n", err.text);
		return 1;
	}
	for (long i = 0; i < n; i++)
		g[i] = (float)(i % 97) * 0.01f;
	double bytes = (double)n * sizeof(float), ranks = comm->size;
	double bus = bytes * 2 * (ranks - 1) / ranks;
	double *plain = calloc((size_t)rounds, sizeof *plain), *bucketed = calloc((size_t)rounds,
	                                                                          sizeof *bucketed);
	if (comm->rank == 0)
		printf("bench_allreduce: %d ranks, %.1f MiB of fp32 gradients, buckets of %.0f MiB "
		       "(%d), %d rounds of %d reps\n%-6s %16s %16s %8s\n", comm->size, bytes / 1048576,
		       bucket_mib, dp.n_buckets, rounds, reps, "round", "plain GB/s", "bucketed GB/s",
		       "ratio");
	for (int r = 0; r < rounds; r++) {
		for (int order = 0; order < 2; order++) {
			int do_plain = (order == 0) == (r % 2 == 0);
			trn_comm_barrier(comm, &err);
			double t0 = MPI_Wtime();
			for (int k = 0; k < reps; k++) {
				if (do_plain) {
					trn_comm_allreduce_f32(comm, g, n, &err);
				} else {
					trn_dp_arm(&dp);
					for (int p = NP - 1; p >= 0; p--)
						trn_dp_grad_ready(&dp, p);
					if (trn_dp_finish(&dp, 1.0f, &err) != 0) {
						fprintf(stderr, "bench_allreduce: %s\n", err.text);
						trn_comm_abort(comm, 1);
					}
				}
			}
			double t = (MPI_Wtime() - t0) / reps, slowest = t;
			MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			(do_plain ? plain : bucketed)[r] = bus / slowest / 1e9;
		}
		if (comm->rank == 0)
			printf("%-6d %16.2f %16.2f %8.2f\n", r + 1, plain[r], bucketed[r],
			       bucketed[r] / plain[r]);
	}
	double mp = median(plain, rounds), mb = median(bucketed, rounds);
	if (comm->rank == 0)
		printf("median %16.2f %16.2f %8.2f   (bucketed / plain; bus GB/s = bytes x 2(n-1)/n / s)\n",
		       mp, mb, mb / mp);
	trn_dp_release(&dp);
	free(g);
	free(plain);
	free(bucketed);
	trn_comm_close(comm);
	return 0;
}
