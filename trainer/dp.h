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
 * With one rank there is nothing to do and every call returns at once.
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
};

struct trn_dp {
	struct trn_comm *comm;
	float *g;                      /* the model's gradient buffer */
	long n_floats;
	struct trn_dp_bucket *buckets;
	int n_buckets;
	int *bucket_of;                /* param index -> bucket */
	int next;                      /* the next bucket to start */
	int armed;                     /* grad_ready counts (the last micro-batch's backward) */
	int failed;                    /* a start failed in grad_ready: err says why */
	struct trn_err err;
	double t_first;                /* when this step's first bucket started */
	/* figures, summed over steps */
	double comm_s;                 /* time with requests outstanding, from first start to done */
	double wait_s;                 /* of which spent waiting in trn_dp_finish (not hidden) */
	double bytes;                  /* reduced */
	long steps;
};

/* Buckets over m's parameters. 0, or -1 with err. */
int trn_dp_init(struct trn_dp *dp, struct trn_comm *comm, struct trn_model *m, long bucket_bytes,
                struct trn_err *err);
void trn_dp_release(struct trn_dp *dp);

/* The next backward is the step's last: its parameters' readiness starts
 * their buckets. */
void trn_dp_arm(struct trn_dp *dp);

/* Backward has finished parameter p's gradient (for this step, when armed).
 * From the training thread only. A failure is kept for trn_dp_finish. Its
 * signature is struct trn_model's grad_ready hook's (dp as ctx). */
void trn_dp_grad_ready(void *dp, int p);

/* Every bucket summed over the ranks and divided by their count. 0, or -1
 * with err (a collective failed: stop the run). */
int trn_dp_finish(struct trn_dp *dp, struct trn_err *err);

/* Buckets in the layout, and the hidden fraction of communication so far
 * (1 - wait / comm; 0 when nothing was reduced). */
double trn_dp_overlap(const struct trn_dp *dp);

#endif
