/* kernels/quant8_cuda.cu - 8-bit block-wise optimizer state on the GPU (see
 * quant8.h, quant8_cuda.h; the device code is quant8_kernels.cuh).
 *
 * One thread block per state block of KERN_Q8_BLOCK values, eight a
 * thread: the codes are dequantized with the code map's table (in device
 * memory, copied to shared memory by each block), each element updated by
 * optimizer_kernels.cuh's formula, the block's new absmax found on the
 * values' bits (a NaN wins, as on the CPU), and each value encoded as the
 * count of the code map's midpoints below |x| / absmax, by bisection over the
 * same float midpoints the CPU counts: the CPU's codes and scales, bit for
 * bit. Built with --fmad=false (kernels/CMakeLists.txt), as
 * optimizer_cuda.cu is.
 *
 * LAMB's norm pass keeps the CPU's order of summation: per block in element
 * order (one thread of the block adds what the others computed), then
 * blocks per chunk and chunks in order (quant8_cpu.c's cut), so that the
 * trust ratio, and with it the update, is the CPU's too.
 */
#include "quant8_cuda.h"

#include "cuda_common.h"
#include "quant8_kernels.cuh"

/* the code map's table in device memory, uploaded on first use (a few
 * KiB, kept for the process) */
static const struct q8_table *dev_table(void)
{
	static struct q8_table *table;
	if (!table) {
		struct q8_table t = q8_table_of();
		table = (struct q8_table *)kern_cuda_dup(&t, sizeof t);
	}
	return table;
}

/* the scalars of struct q8_hyper (unused ones 0) */
static struct q8_hyper hyper(float lr, float mu, float wd, float b1, float b2, float eps,
                             float bc1, float bc2, int nesterov)
{
	struct q8_hyper h;
	h.lr = lr, h.mu = mu, h.wd = wd, h.b1 = b1, h.b2 = b2, h.eps = eps;
	h.bc1 = bc1, h.bc2 = bc2, h.nesterov = nesterov;
	return h;
}

template <int OP>
static void update(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs, const float *g,
                   long n, const struct q8_hyper *h)
{
	long nb = kern_q8_blocks(n);
	if (nb == 0)
		return;
	q8_update_kernel<OP><<<(unsigned)nb, Q8_THREADS, 0, kern_cuda_stream()>>>(
		dev_table(), w, mq, ms, vq, vs, g, n, *h);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_sgd_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n,
                                        float lr, float mu, float wd, int nesterov)
{
	struct q8_hyper h = hyper(lr, mu, wd, 0, 0, 0, 0, 0, nesterov);
	update<Q8_SGD>(w, mq, ms, NULL, NULL, g, n, &h);
}

extern "C" void kern_adamw_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq,
                                          float *vs, const float *g, long n, float lr, float b1,
                                          float b2, float eps, float wd, float bc1, float bc2)
{
	struct q8_hyper h = hyper(lr, 0, wd, b1, b2, eps, bc1, bc2, 0);
	update<Q8_ADAMW>(w, mq, ms, vq, vs, g, n, &h);
}

extern "C" void kern_lars_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n,
                                         float step, float mu, float wd)
{
	struct q8_hyper h = hyper(step, mu, wd, 0, 0, 0, 0, 0, 0);
	update<Q8_LARS>(w, mq, ms, NULL, NULL, g, n, &h);
}

extern "C" void kern_lamb_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq,
                                         float *vs, const float *g, long n, float step, float b1,
                                         float b2, float eps, float wd, float bc1, float bc2)
{
	struct q8_hyper h = hyper(step, 0, wd, b1, b2, eps, bc1, bc2, 0);
	update<Q8_LAMB>(w, mq, ms, vq, vs, g, n, &h);
}

extern "C" double kern_lamb_norm_q8_cuda(const int8_t *mq, const float *ms, const uint8_t *vq,
                                         const float *vs, const float *g, const float *w, long n,
                                         float b1, float b2, float eps, float wd, float bc1,
                                         float bc2)
{
	long nb = kern_q8_blocks(n);
	if (nb == 0)
		return 0;
	struct q8_hyper h = hyper(0, 0, wd, b1, b2, eps, bc1, bc2, 0);
	double *part = (double *)kern_cuda_scratch_alloc(sizeof(double) * (size_t)(nb + 1));
	double *result = part + nb;
	q8_lamb_norm_kernel<<<(unsigned)nb, Q8_THREADS, 0, kern_cuda_stream()>>>(
		dev_table(), part, mq, ms, vq, vs, g, w, n, h);
	KERN_CUDA_CHECK_LAUNCH();
	q8_norm_sum_kernel<<<1, Q8_THREADS, 0, kern_cuda_stream()>>>(result, part, nb,
	                                                             kern_q8_norm_chunk(nb));
	KERN_CUDA_CHECK_LAUNCH();
	double s;
	kern_cuda_download(&s, result, sizeof s);
	kern_cuda_scratch_free(part);
	return s;
}
