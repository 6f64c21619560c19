/* kernels/attention_flash_fwd_cuda.cuh - the fused causal attention's
 * forward kernels (attention_flash_cuda.cu launches them; the shared tile
 * code is attention_flash_cuda.cuh). CUDA C++ (nvcc), or the CPU
 * emulation of tests/unit/test_flash_emu. */
#ifndef LARCH_KERNELS_ATTENTION_FLASH_FWD_CUDA_CUH
#define LARCH_KERNELS_ATTENTION_FLASH_FWD_CUDA_CUH

#include "attention_flash_cuda.cuh"

/* The forward's running state of a warp's R tiles of 16 rows, an online
 * softmax: m the running max of each of the lane's two rows of each tile
 * (g and g + 8) of the raw scores q k (scale > 0 keeps their order), l
 * its part of the sum of exp2(sl2 (s - m)), o the unnormalised out. Each
 * score costs one fma and one exp2 (FlashAttention-2's scaling inside the
 * exponent), not a multiply, a subtraction and exp2f's subnormal
 * handling. */
template <int R>
struct fa_fwd_rows {
	float m[R][2], l[R][2], o[R][FA_HS / 8][4];
};

template <int R>
__device__ __forceinline__ static void fwd_rows_init(fa_fwd_rows<R> &st)
{
#pragma unroll
	for (int i = 0; i < R; i++) {
		st.m[i][0] = st.m[i][1] = -INFINITY;
		st.l[i][0] = st.l[i][1] = 0.0f;
#pragma unroll
		for (int j = 0; j < FA_HS / 8; j++)
			st.o[i][j][0] = st.o[i][j][1] = st.o[i][j][2] = st.o[i][j][3] = 0.0f;
	}
}

/* One key tile (keys from k0, v its tile) of the forward for a warp's R
 * tiles of 16 rows (the first from row wrow), given their raw scores s
 * (warp_abt_rows of q and the tile's k; overwritten): the causal mask,
 * the online softmax's update of st, and o += p v. Every kernel of the
 * forward goes through it, so their sums are the same steps in the same
 * order. */
template <typename T, int R>
__device__ __forceinline__ static void fwd_tile(fa_fwd_rows<R> &st, float s[R][FA_TILE / 8][4],
                                                const uint16_t *vs, int k0, int wrow, float sl2,
                                                int bf16)
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	uint32_t pf[R][FA_TILE / 16][4];
#pragma unroll
	for (int i = 0; i < R; i++) {
		/* mask; every row sees key k0 <= q0 first, so its max is finite
		 * (rows at or past t too: they see the zero keys, never stored).
		 * Only a tile that reaches past the tile of rows' first row needs
		 * the mask's compares (the diagonal's): masked is a constant at
		 * each call. */
		int row0 = wrow + 16 * i + g;
		float mx[2] = { st.m[i][0], st.m[i][1] };
		auto mask_max = [&](const bool masked) {
#pragma unroll
			for (int j = 0; j < FA_TILE / 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int key = k0 + 8 * j + 2 * q + (e & 1), row = row0 + 8 * (e >> 1);
					if (masked && key > row)
						s[i][j][e] = -INFINITY;
					mx[e >> 1] = fmaxf(mx[e >> 1], s[i][j][e]);
				}
		};
		if (k0 + FA_TILE - 1 <= wrow + 16 * i)
			mask_max(false);
		else
			mask_max(true);
		float alpha[2], msl[2];
#pragma unroll
		for (int r = 0; r < 2; r++) {      /* the row's four lanes agree on its max */
			mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
			mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
			msl[r] = mx[r] * sl2;
			alpha[r] = fast_exp2(st.m[i][r] * sl2 - msl[r]);   /* 0 at the first tile */
			st.m[i][r] = mx[r];
			st.l[i][r] *= alpha[r];
		}
#pragma unroll
		for (int j = 0; j < FA_TILE / 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				float p = fast_exp2(fmaf(s[i][j][e], sl2, -msl[e >> 1]));
				s[i][j][e] = p;
				st.l[i][e >> 1] += p;
				st.o[i][j][e] *= alpha[e >> 1];
			}
		to_rows16(pf[i], s[i], bf16);
	}
	warp_ab_rows<T, R>(st.o, pf, vs);
}

