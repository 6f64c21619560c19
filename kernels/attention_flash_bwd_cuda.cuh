/* kernels/attention_flash_bwd_cuda.cuh - the fused causal attention's
 * backward kernels: the row dot D, the dk, dv kernel, the dq kernel and
 * the rounding of an atomically added dq (attention_flash_cuda.cu launches
 * them; the shared tile code is attention_flash_cuda.cuh). CUDA C++
 * (nvcc), or the CPU emulation of tests/unit/test_flash_emu. */
#ifndef LARCH_KERNELS_ATTENTION_FLASH_BWD_CUDA_CUH
#define LARCH_KERNELS_ATTENTION_FLASH_BWD_CUDA_CUH

#include "attention_flash_cuda.cuh"

/* the query columns the dk, dv kernel takes at a time (of FA_TILE) */
#define FA_KV_PART 32
/* the keys the dq kernel takes at a time (of FA_TILE) */
#define FA_Q_PART 32

/* dd[bh, i] = sum over the head's 64 columns of dout * out at row i: eight
 * lanes a row, eight columns a lane (one 16-byte read of each operand,
 * which flash_ops checked aligned), then the butterfly over the eight (a
 * fixed order). Blocks of 256 threads: FA_ROWDOT_ROWS rows a block.
 * With dq_zero, the threads also clear the fp32 dq [b, t, c] that the
 * dk, dv kernel adds to when it computes dq too (fa_bwd_kv_kernel's
 * AddDq): the same rows and columns as they read of dout. */
#define FA_ROWDOT_ROWS 32
__global__ static void fa_rowdot_kernel(float *dd, float *dq_zero, const uint16_t *dout,
                                        const uint16_t *out, int b, int t, int c, int nh, int bf16)
{
	long r = (long)blockIdx.x * FA_ROWDOT_ROWS + (threadIdx.x >> 3);
	int part = threadIdx.x & 7;
	int live = r < (long)b * nh * t;
	float s = 0.0f;
	if (live) {
		int i = (int)(r % t), bh = (int)(r / t), bb = bh / nh, h = bh % nh;
		size_t at = ((size_t)bb * t + i) * c + (size_t)h * FA_HS + 8 * part;
		if (dq_zero) {             /* the same eight columns of the fp32 dq the backward adds to */
			float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			*(float4 *)(dq_zero + at) = z;
			*(float4 *)(dq_zero + at + 4) = z;
		}
		uint4 du = *(const uint4 *)(dout + at), ou = *(const uint4 *)(out + at);
		uint32_t dw[4] = { du.x, du.y, du.z, du.w }, ow[4] = { ou.x, ou.y, ou.z, ou.w };
		for (int k = 0; k < 4; k++)
			s += of16_bits((uint16_t)(dw[k] & 0xffffu), bf16) *
			             of16_bits((uint16_t)(ow[k] & 0xffffu), bf16) +
			     of16_bits((uint16_t)(dw[k] >> 16), bf16) * of16_bits((uint16_t)(ow[k] >> 16), bf16);
	}
	/* every lane of the warp takes part (rows past the end add zeros) */
	for (int off = 4; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	if (live && part == 0)
		dd[r] = s;
}

/* A warp's ds^T (to_rows16: its 16 rows of keys from r0, 16 K16 of a
 * query tile's columns from c0) into those rows and columns of a shared
 * tile, as they are: keys down, queries across */
template <int K16>
__device__ static void warp_put_rows(uint16_t *tile, int r0, int c0, const uint32_t f[K16][4])
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	uint16_t *top = tile + (r0 + g) * FA_LD + c0 + 2 * q, *low = top + 8 * FA_LD;
#pragma unroll
	for (int k = 0; k < K16; k++) {
		*(uint32_t *)(top + 16 * k) = f[k][0];
		*(uint32_t *)(low + 16 * k) = f[k][1];
		*(uint32_t *)(top + 16 * k + 8) = f[k][2];
		*(uint32_t *)(low + 16 * k + 8) = f[k][3];
	}
}

/* The a operands of columns [c0, c0 + 16) of a tile of 16 K16 rows read as
 * rows: the [16, 16 K16] transpose of its [16 K16, 16] column block, f[k]
 * for its columns 16k.. (the tile's rows). ldmatrix .trans gives each 8x8 matrix
 * transposed, so the tile's (16k + 8, c0) matrix is the transpose's
 * (0, 8): a[1] and a[2] trade places against warp_rows'. */
