/* trainer/model.h - the models: named parameter tensors in one flat buffer,
 * forward and backward on a micro-batch.
 *
 * All parameters live in one float array (w) and their gradients in another
 * of the same layout (g); optimizer state, checkpoints and gradient buckets
 * use the same offsets. Parameter names follow PyTorch's habits
 * ("fc1.weight", "blocks.0.attn.qkv.bias", "blocks.0.norm1.weight") so that
 * exclusion patterns such as "bias" and "norm" select what users expect.
 */
#ifndef LARCH_TRAINER_MODEL_H
#define LARCH_TRAINER_MODEL_H

#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "err.h"
#include "kernels/precision.h"
#include "spec/spec.h"

#define TRN_PARAM_NAME 64

struct trn_param {
	char name[TRN_PARAM_NAME];
	int ndim;
	int shape[4];
	long numel;
	long offset;                   /* in floats, into w, g and optimizer state */
};

struct trn_fwd_stats {
	double loss_sum;               /* sum of per-sample (per-token) losses */
	long correct;                  /* top-1 hits */
	long count;                    /* samples (tokens) scored */
};

/* A GPU model adds each backward's gradients into the host's through a
 * stage of at most this many floats (trainer/model_cuda.c). */
#define TRN_GRAD_STAGE_FLOATS (1L << 20)

struct trn_model;
struct trn_options;
struct trn_param_offload;

/* A GPU model's device memory, in bytes. */
struct trn_device_memory {
	double in_use;                 /* now, the whole process's (the driver's figure) */
	double total;                  /* the device's */
	double alloc_peak;             /* the most larch's own buffers held at once:
	                                * what larch plan predicts */
	double scratch_peak;           /* the kernels' stream-ordered scratch pool's peak */
};

struct trn_model_ops {
	/* Runs the forward pass on b (b->n <= max_batch) and keeps what backward
	 * needs. Adds to st when st is not NULL. Returns the mean loss. */
	double (*forward)(struct trn_model *m, const struct trn_batch *b, struct trn_fwd_stats *st);
	/* Backward of the last forward: g += scale * d(mean loss)/dw. */
	void (*backward)(struct trn_model *m, const struct trn_batch *b, float scale);
	/* Fills w with a fresh initialisation from seed. */
	void (*init_weights)(struct trn_model *m, uint64_t seed);
	void (*free)(struct trn_model *m);
	/* GPU models only (NULL on the CPU), for trn_model_set_resident: */
	void (*zero_device_grads)(struct trn_model *m);
	void (*pull_weights)(struct trn_model *m);     /* the device's w into w */
	/* the device's w = master (device fp32 master weights), rounded to the
	 * compute dtype */
	void (*publish_master)(struct trn_model *m, const float *master);
	/* optional: something besides publish_master changed the device's w
	 * (trn_model_device_weights_changed) */
	void (*device_weights_changed)(struct trn_model *m);
	/* the device's memory, in bytes (struct trn_device_memory) */
	void (*device_memory)(const struct trn_model *m, struct trn_device_memory *out);
	/* optional: w's floats [off, off + n) changed (trn_model_range_changed) */
	void (*range_changed)(struct trn_model *m, long off, long n);
	/* optional: b is the next forward's batch (trn_model_stage_batch) */
	void (*stage_batch)(struct trn_model *m, const struct trn_batch *b);
};

