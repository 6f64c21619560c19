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
 * FlashAttention-2's: the dk, dv kernel also computes dq += ds k for each
 * query tile it walks and adds it to an fp32 dq by atomic adds, which a
 * last pass rounds to 16 bits (five tile products a pair of tiles instead
 * of seven; the adds in no fixed order), its blocks of 64 keys or, with
 * 8 warps, of 128 (half the adds). Each walk's next tiles are copied
 * (cp.async) into a second set of shared tiles while the block computes on
 * this one (kern_attention_flash_pipeline; without, each tile's loads
 * stalled the block, at two blocks an SM that the dk, dv kernel's 222
 * registers allow).
 *
 * Each kernel has several shapes that give the same bits (blocks of 4 or
 * 8 warps, 16 or 32 rows a warp, registers capped for one block more an
 * SM, the forward's scores a tile ahead, the backward's tiles whole or in
 * halves): a switch below fixes one, else a shape's first call times them
 * and keeps the fastest (kern_cuda_variant_pick).
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

/* the forward's: q (r tiles: fa_fwd_kernel's R), and per set of the walk
 * (one, or two pipelined) k, v */
#define FA_FWD_SMEM(sets, r)                                                                    \
	(((r) + (sets) * FA_BWD_WALK_TILES) * FA_TILE_VALUES * sizeof(uint16_t))
/* the backward kernels' (the dk, dv kernel's, the larger) of kt key tiles
 * (kt = 1 for the dq kernel): 2 kt fixed tiles (k, v; q, dout), per set of
 * the walk (one, or two pipelined) two tiles and two rows of FA_TILE
 * floats, and with dq added atomically (add_dq) kt tiles for ds */
#define FA_BWD_SMEM(sets, add_dq, kt)                                                           \
	((2 * (kt) + (sets) * FA_BWD_WALK_TILES + (add_dq) * (kt)) * FA_TILE_VALUES *             \
	         sizeof(uint16_t) +                                                                 \
	 (sets) * 2 * FA_TILE * sizeof(float))
/* within the 48 KiB a block gets without opting in, but for the pipelined
 * backward's (55 KiB, 64 with dq added atomically, 92 at 128 keys) and the
 * one-set backward's that adds dq (46 KiB: within), which opt in */
static_assert(FA_FWD_SMEM(2, 1) <= 48 * 1024 && FA_BWD_SMEM(1, 1, 1) <= 48 * 1024,
              "flash attention's tiles");
static_assert(FA_FWD_SMEM(2, 2) <= 113 * 1024, "two forward blocks of 32 rows a warp an SM");
static_assert(FA_BWD_SMEM(2, 1, 2) <= 113 * 1024, "two pipelined backward blocks an SM");

/* Whether the kernels copy the next tiles (cp.async) while they compute on
 * this one: LARCH_CUDA_FLASH_PIPE=0 in the environment says no
 * (a comparison, or a way around), kern_attention_flash_pipeline sets it */
static int flash_pipe = -1;

extern "C" int kern_attention_flash_pipeline(int on)
{
	return kern_cuda_env_switch(&flash_pipe, "LARCH_CUDA_FLASH_PIPE", "0", 1, on);
}

/* Per backward kernel (enum kern_flash_kernel), whether an SM holds one
 * more block of it than its registers allow, its registers capped: -1 not
 * read from LARCH_CUDA_FLASH_MORE_BLOCKS yet */
static int flash_more[2] = { -1, -1 };

extern "C" int kern_attention_flash_more_blocks(enum kern_flash_kernel k, int on)
{
	static const char *const names[2] = { "kv", "q" };
	if (flash_more[k] < 0) {
		/* a list of the kernels' names: "kv", "q", "kv q" */
		const char *v = getenv("LARCH_CUDA_FLASH_MORE_BLOCKS");
		char list[64];
		snprintf(list, sizeof list, " %s ", v ? v : "");
		for (char *p = list; *p; p++)
			if (*p == ',')
				*p = ' ';
		char want[8];
		snprintf(want, sizeof want, " %s ", names[k]);
		flash_more[k] = strstr(list, want) != NULL;
	}
	int prev = flash_more[k];
	if (on >= 0)
		flash_more[k] = on != 0;
	return prev;
}