template <int K16>
__device__ static void warp_cols(uint32_t f[K16][4], const uint16_t *tile, int c0)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int k = 0; k < K16; k++) {
		uint32_t r[4];
		ldsm_x4_t(r, ldsm_at(tile, FA_LD, 16 * k, c0, lane));
		f[k][0] = r[0];
		f[k][1] = r[2];
		f[k][2] = r[1];
		f[k][3] = r[3];
	}
}

/* acc (a warp's [16, 8 N8] as mma16816's d) times scale added to rows
 * row0 + g and row0 + g + 8 (those below t) of the fp32 dst (rows ld
 * apart) by atomic adds, a lane's two adjacent values in one (red_add2) */
template <int N8>
__device__ static void warp_add(float *dst, long ld, int row0, int t, const float acc[N8][4],
                                float scale)
{
	warp_each_pair<N8>(row0, t, acc, [&](int row, int col, float v0, float v1, int) {
		red_add2(dst + (size_t)row * ld + col, v0 * scale, v1 * scale);
	});
}

/* One block of Warps warps per tile of 16 Warps keys: dk and dv of its
 * keys over every query that sees them; a warp's rows are 16 keys, its
 * columns a query tile's 64 queries (the transposes of p and dp). Shared
 * memory: k, v (Warps / 4 tiles each), then per set q, dout (tiles) and
 * lse, D (FA_TILE floats each), and with AddDq ds (Warps / 4 tiles).
 * No register cap: 196-208 registers, two blocks of 4 warps an SM (8
 * warps: about 200, one block).
 *
 * AddDq: the block also adds each query tile's part of dq, ds k over its
 * keys, to the fp32 dq_acc ([b, t, c], cleared before: fa_rowdot_kernel)
 * by atomic adds, FlashAttention-2's backward: five tile products a pair
 * of tiles where this kernel and fa_bwd_q_kernel together do seven, at the
 * price of the adds (in no fixed order: not the same bits on every run)
 * and a pass that rounds dq_acc into dqkv (fa_dq_round_kernel). ds^T goes
 * through shared memory, as a warp holds 16 keys of it where dq's product
 * wants 16 queries: warp w takes queries 16 (w % 4).. and, of 8 warps, the
 * half of the columns w / 4. 8 warps (128 keys) halve the adds per
 * product against 4. dq_acc is unused without AddDq.
 *
 * A warp whose keys all come after the query tile's skips the tile: its
 * probabilities would all be zero (only with 8 warps, on a block's first
 * tile). The query tile is taken FA_KV_PART columns at a time, for half
 * the tile's registers. dk and dv are the same bits whatever Warps and
 * AddDq. */
