/* kernels/optimizer.h - parameter updates on fp32 master weights, one tensor
 * (or one shard of a tensor) per call.
 *
 * The layer-wise optimizers are split into passes so that the norms behind a
 * trust ratio can be summed over shards (ZeRO) before the update is applied:
 * the caller computes ||w||^2 and ||g||^2 (or ||u||^2) with kern_sumsq_*,
 * forms the ratio, and passes the resulting step size in.
 *
 * bc1 = 1 - beta1^t and bc2 = 1 - beta2^t are Adam's bias corrections for
 * step t (t >= 1), computed by the caller in double precision from the
 * float-rounded betas the kernels use (0.999f is 0.99900001).
 *
 * The _cpu versions run on the OpenMP threads and the widest vector unit the
 * CPU has (optimizer_simd.h; LARCH_CPU_ISA=avx512|avx2|scalar forces one),
 * and give the _ref versions' bits for the updates on every one.
 */
#ifndef LARCH_KERNELS_OPTIMIZER_H
#define LARCH_KERNELS_OPTIMIZER_H

/* sum of x[i]^2, accumulated in double. */
double kern_sumsq_ref(const float *x, long n);
double kern_sumsq_cpu(const float *x, long n);

/* x[i] *= s (gradient clipping, averaging). */
void kern_scale_ref(float *x, long n, float s);
void kern_scale_cpu(float *x, long n, float s);

/* SGD with momentum, PyTorch semantics (L2 decay added to the gradient):
 *   d = g + wd*w;  m = mu*m + d;  w -= lr * (nesterov ? d + mu*m : m).
 * With mu == 0, m is not touched and may be NULL: w -= lr * d. */
void kern_sgd_update_ref(float *w, float *m, const float *g, long n,
                         float lr, float mu, float wd, int nesterov);
void kern_sgd_update_cpu(float *w, float *m, const float *g, long n,
                         float lr, float mu, float wd, int nesterov);

/* AdamW (Loshchilov & Hutter 2019; PyTorch's AdamW), decoupled decay:
 *   w -= lr*wd*w;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
 *   w -= lr * (m/bc1) / (sqrt(v/bc2) + eps). */
void kern_adamw_update_ref(float *w, float *m, float *v, const float *g, long n,
                           float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2);
void kern_adamw_update_cpu(float *w, float *m, float *v, const float *g, long n,
                           float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2);

/* LARS (You, Gitman & Ginsburg 2017, Algorithm 1), momentum carries the step:
 *   m = mu*m + step*(g + wd*w);  w -= m
 * where step = lr * local_lr, local_lr = trust*||w|| / (||g|| + wd*||w||)
 * (1 for parameters excluded from adaptation). */
void kern_lars_update_ref(float *w, float *m, const float *g, long n,
                          float step, float mu, float wd);
void kern_lars_update_cpu(float *w, float *m, const float *g, long n,
                          float step, float mu, float wd);

/* LAMB (You et al. 2020, Algorithm 2), pass 1: update the moments
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
 * and return ||u||^2 for u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*w. */
double kern_lamb_moments_ref(float *m, float *v, const float *g, const float *w, long n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2);
double kern_lamb_moments_cpu(float *m, float *v, const float *g, const float *w, long n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2);

/* LAMB pass 2: w -= step * u, u recomputed from m, v and w as in pass 1;
 * step = lr * ||w|| / ||u|| (lr when either norm is 0 or the tensor is
 * excluded from adaptation). */
void kern_lamb_apply_ref(float *w, const float *m, const float *v, long n, float step,
                         float eps, float wd, float bc1, float bc2);
void kern_lamb_apply_cpu(float *w, const float *m, const float *v, long n, float step,
                         float eps, float wd, float bc1, float bc2);

#endif
