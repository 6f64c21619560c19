/* kernels/attention_flash_cuda.cu - fused (flash-style) causal attention on
 * 16-bit activations (see attention_cuda.h): the [t, t] scores never leave
 * the registers. Head size 64, bf16 or fp16 (kern_cuda_gemm_operands),
 * products on the tensor cores through mma.m16n8k16 with fp32 sums
 * (kernels/mma_cuda.cuh: documented register layouts, so a product's
 * result is the next product's operand without a trip through shared
 * memory, FlashAttention-2's scheme).
 *
 * Tiles of 64 queries (or keys) a block of 4 warps, 16 rows a warp; the
 * block's tiles of q, k, v, dout sit in shared memory, rows padded to 72
 * values (144 bytes: ldmatrix's eight row addresses fall on distinct banks).
 * A lane holds two rows' (g and g + 8) scores, eight columns a row of a
 * 64-column tile, and the four lanes of a row agree on its max by two
 * shuffles. The forward and dq kernels take the query tiles from the last
 * (the longest walk over the keys).
 *
 * Forward, one pass over the key tiles up to the diagonal with an online
 * softmax in base 2: per tile the row max m of the raw scores s = q k is
 * updated, the accumulators and the row's sum of exp2(c (s - m)) (c the
 * scale times log2(e), applied by one fma inside the exponent) rescaled
 * by exp2(c (m_old - m)), and p = exp2(c (s - m)) rounded to 16 bits times
 * v added in; at the end out is divided by the row's sum and
 * lse = (c m + log2(sum)) / log2(e) goes out for backward.
 *
 * Backward without atomics, in two kernels that each recompute p and
 * dp = dout v^T from q, k, v and lse:
 *   dk, dv: a block per key tile walks the query tiles from the diagonal
 *           down: dv += p^T dout, dk += ds^T q (a warp's rows are keys);
 *   dq:     a block per query tile walks the key tiles up to the diagonal:
 *           dq += ds k;
 * with ds = p (dp - D) and D = rowsum(dout * out) (a small kernel first),
 * p and ds rounded to 16 bits for their products. Every sum has a fixed
 * order: the same bits on every run. Or, with kern_attention_flash_dq_atomic,
 * FlashAttention-2's: the dk, dv kernel (8 warps, 128 keys a block) also
 * computes dq += ds k for each query tile it walks and adds it to an fp32
 * dq by atomic adds, which a last pass rounds to 16 bits (five tile
 * products a pair of tiles instead of seven; the adds in no fixed order).
 * Each walk's next tiles are copied (cp.async) into a second set of shared
 * tiles while the block computes on this one.
 */
#include "attention_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_flash_bwd_cuda.cuh"
#include "attention_flash_fwd_cuda.cuh"
#include "cuda_common.h"
#include "matmul_cuda.h"

/* ---- entry points ------------------------------------------------------------- */

/* the forward's: q, and per set of the walk k, v */
#define FA_FWD_SMEM (((1) + FA_WALK_SETS * FA_BWD_WALK_TILES) * FA_TILE_VALUES * sizeof(uint16_t))
/* the backward kernels' (the dk, dv kernel's, the larger) of kt key tiles
 * (kt = 1 for the dq kernel): 2 kt fixed tiles (k, v; q, dout), per set of
 * the walk two tiles and two rows of FA_TILE floats, and with dq added
 * atomically (add_dq) kt tiles for ds */
#define FA_BWD_SMEM(add_dq, kt)                                                                 \
	((2 * (kt) + FA_WALK_SETS * FA_BWD_WALK_TILES + (add_dq) * (kt)) * FA_TILE_VALUES *       \
	         sizeof(uint16_t) +                                                                 \
	 FA_WALK_SETS * 2 * FA_TILE * sizeof(float))
/* the forward's within the 48 KiB a block gets without opting in; the
 * backward's (55 KiB, 92 with dq added atomically at 128 keys) opt in */
static_assert(FA_FWD_SMEM <= 48 * 1024, "flash attention's tiles");
static_assert(FA_BWD_SMEM(1, 2) <= 227 * 1024, "the atomic dq's backward block");
static_assert(FA_BWD_SMEM(0, 1) <= 113 * 1024, "two backward blocks an SM");

/* The keys a block of the dk, dv kernel that adds dq atomically takes
 * (128), 0 for the dq kernel */
static int flash_dq_atomic;

extern "C" int kern_attention_flash_dq_atomic(int keys)
{
	int prev = flash_dq_atomic;
	if (keys == 0 || keys == 128)
		flash_dq_atomic = keys;
	return prev;
}

extern "C" int kern_attention_flash_supported(int t, int c, int nh)
{
	return t > 0 && nh > 0 && c == nh * FA_HS;
}