struct trn_model {
	const struct trn_model_ops *ops;
	struct trn_param *params;      /* owned */
	int n_params;
	long n_floats;                 /* sum of numel */
	float *w;                      /* parameters [n_floats], owned */
	float *g;                      /* gradients [n_floats], owned */
	int max_batch;                 /* micro-batch the activations are sized for */
	/* offload.activations: "none" keeps every activation backward needs;
	 * "recompute" keeps each block's (layer's) input and recomputes the rest
	 * of the block just before its backward, in one block's scratch; "cpu"
	 * keeps them in a host store (trainer/act_offload.h) and works in two
	 * blocks' staging. The gradients are bit-identical in all three. */
	enum trn_offload act_offload;
	long act_bytes;                /* activations and their gradients at max_batch, as held */
	long act_bytes_none;           /* the same with offload.activations "none" */
	long act_host_bytes;           /* "cpu": the host store (not model memory), else 0 */
	double flops_per_sample;       /* forward + backward FLOPs of one sample, GEMMs only */
	long tokens_per_sample;        /* 1 for the mlp, seq for gpt */
	/* Optional: called by backward as soon as a parameter's gradient is
	 * final for this micro-batch (data parallel starts reducing it while
	 * backward goes on; trainer/dp.h). Every parameter once per backward. */
	void (*grad_ready)(void *ctx, int param);
	void *grad_ready_ctx;
	/* Mixed precision (precision.compute): the dtype that parameters,
	 * activations and all gradients are stored in during forward and
	 * backward. On the CPU they stay in float buffers holding values rounded
	 * to it (trn_model_round after every op that writes one), which is
	 * numerically what 16-bit storage with fp32 GEMM accumulation does on a
	 * GPU; the fp32 master weights live with the optimizer (trainer/train.c). */
	enum trn_dtype dtype;
	/* Blocks: runs of parameters the model computes one at a time (gpt's
	 * transformer blocks, the mlp's layers), block b being params
	 * [block_first + b * block_params, + block_params); the others (gpt's
	 * embeddings, tied head and final LayerNorm) are resident. With
	 * offload.params "cpu" w and g are the host copies, a block's weights
	 * are staged for its compute and its gradients staged until copied out
	 * (trainer/param_offload.h), and the resident tensors are used in place:
	 * on a GPU they would be device copies. Model files reach a block's
	 * weights and gradients only through trn_model_block_* below, which
	 * hand out the staged copies, or w and g without offload. */
	/* The backend: 0 the CPU; 1 a GPU (trainer/model_cuda.h), which computes
	 * on device copies of w and g: the trainer says when it changed w
	 * (trn_model_weights_changed), and g holds each backward's gradients
	 * once it returns, as with the CPU. */
	int device;
	/* Resident (trn_model_set_resident): the device copies are the run's,
	 * updated in place by an optimizer on the device: gradients stay there
	 * (g is not written, grad_ready is not called), w is refreshed from them
	 * by trn_model_pull_weights, and host writes of w still reach the device
	 * through trn_model_weights_changed. */
	int resident;
	float *w_dev, *g_dev;          /* the device copies (GPU models), else NULL */
	long w_version;                /* bumped by trn_model_weights_changed */
	long w_streamed_at;            /* the w_version trn_model_weights_streamed made */
	int w_device_newer;            /* resident: w_dev changed since w was pulled */
	int g_zeroed;                  /* g counts as all zeros (trn_model_zero_grad, no backward
	                                  since): zeros, or with g_overwritten what the next
	                                  backward overwrites */
	/* a GPU model that sums gradients on the device: the first backward
	 * after trn_model_zero_grad writes all of g instead of adding into it,
	 * so zero_grad leaves g as it is (a pass over 4 bytes a parameter on
	 * the host every step, a third of a second at 1.5B, saved) */
	int g_overwritten;
	/* trn_model_more_micro: more micro-batches of this step follow the next
	 * backward; and (a GPU model) g_dev holds the sum of this step's
	 * micro-batches so far, which has not gone to g */
	int more_micro, grads_held;
	/* trn_model_expect_backward: the scale of the backward that follows the
	 * next forward (0: none said; the forward takes it back to 0) */
	float bwd_scale_next;
	double peak_flops;             /* the device's peak FLOP/s for the MFU; 0 unknown (CPU) */
	const char *peak_basis;        /* where peak_flops comes from (static), NULL on the CPU */
	char device_desc[384];         /* "cuda:0 NVIDIA H100 ..., sm_90, ..." ("" on the CPU) */
	int n_blocks, block_first, block_params;
	enum trn_offload param_offload;
	struct trn_param_offload *param_off;  /* "cpu": owned */
	long param_resident_floats;    /* floats outside every block */
	long param_stage_floats;       /* "cpu": two blocks' staging of weights (as much
	                                  again for gradients), else 0 */
	/* Streamed (trn_spec_streams_update with offload.params "cpu"): the
	 * optimizer steps each tensor as its gradient becomes final in backward,
	 * and the host keeps no gradients of the blocks: g's range over them is
	 * address space only,
	 * unreadable, and a block's gradients are read from the parameter
	 * offload's windows (trn_model_grad_of). */
	int streamed;
	size_t g_map_bytes;            /* streamed: g is this mapping, else malloc'd */
	/* w holds the fp32 master weights, which the model rounds to the
	 * compute dtype as it reads them (a GPU model with offload.params and
	 * 16-bit compute: each staged block and the resident tensors' device
	 * copy), so that the trainer keeps no second fp32 copy */
	int w_master;
	/* forwards whose batch came from the copy started ahead of them
	 * (trn_model_stage_batch), and staged batches no forward took */
	long batches_ahead, batches_not_ahead;
	/* a GPU model's weights, each time they changed on the host before a
	 * forward: sent whole then, or already on their way as they were
	 * written (trn_model_range_changed, then trn_model_weights_streamed) */
	long w_sent_whole, w_sent_streamed;
};

