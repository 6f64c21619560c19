/* trainer/dp.h - data parallel gradient averaging in buckets.
 *
 * The flat gradient buffer (model.h) is cut into buckets of about
 * bucket_bytes, in reverse parameter order: the order backward finishes
 * them. Each bucket is summed over the ranks with a non-blocking allreduce
 * as soon as all its parameters are final (trn_dp_grad_ready, called by
 * backward as it goes) so that communication overlaps the rest of the
 * backward pass; trn_dp_finish starts whatever has not started, waits for
 * all, and divides by the rank count. Buckets start strictly in order on
 * every rank (an MPI collective must be issued in the same order
 * everywhere), a later ready bucket waiting for an earlier one.
 *
 * ZeRO-1 (zero != 0): the buffer is partitioned into one contiguous range
 * per rank ([lo, hi) here; the optimizer's shard). A bucket is then
 * reduce-scattered instead of allreduced: each rank receives the sums of the
 * bucket's part inside its own range, into gs (its shard of the averaged
 * gradients), and the optimizer updates only that range; after the update
 * trn_dp_allgather brings every rank's updated range to all.
 *
 * With one rank there is nothing to reduce: the shard is the whole buffer
 * and gs is g. The buckets are laid out all the same, and with a
 * bucket_started hook (optimizer offload, trainer/opt_offload.h) they are
 * "started" as they become final, so that the hook sees each bucket once
 * per step on any rank count.
 */
#ifndef LARCH_TRAINER_DP_H
#define LARCH_TRAINER_DP_H

#include "comm.h"
#include "model.h"

struct trn_dp_bucket {
	long offset, numel;            /* floats of the gradient buffer */
	int first_param, n_params;     /* params[first_param .. +n_params) in reverse order */
	int ready;                     /* params reported ready this step */
	int started;
	struct trn_comm_req *req;
	int *counts;                   /* ZeRO: the bucket's floats in each rank's range */
};

struct trn_optim_kernels;

struct trn_dp {
	struct trn_comm *comm;
	float *g;                      /* the model's gradient buffer */
	const struct trn_optim_kernels *k;  /* gradients on a device (trn_dp_move_to), or NULL */
	long n_floats;
	int zero;                      /* ZeRO-1: reduce-scatter into gs */
	long lo, hi;                   /* this rank's range of the buffer (all of it without ZeRO) */
	long *counts, *displs;         /* ZeRO: every rank's range, hi - lo and lo, [size] */
	float *gs;                     /* averaged gradients of [lo, hi): g + lo, or owned (ZeRO) */
	struct trn_dp_bucket *buckets;
	int n_buckets;
	int *bucket_of;                /* param index -> bucket */
	int next;                      /* the next bucket to start */
	int armed;                     /* grad_ready counts (the last micro-batch's backward) */
	int failed;                    /* a start failed in grad_ready: err says why */
	struct trn_err err;
	/* Optional: called as bucket i's reduction is issued (one rank: as it is
	 * final), every bucket once per step; what it starts must be ordered
	 * after the reduction (its result is there once trn_dp_wait returns) */
	void (*bucket_started)(void *ctx, int i);
	void *bucket_ctx;
	/* Optional, per step (several ranks): this rank's squared gradient norm
	 * before the reduction, summed bucket by bucket as each is issued (the
	 * gradient noise scale's small batch, gns.h). Set sumsq_on and zero
	 * sumsq before the step's last backward; read after trn_dp_wait. */
	int sumsq_on;
	double sumsq;
	double sumsq_s;                /* time in those norms, summed over steps */
	double t_first;                /* when this step's first bucket started */
	/* figures, summed over steps */
	double comm_s;                 /* time with requests outstanding, from first start to done */
	double wait_s;                 /* of which spent waiting in trn_dp_finish (not hidden) */
	double bytes;                  /* reduced */
	double gather_s;               /* ZeRO: in trn_dp_allgather (after the update, not hidden) */
	long early;                    /* buckets started during backward (by grad_ready) */
	long steps;
};

/* Buckets over m's parameters; with zero, the partition and gs. 0, or -1
 * with err. */
int trn_dp_init(struct trn_dp *dp, struct trn_comm *comm, struct trn_model *m, long bucket_bytes,
                int zero, struct trn_err *err);
void trn_dp_release(struct trn_dp *dp);

/* The gradients to reduce are the device buffer g (a resident run over a
 * device communicator, comm.h): the ZeRO shard gs is allocated and the
 * division done with k, the device's kernels. 0, or -1 with err. */
int trn_dp_move_to(struct trn_dp *dp, const struct trn_optim_kernels *k, float *g,
                   struct trn_err *err);

/* The next backward is the step's last: its parameters' readiness starts
 * their buckets. */
void trn_dp_arm(struct trn_dp *dp);

/* Backward has finished parameter p's gradient (for this step, when armed).
 * From the training thread only. A failure is kept for trn_dp_finish. Its
 * signature is struct trn_model's grad_ready hook's (dp as ctx). */
void trn_dp_grad_ready(void *dp, int p);

/* Every bucket summed over the ranks and multiplied by scale / ranks (scale
 * undoes a loss scale), into gs[0 .. hi - lo). 0, or -1 with err (a
 * collective failed: stop the run). trn_dp_wait and then trn_dp_unscale
 * of gs. */
int trn_dp_finish(struct trn_dp *dp, float scale, struct trn_err *err);

/* Every bucket summed over the ranks into gs, not yet divided: starts what
 * has not started and waits for all. 0, or -1 with err. */
int trn_dp_wait(struct trn_dp *dp, struct trn_err *err);

/* Multiplies x[0 .. hi - lo) (gs, or a copy of it) by scale / ranks: the
 * division of trn_dp_finish. */
void trn_dp_unscale(const struct trn_dp *dp, float *x, float scale);

/* Bucket i's part of this rank's range: [*a, *a + return) in range
 * coordinates (0 = flat offset lo); 0 when none of it is in the range. */
long trn_dp_bucket_part(const struct trn_dp *dp, int i, long *a);

/* ZeRO: every rank's range of buf (the parameters, once each rank has
 * updated its own) to all ranks, in place. Nothing without ZeRO. */
int trn_dp_allgather(struct trn_dp *dp, float *buf, struct trn_err *err);

/* A buffer laid out like this rank's range (shard, hi - lo floats) from
 * every rank into full (n_floats) on rank 0; without ZeRO, shard is already
 * whole and is copied. full may be NULL on other ranks. */
int trn_dp_gather(struct trn_dp *dp, const float *shard, float *full, struct trn_err *err);

/* Buckets in the layout, and the hidden fraction of communication so far
 * (1 - wait / comm; 0 when nothing was reduced). */
double trn_dp_overlap(const struct trn_dp *dp);

#endif