/* A switch of two values, dflt and alt: *state is 0 until the first call
 * reads name from the environment (alt where its value is alt written in
 * decimal), then a value given (dflt or alt) sets it, any other only
 * asks. Returns the setting before the call. */
static int two_way_switch(int *state, const char *name, int dflt, int alt, int value)
{
	if (!*state) {
		const char *v = getenv(name);
		char want[16];
		snprintf(want, sizeof want, "%d", alt);
		*state = v && strcmp(v, want) == 0 ? alt : dflt;
	}
	int prev = *state;
	if (value == dflt || value == alt)
		*state = value;
	return prev;
}

/* The rows of queries a warp of the forward takes (16 or 32: its R 1 or 2) */
static int flash_fwd_rows;

extern "C" int kern_attention_flash_fwd_rows(int rows)
{
	return two_way_switch(&flash_fwd_rows, "LARCH_CUDA_FLASH_FWD_ROWS", 16, 32, rows);
}

/* The queries or keys a block takes (64 or 128) */
static int flash_block;

extern "C" int kern_attention_flash_block(int rows)
{
	return two_way_switch(&flash_block, "LARCH_CUDA_FLASH_BLOCK", 64, 128, rows);
}

/* Whether the forward runs the scores a tile ahead (fa_fwd_ahead_kernel) */
static int flash_fwd_ahead = -1;

extern "C" int kern_attention_flash_fwd_ahead(int on)
{
	return kern_cuda_env_switch(&flash_fwd_ahead, "LARCH_CUDA_FLASH_FWD_AHEAD", "1", 0, on);
}

/* Whether the backward kernels take each tile of their walk whole */
static int flash_whole_tiles = -1;

extern "C" int kern_attention_flash_whole_tiles(int on)
{
	return kern_cuda_env_switch(&flash_whole_tiles, "LARCH_CUDA_FLASH_WHOLE_TILES", "1", 0, on);
}

/* The keys a block of the dk, dv kernel that adds dq atomically takes
 * (fa_bwd_kv_kernel's AddDq: 64 or 128, its Warps 4 or 8), 0 for the dq
 * kernel: -1 not read from LARCH_CUDA_FLASH_DQ ("atomic", "atomic128") yet */
static int flash_dq_atomic = -1;

extern "C" int kern_attention_flash_dq_atomic(int keys)
{
	if (flash_dq_atomic < 0) {
		const char *v = getenv("LARCH_CUDA_FLASH_DQ");
		flash_dq_atomic = !v                               ? 0
		                  : strcmp(v, "atomic") == 0    ? 64
		                  : strcmp(v, "atomic128") == 0 ? 128
		                                                : 0;
	}
	int prev = flash_dq_atomic;
	if (keys == 0 || keys == 64 || keys == 128)
		flash_dq_atomic = keys;
	return prev;
}

extern "C" int kern_attention_flash_supported(int t, int c, int nh)
{
	return t > 0 && nh > 0 && c == nh * FA_HS;
}

/* Whether the environment sets any of names (NULL-terminated): a switch
 * set there, to any value, fixes the variant (kern_cuda_kernel_tune).
 * Read once into *state (-1 until then): the calls are in the step. */
static int env_fixes(int *state, const char *const names[])
{
	if (*state < 0) {
		*state = 0;
		for (int i = 0; names[i]; i++)
			*state |= getenv(names[i]) != NULL;
	}
	return *state;
}

/* "bf16,b2,t1024,nh12": the shape in a variant's key (kern_cuda_variant_pick) */
static void flash_key(char *key, size_t len, const char *op, int b, int t, int nh, int bf16)
{
	snprintf(key, len, "%s:%s,b%d,t%d,nh%d", op, bf16 ? "bf16" : "fp16", b, t, nh);
}

/* A forward call's operands, for its variants (fwd_run) */
struct fwd_call {
	uint16_t *out;
	float *lse;
	const uint16_t *qkv;
	int b, t, c, nh, bf16, pipe;
};

/* the forward's variants: 0 R = 1 (16 rows a warp) of 4 warps, 1 R = 2 of
 * 4 warps, 2 R = 1 of 8 warps (blocks of 128 queries both), 3 as 0 with
 * the scores a tile ahead (pipelined only: fa_fwd_ahead_kernel) */
#define FA_FWD_VARIANTS 4
static const char *const fwd_names[FA_FWD_VARIANTS] = {
	"16 rows a warp", "32 rows a warp", "8 warps", "scores a tile ahead"
};