/* Rounds x[0..n) to the model's compute dtype in place (nothing for fp32). */
static inline void trn_model_round(const struct trn_model *m, float *x, long n)
{
	if (m->dtype == TRN_DTYPE_FP16)
		kern_round_fp16_cpu(x, n);
	else if (m->dtype == TRN_DTYPE_BF16)
		kern_round_bf16_cpu(x, n);
}

/* Backward calls this once per parameter per backward pass, as soon as the
 * parameter's gradient for this micro-batch has been added: the gradient is
 * rounded to the compute dtype (the 16-bit gradient buffer of mixed
 * precision, where a too-small gradient flushes to zero and a too-large one
 * becomes inf) and handed to the grad_ready hook. */
static inline void trn_model_grad_ready(struct trn_model *m, int param)
{
	if (m->dtype != TRN_DTYPE_FP32)
		trn_model_round(m, m->g + m->params[param].offset, m->params[param].numel);
	if (m->grad_ready)
		m->grad_ready(m->grad_ready_ctx, param);
}

/* Block b's first float in w and g, and in *floats its length. */
long trn_model_block_range(const struct trn_model *m, int b, long *floats);
/* The floats of the largest block (0 without blocks). */
long trn_model_largest_block(const struct trn_model *m);
/* The block parameter p belongs to, or -1 (a resident tensor). */
int trn_model_block_of(const struct trn_model *m, int p);

/* Where parameter param's gradient is once grad_ready handed it out: in g,
 * or streamed, a block's in its window (until the next block's backward
 * ends). */
const float *trn_model_grad_of(const struct trn_model *m, int param);

/* A backward with nothing to learn from (no target counted): every
 * parameter final with its gradient as it is (a step's first micro-batch:
 * zero_grad's zeros), handed to grad_ready in backward's order; streamed,
 * each block's from a zeroed window. */
void trn_model_grads_ready_as_they_are(struct trn_model *m);

/* The trainer changed w (initialised, loaded, updated by the optimizer,
 * rolled back): a GPU model refreshes its device copy before its next
 * forward. */
void trn_model_weights_changed(struct trn_model *m);
/* The same for a step's update that followed backward, each tensor of it
 * announced through trn_model_range_changed as it was written: a GPU model
 * all of whose w went so since the last change need only wait for those
 * copies. Any other change of w (trn_model_weights_changed: a rollback of
 * that very step, say) takes a whole upload again. */
void trn_model_weights_streamed(struct trn_model *m);
/* The trainer changed w's floats [off, off + n) and will not write them
 * again before the next forward (an update that follows backward, or the
 * optimizer offload's parameters coming back chunk by chunk): a GPU model
 * that keeps all of w on the device starts copying them there now, beside
 * what else runs; once all of w came so, trn_model_weights_changed costs
 * the next forward only a wait. trn_model_tensor_changed: parameter p's. */
void trn_model_range_changed(struct trn_model *m, long off, long n);
void trn_model_tensor_changed(struct trn_model *m, int p);
/* Whether the model copies batches ahead (a GPU model), and b, very likely
 * the next forward's batch, to copy now: its copy to the device runs beside
 * the compute enqueued after (the backward of the forward just done), and
 * a forward whose batch holds the same data takes it from there, one whose
 * batch differs copies its own. b is the caller's to reuse at once. */
int trn_model_stages_batches(const struct trn_model *m);
void trn_model_stage_batch(struct trn_model *m, const struct trn_batch *b);
/* A GPU model becomes resident (see above); 0, or -1 on the CPU. */
int trn_model_set_resident(struct trn_model *m);
/* Resident: an optimizer on the device, or the ranks' all-gather, changed
 * w_dev (w is stale, and what the model derives from w_dev). */
