/* trainer/optim_int.h - what optim.c, optim_q8.c and optim_state.c share;
 * not part of the trainer's interface (that is optim.h).
 *
 * A step with int8 state: trn_optim_q8_begin dequantizes the blocks the
 * range holds in part; the passes of optim.c call trn_optim_q8_lamb_norm and
 * trn_optim_q8_update tensor by tensor where the fp32 state would take
 * kernels/optimizer.h's updates; trn_optim_q8_finish requantizes the part
 * blocks at the scale the ranks agree on.
 */
#ifndef LARCH_TRAINER_OPTIM_INT_H
#define LARCH_TRAINER_OPTIM_INT_H

#include "optim.h"

/* Tensor i's part of the range: [*a, *a + return) in range coordinates
 * (0 = flat offset lo); 0 when the tensor lies outside it. */
long trn_optim_piece(const struct trn_optim *o, int i, long *a);

/* o->q8 for o's range, with m and/or v. 0, or -1 with err. */
int trn_optim_q8_init(struct trn_optim *o, int want_m, int want_v, struct trn_err *err);
/* q, its codes and scales with k's release (where they live); accepts NULL */
void trn_optim_q8_free(struct trn_optim_q8 *q, const struct trn_optim_kernels *k);

/* The number of blocks of the whole buffer that start before flat offset x. */
long trn_optim_q8_blocks_before(const struct trn_optim *o, long x);

void trn_optim_q8_begin(struct trn_optim *o);

/* w and g: tensor i's part of the range (trn_optim_piece), not the range. */

/* LAMB pass 1 over tensor i's part: ||u||^2 of this step's moments. */
double trn_optim_q8_lamb_norm(struct trn_optim *o, int i, const float *w, const float *g,
                              float wd, float bc1, float bc2);

/* The update of tensor i's part: lr for SGD and AdamW, the step (lr times
 * the trust ratio) for LARS and LAMB. */
void trn_optim_q8_update(struct trn_optim *o, int i, float *w, const float *g, float lr,
                         float wd, float bc1, float bc2);

/* 0, or -1 with err when the ranks could not agree on the scales. */
int trn_optim_q8_finish(struct trn_optim *o, struct trn_err *err);

#endif