template <typename T>
static void fwd_run(void *ctx, int v)
{
	const struct fwd_call *f = (const struct fwd_call *)ctx;
	typedef void (*fwd_kernel)(uint16_t *, float *, const uint16_t *, int, int, int, float, int);
	/* by [pipelined][v]; the query tiles of a block (qt) */
	static const fwd_kernel fwd[2][FA_FWD_VARIANTS] = {
		{ fa_fwd_kernel<T, false>, fa_fwd_kernel<T, false, 2>, fa_fwd_kernel<T, false, 1, 8>,
		  NULL },
		{ fa_fwd_kernel<T, true>, fa_fwd_kernel<T, true, 2>, fa_fwd_kernel<T, true, 1, 8>,
		  fa_fwd_ahead_kernel<T> },
	};
	static const int qt[FA_FWD_VARIANTS] = { 1, 2, 2, 1 }, warps[FA_FWD_VARIANTS] = { 4, 4, 8, 4 };
	static int opted_in;   /* per T: the larger shared memory of all but the smallest */
	if (!opted_in) {
		for (int p = 0; p < 2; p++)
			for (int i = 1; i < 3; i++)
				KERN_CUDA_CHECK(cudaFuncSetAttribute(
					fwd[p][i], cudaFuncAttributeMaxDynamicSharedMemorySize,
					(int)FA_FWD_SMEM(p + 1, qt[i])));
		opted_in = 1;
	}
	if (!fwd[f->pipe][v])
		kern_cuda_fail(__FILE__, __LINE__, "flash attention forward", "no such variant");
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	dim3 grid = fa_grid(f->b, f->nh, f->t, qt[v] * FA_TILE);
	fwd[f->pipe][v]<<<grid, 32 * warps[v], FA_FWD_SMEM(f->pipe + 1, qt[v]),
	                  kern_cuda_stream()>>>(f->out, f->lse, f->qkv, f->t, f->c, f->nh, scale,
	                                        f->bf16);
	KERN_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void flash_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int b, int t, int c, int nh,
                      int bf16)
{
	static const char *const fixers[] = { "LARCH_CUDA_FLASH_FWD_ROWS", "LARCH_CUDA_FLASH_BLOCK",
		                              "LARCH_CUDA_FLASH_PIPE", "LARCH_CUDA_FLASH_FWD_AHEAD",
		                              NULL };
	static int fixed = -1;
	struct fwd_call f = { out, lse, qkv, b, t, c, nh, bf16, kern_attention_flash_pipeline(-1) };
	/* 32 rows a warp if asked (128 queries a block already), else 8 warps
	 * for blocks of 128 if asked, else the scores a tile ahead if asked
	 * (pipelined); else the fastest, pipelined */
	int v = kern_attention_flash_fwd_rows(-1) == 32 ? 1
	        : kern_attention_flash_block(-1) == 128 ? 2
	        : f.pipe && kern_attention_flash_fwd_ahead(-1) ? 3
	        : 0;
	if (v == 0 && f.pipe && !env_fixes(&fixed, fixers)) {
		char key[96];
		flash_key(key, sizeof key, "flash-fwd", b, t, nh, bf16);
		v = kern_cuda_variant_pick(key, FA_FWD_VARIANTS, fwd_names, fwd_run<T>, &f);
	}
	fwd_run<T>(&f, v);
}

/* A backward call's operands, for the variants of its two kernels (kv_run,
 * q_run); add: dq added atomically by the dk, dv kernel in blocks of 64
 * keys (1) or 128 (2), else 0 */
struct bwd_call {
	uint16_t *dqkv;
	float *dq_acc;
	const uint16_t *dout, *qkv;
	const float *lse, *dd;
	int b, t, c, nh, bf16, pipe, add;
};

/* the variants of the dk, dv kernel (without atomics) and of the dq
 * kernel: 0 blocks of 4 warps, 1 the same at one block more an SM (its
 * registers capped: kern_attention_flash_more_blocks; pipelined only),
 * 2 blocks of 8 warps (kern_attention_flash_block), 3 blocks of 4 warps
 * that take each tile of the walk whole (kern_attention_flash_whole_tiles;
 * pipelined only) */
#define FA_BWD_VARIANTS 4
static const char *const bwd_names[FA_BWD_VARIANTS] = {
	"4 warps", "4 warps, a block more an SM", "8 warps", "4 warps, whole tiles"
};