void trn_model_device_weights_changed(struct trn_model *m);
/* Resident: makes w the device's weights (a copy when stale); else nothing. */
void trn_model_pull_weights(struct trn_model *m);
/* Resident in 16 bits: the device's weights from the device's fp32 master
 * weights, rounded to the compute dtype (w is then stale). */
void trn_model_publish_master(struct trn_model *m, const float *master_dev);

/* Model files: their blocks, once the parameter table is complete. */
void trn_model_set_blocks(struct trn_model *m, int n_blocks, int first_param, int block_params);
/* Forward starts (before any block's trn_model_block_fwd). */
void trn_model_fwd_start(struct trn_model *m);
/* Block b's weights for its forward (the block's first parameter's; the
 * others follow at their offsets relative to it). */
const float *trn_model_block_fwd(struct trn_model *m, int b);
/* Backward reaches block b (blocks in reverse order): its weights, and in
 * *grads its gradients, laid out as for trn_model_block_fwd; they hold
 * what g holds, and the block's backward adds into them. */
const float *trn_model_block_bwd(struct trn_model *m, int b, float **grads);
/* Parameter param of block b has its gradient for this backward (in the
 * block's gradients): rounds it to the compute dtype, and hands it to the
 * grad_ready hook, at once or, offloaded, once the block's gradients have
 * reached g. In place of trn_model_grad_ready for block parameters. */
void trn_model_block_grad_ready(struct trn_model *m, int b, int param);
/* Block b's backward is done; then, after the last block, backward's end
 * of the blocks (before the resident tensors' gradients are ready). */
void trn_model_block_bwd_end(struct trn_model *m, int b);
void trn_model_blocks_bwd_done(struct trn_model *m);

/* Builds the model of spec->model for the data in ds with buffers for
 * micro-batches of max_batch samples. Weights are not initialised: call
 * trn_model_init_weights or load them. Returns NULL with err set. */
struct trn_model *trn_model_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                int max_batch, struct trn_err *err);
void trn_model_free(struct trn_model *m);  /* accepts NULL */
/* trn_model_new on CUDA device cuda_device (>= 0; -1: the CPU), with the
 * GPU backend and its kernels as opts' cuda_* rows say (options.h;
 * borrowed; NULL: their defaults). Without a CUDA build, or a GPU, NULL
 * with err saying so. */
struct trn_model *trn_model_new_on(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, int cuda_device,
                                   const struct trn_options *opts, struct trn_err *err);
/* A GPU run's job directory, for the GPU backend's files there (the tuned
 * GEMMs' picks: trainer/cuda_backend.h); nothing without a backend. */
void trn_model_cuda_tune_dir(const char *job_dir);
/* Whether this build has the CUDA models. */
int trn_model_cuda_built(void);
/* Prints the CUDA devices a --device cuda run could use, one line each
 * ("cuda:0 NVIDIA H100 ..."), or one line saying why there are none, with
 * the GPU backend opts' cuda_backend names (NULL: the default); returns how
 * many there are. */
int trn_model_cuda_list(FILE *out, const struct trn_options *opts);

double trn_model_forward(struct trn_model *m, const struct trn_batch *b, struct trn_fwd_stats *st);
void trn_model_backward(struct trn_model *m, const struct trn_batch *b, float scale);
/* Says before a forward that trn_model_backward(m, same batch, scale) follows
 * it (a training step's micro-batch): a model may then start the backward's
 * work in the forward (the GPU GPT's cross-entropy gradient, in the pass
 * that computes the loss). The same results either way; the forward
 * forgets it, so a forward not followed by that backward (an evaluation)
 * must not be told. */
void trn_model_expect_backward(struct trn_model *m, float scale);
void trn_model_init_weights(struct trn_model *m, uint64_t seed);
void trn_model_zero_grad(struct trn_model *m);
/* Before a backward: whether more micro-batches of the same step follow it
 * (the trainer's gradient accumulation; 0 until said). A GPU model that
 * keeps all its gradients on the device but is not resident (offload
 * .optimizer "cpu", or data parallel over the host) then adds them up
 * there and sends them to g once, after the step's last backward, instead
 * of once per micro-batch (a step of 32 micro-batches of GPT-2 1.5B moved
 * 32 x 6 GB over PCIe and added them up on the host). They add up there as
 * a resident model's do: each contribution onto the sum so far (as the CPU
 * models add into g; not bit for bit the host's sum of each backward's
 * own), each backward's sum rounded to the compute dtype as grad_ready
 * rounds g; no grad_ready hook fires before the last backward (data
 * parallel arms for that one only). The CPU models, and a
 * GPU model that is resident or offloads its parameters, ignore it. */