template <typename T>
static void flash_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int b, int t, int c, int nh,
                      int bf16)
{
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	fa_fwd_kernel<T><<<fa_grid(b, nh, t, FA_TILE), FA_THREADS, FA_FWD_SMEM,
	                   kern_cuda_stream()>>>(out, lse, qkv, t, c, nh, scale, bf16);
	KERN_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void flash_bwd(uint16_t *dqkv, const uint16_t *dout, const uint16_t *out,
                      const uint16_t *qkv, const float *lse, int b, int t, int c, int nh, int bf16)
{
	static int opted_in;               /* per T: the backward kernels' shared memory */
	if (!opted_in) {
		KERN_CUDA_CHECK(cudaFuncSetAttribute(fa_bwd_kv_kernel<T>,
		                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                     (int)FA_BWD_SMEM(0, 1)));
		KERN_CUDA_CHECK(cudaFuncSetAttribute(fa_bwd_kv_kernel<T, true, 8>,
		                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                     (int)FA_BWD_SMEM(1, 2)));
		KERN_CUDA_CHECK(cudaFuncSetAttribute(fa_bwd_q_kernel<T>,
		                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                     (int)FA_BWD_SMEM(0, 1)));
		opted_in = 1;
	}
	int add = kern_attention_flash_dq_atomic(-1) == 128;
	long rows = (long)b * nh * t;
	float *dd = (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)rows);
	float *dq_acc = add ? (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)b * t * c)
	                    : NULL;
	fa_rowdot_kernel<<<(unsigned)((rows + FA_ROWDOT_ROWS - 1) / FA_ROWDOT_ROWS), 256, 0,
	                   kern_cuda_stream()>>>(dd, dq_acc, dout, out, b, t, c, nh, bf16);
	KERN_CUDA_CHECK_LAUNCH();
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	if (add) {
		fa_bwd_kv_kernel<T, true, 8><<<fa_grid(b, nh, t, 2 * FA_TILE), 2 * FA_THREADS,
		                               FA_BWD_SMEM(1, 2), kern_cuda_stream()>>>(
			dqkv, dq_acc, dout, qkv, lse, dd, t, c, nh, scale, bf16);
		KERN_CUDA_CHECK_LAUNCH();
		long n = (long)b * t * (c / 8);
		fa_dq_round_kernel<<<(unsigned)((n + 255) / 256), 256, 0, kern_cuda_stream()>>>(
			dqkv, dq_acc, (long)b * t, c, bf16);
		KERN_CUDA_CHECK_LAUNCH();
	} else {
		fa_bwd_kv_kernel<T><<<fa_grid(b, nh, t, FA_TILE), FA_THREADS, FA_BWD_SMEM(0, 1),
		                      kern_cuda_stream()>>>(dqkv, NULL, dout, qkv, lse, dd, t, c, nh,
		                                            scale, bf16);
		KERN_CUDA_CHECK_LAUNCH();
		fa_bwd_q_kernel<T><<<fa_grid(b, nh, t, FA_TILE), FA_THREADS, FA_BWD_SMEM(0, 1),
		                     kern_cuda_stream()>>>(dqkv, dout, qkv, lse, dd, t, c, nh, scale,
		                                           bf16);
		KERN_CUDA_CHECK_LAUNCH();
	}
	kern_cuda_scratch_free(dq_acc);
	kern_cuda_scratch_free(dd);
}

/* The operands' type for a fused attention call (what names it), once
 * they are known to be 16-bit and, for a non-empty call, the head size 64,
 * the operands (ptrs: their addresses or'ed) 16-byte aligned, as the tiles'
 * vector loads read them, and the tiles of 64 within a grid's y (65535:
 * fa_grid). */
static int flash_ops(const char *what, int b, int t, int c, int nh, uintptr_t ptrs)
{
	int ops = kern_cuda_act_operands(KERN_ACT_16, what);
	if (b <= 0 || t <= 0)
		return ops;
	if (!kern_attention_flash_supported(t, c, nh))
		kern_cuda_fail(__FILE__, __LINE__, what, "head size other than 64");
	if (ptrs & 15)
		kern_cuda_fail(__FILE__, __LINE__, what, "an operand not 16-byte aligned");
	if ((t + FA_TILE - 1) / FA_TILE > 65535)
		kern_cuda_fail(__FILE__, __LINE__, what, "a sequence over 65535 tiles of 64");
	return ops;
}

extern "C" void kern_attention_flash_fwd_cuda(void *out, float *lse, const void *qkv, int b,
                                              int t, int c, int nh)
{
	int ops = flash_ops("flash attention forward", b, t, c, nh,
	                    (uintptr_t)out | (uintptr_t)qkv);
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
	int ops = flash_ops("flash attention backward", b, t, c, nh,
	                    (uintptr_t)dqkv | (uintptr_t)dout | (uintptr_t)out | (uintptr_t)qkv);
	if (b <= 0 || t <= 0)
		return;
	const uint16_t *d = (const uint16_t *)dout, *o = (const uint16_t *)out;
	const uint16_t *x = (const uint16_t *)qkv;
	if (ops == KERN_MM_BF16)
		flash_bwd<__nv_bfloat16>((uint16_t *)dqkv, d, o, x, lse, b, t, c, nh, 1);
	else
		flash_bwd<__half>((uint16_t *)dqkv, d, o, x, lse, b, t, c, nh, 0);
}