/* The forward's end for a warp's R tiles of 16 rows from wrow of batch x
 * head bh: out = o / l rounded to 16 bits, and each row's lse */
template <int R>
__device__ __forceinline__ static void fwd_rows_store(fa_fwd_rows<R> &st, uint16_t *out,
                                                      float *lse, int bh, int nh, int t, int c,
                                                      int wrow, float sl2, int bf16)
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, b = bh / nh, h = bh % nh;
#pragma unroll
	for (int i = 0; i < R; i++) {
		int row0 = wrow + 16 * i + g;
		float inv[2];
#pragma unroll
		for (int r = 0; r < 2; r++) {
			st.l[i][r] += __shfl_xor_sync(0xffffffffu, st.l[i][r], 1);
			st.l[i][r] += __shfl_xor_sync(0xffffffffu, st.l[i][r], 2);
			inv[r] = 1.0f / st.l[i][r];
		}
		warp_store(out + (size_t)b * t * c + (size_t)h * FA_HS, c, wrow + 16 * i, t, st.o[i],
		           inv, bf16);
		if (q == 0)
			for (int r = 0; r < 2; r++)
				if (row0 + 8 * r < t)
					lse[(size_t)bh * t + row0 + 8 * r] =
						(st.m[i][r] * sl2 + log2f(st.l[i][r])) / FA_LOG2E;
	}
}

/* One block per tile of 64 queries, 4 warps of 16 rows: warp w's rows
 * from 16 w. A warp whose rows all come before a key tile skips its
 * products there (their probabilities would all be zero, and the online
 * softmax would be left as it was). Shared memory: q, then per set of the
 * walk k, v (two sets: the next tile's copies land while the block
 * computes on this one). The registers are capped at an SM's 64 Ki over
 * 16 warps (128 a thread, none spilled: ptxas, CUDA 13.0, sm_90), so four
 * blocks fit an SM whatever the compiler's allocation would drift to. */
template <typename T>
__global__ static void __launch_bounds__(FA_THREADS, 16 / FA_WARPS)
fa_fwd_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int t, int c, int nh, float scale,
              int bf16)
{
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *walk = qs + FA_TILE_VALUES;  /* then per set k, v */
	int warp = threadIdx.x >> 5;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.y - 1 - blockIdx.y) * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	int wrow = q0 + warp * 16;         /* the warp's first row */
	int kend = min(t, q0 + FA_TILE);   /* the keys any query of the block sees */
	float sl2 = scale * FA_LOG2E;      /* scores in base 2 */
	/* the first key tile's, beside q's */
	tile_async<FA_THREADS>(walk, base + c, ld, 0, t);
	tile_async<FA_THREADS>(walk + FA_TILE_VALUES, base + 2 * c, ld, 0, t);
	cp_async_commit();
	load_tile<FA_THREADS>(qs, base, ld, q0, t);
	__syncthreads();
	uint32_t qf[1][FA_HS / 16][4];
	warp_rows(qf[0], qs, wrow - q0);

	fa_fwd_rows<1> st;
	fwd_rows_init(st);
	int set = 0;
	for (int k0 = 0; k0 < kend; k0 += FA_TILE, set ^= 1) {
		uint16_t *ks = kv_tiles<FA_THREADS>(walk, set, base, ld, c, k0, kend, t);
		if (k0 > wrow + 15)            /* every key after every row of the warp's */
			continue;
		float s[1][FA_TILE / 8][4];
		warp_abt_rows<T, 1>(s, qf, ks);
		fwd_tile<T, 1>(st, s, ks + FA_TILE_VALUES, k0, wrow, sl2, bf16);
	}
	fwd_rows_store(st, out, lse, bh, nh, t, c, wrow, sl2, bf16);
}

#endif
