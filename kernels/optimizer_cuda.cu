/* kernels/optimizer_cuda.cu - parameter updates and norms on the GPU (see
 * optimizer.h, optimizer_cuda.h).
 *
 * The per-element formulas are optimizer_cpu.c's, written the same way (the
 * same operations in the same order) and compiled with --fmad=false (see
 * kernels/CMakeLists.txt): float +, -, *, / and sqrtf are correctly rounded
 * on both sides, so the GPU gives the CPU's bits.
 *
 * Norms: pass 1 cuts x into NORM_BLOCKS-or-fewer chunks (the cut depends on n
 * alone); a block sums its chunk in double, each thread a strided share,
 * then a tree in shared memory. Pass 2, one block, sums the chunk sums the
 * same way. No atomics: the same bits on every run.
 */
#include "optimizer_cuda.h"

#include "cuda_common.h"
#include "optimizer_kernels.cuh"

#define THREADS 256
#define NORM_THREADS 256
#define NORM_BLOCKS 1024  /* chunks at most */
#define NORM_MIN 8192L    /* elements per chunk at least */

/* ---- norms ----------------------------------------------------------------- */

/* Elements per chunk for an n-element tensor: a function of n alone. */
static long chunk_len(long n)
{
	long len = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
	return len < NORM_MIN ? NORM_MIN : len;
}

/* Tree sum over the block's NORM_THREADS values; the result in thread 0. */
__device__ static double block_sum(double v)
{
	__shared__ double buf[NORM_THREADS];
	buf[threadIdx.x] = v;
	__syncthreads();
	for (int w = NORM_THREADS / 2; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			buf[threadIdx.x] += buf[threadIdx.x + w];
		__syncthreads();
	}
	return buf[0];
}

