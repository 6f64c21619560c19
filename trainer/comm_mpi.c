/* trainer/comm_mpi.c - the MPI communicator (see comm.h): MPI_COMM_WORLD as
 * the launcher made it, MPI_THREAD_FUNNELED (only the training thread calls
 * MPI; OpenMP threads never do). Errors return (MPI_ERRORS_RETURN) so that
 * the run can say what failed before it aborts every rank. */
#ifdef LARCH_HAVE_MPI

#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

struct trn_comm_req {
	MPI_Request r;
};

/* err from an MPI error code; -1 */
static int mpi_fail(struct trn_err *err, const char *what, int code)
{
	char text[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
		len = 0;
	text[len] = '\0';
	return trn_err_set(err, "%s: %s", what, len ? text : "MPI error");
}

/* MPI counts are int: longer buffers go in chunks */
#define CHUNK (1L << 30)

static int mpi_allreduce(void *buf, long n, MPI_Datatype t, size_t elem, struct trn_err *err)
{
	for (long off = 0; off < n; off += CHUNK) {
		long k = n - off < CHUNK ? n - off : CHUNK;
		int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * elem, (int)k, t,
		                       MPI_SUM, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, "allreduce", rc);
	}
	return 0;
}

static int mpi_allreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_err *err)
{
	(void)c;
	return mpi_allreduce(buf, n, MPI_FLOAT, sizeof *buf, err);
}

static int mpi_allreduce_f64(struct trn_comm *c, double *buf, long n, struct trn_err *err)
{
	(void)c;
	return mpi_allreduce(buf, n, MPI_DOUBLE, sizeof *buf, err);
}

static int mpi_iallreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_comm_req **req,
                              struct trn_err *err)
{
	(void)c;
	*req = NULL;
	if (n > INT_MAX)
		return trn_err_set(err, "allreduce: %ld floats in one request (bucket too large)", n);
	struct trn_comm_req *q = malloc(sizeof *q);
	if (!q)
		return trn_err_set(err, "allreduce: out of memory");
	int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
	                        &q->r);
	if (rc != MPI_SUCCESS) {
		free(q);
		return mpi_fail(err, "allreduce", rc);
	}
	*req = q;
	return 0;
}

static int mpi_ireduce_scatter_f32(struct trn_comm *c, const float *send, float *recv,
                                   const int *counts, struct trn_comm_req **req,
                                   struct trn_err *err)
{
	(void)c;
	*req = NULL;
	struct trn_comm_req *q = malloc(sizeof *q);
	if (!q)
		return trn_err_set(err, "reduce-scatter: out of memory");
	int rc = MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q->r);
	if (rc != MPI_SUCCESS) {
		free(q);
		return mpi_fail(err, "reduce-scatter", rc);
	}
	*req = q;
	return 0;
}

/* counts and displacements as MPI's ints; -1 with err when one does not fit */
static int int_layout(const struct trn_comm *c, const long *counts, const long *displs,
                      int **ic, int **id, const char *what, struct trn_err *err)
{
	*ic = malloc(sizeof(int) * (size_t)c->size);
	*id = malloc(sizeof(int) * (size_t)c->size);
	if (!*ic || !*id) {
		free(*ic), free(*id);
		return trn_err_set(err, "%s: out of memory", what);
	}
	for (int r = 0; r < c->size; r++) {
		if (counts[r] > INT_MAX || displs[r] > INT_MAX) {
			free(*ic), free(*id);
			return trn_err_set(err, "%s: a buffer of more than 2^31 floats", what);
		}
		(*ic)[r] = (int)counts[r];
		(*id)[r] = (int)displs[r];
	}
	return 0;
}

static int mpi_allgather_f32(struct trn_comm *c, float *buf, const long *counts,
                             const long *displs, struct trn_err *err)
{
	int *ic, *id;
	if (int_layout(c, counts, displs, &ic, &id, "all-gather", err) != 0)
		return -1;
	int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, ic, id, MPI_FLOAT,
	                        MPI_COMM_WORLD);
	free(ic), free(id);
	return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "all-gather", rc);
}

