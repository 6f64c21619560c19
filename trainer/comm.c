/* trainer/comm.c - the single-process communicator, and choosing one; see
 * comm.h. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "env.h"

/* ---- one process: every collective is the identity ------------------------------ */

static int single_allreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_err *err)
{
	(void)c, (void)buf, (void)n, (void)err;
	return 0;
}

static int single_allreduce_f64(struct trn_comm *c, double *buf, long n, struct trn_err *err)
{
	(void)c, (void)buf, (void)n, (void)err;
	return 0;
}

static int single_iallreduce_f32(struct trn_comm *c, float *buf, long n,
                                 struct trn_comm_req **req, struct trn_err *err)
{
	(void)c, (void)buf, (void)n, (void)err;
	*req = NULL;
	return 0;
}

static int single_ireduce_scatter_f32(struct trn_comm *c, const float *send, float *recv,
                                      const int *counts, struct trn_comm_req **req,
                                      struct trn_err *err)
{
	(void)c, (void)err;
	*req = NULL;
	if (recv != send)
		memcpy(recv, send, sizeof(float) * (size_t)counts[0]);
	return 0;
}

static int single_allgather_f32(struct trn_comm *c, float *buf, const long *counts,
                                const long *displs, struct trn_err *err)
{
	(void)c, (void)buf, (void)counts, (void)displs, (void)err;
	return 0;
}

static int single_gather_f32(struct trn_comm *c, const float *send, float *recv,
                             const long *counts, const long *displs, int root,
                             struct trn_err *err)
{
	(void)c, (void)root, (void)err;
	if (recv + displs[0] != send)
		memmove(recv + displs[0], send, sizeof(float) * (size_t)counts[0]);
	return 0;
}

static int single_wait(struct trn_comm *c, struct trn_comm_req *req, struct trn_err *err)
{
	(void)c, (void)req, (void)err;
	return 0;
}

static void single_progress(struct trn_comm *c)
{
	(void)c;
}

static int single_bcast(struct trn_comm *c, void *buf, long bytes, int root, struct trn_err *err)
{
	(void)c, (void)buf, (void)bytes, (void)root, (void)err;
	return 0;
}

static int single_barrier(struct trn_comm *c, struct trn_err *err)
{
	(void)c, (void)err;
	return 0;
}

static void single_abort(struct trn_comm *c, int code)
{
	(void)c, (void)code;
}

static void single_close(struct trn_comm *c)
{
	free(c);
}

static const struct trn_comm_ops single_ops = {
	.name = "single",
	.allreduce_f32 = single_allreduce_f32,
	.allreduce_f64 = single_allreduce_f64,
	.iallreduce_f32 = single_iallreduce_f32,
	.ireduce_scatter_f32 = single_ireduce_scatter_f32,
	.allgather_f32 = single_allgather_f32,
	.gather_f32 = single_gather_f32,
	.wait = single_wait,
	.progress = single_progress,
	.bcast = single_bcast,
	.barrier = single_barrier,
	.abort = single_abort,
	.close = single_close,
};

/* ---- choosing -------------------------------------------------------------------- */

int trn_comm_have_mpi(void)
{
#ifdef LARCH_HAVE_MPI
	return 1;
#else
	return 0;
#endif
}

int trn_comm_launched_size(void)
{
	/* mpirun (Open MPI), then PMIx and PMI as srun --mpi=... sets them */
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE" };
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = trn_env_str(vars[i]);
		if (v)
			return atoi(v);
	}
	/* srun --mpi=pmix gives each task its PMIx rank but leaves the size in
	 * the PMIx server's job data; the step's task count is the same number */
	const char *tasks = trn_env_str("SLURM_STEP_NUM_TASKS");
	if (trn_env_has("PMIX_RANK") && tasks)
		return atoi(tasks);
	return 0;
}

const char *trn_comm_launcher(void)
{
	const char *mpi = trn_env_str("SLURM_MPI_TYPE");
	if (trn_env_has("OMPI_COMM_WORLD_SIZE"))
		return "mpirun";
	if (trn_env_has("PMIX_RANK"))
		return mpi && strncmp(mpi, "pmix", 4) == 0 ? "srun --mpi=pmix" : "PMIx";
	if (trn_env_has("PMI_SIZE"))
		return "PMI";
	if (trn_comm_slurm_tasks() > 1)
		return "srun";
	return "none";
}

