/* kernels/softmax_xent_cuda.h - fused softmax + cross-entropy on the GPU
 * (softmax_xent_cuda.cu); the contract is softmax_xent.h's. Pointers
 * (targets too) are device pointers; dloss is a host value; the work goes on
 * kern_cuda_stream(). Results are bit-identical from run to run. */
#ifndef LARCH_KERNELS_SOFTMAX_XENT_CUDA_H
#define LARCH_KERNELS_SOFTMAX_XENT_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_softmax_xent_fwd_cuda(float *losses, float *lse, const float *logits,
                                const int *targets, int n, int v);
void kern_softmax_xent_bwd_cuda(float *dlogits, float dloss, const float *logits,
                                const float *lse, const int *targets, int n, int v);
void kern_softmax_xent_bwd_set_cuda(float *dlogits, float dloss, const float *logits,
                                    const float *lse, const int *targets, int n, int v);

/* best[r] = the index of row r's largest logit, as a left-to-right scan
 * with a strict > finds it (the first of equal maxima; NaNs never win, but
 * a NaN in column 0 is never beaten): top-1 for trn_model_score. */
void kern_argmax_rows_cuda(int *best, const float *logits, int n, int v);

/* The same over rows ld floats apart (ld >= v; dlogits too), the columns
 * in between neither read nor written: the logits of a GEMM whose output
 * rows are padded (kern_matmul_fwd_ld_cuda). */
void kern_softmax_xent_fwd_ld_cuda(float *losses, float *lse, const float *logits, int ld,
                                   const int *targets, int n, int v);
void kern_softmax_xent_bwd_set_ld_cuda(float *dlogits, float dloss, const float *logits, int ld,
                                       const float *lse, const int *targets, int n, int v);
void kern_argmax_rows_ld_cuda(int *best, const float *logits, int ld, int n, int v);

/* The _ld versions with logits and dlogits stored as a16 says (cuda_common.h). */
void kern_softmax_xent_fwd_ld_act_cuda(int a16, float *losses, float *lse, const void *logits,
                                       int ld, const int *targets, int n, int v);
void kern_softmax_xent_bwd_set_ld_act_cuda(int a16, void *dlogits, float dloss,
                                           const void *logits, int ld, const float *lse,
                                           const int *targets, int n, int v);
void kern_argmax_rows_ld_act_cuda(int a16, int *best, const void *logits, int ld, int n, int v);
/* kern_softmax_xent_fwd_ld_act_cuda and then kern_softmax_xent_bwd_set_ld_act_cuda
 * in one pass (the same values): for a training step, whose backward's
 * dloss is known before its forward, one read of the logits from memory
 * instead of two. A shape's first call times the one pass and the two
 * kernels and keeps the faster (kern_cuda_kernel_tune, cuda_common.h),
 * where dlogits is not logits. */
void kern_softmax_xent_fwd_bwd_set_ld_act_cuda(int a16, float *losses, float *lse,
                                               void *dlogits, float dloss, const void *logits,
                                               int ld, const int *targets, int n, int v);

#ifdef __cplusplus
}
#endif

#endif
