/* kernels/gelu.h - GELU, tanh approximation as in GPT-2:
 * out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); backward adds into dinp,
 * the _set backward overwrites it and may run in place (dinp == dout). */
#ifndef LARCH_KERNELS_GELU_H
#define LARCH_KERNELS_GELU_H

void kern_gelu_fwd_ref(float *out, const float *inp, long n);
void kern_gelu_fwd_cpu(float *out, const float *inp, long n);
void kern_gelu_bwd_ref(float *dinp, const float *inp, const float *dout, long n);
void kern_gelu_bwd_cpu(float *dinp, const float *inp, const float *dout, long n);
void kern_gelu_bwd_set_ref(float *dinp, const float *inp, const float *dout, long n);
void kern_gelu_bwd_set_cpu(float *dinp, const float *inp, const float *dout, long n);

#endif