int trn_comm_check_size(int size, int ranks, int min_ranks, const char *launcher,
                        struct trn_err *err)
{
	int slurm = strcmp(launcher, "slurm") == 0;
	const char *who = slurm ? "Slurm" : "the launcher";
	const char *what = slurm ? "tasks (SLURM_STEP_NUM_TASKS)" : "processes";
	if (size == ranks)
		return 0;
	if (!min_ranks)
		return trn_err_set(err, "parallel.ranks: the spec asks for %d ranks but %s started %d "
		                   "%s", ranks, who, size, what);
	if (size < min_ranks || size > ranks)
		return trn_err_set(err, "parallel.elastic.min_ranks: %s started %d %s, and the spec "
		                   "runs on %d to %d ranks (min_ranks to ranks)", who, size, what,
		                   min_ranks, ranks);
	return 0;
}

struct trn_comm *trn_comm_open(int ranks, const char *dir, const struct trn_comm_settings *set,
                               struct trn_err *err)
{
	int launched = trn_comm_launched_size();
	int min_ranks = set ? set->min_ranks : 0;
	if (launched > 0 && trn_comm_have_mpi()) {
#ifdef LARCH_HAVE_MPI
		return trn_comm_mpi_open(ranks, min_ranks, err);
#endif
	}
	if (ranks > 1 && trn_comm_slurm_tasks() > 1)
		return trn_comm_tcp_open(ranks, dir, set, err);
	if (ranks > 1 && min_ranks > 1) {
		trn_err_set(err, "parallel.elastic.min_ranks: larch-train runs as one process, and the "
		            "spec runs on %d to %d ranks: start it with mpirun -n %d", min_ranks, ranks,
		            ranks);
		return NULL;
	}
	if (ranks > 1 && !min_ranks) {
		if (!trn_comm_have_mpi())
			trn_err_set(err, "parallel.ranks: %d ranks need MPI or srun, and this larch-train "
			            "was built without MPI (install libopenmpi-dev and rebuild, or start "
			            "it with srun -n %d)", ranks, ranks);
		else
			trn_err_set(err, "parallel.ranks: the spec asks for %d ranks but larch-train runs "
			            "as one process: start it with mpirun -n %d", ranks, ranks);
		return NULL;
	}
	struct trn_comm *c = calloc(1, sizeof *c);
	if (!c) {
		trn_err_set(err, "communicator: out of memory");
		return NULL;
	}
	*c = (struct trn_comm){ .ops = &single_ops, .rank = 0, .size = 1 };
	return c;
}

void trn_comm_close(struct trn_comm *c)
{
	if (!c)
		return;
	struct trn_comm *host = c->host;
	c->ops->close(c);
	trn_comm_close(host);
}

struct trn_comm *trn_comm_open_device(struct trn_comm *host, int device, struct trn_err *err)
{
	struct trn_err why = { 0 };
	const struct trn_cuda_backend *be = trn_cuda_backend_get(&why);
	struct trn_comm *dc = NULL;
	if (be && !be->comm_open)
		trn_err_set(&why, "the GPU backend has no device communicator");
	else if (be)
		dc = be->comm_open(host, device, &why);
	/* all or none: a rank that goes on over the host alone would wait
	 * forever on the others' device collectives */
	double *failed = calloc((size_t)host->size, sizeof *failed);
	struct trn_err aerr = { 0 };
	int rc = -1;
	if (failed) {
		failed[host->rank] = !dc;
		rc = trn_comm_allreduce_f64(host, failed, host->size, &aerr);
	}
	if (rc != 0) {
		if (dc)
			dc->ops->close(dc);
		trn_err_set(err, "device communicator: %s", failed ? aerr.text : "out of memory");
		free(failed);
		return NULL;
	}
	int first = -1, n_failed = 0;
	for (int r = 0; r < host->size; r++)
		if (failed[r] > 0 && n_failed++ == 0)
			first = r;
	free(failed);
	if (n_failed) {
		if (dc)
			dc->ops->close(dc);
		if (why.set)
			trn_err_set(err, "%s", why.text);
		else
			trn_err_set(err, "device communicator: it failed on %d of %d ranks, rank %d "
			            "first (its output says why)", n_failed, host->size, first);
		if (!dc && host->rank != 0)
			fprintf(stderr, "larch-train: rank %d: %s\n", host->rank, why.text);
		return NULL;
	}
	dc->device = 1;
	dc->host = host;
	return dc;
}