template <typename T, bool AddDq = false, int Warps = FA_WARPS>
__global__ static void __launch_bounds__(Warps * 32, 1)
fa_bwd_kv_kernel(uint16_t *dqkv, float *dq_acc, const uint16_t *dout, const uint16_t *qkv,
                 const float *lse, const float *dd, int t, int c, int nh, float scale, int bf16)
{
	static_assert(Warps == 4 || Warps == 8, "a key tile of 64 or 128");
	const int threads = Warps * 32, kt = Warps / 4;   /* key tiles of FA_TILE a block */
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *ks = (uint16_t *)smem, *vs = ks + kt * FA_TILE_VALUES;
	uint16_t *walk = vs + kt * FA_TILE_VALUES;
	float *rows = (float *)(walk + FA_WALK_SETS * FA_BWD_WALK_TILES * FA_TILE_VALUES);
	uint16_t *dss = (uint16_t *)(rows + FA_WALK_SETS * 2 * FA_TILE);   /* AddDq's ds^T */
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int k0 = blockIdx.y * kt * FA_TILE;   /* the longest walks first: from the first keys */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const uint16_t *dbase = dout + (size_t)b * t * c + (size_t)h * FA_HS;
	const float *lse_bh = lse + (size_t)bh * t, *dd_bh = dd + (size_t)bh * t;
	int key0 = k0 + warp * 16 + g;     /* this lane's keys: key0 and key0 + 8 */
	float sl2 = scale * FA_LOG2E;
	/* the first query tile's, beside k's and v's */
	tile_async<threads>(walk, base, ld, k0, t);
	tile_async<threads>(walk + FA_TILE_VALUES, dbase, c, k0, t);
	rows_async<threads>(rows, lse_bh, k0, t);
	rows_async<threads>(rows + FA_TILE, dd_bh, k0, t);
	cp_async_commit();
#pragma unroll
	for (int i = 0; i < kt; i++) {
		load_tile<threads>(ks + i * FA_TILE_VALUES, base + c, ld, k0 + i * FA_TILE, t);
		load_tile<threads>(vs + i * FA_TILE_VALUES, base + 2 * c, ld, k0 + i * FA_TILE, t);
	}
	__syncthreads();
	uint32_t kf[FA_HS / 16][4], vf[FA_HS / 16][4];
	warp_rows(kf, ks, warp * 16);
	warp_rows(vf, vs, warp * 16);

	float dk[FA_HS / 8][4], dv[FA_HS / 8][4];
#pragma unroll
	for (int j = 0; j < FA_HS / 8; j++)
#pragma unroll
		for (int i = 0; i < 4; i++)
			dk[j][i] = dv[j][i] = 0.0f;
	int set = 0;
	for (int q0 = k0; q0 < t; q0 += FA_TILE, set ^= 1) {
		uint16_t *qs = walk + set * FA_BWD_WALK_TILES * FA_TILE_VALUES;
		uint16_t *dos = qs + FA_TILE_VALUES;
		float *lse_s = rows + set * 2 * FA_TILE, *dd_s = lse_s + FA_TILE;
		/* as kv_tiles: this tile's copies landed, one barrier, then the
		 * next tile's into the set the last step read */
		cp_async_wait<0>();
		__syncthreads();
		if (q0 + FA_TILE < t) {
			uint16_t *nq = walk + (set ^ 1) * FA_BWD_WALK_TILES * FA_TILE_VALUES;
			float *nr = rows + (set ^ 1) * 2 * FA_TILE;
			tile_async<threads>(nq, base, ld, q0 + FA_TILE, t);
			tile_async<threads>(nq + FA_TILE_VALUES, dbase, c, q0 + FA_TILE, t);
			rows_async<threads>(nr, lse_bh, q0 + FA_TILE, t);
			rows_async<threads>(nr + FA_TILE, dd_bh, q0 + FA_TILE, t);
			cp_async_commit();
		}
		/* the query tile in parts of Part columns, each through
		 * its scores, dp, ds and its k16 steps of the two products
		 * before the next: the same steps in the same order as the
		 * whole tile at once, so the same bits, for a part's registers
		 * instead of the tile's (an SM's third block) */
		const int Part = FA_KV_PART;
		static_assert(FA_TILE % Part == 0 && Part % 16 == 0, "whole parts of m16 tiles");
		const int part16 = Part / 16;
		int wk = k0 + warp * 16;       /* the warp's first key */
		bool seen = wk < q0 + FA_TILE; /* some query of the tile sees a key of the warp's */
#pragma unroll
		for (int c0 = 0; c0 < FA_TILE; c0 += Part) {
			uint32_t dsf[part16][4];
			if (seen) {
				/* p^T = exp2(k q^T - lse), dp^T = v dout^T; ds^T = p^T (dp^T - D) */
				float p[2 * part16][4], ds[2 * part16][4];
				warp_abt<T, part16>(p, kf, qs + c0 * FA_LD);
				warp_abt<T, part16>(ds, vf, dos + c0 * FA_LD);
				/* the mask's compares only where the tile is not whole:
				 * on the diagonal, or at t (masked a constant at each
				 * call) */
				auto probs = [&](const bool masked) {
#pragma unroll
					for (int j = 0; j < 2 * part16; j++)
#pragma unroll
						for (int i = 0; i < 4; i++) {
							int col = c0 + 8 * j + 2 * q + (i & 1), qi = q0 + col;
							int key = key0 + 8 * (i >> 1);
							float e = !masked || (key <= qi && qi < t && key < t)
							                  ? fast_exp2(p[j][i] * sl2 -
							                              lse_s[col] * FA_LOG2E)
							                  : 0.0f;
							p[j][i] = e;
							ds[j][i] = e * (ds[j][i] - dd_s[col]);
						}
				};
				if (wk + 15 <= q0 && q0 + FA_TILE <= t)
					probs(false);
				else
					probs(true);
				uint32_t pf[part16][4];
				to_rows16<part16>(pf, p, bf16);
				to_rows16<part16>(dsf, ds, bf16);
				warp_ab_block<T, 1, part16, FA_HS / 16>(
					(float (*)[FA_HS / 8][4])dv, (const uint32_t (*)[part16][4])pf,
					dos + c0 * FA_LD, 0);
				warp_ab_block<T, 1, part16, FA_HS / 16>(
					(float (*)[FA_HS / 8][4])dk, (const uint32_t (*)[part16][4])dsf,
					qs + c0 * FA_LD, 0);
			} else {
#pragma unroll
				for (int k = 0; k < part16; k++)
					dsf[k][0] = dsf[k][1] = dsf[k][2] = dsf[k][3] = 0;
			}
			if (AddDq)
				warp_put_rows<part16>(dss, warp * 16, c0, dsf);
		}
		if (AddDq) {
			/* dq of queries q0 + 16 (warp % 4).. (and of 8 warps, columns
			 * 32 (warp / 4)..) over the block's keys: the rows of ds^T
			 * every warp put, read as columns; the next put waits for
			 * these reads at the loop's first barrier */
			const int cols = FA_HS / kt;   /* the warp's columns of dq */
			int qt = warp % 4, c0 = warp / 4 * cols;
			__syncthreads();
			uint32_t af[1][kt * FA_TILE / 16][4];
			warp_cols<kt * FA_TILE / 16>(af[0], dss, qt * 16);
			float dq[1][cols / 8][4];
#pragma unroll
			for (int j = 0; j < cols / 8; j++)
				dq[0][j][0] = dq[0][j][1] = dq[0][j][2] = dq[0][j][3] = 0.0f;
			warp_ab_block<T, 1, kt * FA_TILE / 16, cols / 16>(dq, af, ks, c0);
			warp_add<cols / 8>(dq_acc + (size_t)b * t * c + (size_t)h * FA_HS + c0, c,
			                   q0 + qt * 16, t, dq[0], scale);
		}
	}
	uint16_t *dbase3 = dqkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const float kscale[2] = { scale, scale }, one[2] = { 1.0f, 1.0f };
	warp_store(dbase3 + c, ld, k0 + warp * 16, t, dk, kscale, bf16);
	warp_store(dbase3 + 2 * c, ld, k0 + warp * 16, t, dv, one, bf16);
}

