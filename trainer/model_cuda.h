/* trainer/model_cuda.h - the models on a CUDA GPU (built with CUDA only).
 *
 * A CUDA model is the CPU model's parameter table, initialisation and host
 * buffers (w, g: what the optimizer, data parallel and checkpoints work on,
 * as with the CPU models) with the forward and backward on the GPU: the
 * parameters' device copy is refreshed from w when the trainer changed them
 * (trn_model_weights_changed), and each backward's gradients come back into
 * g, after which the parameters' grad_ready hooks fire in the CPU model's
 * order (data parallel reduces them as it would). Activations and their
 * gradients live in one device arena sized for the micro-batch up front:
 * the step loop allocates nothing.
 *
 * Resident (trn_model_set_resident): one rank with the optimizer on the
 * device too (optim_cuda.c), the device copies are the run's and nothing
 * crosses to the host in a step; checkpoints pull the weights. In 16 bits
 * the trainer keeps fp32 master weights on the device and publishes them
 * rounded into the model's weights (trn_model_publish_master).
 *
 * fp32, bf16 or fp16 compute: in 16 bits every activation and activation
 * gradient is rounded where the CPU model rounds it (16-bit storage held in
 * floats), and the GEMMs take 16-bit operands on the tensor cores with fp32
 * sums; the master weights, the optimizer and the loss scaler are the
 * trainer's (on the device when resident).
 *
 * offload.params "cpu": the device holds the resident parameters (gpt's
 * embeddings and final LayerNorm; the mlp has none) and their gradients,
 * and two slots of weights and two of gradients of one block each, which
 * the parameter offload engine (trainer/param_offload.h) fills and empties
 * through device memory and a copy stream (kern_cuda_copy_async); w_dev
 * and g_dev then hold only the resident floats, [0, res_head) and
 * [res_tail, n_floats) of the layout, one after the other
 * (trn_cuda_model_dev). offload.activations "recompute" and "cpu" run as
 * the CPU models run them, "cpu" through the activation offload engine
 * (trainer/act_offload.h) on the same copy stream. The kernels are
 * kernels/<op>_cuda.cu, each tested against its CPU reference (tests/gpu).
 */
#ifndef LARCH_TRAINER_MODEL_CUDA_H
#define LARCH_TRAINER_MODEL_CUDA_H

#include "model.h"

struct kern_cuda_opts;

/* What the GPT and MLP device models share; each embeds it first. */
struct trn_cuda_model {
	struct trn_model base;         /* params, w, g: the CPU layout's (cpu owns them) */
	struct trn_model *cpu;         /* the CPU model's layout with its w and g; owned */
	float *w_dev, *g_dev;          /* the parameters and their gradients: [n_floats], or
	                                  with offload.params the resident ones */
	long res_head, res_tail;       /* the resident floats: [0, head) and [tail, n_floats)
	                                  (without offload.params head = tail = n_floats) */
	/* in 16 bits without offload.params: w_dev's values as 16-bit values, the
	 * copy the GEMMs read (kern_matmul_cuda_weights16), written with w_dev
	 * by publish_master, else from it at the first GEMM after it changed;
	 * with a gap of w16_pad zeros after float w16_pad_at (the model sets
	 * both before trn_cuda_model_init: gpt's vocabulary rows padded) */
	uint16_t *w16_dev;
	long w16_pad_at, w16_pad;
	int w16_fresh;                 /* w16_dev holds w_dev's values */
	float *arena;                  /* activations and scratch, device */
	long arena_floats;
	int *tokens_dev, *targets_dev; /* [rows]: gpt tokens / targets, mlp targets */
	int *best_dev, *best_host;     /* [rows] top-1 per scored row */
	float *losses_host;            /* [rows] */
	float *g_stage;                /* host: gradients before they add into g */
	long stage_floats;             /* g_stage's: TRN_GRAD_STAGE_FLOATS at most */
	long rows;                     /* scored rows at max_batch (samples x tokens) */
	long w_version;                /* base.w_version of w_dev; -1 before the first upload */
	int pinned;                    /* bits 0-2: w, g, g_stage page-locked (kern_cuda_host_register) */
	/* gradients out block by block (trn_cuda_model_block_out): the block on
	 * its way through each of two channels, -1 none, and a stage each for
	 * adding to what g holds (the largest block's floats, page-locked) */
	int out_held[2];
	float *out_stage[2];
	/* floats of w sent to w_dev tensor by tensor since the last upload
	 * (trn_cuda_model_tensor_changed), on channel TRN_CUDA_W_IN_CHANNEL */
	long w_streamed;
	long w_streamed_version;       /* base.w_version when they went */
	/* the next batch, copied ahead (trn_cuda_model_stage_batch): page-locked
	 * host copies, the device staging they go to on TRN_CUDA_BATCH_CHANNEL,
	 * and what they hold */
	struct {
		int32_t *tokens, *targets;
		float *x;
		int *tokens_dev, *targets_dev;
		float *x_dev;
		long x_row;                /* floats of x a sample (mlp), 0 for tokens */
		int n;                     /* samples held */
		int live;                  /* a copy was started and not taken by a forward */
	} ahead;
	void (*free_impl)(struct trn_cuda_model *c);
};