__global__ static void sumsq_kernel(double *part, const float *x, long n, long len)
{
	long lo = blockIdx.x * len, hi = min(n, lo + len);
	double s = 0;
	for (long i = lo + threadIdx.x; i < hi; i += NORM_THREADS)
		s += (double)x[i] * x[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* LAMB pass 1: moments, and the chunk's sum of u^2 */
__global__ static void lamb_moments_kernel(double *part, float *m, float *v, const float *g,
                                           const float *w, long n, long len, float b1, float b2,
                                           float eps, float wd, float bc1, float bc2)
{
	long lo = blockIdx.x * len, hi = min(n, lo + len);
	double s = 0;
	for (long i = lo + threadIdx.x; i < hi; i += NORM_THREADS) {
		float mi = m[i], vi = v[i];
		lamb_moments_step(&mi, &vi, g[i], b1, b2);
		m[i] = mi;
		v[i] = vi;
		float u = lamb_u(mi, vi, w[i], eps, wd, bc1, bc2);
		s += (double)u * u;
	}
	s = block_sum(s);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* *result = sum of part[0..nparts) */
__global__ static void sum_parts_kernel(double *result, const double *part, int nparts)
{
	double s = 0;
	for (int k = threadIdx.x; k < nparts; k += NORM_THREADS)
		s += part[k];
	s = block_sum(s);
	if (threadIdx.x == 0)
		*result = s;
}

static void finish_norm(double *result, double *part, int nparts)
{
	sum_parts_kernel<<<1, NORM_THREADS, 0, kern_cuda_stream()>>>(result, part, nparts);
	KERN_CUDA_CHECK_LAUNCH();
	kern_cuda_scratch_free(part);
}

extern "C" void kern_sumsq_cuda_dev(double *result, const float *x, long n)
{
	if (n <= 0) {
		kern_cuda_zero(result, sizeof(double));
		return;
	}
	long len = chunk_len(n);
	int nparts = (int)((n + len - 1) / len);
	double *part = (double *)kern_cuda_scratch_alloc(sizeof(double) * nparts);
	sumsq_kernel<<<nparts, NORM_THREADS, 0, kern_cuda_stream()>>>(part, x, n, len);
	KERN_CUDA_CHECK_LAUNCH();
	finish_norm(result, part, nparts);
}

extern "C" void kern_lamb_moments_cuda_dev(double *result, float *m, float *v, const float *g,
                                           const float *w, long n, float b1, float b2, float eps,
                                           float wd, float bc1, float bc2)
{
	if (n <= 0) {
		kern_cuda_zero(result, sizeof(double));
		return;
	}
	long len = chunk_len(n);
	int nparts = (int)((n + len - 1) / len);
	double *part = (double *)kern_cuda_scratch_alloc(sizeof(double) * nparts);
	lamb_moments_kernel<<<nparts, NORM_THREADS, 0, kern_cuda_stream()>>>(
		part, m, v, g, w, n, len, b1, b2, eps, wd, bc1, bc2);
	KERN_CUDA_CHECK_LAUNCH();
	finish_norm(result, part, nparts);
}

/* runs a _dev norm into scratch and brings the result back */
static double norm_to_host(double *dev)
{
	double h = 0;
	kern_cuda_download(&h, dev, sizeof h);
	kern_cuda_scratch_free(dev);
	return h;
}

extern "C" double kern_sumsq_cuda(const float *x, long n)
{
	if (n <= 0)
		return 0;
	double *r = (double *)kern_cuda_scratch_alloc(sizeof(double));
	kern_sumsq_cuda_dev(r, x, n);
	return norm_to_host(r);
}

extern "C" double kern_lamb_moments_cuda(float *m, float *v, const float *g, const float *w,
                                         long n, float b1, float b2, float eps, float wd,
                                         float bc1, float bc2)
{
	if (n <= 0)
		return 0;
	double *r = (double *)kern_cuda_scratch_alloc(sizeof(double));
	kern_lamb_moments_cuda_dev(r, m, v, g, w, n, b1, b2, eps, wd, bc1, bc2);
	return norm_to_host(r);
}

/* ---- updates --------------------------------------------------------------- */

#define GRID_STRIDE(i, n)                                                                  \
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
	     i += (long)gridDim.x * blockDim.x)

__global__ static void scale_kernel(float *x, long n, float s)
{
	GRID_STRIDE(i, n)
		x[i] *= s;
}

__global__ static void sgd_kernel(float *w, float *m, const float *g, long n, float lr, float mu,
                                  float wd, int nesterov)
{
	if (mu == 0) {
		GRID_STRIDE(i, n)
			sgd_step_nomomentum(&w[i], g[i], lr, wd);
	} else {
		GRID_STRIDE(i, n)
			sgd_step(&w[i], &m[i], g[i], lr, mu, wd, nesterov);
	}
}

__global__ static void adamw_kernel(float *w, float *m, float *v, const float *g, long n,
                                    float lr, float b1, float b2, float eps, float wd, float bc1,
                                    float bc2)
{
	GRID_STRIDE(i, n)
	{
		float wi = w[i], mi = m[i], vi = v[i];
		adamw_step(&wi, &mi, &vi, g[i], lr, b1, b2, eps, wd, bc1, bc2);
		w[i] = wi;
		m[i] = mi;
		v[i] = vi;
	}
}

__global__ static void lars_kernel(float *w, float *m, const float *g, long n, float step,
                                   float mu, float wd)
{
	GRID_STRIDE(i, n)
	{
		float wi = w[i], mi = m[i];
		lars_step(&wi, &mi, g[i], step, mu, wd);
		w[i] = wi;
		m[i] = mi;
	}
}

__global__ static void lamb_apply_kernel(float *w, const float *m, const float *v, long n,
                                         float step, float eps, float wd, float bc1, float bc2)
{
	GRID_STRIDE(i, n)
		w[i] -= step * lamb_u(m[i], v[i], w[i], eps, wd, bc1, bc2);
}

#define LAUNCH(kernel, n, ...)                                                             \
	do {                                                                               \
		if ((n) <= 0)                                                              \
			return;                                                            \
		kernel<<<kern_cuda_grid((n), THREADS), THREADS, 0, kern_cuda_stream()>>>(  \
			__VA_ARGS__);                                                      \
		KERN_CUDA_CHECK_LAUNCH();                                                  \
	} while (0)

extern "C" void kern_scale_cuda(float *x, long n, float s)
{
	LAUNCH(scale_kernel, n, x, n, s);
}

extern "C" void kern_sgd_update_cuda(float *w, float *m, const float *g, long n, float lr,
                                     float mu, float wd, int nesterov)
{
	LAUNCH(sgd_kernel, n, w, m, g, n, lr, mu, wd, nesterov);
}

extern "C" void kern_adamw_update_cuda(float *w, float *m, float *v, const float *g, long n,
                                       float lr, float b1, float b2, float eps, float wd,
                                       float bc1, float bc2)
{
	LAUNCH(adamw_kernel, n, w, m, v, g, n, lr, b1, b2, eps, wd, bc1, bc2);
}

extern "C" void kern_lars_update_cuda(float *w, float *m, const float *g, long n, float step,
                                      float mu, float wd)
{
	LAUNCH(lars_kernel, n, w, m, g, n, step, mu, wd);
}

extern "C" void kern_lamb_apply_cuda(float *w, const float *m, const float *v, long n, float step,
                                     float eps, float wd, float bc1, float bc2)
{
	LAUNCH(lamb_apply_kernel, n, w, m, v, n, step, eps, wd, bc1, bc2);
}
