/* trainer/opt_offload.h - optimizer offload (offload.optimizer "cpu"), as
 * ZeRO-Offload does it: the fp32 master weights and the optimizer state of
 * this rank's range live in host memory and the update runs on the host;
 * the device keeps the parameters in the compute dtype, the gradients and
 * the activations.
 *
 * A step. As backward finishes each gradient bucket (trainer/dp.h; with
 * data parallel, as the bucket's reduction is issued, ordered after it), its
 * part of this rank's range starts copying device -> host into the host
 * gradients (trn_opt_offload_grads_out), so that the copies run during the
 * rest of backward; trn_opt_offload_grads_wait waits for all of them before
 * the host reads the gradients. The host unscales, checks, clips and updates
 * the master weights (trn_optim_step) once every bucket is in. Then
 * trn_opt_offload_params_in sends the updated parameters back chunk by
 * chunk: it rounds a chunk of master weights to the compute dtype into one
 * of two host staging buffers and copies it host -> device from there,
 * waiting before it writes a staging buffer again for the copy out of it
 * (the chunk before last); trn_opt_offload_params_wait waits for the last
 * two, before the device's parameters are read.
 *
 * Copies go through a copy engine with one copy in flight per bucket and per
 * staging buffer and an explicit wait before a copy's destination is read or
 * its source written again: on a GPU, a copy stream, an event per copy (a
 * bucket's after its reduction on the communication stream) and pinned host
 * buffers. Only the engine changes there. The CPU engine, as
 * act_offload.h's, performs a copy at its wait point, the latest moment at
 * which an asynchronous engine could have finished it, so a missing wait
 * leaves stale gradients or parameters behind (and other numbers in the
 * tests) instead of going unnoticed.
 *
 * In place. With offload.params "cpu" the model's parameters and gradients
 * already live in host memory (trainer/param_offload.h): there is nothing
 * to copy, and a second host copy of each would double what the largest
 * models need of the host. So on a GPU, whose model moves its own page-
 * locked host copies of the parameters and gradients across (the gradients
 * arrive there block by block in the step's last backward, the parameters
 * leave from there as trn_model_range_changed tells it): a copy here would
 * be a second pass over both, on the host's memory bus, every step. The
 * offload then reads the gradients where they are (grads is dev_grads) and
 * writes the rounded parameters straight into dev_params, a chunk at a
 * time, calling landed after each (the model's copy of it starts while the
 * next is rounded), or only calls landed when the master weights are the
 * parameters themselves (fp32 compute, or a model that rounds the
 * parameters as it reads them: model.h's w_master); it holds no buffer of
 * its own. The CPU model keeps the copies, so that CI runs their schedule.
 *
 * Streamed (trn_spec_streams_update: in place, one rank, one micro-batch a
 * step, no clipping, no loss scale): the trainer steps each tensor as the
 * model hands its final gradient out in backward (trn_optim_step_tensor)
 * instead of once after it, reading block gradients from the parameter
 * offload's windows (param_offload.h), so the host keeps none of them.
 */
#ifndef LARCH_TRAINER_OPT_OFFLOAD_H
#define LARCH_TRAINER_OPT_OFFLOAD_H

#include "spec/spec.h"

/* A copy in flight; n 0: none. */
struct trn_opt_copy {
	float *dst;
	const float *src;
	long n;                        /* floats */
};

struct trn_opt_offload {
	long n;                        /* floats of the range */
	enum trn_dtype dtype;          /* the device's parameters' */
	float *master;                 /* host: fp32 master weights [n], borrowed */
	float *grads;                  /* host: fp32 gradients [n], owned; in place dev_grads */
	int in_place;                  /* dev_grads and dev_params are host memory */
	const float *dev_grads;        /* device: the range's gradients [n], borrowed */
	float *dev_params;             /* device: the range's parameters [n], borrowed */
	struct trn_opt_copy *down;     /* device -> host, one per bucket [n_down], owned */
	int n_down;
	float *stage[2];               /* host: parameter staging [chunk] each, owned */
	long chunk;
	struct trn_opt_copy up[2];     /* host -> device, out of each staging buffer */
	long floats_down, floats_up;   /* copied so far */
	/* optional: a chunk [a, a + n) of the range's parameters is in
	 * dev_params for good (its copy done), called as each lands */
	void (*landed)(void *ctx, long a, long n);
	void *landed_ctx;
};

/* Sets o up for a range of n floats whose gradients come from dev_grads in
 * n_buckets buckets and whose parameters (dtype) go to dev_params through two
 * staging buffers of trn_opt_offload_stage_floats(n, chunk) floats; master
 * is the host's fp32 master weights (borrowed, like dev_grads and
 * dev_params). Allocates the host gradients and the staging buffers. With
 * in_place (see above) it allocates nothing, and master may be dev_params.
 * 0, or -1 when out of memory (o can then be released). */
/* Whether the offload works in place (above): with the parameters
 * offloaded, the update streamed, or the model on a GPU. */
int trn_opt_offload_works_in_place(int params_offloaded, int streamed, int on_gpu);

int trn_opt_offload_init(struct trn_opt_offload *o, long n, int n_buckets, long chunk,
                         enum trn_dtype dtype, float *master, const float *dev_grads,
                         float *dev_params, int in_place);
void trn_opt_offload_release(struct trn_opt_offload *o);

/* Floats in each staging buffer for a range of n floats sent in chunks of
 * chunk (at least 1). */
long trn_opt_offload_stage_floats(long n, long chunk);

/* Bucket i's gradients [a, a + n) of the range are final on the device
 * (once the reduction issued before this call completes): starts copying
 * them to the host gradients, after waiting for the bucket's previous copy. */
void trn_opt_offload_grads_out(struct trn_opt_offload *o, int i, long a, long n);

/* Waits for every gradient copy: grads holds the step's gradients. */
void trn_opt_offload_grads_wait(struct trn_opt_offload *o);

/* Starts sending the master weights, rounded to dtype, to dev_params chunk
 * by chunk through the staging buffers (in place: rounds them into
 * dev_params chunk by chunk); the master weights may change again when it
 * returns, the device's parameters only after trn_opt_offload_params_wait. */
void trn_opt_offload_params_in(struct trn_opt_offload *o);

/* Waits for the parameter copies still in flight. */
void trn_opt_offload_params_wait(struct trn_opt_offload *o);

#endif
