/* kernels/relu.h - out = max(inp, 0); backward dinp += (inp > 0 ? dout : 0), a
 * select rather than a product, so an inf or NaN in dout where inp <= 0
 * does not leak through. The _set backward overwrites instead,
 * dinp = (inp > 0 ? dout : 0), and may run in place (dinp == dout). */
#ifndef LARCH_KERNELS_RELU_H
#define LARCH_KERNELS_RELU_H

void kern_relu_fwd_ref(float *out, const float *inp, long n);
void kern_relu_fwd_cpu(float *out, const float *inp, long n);
void kern_relu_bwd_ref(float *dinp, const float *inp, const float *dout, long n);
void kern_relu_bwd_cpu(float *dinp, const float *inp, const float *dout, long n);
void kern_relu_bwd_set_ref(float *dinp, const float *inp, const float *dout, long n);
void kern_relu_bwd_set_cpu(float *dinp, const float *inp, const float *dout, long n);

#endif
