/* kernels/residual.h - out = a + b; backward da += dout, db += dout. */
#ifndef LARCH_KERNELS_RESIDUAL_H
#define LARCH_KERNELS_RESIDUAL_H

void kern_residual_fwd_ref(float *out, const float *a, const float *b, long n);
void kern_residual_fwd_cpu(float *out, const float *a, const float *b, long n);
void kern_residual_bwd_ref(float *da, float *db, const float *dout, long n);
void kern_residual_bwd_cpu(float *da, float *db, const float *dout, long n);

#endif
