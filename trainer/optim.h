/* trainer/optim.h - the optimizers over a model's flat parameter buffer.
 *
 * SGD (momentum, Nesterov), AdamW, LARS and LAMB with the kernels of
 * kernels/optimizer.h. LARS and LAMB go tensor by tensor (each tensor has its
 * own trust ratio); SGD and AdamW make one pass over each run of adjacent
 * tensors that share a weight decay. Weight decay and layer-wise adaptation
 * are skipped for tensors whose names match the spec's exclusion patterns.
 * State (momentum m, second moment v) has the parameters' layout.
 *
 * ZeRO-1: an optimizer can own one range [lo, hi) of the flat buffer (its
 * rank's shard): its state covers only that range, and its step takes w and
 * g of the range (index 0 = flat offset lo). A tensor cut by the range's
 * ends is updated in part; the norms behind LARS and LAMB trust ratios are
 * summed over the ranks' parts (one allreduce of two doubles per tensor per
 * step), so the ratios are those of whole tensors.
 *
 * int8 state (state_dtype int8, kernels/quant8.h): m and v as 8-bit codes
 * with one fp32 scale per block of KERN_Q8_BLOCK values. Blocks are cut
 * per tensor from its first element (a tensor's last block may be shorter)
 * and numbered over the whole buffer in tensor order: they do not depend on
 * how the ranks cut the buffer, and neither do a checkpoint's state nor the
 * numerics. A block that a range boundary cuts is held in part by two (or
 * more) ranks with one shared scale: each updates its part in fp32, the
 * ranks take the largest absmax (one small allreduce per step) and
 * requantize at it, so the codes are those one rank would store. The code
 * map is dynamic (optim_q8.c says why). An optimizer of the whole buffer can
 * move int8 state to a GPU as fp32 state (trn_optim_move_to): the codes and
 * scales then live there and its kernels' q8 updates give the CPU's bits;
 * with ZeRO it stays on the host (the cut blocks' shared scales are agreed
 * on there).
 */
#ifndef LARCH_TRAINER_OPTIM_H
#define LARCH_TRAINER_OPTIM_H

#include <stdint.h>

#include "comm.h"
#include "err.h"
#include "kernels/quant8.h"
#include "model.h"
#include "spec/spec.h"

struct trn_dp;

/* The kernels an optimizer runs and where its state lives: the CPU's, or a
 * GPU's (optim_cuda.c; kernels/optimizer_cuda.h), with w, g and the state
 * in device memory. The signatures are kernels/optimizer.h's. */
struct trn_optim_kernels {
	const char *name;              /* "cpu", "cuda" */
	double (*sumsq)(const float *x, long n);
	void (*scale)(float *x, long n, float s);
	int (*nonfinite)(const float *x, long n);
	void (*sgd)(float *w, float *m, const float *g, long n, float lr, float mu, float wd,
	            int nesterov);
	void (*adamw)(float *w, float *m, float *v, const float *g, long n, float lr, float b1,
	              float b2, float eps, float wd, float bc1, float bc2);
	void (*lars)(float *w, float *m, const float *g, long n, float step, float mu, float wd);
	double (*lamb_moments)(float *m, float *v, const float *g, const float *w, long n, float b1,
	                       float b2, float eps, float wd, float bc1, float bc2);
	void (*lamb_apply)(float *w, const float *m, const float *v, long n, float step, float eps,
	                   float wd, float bc1, float bc2);
	/* int8 state (kernels/quant8.h): the fused block-wise updates */
	void (*sgd_q8)(float *w, int8_t *mq, float *ms, const float *g, long n, float lr, float mu,
	               float wd, int nesterov);
	void (*adamw_q8)(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs, const float *g,
	                 long n, float lr, float b1, float b2, float eps, float wd, float bc1,
	                 float bc2);
	void (*lars_q8)(float *w, int8_t *mq, float *ms, const float *g, long n, float step,
	                float mu, float wd);
	double (*lamb_norm_q8)(const int8_t *mq, const float *ms, const uint8_t *vq,
	                       const float *vs, const float *g, const float *w, long n, float b1,
	                       float b2, float eps, float wd, float bc1, float bc2);
	void (*lamb_q8)(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs, const float *g,
	                long n, float step, float b1, float b2, float eps, float wd, float bc1,
	                float bc2);
	/* state memory: a zeroed buffer (NULL when out of memory), its release
	 * (which accepts NULL), zeroing, and copies between it and host memory */
	void *(*alloc_zeroed)(size_t bytes);
	void (*release)(void *p);
	void (*zero)(void *p, size_t bytes);
	void (*to_host)(void *host, const void *state, size_t bytes);
	void (*from_host)(void *state, const void *host, size_t bytes);
};

extern const struct trn_optim_kernels trn_optim_cpu_kernels;
extern const struct trn_optim_kernels trn_optim_cuda_kernels;  /* the GPU backend's */
/* The kernels for m's memory: a GPU model's device (cuda_backend.h), else
 * the CPU's. */
const struct trn_optim_kernels *trn_optim_kernels_of(const struct trn_model *m);

