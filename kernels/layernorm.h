/* kernels/layernorm.h - LayerNorm over the last dimension, eps = 1e-5.
 *
 * inp/out [n, c], weight/bias [c]; forward saves mean and rstd [n] (1/std)
 * for backward. Backward adds into dinp, dweight and dbias; the _set backward
 * overwrites dinp instead (=) and still adds into dweight and dbias.
 */
#ifndef LARCH_KERNELS_LAYERNORM_H
#define LARCH_KERNELS_LAYERNORM_H

#define KERN_LAYERNORM_EPS 1e-5f

void kern_layernorm_fwd_ref(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int n, int c);
void kern_layernorm_fwd_cpu(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int n, int c);

void kern_layernorm_bwd_ref(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int n, int c);
void kern_layernorm_bwd_cpu(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            const float *mean, const float *rstd, int n, int c);
void kern_layernorm_bwd_set_ref(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int n, int c);
void kern_layernorm_bwd_set_cpu(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int n, int c);

#endif
