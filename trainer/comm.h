/* trainer/comm.h - the communicator data parallel training runs on.
 *
 * One interface, three implementations: a single process (rank 0 of 1;
 * every collective is the identity), MPI (comm_mpi.c, Open MPI from Debian;
 * ranks from the launcher: `mpirun -n N larch-train ...`, or mpirun inside a
 * Slurm allocation), and NCCL for GPUs (comm_nccl_cuda.c, below). Sums are
 * in place on fp32 or fp64 buffers; a non-blocking allreduce returns a
 * request that trn_comm_wait completes (and frees), and trn_comm_progress
 * lets the library move outstanding ones along between compute.
 *
 * A GPU run keeps a device communicator (trn_comm_open_device: the GPU
 * backend's NCCL) over the host one: the same calls on device memory,
 * ordered after the work enqueued on the kernels' stream, and that stream's
 * later work ordered after them (a wait completes a request there, not on
 * the host). Host memory given to it goes over the host communicator
 * instead, not ordered against the kernels' stream: the caller fills it
 * with copies it has waited for (kern_cuda_download), so every caller of
 * the interface works unchanged.
 *
 * Failure: a collective that fails returns -1 with err; the caller stops
 * the run, and trn_comm_abort ends every rank (MPI_Abort), so that no rank
 * waits forever on one that is gone. A rank killed outright is noticed by
 * the launcher (mpirun ends the others).
 */
#ifndef LARCH_TRAINER_COMM_H
#define LARCH_TRAINER_COMM_H

#include "err.h"

struct trn_comm;
struct trn_comm_req;

struct trn_comm_ops {
	const char *name;                  /* "single", "mpi" */
	const char *caveat;                /* a line for the run's header where this is no
	                                      cluster's data path (the TCP fallback); NULL */
	int (*allreduce_f32)(struct trn_comm *c, float *buf, long n, struct trn_err *err);
	int (*allreduce_f64)(struct trn_comm *c, double *buf, long n, struct trn_err *err);
	int (*iallreduce_f32)(struct trn_comm *c, float *buf, long n, struct trn_comm_req **req,
	                      struct trn_err *err);
	int (*ireduce_scatter_f32)(struct trn_comm *c, const float *send, float *recv,
	                           const int *counts, struct trn_comm_req **req, struct trn_err *err);
	int (*allgather_f32)(struct trn_comm *c, float *buf, const long *counts, const long *displs,
	                     struct trn_err *err);
	int (*gather_f32)(struct trn_comm *c, const float *send, float *recv, const long *counts,
	                  const long *displs, int root, struct trn_err *err);
	int (*wait)(struct trn_comm *c, struct trn_comm_req *req, struct trn_err *err);
	void (*progress)(struct trn_comm *c);
	int (*bcast)(struct trn_comm *c, void *buf, long bytes, int root, struct trn_err *err);
	int (*barrier)(struct trn_comm *c, struct trn_err *err);
	void (*abort)(struct trn_comm *c, int code);
	void (*close)(struct trn_comm *c);
};

struct trn_comm {
	const struct trn_comm_ops *ops;
	int rank, size;
	int device;                        /* a device communicator (see above) */
	struct trn_comm *host;             /* a device communicator's host one, owned */
};

/* How Slurm's tasks without MPI meet (comm_tcp.c); from the run's options
 * (options.h: comm_timeout_s, comm_host). */
#define TRN_COMM_TIMEOUT_S 120
struct trn_comm_settings {
	int timeout_s;                     /* the rendezvous's bound; 0: TRN_COMM_TIMEOUT_S */
	const char *host;                  /* what rank 0 publishes; NULL: its hostname */
	int min_ranks;                     /* fewest processes accepted in place of `ranks`
	                                      (parallel.elastic); 0: exactly ranks */
};

/* The communicator for a run of `ranks` processes. Under a launcher (mpirun
 * sets OMPI_COMM_WORLD_SIZE; PMI/PMIx variables likewise) with larch-train
 * built with MPI: MPI's world, which must have exactly `ranks` processes
 * (set->min_ranks..ranks where set gives a minimum).
 * Else, ranks > 1 started by Slurm as the tasks of one step (srun without
 * MPI): TCP, meeting through a file in dir (the job dir; comm_tcp.c).
 * Otherwise, for ranks = 1: a single process. Returns NULL with err naming
 * what to do (launch with mpirun -n N or srun, build with MPI). set (NULL:
 * the defaults) is borrowed for the call. */
struct trn_comm *trn_comm_open(int ranks, const char *dir, const struct trn_comm_settings *set,
                               struct trn_err *err);
void trn_comm_close(struct trn_comm *c);     /* accepts NULL */