typedef void (*kv_kernel)(uint16_t *, float *, const uint16_t *, const uint16_t *, const float *,
                          const float *, int, int, int, float, int);
typedef void (*q_kernel)(uint16_t *, const uint16_t *, const uint16_t *, const float *,
                         const float *, int, int, int, float, int);

/* The dk, dv kernels by [pipelined][variant][add]; none unpipelined with
 * one block more or whole tiles, none of 8 warps that adds dq atomically
 * but by 128 keys (add 2, which is 8 warps already: variant 0), none of
 * 128 keys with one block more, none with whole tiles that adds dq */
template <typename T>
static kv_kernel kv_kernel_of(int pipe, int v, int add)
{
	static const kv_kernel kv[2][FA_BWD_VARIANTS][3] = {
		{ { fa_bwd_kv_kernel<T, false>, fa_bwd_kv_kernel<T, false, 1, true>,
		    fa_bwd_kv_kernel<T, false, 1, true, 8> },
		  { NULL, NULL, NULL },
		  { fa_bwd_kv_kernel<T, false, 1, false, 8>, NULL, NULL },
		  { NULL, NULL, NULL } },
		{ { fa_bwd_kv_kernel<T, true>, fa_bwd_kv_kernel<T, true, 1, true>,
		    fa_bwd_kv_kernel<T, true, 1, true, 8> },
		  { fa_bwd_kv_kernel<T, true, 3>, fa_bwd_kv_kernel<T, true, 3, true>, NULL },
		  { fa_bwd_kv_kernel<T, true, 1, false, 8>, NULL, NULL },
		  { fa_bwd_kv_kernel<T, true, 1, false, FA_WARPS, FA_TILE>, NULL, NULL } },
	};
	static int opted_in;   /* per T: the larger shared memory of all but the smallest */
	if (!opted_in) {
		for (int p = 0; p < 2; p++)
			for (int i = 0; i < FA_BWD_VARIANTS; i++)
				for (int a = 0; a < 3; a++)
					if (kv[p][i][a])
						KERN_CUDA_CHECK(cudaFuncSetAttribute(
							kv[p][i][a], cudaFuncAttributeMaxDynamicSharedMemorySize,
							(int)FA_BWD_SMEM(p + 1, a > 0, a == 2 || i == 2 ? 2 : 1)));
		opted_in = 1;
	}
	if (!kv[pipe][v][add])
		kern_cuda_fail(__FILE__, __LINE__, "flash attention dk, dv", "no such variant");
	return kv[pipe][v][add];
}

