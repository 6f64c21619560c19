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
 */
#ifndef LARCH_TRAINER_OPTIM_H
#define LARCH_TRAINER_OPTIM_H

#include "comm.h"
#include "err.h"
#include "model.h"
#include "spec.h"

struct trn_optim {
	struct trn_spec_optimizer cfg;
	const struct trn_param *params; /* borrowed from the model */
	int n_params;
	long n_floats;                 /* of the whole buffer */
	long lo, hi;                   /* the range this optimizer updates (all of it: 0, n_floats) */
	struct trn_comm *comm;         /* sums norms over the ranks' ranges; NULL when whole */
	long t;                        /* updates applied so far */
	float *m;                      /* [hi - lo] or NULL when the optimizer has none */
	float *v;                      /* [hi - lo] or NULL */
	double *norms;                 /* per tensor: two partial squared norms (lars, lamb) */
	unsigned char *decay;          /* per tensor: weight decay applies */
	unsigned char *adapt;          /* per tensor: trust ratio applies (lars, lamb) */
	float *trust;                  /* per tensor: last trust ratio (1 when not adapted) */
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

/* One update of w from g at learning rate lr (w and g: the optimizer's
 * range). 0, or -1 with err when summing norms over the ranks failed (err
 * may be NULL for a whole-buffer optimizer, which cannot fail). */
int trn_optim_step(struct trn_optim *o, float *w, const float *g, double lr,
                   struct trn_err *err);

/* Global L2 norm of g over all tensors. */
double trn_grad_norm(const float *g, long n);

/* Scales g so that its global norm is at most max_norm (max_norm > 0) and
 * returns the norm before clipping. */
double trn_clip_grad_norm(float *g, long n, double max_norm);

/* 1 when name contains any of the patterns. */
int trn_name_matches(const char *name, const char (*patterns)[TRN_PATTERN_MAX + 1], int n);

#endif
