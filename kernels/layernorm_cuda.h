/* kernels/layernorm_cuda.h - LayerNorm on the GPU (layernorm_cuda.cu); the
 * contract is layernorm.h's: backward adds into dweight and dbias and, except
 * in the _set version, into dinp. Pointers are device pointers; the work goes
 * on kern_cuda_stream(). Results are bit-identical from run to run (no float
 * atomics; sums over rows go through partials added in a fixed order). */
#ifndef LARCH_KERNELS_LAYERNORM_CUDA_H
#define LARCH_KERNELS_LAYERNORM_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, int n, int c);
void kern_layernorm_bwd_cuda(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             const float *mean, const float *rstd, int n, int c);
void kern_layernorm_bwd_set_cuda(float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const float *weight,
                                 const float *mean, const float *rstd, int n, int c);

/* The same on activations (out, inp; dinp, dout) stored as a16 says
 * (cuda_common.h): packed 16-bit values with a16 KERN_ACT_16. */
void kern_layernorm_fwd_act_cuda(int a16, void *out, float *mean, float *rstd, const void *inp,
                                 const float *weight, const float *bias, int n, int c);
void kern_layernorm_bwd_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                 const void *dout, const void *inp, const float *weight,
                                 const float *mean, const float *rstd, int n, int c);
/* res = a + b (the residual connection, kern_residual_fwd_act_cuda) and
 * out, mean, rstd the LayerNorm of res (kern_layernorm_fwd_act_cuda), n
 * rows of c, all activations stored as a16 says: the same bits as the two
 * calls, which it makes where the rows are not four-aligned, longer than
 * 2048, or kern_layernorm_cuda_fuse_residual is off; else one kernel that
 * reads a and b once and keeps each row in registers (the two read res
 * back three times). res may be a or b (each group of a row is read
 * before it is written), not out. Where the one kernel can run, unless
 * res is a or b, a shape's first call times it and the two and keeps the
 * faster
 * (kern_cuda_kernel_tune, cuda_common.h). */
void kern_residual_layernorm_fwd_act_cuda(int a16, void *res, void *out, float *mean,
                                          float *rstd, const void *a, const void *b,
                                          const float *weight, const float *bias, int n, int c);
/* Whether kern_residual_layernorm_fwd_act_cuda may run its one kernel
 * (timed against the two), on by default; off, the two calls (the same
 * bits either way; tests compare them); on >= 0 sets it, -1 only asks.
 * Returns the previous setting. */
int kern_layernorm_cuda_fuse_residual(int on);
void kern_layernorm_bwd_set_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                     const void *dout, const void *inp, const float *weight,
                                     const float *mean, const float *rstd, int n, int c);

#ifdef __cplusplus
}
#endif

#endif