static int mpi_gather_f32(struct trn_comm *c, const float *send, float *recv,
                          const long *counts, const long *displs, int root,
                          struct trn_err *err)
{
	int *ic, *id;
	if (int_layout(c, counts, displs, &ic, &id, "gather", err) != 0)
		return -1;
	int rc = MPI_Gatherv(send, ic[c->rank], MPI_FLOAT, recv, ic, id, MPI_FLOAT, root,
	                     MPI_COMM_WORLD);
	free(ic), free(id);
	return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "gather", rc);
}

static int mpi_wait(struct trn_comm *c, struct trn_comm_req *req, struct trn_err *err)
{
	(void)c;
	if (!req)
		return 0;
	int rc = MPI_Wait(&req->r, MPI_STATUS_IGNORE);
	free(req);
	return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "collective", rc);
}

static void mpi_progress(struct trn_comm *c)
{
	(void)c;
	int flag;
	/* any call into the library moves non-blocking collectives on */
	MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

static int mpi_bcast(struct trn_comm *c, void *buf, long bytes, int root, struct trn_err *err)
{
	(void)c;
	for (long off = 0; off < bytes; off += CHUNK) {
		long k = bytes - off < CHUNK ? bytes - off : CHUNK;
		int rc = MPI_Bcast((char *)buf + off, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, "broadcast", rc);
	}
	return 0;
}

static int mpi_barrier(struct trn_comm *c, struct trn_err *err)
{
	(void)c;
	int rc = MPI_Barrier(MPI_COMM_WORLD);
	return rc == MPI_SUCCESS ? 0 : mpi_fail(err, "barrier", rc);
}

static void mpi_abort(struct trn_comm *c, int code)
{
	(void)c;
	MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_close(struct trn_comm *c)
{
	int done = 0;
	MPI_Finalized(&done);
	if (!done)
		MPI_Finalize();
	free(c);
}

static const struct trn_comm_ops mpi_ops = {
	.name = "mpi",
	.allreduce_f32 = mpi_allreduce_f32,
	.allreduce_f64 = mpi_allreduce_f64,
	.iallreduce_f32 = mpi_iallreduce_f32,
	.ireduce_scatter_f32 = mpi_ireduce_scatter_f32,
	.allgather_f32 = mpi_allgather_f32,
	.gather_f32 = mpi_gather_f32,
	.wait = mpi_wait,
	.progress = mpi_progress,
	.bcast = mpi_bcast,
	.barrier = mpi_barrier,
	.abort = mpi_abort,
	.close = mpi_close,
};

struct trn_comm *trn_comm_mpi_open(int ranks, int min_ranks, struct trn_err *err)
{
	int provided = 0, rank = 0, size = 0;
	/* Open MPI's non-blocking allreduce picks a ring for large buffers, which
	 * ran at ~0.55x the blocking MPI_Allreduce here; Rabenseifner's
	 * reduce-scatter + allgather matches it (tests/bench/bench_allreduce.c).
	 * A value the user set wins. */
	setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
	if (rc != MPI_SUCCESS) {
		mpi_fail(err, "MPI_Init_thread", rc);
		return NULL;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (trn_comm_check_size(size, ranks, min_ranks, "mpi", err) != 0) {
		MPI_Finalize();
		return NULL;
	}
	struct trn_comm *c = calloc(1, sizeof *c);
	if (!c) {
		trn_err_set(err, "communicator: out of memory");
		MPI_Finalize();
		return NULL;
	}
	*c = (struct trn_comm){ .ops = &mpi_ops, .rank = rank, .size = size };
	return c;
}

#else
/* ISO C forbids an empty translation unit */
typedef int trn_comm_mpi_unused;
#endif
