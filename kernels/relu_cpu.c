/* kernels/relu_cpu.c - ReLU (see relu.h): reference and threaded, vectorised
 * version. Both compute the same expression, so they agree bit for bit. */
#include "relu.h"

/* Below this many elements the loop runs on one thread. */
#define RELU_PAR_MIN 32768L

void kern_relu_fwd_ref(float *out, const float *inp, long n)
{
	for (long i = 0; i < n; i++)
		out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void kern_relu_bwd_ref(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		if (inp[i] > 0.0f)
			dinp[i] += dout[i];
}

void kern_relu_bwd_set_ref(float *dinp, const float *inp, const float *dout, long n)
{
	for (long i = 0; i < n; i++)
		dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

/* Elementwise, so in-place use (out == inp) is fine. */
void kern_relu_fwd_cpu(float *out, const float *inp, long n)
{
#pragma omp parallel for simd schedule(static) if (n > RELU_PAR_MIN)
	for (long i = 0; i < n; i++)
		out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

/* A select rather than dout * (inp > 0): an inf or NaN in dout where the
 * unit is off must not leak into dinp, as in the reference. dout[i] is
 * loaded whatever inp[i] is: a load under the condition is one GCC does not
 * vectorise (it made this a scalar loop with an unpredictable branch). */
void kern_relu_bwd_cpu(float *dinp, const float *inp, const float *dout, long n)
{
#pragma omp parallel for simd schedule(static) if (n > RELU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		float d = dout[i];
		dinp[i] += inp[i] > 0.0f ? d : 0.0f;
	}
}

/* Elementwise, so in-place use (dinp == dout) is fine. */
void kern_relu_bwd_set_cpu(float *dinp, const float *inp, const float *dout, long n)
{
#pragma omp parallel for simd schedule(static) if (n > RELU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		float d = dout[i];
		dinp[i] = inp[i] > 0.0f ? d : 0.0f;
	}
}
