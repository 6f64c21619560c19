/* kernels/embedding_cuda.cu - token + position embedding on the GPU (see
 * embedding.h, embedding_cuda.h).
 *
 * Backward without float atomics: the positions are sorted by token (CUB's
 * radix sort, which is stable, so each token's positions stay in order);
 * then one block per distinct token adds that token's dout rows into its
 * dwte row, position by position, one thread per channel. dwpe: one thread
 * per (position, channel) adds the batches in order. Both are the
 * reference's order of additions, so the results equal it bit for bit.
 */
#include "embedding_cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.h"
#include "embedding_kernels.cuh"
#include "precision_cuda.cuh"

extern "C" void kern_embedding_fwd_act_cuda(int a16, void *out, const int *tokens,
                                            const float *wte, const float *wpe, int b, int t,
                                            int c)
{
	int ops = kern_cuda_act_operands(a16, "embedding forward");
	long total = (long)b * t * c;
	if (total <= 0)
		return;
	unsigned blocks = kern_cuda_grid(total, EMB_THREADS);
	embedding_fwd_kernel<<<blocks, EMB_THREADS, 0, kern_cuda_stream()>>>(
		out, tokens, wte, wpe, total, t, c, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
}

extern "C" void kern_embedding_fwd_cuda(float *out, const int *tokens, const float *wte,
                                        const float *wpe, int b, int t, int c)
{
	kern_embedding_fwd_act_cuda(KERN_ACT_F32, out, tokens, wte, wpe, b, t, c);
}

extern "C" void kern_embedding_bwd_cuda(float *dwte, float *dwpe, const float *dout,
                                        const int *tokens, int b, int t, int c, int vocab)
{
	kern_embedding_bwd_act_cuda(KERN_ACT_F32, dwte, dwpe, dout, tokens, b, t, c, vocab);
}

extern "C" void kern_embedding_bwd_act_cuda(int a16, float *dwte, float *dwpe, const void *dout,
                                            const int *tokens, int b, int t, int c, int vocab)
{
	int ops = kern_cuda_act_operands(a16, "embedding backward");
	long rows = (long)b * t;
	if (rows <= 0 || c <= 0)
		return;
	cudaStream_t st = kern_cuda_stream();
	if (dwpe) {
		unsigned blocks = kern_cuda_grid((long)t * c, EMB_THREADS);
		dwpe_kernel<<<blocks, EMB_THREADS, 0, st>>>(dwpe, dout, b, t, c, a16, ops);
		KERN_CUDA_CHECK_LAUNCH();
	}
	if (!dwte)
		return;
	/* sort (token, position) pairs by token on the bits a token can use */
	int end_bit = 1;
	while (end_bit < 32 && (1u << end_bit) < (unsigned)vocab)
		end_bit++;
	unsigned *buf = (unsigned *)kern_cuda_scratch_alloc(sizeof(unsigned) * 3 * (size_t)rows);
	unsigned *tok_sorted = buf, *pos = buf + rows, *pos_sorted = buf + 2 * rows;
	iota_kernel<<<kern_cuda_grid(rows, EMB_THREADS), EMB_THREADS, 0, st>>>(pos, rows);
	KERN_CUDA_CHECK_LAUNCH();
	size_t temp_bytes = 0;
	KERN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned *)tokens,
	                                                tok_sorted, pos, pos_sorted, rows, 0,
	                                                end_bit, st));
	void *temp = kern_cuda_scratch_alloc(temp_bytes);
	KERN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const unsigned *)tokens,
	                                                tok_sorted, pos, pos_sorted, rows, 0,
	                                                end_bit, st));
	dwte_kernel<<<(unsigned)rows, EMB_DWTE_THREADS, 0, st>>>(dwte, dout, tok_sorted, pos_sorted,
	                                                         rows, c, a16, ops);
	KERN_CUDA_CHECK_LAUNCH();
	kern_cuda_scratch_free(temp);
	kern_cuda_scratch_free(buf);
}
