/* kernels/attention_flash_cuda.cu - fused (flash-style) causal attention on
 * 16-bit activations (see attention_cuda.h): the [t, t] scores never leave
 * the SM. Head size 64, bf16 or fp16 (kern_cuda_gemm_operands), products on
 * the tensor cores through WMMA 16x16x16 fragments with fp32 sums.
 *
 * Tiles of 64 queries (or keys) a block of 4 warps, 16 rows a warp; the
 * block's tiles of q, k, v, dout sit in shared memory, rows padded to 72
 * values against bank conflicts. Each warp keeps a 16 x 72 fp32 buffer for
 * its scores, in which two lanes own a row, the even and the odd columns
 * (with the buffer's row stride, 68 floats, the 32 lanes' reads fall on
 * 16 banks, against 4 with halves of rows). The forward and dq kernels
 * take the query tiles from the last (the longest walk over the keys).
 *
 * Forward, two passes over the key tiles up to the diagonal: the first
 * finds each row's max and sum of exponentials (online, per lane, merged
 * across the lane pair), i.e. its log-sum-exp; the second computes the
 * normalised probabilities exp(s - lse), rounds them to 16 bits and adds
 * their product with v into the warp's accumulators. So the probabilities
 * are rounded where the CPU model rounds att, and the accumulators never
 * need rescaling (WMMA's fragment layout is opaque). lse goes out for
 * backward.
 *
 * Backward without atomics, in two kernels that each recompute p and
 * dp = dout v^T from q, k, v and lse:
 *   dk, dv: a block per key tile walks the query tiles from the diagonal
 *           down: dv += p^T dout, dk += ds^T q;
 *   dq:     a block per query tile walks the key tiles up to the diagonal:
 *           dq += ds k;
 * with ds = p (dp - D) and D = rowsum(dout * out) (a small kernel first),
 * p and ds rounded to 16 bits for their products. Every sum has a fixed
 * order: the same bits on every run.
 */
#include "attention_cuda.h"

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "attention_flash_cuda.cuh"
#include "cuda_common.h"
#include "matmul_cuda.h"

/* ---- entry points ------------------------------------------------------------- */

#define FA_FWD_SMEM (3 * FA_TILE_VALUES * sizeof(uint16_t) + FA_WARPS * FA_WBUF * sizeof(float))
#define FA_BWD_SMEM (4 * FA_TILE_VALUES * sizeof(uint16_t) + FA_WARPS * FA_WBUF * sizeof(float) + \
                     2 * FA_TILE * sizeof(float))

extern "C" int kern_attention_flash_supported(int t, int c, int nh)
{
	return t > 0 && nh > 0 && c == nh * FA_HS;
}

/* Lets kernel k use bytes of dynamic shared memory (over 48 KiB needs the
 * opt-in), once per kernel. */
template <typename K>
static void allow_smem(K k, size_t bytes, int *done)
{
	if (*done)
		return;
	KERN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                                     (int)bytes));
	*done = 1;
}

template <typename T>
static void flash_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int b, int t, int c, int nh,
                      int bf16)
{
	static int smem_ok;
	allow_smem(fa_fwd_kernel<T>, FA_FWD_SMEM, &smem_ok);
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	dim3 grid((unsigned)((t + FA_TILE - 1) / FA_TILE), (unsigned)(b * nh));
	fa_fwd_kernel<T><<<grid, FA_THREADS, FA_FWD_SMEM, kern_cuda_stream()>>>(out, lse, qkv, t, c,
	                                                                          nh, scale, bf16);
	KERN_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void flash_bwd(uint16_t *dqkv, const uint16_t *dout, const uint16_t *out,
                      const uint16_t *qkv, const float *lse, int b, int t, int c, int nh, int bf16)
{
	static int kv_ok, q_ok;
	allow_smem(fa_bwd_kv_kernel<T>, FA_BWD_SMEM, &kv_ok);
	allow_smem(fa_bwd_q_kernel<T>, FA_BWD_SMEM, &q_ok);
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	long rows = (long)b * nh * t;
	float *dd = (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)rows);
	fa_rowdot_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, kern_cuda_stream()>>>(
		dd, dout, out, b, t, c, nh, bf16);
	KERN_CUDA_CHECK_LAUNCH();
	dim3 grid((unsigned)((t + FA_TILE - 1) / FA_TILE), (unsigned)(b * nh));
	fa_bwd_kv_kernel<T><<<grid, FA_THREADS, FA_BWD_SMEM, kern_cuda_stream()>>>(
		dqkv, dout, qkv, lse, dd, t, c, nh, scale, bf16);
	KERN_CUDA_CHECK_LAUNCH();
	fa_bwd_q_kernel<T><<<grid, FA_THREADS, FA_BWD_SMEM, kern_cuda_stream()>>>(
		dqkv, dout, qkv, lse, dd, t, c, nh, scale, bf16);
	KERN_CUDA_CHECK_LAUNCH();
	kern_cuda_scratch_free(dd);
}

/* The operands' type for a fused attention call (what names it), once
 * they are known to be 16-bit and, for a non-empty call, the head size 64. */
static int flash_ops(const char *what, int b, int t, int c, int nh)
{
	int ops = kern_cuda_act_operands(KERN_ACT_16, what);
	if (b > 0 && t > 0 && !kern_attention_flash_supported(t, c, nh))
		kern_cuda_fail(__FILE__, __LINE__, what, "head size other than 64");
	return ops;
}

extern "C" void kern_attention_flash_fwd_cuda(void *out, float *lse, const void *qkv, int b,
                                              int t, int c, int nh)
{
	int ops = flash_ops("flash attention forward", b, t, c, nh);
	if (b <= 0 || t <= 0)
		return;
	if (ops == KERN_MM_BF16)
		flash_fwd<__nv_bfloat16>((uint16_t *)out, lse, (const uint16_t *)qkv, b, t, c, nh, 1);
	else
		flash_fwd<__half>((uint16_t *)out, lse, (const uint16_t *)qkv, b, t, c, nh, 0);
}

extern "C" void kern_attention_flash_bwd_set_cuda(void *dqkv, const void *dout, const void *out,
                                                  const void *qkv, const float *lse, int b,
                                                  int t, int c, int nh)
{
	int ops = flash_ops("flash attention backward", b, t, c, nh);
	if (b <= 0 || t <= 0)
		return;
	const uint16_t *d = (const uint16_t *)dout, *o = (const uint16_t *)out;
	const uint16_t *x = (const uint16_t *)qkv;
	if (ops == KERN_MM_BF16)
		flash_bwd<__nv_bfloat16>((uint16_t *)dqkv, d, o, x, lse, b, t, c, nh, 1);
	else
		flash_bwd<__half>((uint16_t *)dqkv, d, o, x, lse, b, t, c, nh, 0);
}