/* The device communicator of host's ranks on CUDA device `device` (the GPU
 * backend's, trn_cuda_backend.comm_open), which takes host over: closing it
 * closes host, aborting it ends host's ranks. Every rank calls it, and they
 * agree: where it fails on any rank (a backend built without NCCL, an NCCL
 * error) it returns NULL on all, with err saying why, and host stays the
 * caller's. */
struct trn_comm *trn_comm_open_device(struct trn_comm *host, int device, struct trn_err *err);

/* Slurm's tasks of one step without MPI (comm_tcp.c): rank SLURM_PROCID of
 * SLURM_STEP_NUM_TASKS, meeting through a file in dir and talking over TCP. */
struct trn_comm *trn_comm_tcp_open(int ranks, const char *dir,
                                   const struct trn_comm_settings *set, struct trn_err *err);
/* SLURM_STEP_NUM_TASKS when SLURM_PROCID is set (the tasks of an srun step), else 0. */
int trn_comm_slurm_tasks(void);

/* MPI's world, for trn_comm_open (comm_mpi.c; built with MPI only). */
struct trn_comm *trn_comm_mpi_open(int ranks, int min_ranks, struct trn_err *err);
/* Whether `size` processes may run a spec of `ranks` (min_ranks: 0, or the
 * fewest accepted); 0, or -1 with err saying who started how many
 * (launcher: "mpi" or "slurm"). */
int trn_comm_check_size(int size, int ranks, int min_ranks, const char *launcher,
                        struct trn_err *err);

/* Whether this process was started by an MPI launcher, and how many
 * processes it says there are (0: none). */
int trn_comm_launched_size(void);

/* Which launcher started this process, as its environment shows: "mpirun",
 * "srun --mpi=pmix", "PMIx", "PMI", or "none". */
const char *trn_comm_launcher(void);

/* Whether this build has MPI. */
int trn_comm_have_mpi(void);

/* Sums buf over all ranks, in place. 0, or -1 with err. */
static inline int trn_comm_allreduce_f32(struct trn_comm *c, float *buf, long n,
                                         struct trn_err *err)
{
	return c->ops->allreduce_f32(c, buf, n, err);
}

static inline int trn_comm_allreduce_f64(struct trn_comm *c, double *buf, long n,
                                         struct trn_err *err)
{
	return c->ops->allreduce_f64(c, buf, n, err);
}

/* Starts summing buf over all ranks; buf must stay untouched until
 * trn_comm_wait(*req) returns. */
static inline int trn_comm_iallreduce_f32(struct trn_comm *c, float *buf, long n,
                                          struct trn_comm_req **req, struct trn_err *err)
{
	return c->ops->iallreduce_f32(c, buf, n, req, err);
}

/* Starts summing send[0 .. sum of counts) over all ranks and leaves this
 * rank's range, send[displ .. displ + counts[rank]) summed, in
 * recv[0 .. counts[rank]). send, recv and counts (int: MPI's, each range
 * below 2^31 elements) must stay untouched until trn_comm_wait(*req);
 * recv must not overlap send. */
static inline int trn_comm_ireduce_scatter_f32(struct trn_comm *c, const float *send,
                                               float *recv, const int *counts,
                                               struct trn_comm_req **req, struct trn_err *err)
{
	return c->ops->ireduce_scatter_f32(c, send, recv, counts, req, err);
}

/* In place: every rank's range of buf (as it holds it) is copied to all
 * ranks, so that every buf ends up whole. */
static inline int trn_comm_allgather_f32(struct trn_comm *c, float *buf, const long *counts,
                                         const long *displs, struct trn_err *err)
{
	return c->ops->allgather_f32(c, buf, counts, displs, err);
}

/* send[0 .. counts[rank]) of every rank into recv[displs[r] ..] on root;
 * recv is only used on root (may be NULL elsewhere). */
static inline int trn_comm_gather_f32(struct trn_comm *c, const float *send, float *recv,
                                      const long *counts, const long *displs, int root,
                                      struct trn_err *err)
{
	return c->ops->gather_f32(c, send, recv, counts, displs, root, err);
}

static inline int trn_comm_wait(struct trn_comm *c, struct trn_comm_req *req,
                                struct trn_err *err)
{
	return c->ops->wait(c, req, err);
}

static inline void trn_comm_progress(struct trn_comm *c)
{
	c->ops->progress(c);
}

static inline int trn_comm_bcast(struct trn_comm *c, void *buf, long bytes, int root,
                                 struct trn_err *err)
{
	return c->ops->bcast(c, buf, bytes, root, err);
}

static inline int trn_comm_barrier(struct trn_comm *c, struct trn_err *err)
{
	return c->ops->barrier(c, err);
}

/* Ends every rank of the run with code (this one included); does not return
 * for MPI. */
static inline void trn_comm_abort(struct trn_comm *c, int code)
{
	c->ops->abort(c, code);
}

#endif