void trn_model_more_micro(struct trn_model *m, int more);

/* The parameter called name, or NULL. */
const struct trn_param *trn_model_param(const struct trn_model *m, const char *name);

/* Adds a parameter to the table under construction (model files use it):
 * grows m->params and m->n_floats; returns its index, or -1 on allocation failure. */
int trn_model_add_param(struct trn_model *m, const char *name, int ndim, const int *shape);
/* The model of trn_model_new without its memory: the parameter table,
 * n_floats, flops, the activation sizes (act_bytes, act_bytes_none,
 * act_host_bytes) at max_batch and the parameter staging sizes, computed
 * by the walks that lay the real buffers out, with w, g, the activations
 * and the staging unallocated. For memory plans
 * (plan.h); only trn_model_free may be called on it. ds needs only the
 * shape fields (task, dim, n_classes, vocab). */
struct trn_model *trn_model_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, struct trn_err *err);
/* trn_model_layout whose operations are the CPU model's: trn_model_alloc
 * then gives it w and g, trn_model_init_weights fills w as trn_model_new's
 * model would. The host side of a GPU model (model_cuda.c). */
struct trn_model *trn_model_host_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                        int max_batch, struct trn_err *err);
/* Allocates w and g once the table is complete; 0 or -1. */
int trn_model_alloc(struct trn_model *m);
/* Frees what trn_model_add_param and trn_model_alloc made, and the
 * parameter staging (model files call it from their free). */
void trn_model_release(struct trn_model *m);

/* Scores rows of logits [rows, classes] with their per-row losses against
 * targets (negative = not scored): adds the scored rows' loss sum, top-1 hits
 * and count to st (when not NULL) and returns their mean loss (0 when none). */
double trn_model_score(const float *logits, const float *losses, const int32_t *targets,
                       long rows, int classes, struct trn_fwd_stats *st);
/* The same with each row's top-1 class given (top1 may be NULL when st is:
 * a GPU model finds them on the device). */
double trn_model_score_top1(const int *top1, const float *losses, const int32_t *targets,
                            long rows, struct trn_fwd_stats *st);

/* gpt's table: wte, wpe, then per block these parameters in this order
 * ("blocks.<l>.<name>"), then norm_f.weight and norm_f.bias */
#define TRN_GPT_BLOCK_PARAMS 12
extern const char *const trn_gpt_block_names[TRN_GPT_BLOCK_PARAMS];

/* Constructors, one per model file: _new the model (model_mlp.c,
 * model_gpt.c), _layout its table and sizes only (trn_model_layout;
 * trainer/spec/mlp_layout.c, gpt_layout.c). */
typedef struct trn_model *(*trn_model_ctor)(const struct trn_spec *spec,
                                            const struct trn_dataset *ds, int max_batch,
                                            struct trn_err *err);
struct trn_model *trn_mlp_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                              int max_batch, struct trn_err *err);
struct trn_model *trn_mlp_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                 int max_batch, struct trn_err *err);
struct trn_model *trn_gpt_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                              int max_batch, struct trn_err *err);
struct trn_model *trn_gpt_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                 int max_batch, struct trn_err *err);
/* trn_model_new and trn_model_layout: checks that spec's model suits ds
 * (its task) and max_batch, builds it with spec's type's constructor and
 * completes it: the compute dtype, streaming, the parameter staging (sized
 * only, when layout_only). NULL with err set. */
struct trn_model *trn_model_build(const struct trn_spec *spec, const struct trn_dataset *ds,
                                  int max_batch, trn_model_ctor mlp, trn_model_ctor gpt,
                                  int layout_only, struct trn_err *err);

/* For the model files: block b's first parameter, its first float in w and
 * g, and one past the last float of the blocks. */
int trn_model_block_param(const struct trn_model *m, int b);
long trn_model_block_off(const struct trn_model *m, int b);
long trn_model_blocks_end(const struct trn_model *m);

#endif