/* The offload engines' copier on the device (trainer/copier.h): slots in
 * device memory, host stores page-locked, copies on kern_cuda_copy_async's
 * channels. */
struct trn_copier;
extern const struct trn_copier trn_cuda_copier;

/* Builds the model of spec on CUDA device `device`, the kernels set to
 * kopts (kern_cuda_set_opts). NULL with err set (a spec the GPU path
 * cannot run yet names the field). */
struct trn_model *trn_model_cuda_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                     int max_batch, int device,
                                     const struct kern_cuda_opts *kopts, struct trn_err *err);

/* trn_model_cuda_list's work. */
int trn_model_cuda_print_devices(FILE *out);

/* ---- for model_gpt_cuda.c and model_mlp_cuda.c ---------------------------- */

/* Sets c up over the CPU layout cpu (taking it), with rows scored rows at
 * most and arena_floats of device activations. 0, or -1 with err. */
int trn_cuda_model_init(struct trn_cuda_model *c, struct trn_model *cpu,
                        const struct trn_model_ops *ops, long rows, long arena_floats,
                        struct trn_err *err);
/* Rounds x[0..n) on the device to the model's compute dtype (nothing in
 * fp32): model.h's trn_model_round, where the CPU model calls it. */
void trn_cuda_model_round(const struct trn_cuda_model *c, float *x, long n);
/* Sets the GEMMs' operands to the compute dtype (kern_matmul_cuda_operands)
 * and their weights' 16-bit copy, refreshed first if w_dev changed since:
 * forward (after trn_cuda_model_sync_weights) and backward call it first. */
void trn_cuda_model_gemms(struct trn_cuda_model *c);
/* Uploads w when the trainer changed it since the last upload (with
 * offload.params the resident floats; the engine brings the blocks'). */
void trn_cuda_model_sync_weights(struct trn_cuda_model *c);
/* Where float off of the layout lives in dev (w_dev or g_dev): a resident
 * float's place with offload.params, else dev + off. */
static inline float *trn_cuda_model_dev(const struct trn_cuda_model *c, float *dev, long off)
{
	return dev + (off < c->res_head ? off : c->res_head + (off - c->res_tail));
}
/* offload.params: g (+)= the device's gradients of the resident floats
 * [off, off + n) (within one resident range), now. */
void trn_cuda_model_grads_range(struct trn_cuda_model *c, long off, long n);
/* The scored rows' mean loss (and st, when not NULL) from the device's
 * per-row losses and, for st, logits [rows, classes] in rows ld apart,
 * stored as a16 says (cuda_common.h). */
double trn_cuda_model_score(struct trn_cuda_model *c, const float *losses_dev, int a16,
                            const void *logits_dev, int ld, const int32_t *targets, long rows,
                            int classes, struct trn_fwd_stats *st);
/* Backward's start: zeroes g_dev (unless resident: the micro-batches of a
 * step add up there, zeroed by trn_model_zero_grad; or holding the step's
 * sum so far, below). */
void trn_cuda_model_grads_begin(struct trn_cuda_model *c);
/* Backward's end: g (+)= g_dev, then the grad_ready hooks in order
 * (resident, or with more micro-batches of the step to come
 * (trn_model_more_micro, without offload.params): nothing, the gradients
 * stay on the device, rounded there; the step's last backward then sends
 * their sum, straight into g). */
void trn_cuda_model_grads_out(struct trn_cuda_model *c, const int *ready_order);