struct trn_optim {
	const struct trn_optim_kernels *k;  /* &trn_optim_cpu_kernels unless moved */
	struct trn_spec_optimizer cfg;
	const struct trn_param *params; /* borrowed from the model */
	int n_params;
	long n_floats;                 /* of the whole buffer */
	long lo, hi;                   /* the range this optimizer updates (all of it: 0, n_floats) */
	struct trn_comm *comm;         /* sums norms over the ranks' ranges; NULL when whole */
	long t;                        /* updates applied so far */
	double bc1, bc2;               /* this update's Adam bias corrections (trn_optim_begin) */
	float *m;                      /* [hi - lo] or NULL when the optimizer has none */
	float *v;                      /* [hi - lo] or NULL */
	double *norms;                 /* per tensor: two partial squared norms (lars, lamb) */
	unsigned char *decay;          /* per tensor: weight decay applies */
	unsigned char *adapt;          /* per tensor: trust ratio applies (lars, lamb) */
	float *trust;                  /* per tensor: last trust ratio (1 when not adapted) */
	int n_state;                   /* 0, 1 (m) or 2 (m and v) */
	struct trn_optim_q8 *q8;       /* int8 state; NULL with fp32 state or none */
};

/* A block of int8 state that this range holds in part (optim_q8.c). */
struct trn_optim_q8_cut {
	int param;                     /* the tensor */
	long a, n;                     /* range coordinates of the part */
	long blk;                      /* index into the range's scales */
	float *m, *v;                  /* its fp32 values during a step [KERN_Q8_BLOCK] */
};

/* int8 state of a range (optim_q8.c). */
struct trn_optim_q8 {
	int8_t *m;                     /* codes [hi - lo], or NULL */
	uint8_t *v;
	float *ms, *vs;                /* scales of the blocks the range touches [n_blocks] */
	long *first;                   /* per tensor: the number of its first block [n_params + 1] */
	long blk0, n_blocks;           /* the range's first block and block count */
	struct trn_optim_q8_cut cut[2];
	int n_cut;
	double *amax;                  /* the cut blocks' absmax of every rank [6 * ranks] */
};

/* An optimizer's state over the whole buffer, in the model's layout: what
 * a checkpoint holds (state.h). Either fp32 (m, v) or int8 (codes and the
 * scales of all the buffer's blocks, q8->first[n_params] of them). */
struct trn_optim_state {
	float *m, *v;                  /* fp32 [n_floats], or NULL */
	int8_t *mq;                    /* int8 codes [n_floats], or NULL */
	uint8_t *vq;
	float *ms, *vs;                /* int8 scales [n_blocks], or NULL */
	long n_blocks;
	int owned;                     /* the buffers are this struct's (else the optimizer's) */
};

int trn_optim_init(struct trn_optim *o, const struct trn_spec_optimizer *cfg,
                   const struct trn_param *params, int n_params, long n_floats,
                   struct trn_err *err);
/* An optimizer of the range [lo, hi) of one rank of comm (ZeRO-1): every
 * rank of comm must own its range and step together. */
int trn_optim_init_shard(struct trn_optim *o, const struct trn_spec_optimizer *cfg,
                         const struct trn_param *params, int n_params, long n_floats,
                         long lo, long hi, struct trn_comm *comm, struct trn_err *err);
void trn_optim_release(struct trn_optim *o);

/* Moves o's state (fp32, or int8 codes and scales) to k's memory: from
 * then on its steps take w and g there. A whole-buffer optimizer only (int8
 * state with ZeRO stays on the host). 0, or -1 with err. */
int trn_optim_move_to(struct trn_optim *o, const struct trn_optim_kernels *k,
                      struct trn_err *err);

/* One update of w from g at learning rate lr (w and g: the optimizer's
 * range). 0, or -1 with err when summing norms over the ranks failed (err
 * may be NULL for a whole-buffer optimizer, which cannot fail). */
int trn_optim_step(struct trn_optim *o, float *w, const float *g, double lr,
                   struct trn_err *err);

/* The same update tensor by tensor, for an optimizer that has the whole
 * buffer (no comm): trn_optim_begin, then trn_optim_step_tensor once for
 * each tensor in any order, each as soon as its gradient is final, then
 * trn_optim_end. w and g point at tensor i's first float (the gradient
 * need not sit in a whole-buffer g). The parameters, state and trust ratios
 * come out with the same bits as trn_optim_step's. */
void trn_optim_begin(struct trn_optim *o);
void trn_optim_step_tensor(struct trn_optim *o, int i, float *w, const float *g, double lr);
/* 0, or -1 with err (int8 state's scales could not be agreed on). */
int trn_optim_end(struct trn_optim *o, struct trn_err *err);

/* Zero state and t = 0: a fresh start. */
void trn_optim_reset(struct trn_optim *o);

/* Bytes of state this optimizer holds (codes and scales for int8). */
double trn_optim_state_bytes(const struct trn_optim *o);

/* The whole-buffer state of o: for an optimizer of the whole buffer its
 * own buffers (borrowed), else new ones. 0, or -1 with err. */
int trn_optim_state_init(struct trn_optim_state *s, const struct trn_optim *o,
                         struct trn_err *err);
void trn_optim_state_release(struct trn_optim_state *s);

/* Saving: every rank's range of the state into s on rank 0 of dp's ranks
 * (all ranks call it; dp's partition is o's). 0, or -1 with err. */
int trn_optim_state_gather(struct trn_optim_state *s, const struct trn_optim *o,
                           struct trn_dp *dp, struct trn_err *err);

/* Loading: o's range of the whole state s. */
void trn_optim_state_take(struct trn_optim *o, const struct trn_optim_state *s);

/* Global L2 norm of g over all tensors. */
double trn_grad_norm(const float *g, long n);

/* Scales g so that its global norm is at most max_norm (max_norm > 0) and
 * returns the norm before clipping. */
double trn_clip_grad_norm(float *g, long n, double max_norm);

/* 1 when name contains any of the patterns. */
int trn_name_matches(const char *name, const char (*patterns)[TRN_PATTERN_MAX + 1], int n);

#endif