/* One block of 4 warps per query tile: dq of its queries over the keys
 * they see. Shared memory: q, dout, then per set k, v. Three blocks an SM
 * (156 registers, none spilled). A warp whose rows all come before a key
 * tile skips it: every probability there is zero. The key tile is taken
 * FA_Q_PART keys at a time, for half the tile's registers. */
template <typename T>
__global__ static void __launch_bounds__(FA_THREADS, 3)
fa_bwd_q_kernel(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                const float *dd, int t, int c, int nh, float scale, int bf16)
{
	const int threads = FA_THREADS, qt = 1;   /* query tiles of FA_TILE a block */
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *dos = qs + qt * FA_TILE_VALUES;
	uint16_t *walk = dos + qt * FA_TILE_VALUES;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.y - 1 - blockIdx.y) * qt * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const uint16_t *dbase = dout + (size_t)b * t * c + (size_t)h * FA_HS;
	int row0 = q0 + warp * 16 + g;
	int kend = min(t, q0 + qt * FA_TILE);
	float sl2 = scale * FA_LOG2E;
	/* the first key tile's, beside q's and dout's */
	tile_async<threads>(walk, base + c, ld, 0, t);
	tile_async<threads>(walk + FA_TILE_VALUES, base + 2 * c, ld, 0, t);
	cp_async_commit();