/* Resident with a grad_ready hook (data parallel over a device
 * communicator, comm.h): the model reports each parameter as backward
 * finishes it, on the device, so that its bucket reduces there beside the
 * rest of backward: trn_cuda_model_param_final rounds parameter p's
 * gradient in g_dev and calls the hook; _block_final does so for block b's
 * parameters in ready_order's order. The model then skips grads_out. */
int trn_cuda_model_reports_on_device(const struct trn_cuda_model *c);
void trn_cuda_model_param_final(struct trn_cuda_model *c, int p);
void trn_cuda_model_block_final(struct trn_cuda_model *c, int b, const int *ready_order);

/* Gradients that leave the device as backward finishes them (a run that is
 * not resident, without offload.params, which moves them its own way; in
 * the step's last backward, trn_model_more_micro): the
 * model hands the resident tensors' out with trn_cuda_model_grads_range as
 * they are final, and each block's with trn_cuda_model_block_out(c, b) once
 * its backward is enqueued. That starts the block's copy to the host on a
 * copy channel (straight into g on a step's first micro-batch, else into a
 * stage that is added to g) and lands block b + 1's, which ran beside block
 * b's compute: added, then its parameters' grad_ready hooks in ready_order's
 * order, so that data parallel's buckets and the optimizer's offload start
 * during the rest of backward. trn_cuda_model_blocks_out_done lands the
 * last. The same values add in the same order as trn_cuda_model_grads_out. */
#define TRN_CUDA_GRAD_OUT_CHANNEL 6    /* and 7; param offload 0-3, activations 4-5 */
/* w's floats [off, off + n) changed on the host for good until the next
 * forward (model.h's trn_model_range_changed): sent to w_dev on a channel of
 * its own (one param offload leaves free: weights in place on the device)
 * after the compute enqueued so far, which is past their last use (an
 * update that follows backward sends a tensor once its gradient is final).
 * Once all of w went so and w changed in no other way since (one
 * trn_model_weights_changed: the step's), the next
 * trn_cuda_model_sync_weights waits for the channel instead of uploading. */
#define TRN_CUDA_W_IN_CHANNEL 0
/* The next batch's inputs (trn_cuda_model_stage_batch). */
#define TRN_CUDA_BATCH_CHANNEL 8
/* The stage_batch op of both models (model.h). */
void trn_cuda_model_stage_batch(struct trn_model *base, const struct trn_batch *b);
/* Forward's inputs on the device: b's tokens and targets into tokens_dev
 * and targets_dev, and x_row floats a sample of b->x into x_dev (mlp; NULL
 * and 0 for tokens), from the staged copy when it holds b's data (the
 * kernels' stream waits for its copy), else copied now. */
void trn_cuda_model_inputs(struct trn_cuda_model *c, const struct trn_batch *b, float *x_dev,
                           long x_row);
void trn_cuda_model_range_changed(struct trn_model *base, long off, long n);
int trn_cuda_model_streams_grads(const struct trn_cuda_model *c);
void trn_cuda_model_block_out(struct trn_cuda_model *c, int b, const int *ready_order);
void trn_cuda_model_blocks_out_done(struct trn_cuda_model *c, const int *ready_order);
/* The resident ops (struct trn_model_ops) both models use. */
void trn_cuda_model_zero_device_grads(struct trn_model *base);
void trn_cuda_model_pull_weights(struct trn_model *base);
void trn_cuda_model_publish_master(struct trn_model *base, const float *master);
void trn_cuda_model_device_weights_changed(struct trn_model *base);
void trn_cuda_model_device_memory(const struct trn_model *base, struct trn_device_memory *out);
/* The host waits for every copy channel's last copy: a model's free calls
 * it before it frees or unpins any host buffer a copy may still read or
 * write (the final evaluation's activation copies, a streamed step's last
 * weights). */
void trn_cuda_model_drain_copies(void);
/* Frees what trn_cuda_model_init made (and the CPU layout). */
void trn_cuda_model_release(struct trn_cuda_model *c);

/* constructors (model_gpt_cuda.c, model_mlp_cuda.c); cpu: the CPU layout, taken */
struct trn_model *trn_gpt_cuda_new(const struct trn_spec *spec, struct trn_model *cpu,
                                   int max_batch, struct trn_err *err);
struct trn_model *trn_mlp_cuda_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   struct trn_model *cpu, int max_batch, struct trn_err *err);

#endif
