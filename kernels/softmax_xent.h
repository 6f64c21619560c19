/* kernels/softmax_xent.h - fused softmax + cross-entropy, numerically stable.
 *
 * logits [n, v], targets [n] in [0, v). Forward writes the per-row loss
 * losses[i] = lse[i] - logits[i, targets[i]] with lse[i] = log sum_j exp(logits[i, j])
 * (computed with the row max subtracted), and saves lse [n] so that backward
 * needs no [n, v] probability buffer:
 *   dlogits[i, j] += dloss * (exp(logits[i, j] - lse[i]) - (j == targets[i])).
 * dloss is the weight of every row's loss, e.g. 1/n for a mean.
 * A negative target marks a row to ignore: loss 0, no gradient. The _set
 * backward overwrites dlogits (=) instead of adding into it; ignored rows
 * get 0.
 */
#ifndef LARCH_KERNELS_SOFTMAX_XENT_H
#define LARCH_KERNELS_SOFTMAX_XENT_H

void kern_softmax_xent_fwd_ref(float *losses, float *lse, const float *logits,
                               const int *targets, int n, int v);
void kern_softmax_xent_fwd_cpu(float *losses, float *lse, const float *logits,
                               const int *targets, int n, int v);

void kern_softmax_xent_bwd_ref(float *dlogits, float dloss, const float *logits,
                               const float *lse, const int *targets, int n, int v);
void kern_softmax_xent_bwd_cpu(float *dlogits, float dloss, const float *logits,
                               const float *lse, const int *targets, int n, int v);
void kern_softmax_xent_bwd_set_ref(float *dlogits, float dloss, const float *logits,
                                   const float *lse, const int *targets, int n, int v);
void kern_softmax_xent_bwd_set_cpu(float *dlogits, float dloss, const float *logits,
                                   const float *lse, const int *targets, int n, int v);

#endif