#pragma unroll
	for (int i = 0; i < qt; i++) {
		load_tile<threads>(qs + i * FA_TILE_VALUES, base, ld, q0 + i * FA_TILE, t);
		load_tile<threads>(dos + i * FA_TILE_VALUES, dbase, c, q0 + i * FA_TILE, t);
	}
	__syncthreads();
	uint32_t qf[FA_HS / 16][4], dof[FA_HS / 16][4];
	warp_rows(qf, qs, warp * 16);
	warp_rows(dof, dos, warp * 16);
	float row_lse[2], row_dd[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int row = row0 + 8 * r;
		row_lse[r] = row < t ? lse[(size_t)bh * t + row] * FA_LOG2E : 0.0f;
		row_dd[r] = row < t ? dd[(size_t)bh * t + row] : 0.0f;
	}

	float dq[FA_HS / 8][4];
#pragma unroll
	for (int j = 0; j < FA_HS / 8; j++)
		dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
	int set = 0;
	for (int k0 = 0; k0 < kend; k0 += FA_TILE, set ^= 1) {
		uint16_t *ks = kv_tiles<threads>(walk, set, base, ld, c, k0, kend, t);
		uint16_t *vs = ks + FA_TILE_VALUES;
		int wr = q0 + warp * 16;       /* the warp's first row */
		if (k0 > wr + 15)              /* every key after every row of the warp's */
			continue;
		/* the key tile in parts of Part keys, as the dk, dv kernel
		 * takes its query tile: the same steps in the same order (the
		 * same bits) for a part's registers */
		const int Part = FA_Q_PART;
		static_assert(FA_TILE % Part == 0 && Part % 16 == 0, "whole parts of m16 tiles");
		const int part16 = Part / 16;
		bool whole = k0 + FA_TILE - 1 <= wr && wr + 15 < t;
#pragma unroll
		for (int c0 = 0; c0 < FA_TILE; c0 += Part) {
			float s[2 * part16][4], ds[2 * part16][4];
			warp_abt<T, part16>(s, qf, ks + c0 * FA_LD);
			warp_abt<T, part16>(ds, dof, vs + c0 * FA_LD);
			/* the mask's compares only where the tile is not whole: on
			 * the diagonal, or at t (masked a constant at each call) */
			auto probs = [&](const bool masked) {
#pragma unroll
				for (int j = 0; j < 2 * part16; j++)
#pragma unroll
					for (int i = 0; i < 4; i++) {
						int key = k0 + c0 + 8 * j + 2 * q + (i & 1);
						int row = row0 + 8 * (i >> 1);
						float e = !masked || (key <= row && row < t)
						                  ? fast_exp2(s[j][i] * sl2 - row_lse[i >> 1])
						                  : 0.0f;
						ds[j][i] = e * (ds[j][i] - row_dd[i >> 1]);
					}
			};
			if (whole)
				probs(false);
			else
				probs(true);
			uint32_t dsf[part16][4];
			to_rows16<part16>(dsf, ds, bf16);
			warp_ab_block<T, 1, part16, FA_HS / 16>((float (*)[FA_HS / 8][4])dq,
			                                        (const uint32_t (*)[part16][4])dsf,
			                                        ks + c0 * FA_LD, 0);
		}
	}
	const float qscale[2] = { scale, scale };
	warp_store(dqkv + (size_t)b * t * ld + (size_t)h * FA_HS, ld, q0 + warp * 16, t, dq, qscale,
	           bf16);
}

/* dq (rows of dq_acc [b, t, c], fp32, the dk, dv kernel's AddDq sums)
 * rounded to 16 bits into dqkv's q columns: eight values a thread, one
 * 16-byte store */
__global__ static void fa_dq_round_kernel(uint16_t *dqkv, const float *dq_acc, long bt, int c,
                                          int bf16)
{
	long i = (long)blockIdx.x * blockDim.x + threadIdx.x, per = c / 8;
	if (i >= bt * per)
		return;
	long row = i / per;
	int col = (int)(i % per) * 8;
	const float *src = dq_acc + (size_t)row * c + col;
	float4 lo = *(const float4 *)src, hi = *(const float4 *)(src + 4);
	uint4 v = make_uint4(pack16x2(lo.x, lo.y, bf16), pack16x2(lo.z, lo.w, bf16),
	                     pack16x2(hi.x, hi.y, bf16), pack16x2(hi.z, hi.w, bf16));
	*(uint4 *)(dqkv + (size_t)row * 3 * c + col) = v;
}

#endif
