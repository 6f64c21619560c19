/* kernels/matmul.h - fully connected layer: out = inp @ weight^T + bias.
 *
 * Shapes: inp [n, c], weight [oc, c] (PyTorch's nn.Linear layout), bias [oc]
 * or NULL, out [n, oc]. Backward adds into its outputs (+=), as every backward
 * kernel does; dinp and dbias may be NULL when not wanted. The _set backward
 * overwrites dinp instead (=), so that the caller need not zero it, and still
 * adds into dweight and dbias, which sum over micro-batches.
 */
#ifndef LARCH_KERNELS_MATMUL_H
#define LARCH_KERNELS_MATMUL_H

void kern_matmul_fwd_ref(float *out, const float *inp, const float *weight,
                         const float *bias, int n, int c, int oc);
void kern_matmul_fwd_cpu(float *out, const float *inp, const float *weight,
                         const float *bias, int n, int c, int oc);

void kern_matmul_bwd_ref(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int n, int c, int oc);
void kern_matmul_bwd_cpu(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight,
                         int n, int c, int oc);
void kern_matmul_bwd_set_ref(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             int n, int c, int oc);
void kern_matmul_bwd_set_cpu(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight,
                             int n, int c, int oc);

#endif