template <typename T>
static void kv_run(void *ctx, int v)
{
	const struct bwd_call *k = (const struct bwd_call *)ctx;
	kv_kernel kern = kv_kernel_of<T>(k->pipe, v, k->add);
	int kt = v == 2 || k->add == 2 ? 2 : 1;   /* key tiles a block */
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	kern<<<fa_grid(k->b, k->nh, k->t, kt * FA_TILE), kt * FA_THREADS,
	       FA_BWD_SMEM(k->pipe + 1, k->add > 0, kt), kern_cuda_stream()>>>(
		k->dqkv, k->dq_acc, k->dout, k->qkv, k->lse, k->dd, k->t, k->c, k->nh, scale,
		k->bf16);
	KERN_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void q_run(void *ctx, int v)
{
	const struct bwd_call *k = (const struct bwd_call *)ctx;
	/* by [pipelined][variant]; none unpipelined with one block more or
	 * whole tiles */
	static const q_kernel q[2][FA_BWD_VARIANTS] = {
		{ fa_bwd_q_kernel<T, false>, NULL, fa_bwd_q_kernel<T, false, 2, 8>, NULL },
		{ fa_bwd_q_kernel<T, true>, fa_bwd_q_kernel<T, true, 4>,
		  fa_bwd_q_kernel<T, true, 2, 8>, fa_bwd_q_kernel<T, true, 3, FA_WARPS, FA_TILE> },
	};
	static int opted_in;
	if (!opted_in) {
		for (int p = 0; p < 2; p++)
			for (int i = 0; i < FA_BWD_VARIANTS; i++)
				if (q[p][i])
					KERN_CUDA_CHECK(cudaFuncSetAttribute(
						q[p][i], cudaFuncAttributeMaxDynamicSharedMemorySize,
						(int)FA_BWD_SMEM(p + 1, 0, i == 2 ? 2 : 1)));
		opted_in = 1;
	}
	if (!q[k->pipe][v])
		kern_cuda_fail(__FILE__, __LINE__, "flash attention dq", "no such variant");
	int kt = v == 2 ? 2 : 1;           /* query tiles a block */
	float scale = (float)(1.0 / sqrt((double)FA_HS));
	q[k->pipe][v]<<<fa_grid(k->b, k->nh, k->t, kt * FA_TILE), kt * FA_THREADS,
	                FA_BWD_SMEM(k->pipe + 1, 0, kt), kern_cuda_stream()>>>(
		k->dqkv, k->dout, k->qkv, k->lse, k->dd, k->t, k->c, k->nh, scale, k->bf16);
	KERN_CUDA_CHECK_LAUNCH();
}

template <typename T>
static void flash_bwd(uint16_t *dqkv, const uint16_t *dout, const uint16_t *out,
                      const uint16_t *qkv, const float *lse, int b, int t, int c, int nh, int bf16)
{
	static const char *const fixers[] = { "LARCH_CUDA_FLASH_MORE_BLOCKS",
		                              "LARCH_CUDA_FLASH_BLOCK", "LARCH_CUDA_FLASH_PIPE",
		                              "LARCH_CUDA_FLASH_WHOLE_TILES", NULL };
	static int fixed = -1;
	int pipe = kern_attention_flash_pipeline(-1), keys = kern_attention_flash_dq_atomic(-1);
	int wide = kern_attention_flash_block(-1) == 128;
	if (wide && keys == 64)            /* dq added atomically by blocks of 128 keys */
		keys = 128;
	int add = keys == 128 ? 2 : keys == 64 ? 1 : 0;
	/* each kernel's variant: 8 warps where asked (none for add 1), else
	 * one block more where asked (pipelined, and not for add 2), else
	 * whole tiles where asked (pipelined, and dq in its own kernel), else
	 * the fastest where nothing fixes them and dq has its own kernel */
	int whole = pipe && kern_attention_flash_whole_tiles(-1);
	int kv_v = wide && !add ? 2
	           : pipe && add < 2 && kern_attention_flash_more_blocks(KERN_FLASH_BWD_KV, -1) ? 1
	           : whole && !add ? 3
	           : 0;
	int q_v = wide ? 2
	          : pipe && kern_attention_flash_more_blocks(KERN_FLASH_BWD_Q, -1) ? 1
	          : whole ? 3
	          : 0;
	int tune = !add && pipe && kv_v == 0 && q_v == 0 && !env_fixes(&fixed, fixers);

	long rows = (long)b * nh * t;
	float *dd = (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)rows);
	float *dq_acc = add ? (float *)kern_cuda_scratch_alloc(sizeof(float) * (size_t)b * t * c)
	                    : NULL;
	fa_rowdot_kernel<<<(unsigned)((rows + FA_ROWDOT_ROWS - 1) / FA_ROWDOT_ROWS), 256, 0,
	                   kern_cuda_stream()>>>(dd, dq_acc, dout, out, b, t, c, nh, bf16);
	KERN_CUDA_CHECK_LAUNCH();
	struct bwd_call k = { dqkv, dq_acc, dout, qkv, lse, dd, b, t, c, nh, bf16, pipe, add };
	if (tune) {                        /* each kernel on its own: they write apart */
		char key[96];
		flash_key(key, sizeof key, "flash-bwd-kv", b, t, nh, bf16);
		kv_v = kern_cuda_variant_pick(key, FA_BWD_VARIANTS, bwd_names, kv_run<T>, &k);
		flash_key(key, sizeof key, "flash-bwd-q", b, t, nh, bf16);
		q_v = kern_cuda_variant_pick(key, FA_BWD_VARIANTS, bwd_names, q_run<T>, &k);
	}
	kv_run<T>(&k, kv_v);
	if (add) {
		long n = (long)b * t * (c / 8);
		fa_dq_round_kernel<<<(unsigned)((n + 255) / 256), 256, 0, kern_cuda_stream()>>>(
			dqkv, dq_acc, (long)b * t, c, bf16);
		KERN_CUDA_CHECK_LAUNCH();
	} else {
		q_run<T>(&k, q_v);
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
