/* kernels/attention_flash_cuda.cuh - the device code of the fused
 * (flash) causal attention, attention_flash_cuda.cu's kernels (that file
 * says how they work). A header of its own so that tests/unit/test_flash_emu
 * can run the same kernels on the CPU through an emulation of the few CUDA
 * features and tensor-core primitives they use; CUDA C++ otherwise (nvcc).
 * The includer brings the 16-bit types (<cuda_bf16.h>, <cuda_fp16.h>). */
#ifndef LARCH_KERNELS_ATTENTION_FLASH_CUDA_CUH
#define LARCH_KERNELS_ATTENTION_FLASH_CUDA_CUH

#include <math.h>
#include <stdint.h>

#include "mma_cuda.cuh"
#include "precision_cuda.cuh"

#define FA_HS 64                       /* head size */
#define FA_TILE 64                     /* queries or keys a tile */
#define FA_WARPS 4                     /* 16 rows of the tile each */
#define FA_THREADS (FA_WARPS * 32)
#define FA_LD (FA_HS + 8)              /* a tile's row stride (values): 144 bytes */
#define FA_TILE_VALUES (FA_TILE * FA_LD)
#define FA_LOG2E 1.4426950408889634f

/* the block's dynamic shared memory, 128-byte aligned (the CPU emulation
 * brings its own) */
#ifndef KERN_DYNAMIC_SMEM
#define KERN_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

/* A tile's 16-byte chunks (FA_TILE rows of FA_HS / 8) among a block of
 * Threads threads: each thread's FA_TILE_CHUNKS / Threads chunks are in
 * one column (tile_col) and rows Threads / 8 apart from tile_row, a trip
 * count the compiler unrolls (the block is launched with Threads). */
#define FA_TILE_CHUNKS (FA_TILE * (FA_HS / 8))

template <int Threads>
struct fa_chunks {
	static_assert(FA_TILE_CHUNKS % Threads == 0 && Threads % (FA_HS / 8) == 0,
	              "a tile's chunks in whole rows a pass");
	static const int per_thread = FA_TILE_CHUNKS / Threads, row_step = Threads / (FA_HS / 8);
};

/* this thread's first row of a tile and its column (values) */
__device__ static inline int tile_row(void)
{
	return (int)threadIdx.x / (FA_HS / 8);
}

__device__ static inline int tile_col(void)
{
	return (int)threadIdx.x % (FA_HS / 8) * 8;
}

/* Rows [r0, r0 + 64) of one head's 64 columns of src (rows ld values apart)
 * into a tile, zeros for rows at or past t. 16-byte copies, by a block of
 * Threads threads (as the tile loaders below). */
template <int Threads = FA_THREADS>
__device__ static void load_tile(uint16_t *dst, const uint16_t *src, long ld, int r0, int t)
{
	typedef fa_chunks<Threads> ch;
	int r = tile_row(), col = tile_col();
#pragma unroll
	for (int n = 0; n < ch::per_thread; n++, r += ch::row_step) {
		uint4 v = make_uint4(0, 0, 0, 0);
		if (r0 + r < t)
			v = *(const uint4 *)(src + (size_t)(r0 + r) * ld + col);
		*(uint4 *)(dst + r * FA_LD + col) = v;
	}
}

/* The a operands of rows [r0, r0 + 16) of a tile, all 64 columns: f[k] for
 * columns 16k.. */
__device__ static void warp_rows(uint32_t f[FA_HS / 16][4], const uint16_t *tile, int r0)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int k = 0; k < FA_HS / 16; k++)
		ldsm_x4(f[k], ldsm_at(tile, FA_LD, r0, 16 * k, lane));
}

/* s[i][16, 16 N16] = a[i][16, 64] x^T for each of a warp's R tiles of 16
 * rows (warp_rows) and x 16 N16 rows of a tile (a whole one by default):
 * s[i][j] holds columns 8j.. (x's rows 8j..), as mma16816's d. Each of
 * x's fragments is read from shared memory once for the R tiles. */
template <typename T, int R, int N16 = FA_TILE / 16>
__device__ static void warp_abt_rows(float s[R][2 * N16][4],
                                     const uint32_t a[R][FA_HS / 16][4], const uint16_t *x)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int i = 0; i < R; i++)
#pragma unroll
		for (int j = 0; j < 2 * N16; j++)
			s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll
	for (int n = 0; n < N16; n++)
#pragma unroll
		for (int k = 0; k < FA_HS / 16; k++) {
			uint32_t r[4];
			ldsm_x4(r, ldsm_at(x, FA_LD, 16 * n, 16 * k, lane));
#pragma unroll
			for (int i = 0; i < R; i++) {
				mma16816<T>(s[i][2 * n], a[i][k], r[0], r[2]);
				mma16816<T>(s[i][2 * n + 1], a[i][k], r[1], r[3]);
			}
		}
}

/* warp_abt_rows of one tile of 16 rows */
template <typename T, int N16 = FA_TILE / 16>
__device__ static void warp_abt(float s[2 * N16][4], const uint32_t a[FA_HS / 16][4],
                                const uint16_t *x)
{
	warp_abt_rows<T, 1, N16>((float (*)[2 * N16][4])s, (const uint32_t (*)[FA_HS / 16][4])a,
	                         x);
}

/* p[16, 16 K16] (as mma16816's d, columns 8j.. in p[j]; a whole tile's 64
 * by default) rounded to 16 bits as the a operands of its K16 [16, 16]
 * column blocks */
template <int K16 = FA_TILE / 16>
__device__ static void to_rows16(uint32_t f[K16][4], const float p[2 * K16][4], int bf16)
{
#pragma unroll
	for (int k = 0; k < K16; k++) {
		f[k][0] = pack16x2(p[2 * k][0], p[2 * k][1], bf16);
		f[k][1] = pack16x2(p[2 * k][2], p[2 * k][3], bf16);
		f[k][2] = pack16x2(p[2 * k + 1][0], p[2 * k + 1][1], bf16);
		f[k][3] = pack16x2(p[2 * k + 1][2], p[2 * k + 1][3], bf16);
	}
}

/* acc[i][16, 16 N16] += p[i][16, 16 K16] x[16 K16, 16 N16] for each of a
 * warp's R tiles of 16 rows: p as a operands (to_rows16), x the block of
 * a tile (its rows p's columns) from column n0, each of its fragments read
 * once for the R tiles */
template <typename T, int R, int K16, int N16>
__device__ static void warp_ab_block(float acc[R][2 * N16][4], const uint32_t p[R][K16][4],
                                     const uint16_t *x, int n0)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int k = 0; k < K16; k++)
#pragma unroll
		for (int n = 0; n < N16; n++) {
			uint32_t r[4];
			ldsm_x4_t(r, ldsm_at(x, FA_LD, 16 * k, n0 + 16 * n, lane));
#pragma unroll
			for (int i = 0; i < R; i++) {
				mma16816<T>(acc[i][2 * n], p[i][k], r[0], r[1]);
				mma16816<T>(acc[i][2 * n + 1], p[i][k], r[2], r[3]);
			}
		}
}

/* acc[i][16, 64] += p[i][16, 64] x[64, 64], x a whole tile */
template <typename T, int R>
__device__ static void warp_ab_rows(float acc[R][FA_HS / 8][4],
                                    const uint32_t p[R][FA_TILE / 16][4], const uint16_t *x)
{
	warp_ab_block<T, R, FA_TILE / 16, FA_HS / 16>(acc, p, x, 0);
}

/* warp_ab_rows of one tile of 16 rows */
template <typename T>
__device__ static void warp_ab(float acc[FA_HS / 8][4], const uint32_t p[FA_TILE / 16][4],
                               const uint16_t *x)
{
	warp_ab_rows<T, 1>((float (*)[FA_HS / 8][4])acc, (const uint32_t (*)[FA_TILE / 16][4])p, x);
}

/* put(row, col, v0, v1, h) for each pair of adjacent values (columns col,
 * col + 1) of acc, a warp's [16, 8 N8] as mma16816's d, that falls in
 * rows row0 + g and row0 + g + 8 (h 0 or 1) below t */
template <int N8, typename Put>
__device__ static void warp_each_pair(int row0, int t, const float acc[N8][4], Put put)
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		int row = row0 + g + 8 * h;
		if (row >= t)
			continue;
#pragma unroll
		for (int j = 0; j < N8; j++)
			put(row, 8 * j + 2 * q, acc[j][2 * h], acc[j][2 * h + 1], h);
	}
}

/* acc[16, 64] (as mma16816's d) times scale[h] for its row g + 8h, rounded
 * to 16 bits, into rows row0 + g and row0 + g + 8 (those below t) of dst
 * (rows ld values apart) */
__device__ static void warp_store(uint16_t *dst, long ld, int row0, int t,
                                  const float acc[FA_HS / 8][4], const float scale[2], int bf16)
{
	warp_each_pair<FA_HS / 8>(row0, t, acc, [&](int row, int col, float v0, float v1, int h) {
		*(uint32_t *)(dst + (size_t)row * ld + col) =
			pack16x2(v0 * scale[h], v1 * scale[h], bf16);
	});
}

/* Rows [r0, r0 + 64) of one head's 64 columns of src into a tile as
 * load_tile does, but as cp.async copies that land later (zeros for rows
 * at or past t); and 64 floats of src from r0 (zeros past t) */
template <int Threads = FA_THREADS>
__device__ static void tile_async(uint16_t *dst, const uint16_t *src, long ld, int r0, int t)
{
	typedef fa_chunks<Threads> ch;
	int r = tile_row(), col = tile_col();
#pragma unroll
	for (int n = 0; n < ch::per_thread; n++, r += ch::row_step) {
		int in = r0 + r < t;
		cp_async16(dst + r * FA_LD + col, src + (size_t)(in ? r0 + r : r0) * ld + col,
		           in ? 16 : 0);
	}
}

template <int Threads = FA_THREADS>
__device__ static void rows_async(float *dst, const float *src, int r0, int t)
{
	static_assert(Threads >= FA_TILE, "a row a thread");
	int i = (int)threadIdx.x;
	if (i < FA_TILE) {
		int in = r0 + i < t;
		cp_async4(dst + i, src + (in ? r0 + i : r0), in ? 4 : 0);
	}
}

/* The grid of the forward and the two backward kernels: a block per
 * (batch x head, tile of `rows` queries or keys), the head in x. The
 * hardware starts blocks in the order of their linear index, x fastest,
 * so each kernel's tile index (y) maps to its longest walks first: every
 * head's longest block starts before any head's second longest, and the
 * last blocks to start are the shortest (a causal walk is 1 to t / 64
 * tiles long). With the heads in y, as before, the last head's longest
 * walk started near the kernel's end and ran on alone. */
__host__ __device__ static inline dim3 fa_grid(int b, int nh, int t, int rows)
{
	return dim3((unsigned)(b * nh), (unsigned)((t + rows - 1) / rows));
}

/* The kernels' tiles that change as they walk (k and v, or q and dout)
 * and, for dk and dv, the rows' lse and D: one set, or with Pipe two, the
 * next one's copies (cp.async) landing while this one is computed on */
#define FA_BWD_WALK_TILES 2
/* the query columns the dk, dv kernel takes at a time (of FA_TILE), by
 * default: its Part */
#ifndef FA_KV_PART
#define FA_KV_PART 32
#endif
/* the keys the dq kernel takes at a time (of FA_TILE), by default */
#ifndef FA_Q_PART
#define FA_Q_PART 32
#endif
template <bool Pipe>
struct fa_walk {
	static const int sets = Pipe ? 2 : 1;
};

/* A walk over the key tiles (forward, dq) at tile k0 of those below kend:
 * the k and v tiles of k0 in shared memory for every thread of the block
 * (the returned k tile, v after it). Without Pipe they are loaded now,
 * between two barriers. With Pipe they landed from the copies the last
 * step (or the kernel's start, for set 0) began: one barrier, after this
 * thread's wait for its copies, makes every thread's visible, and since
 * every thread has then also finished the last step's reads of the other
 * set, the next tile's copies go there right after it, and land while
 * the block computes on this one. */
template <bool Pipe, int Threads = FA_THREADS>
__device__ static uint16_t *kv_tiles(uint16_t *walk, int set, const uint16_t *base, long ld,
                                     int c, int k0, int kend, int t)
{
	uint16_t *ks = walk + set * FA_BWD_WALK_TILES * FA_TILE_VALUES;
	if (Pipe) {
		cp_async_wait<0>();            /* this tile's copies, the only ones in flight */
		__syncthreads();
		if (k0 + FA_TILE < kend) {     /* the next tile's, into the set the last step read */
			uint16_t *nk = walk + (set ^ 1) * FA_BWD_WALK_TILES * FA_TILE_VALUES;
			tile_async<Threads>(nk, base + c, ld, k0 + FA_TILE, t);
			tile_async<Threads>(nk + FA_TILE_VALUES, base + 2 * c, ld, k0 + FA_TILE, t);
			cp_async_commit();
		}
	} else {
		__syncthreads();               /* the last tile's readers are done */
		load_tile<Threads>(ks, base + c, ld, k0, t);
		load_tile<Threads>(ks + FA_TILE_VALUES, base + 2 * c, ld, k0, t);
		__syncthreads();
	}
	return ks;
}


/* ---- forward ------------------------------------------------------------------ */

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

/* One block per 16 R Warps queries (64 R with 4 warps, 128 R with 8), R
 * tiles of 16 rows a warp: warp w's rows from 16 R w. With R = 2 each
 * fragment of k and v that a warp reads from shared memory serves 32 rows
 * instead of 16, for twice the registers (kern_attention_flash_fwd_rows);
 * with 8 warps each key tile a block copies serves twice the rows
 * (kern_attention_flash_block). A warp whose rows all come before a key
 * tile skips its products there: their probabilities would all be zero,
 * and the online softmax would be left as it was, so every row's sums are
 * those of R = 1 and 4 warps, and the results the same bits. Shared
 * memory: q (16 R Warps rows), then per set of the walk k, v. With R = 1
 * the registers are capped at an SM's 64 Ki over 16 warps (128 a thread,
 * none spilled: ptxas, CUDA 13.0, sm_90), so four blocks of 4 warps fit
 * an SM whatever the compiler's allocation would drift to (it left 126
 * before fwd_tile, 130 after: three blocks). */
template <typename T, bool Pipe, int R = 1, int Warps = FA_WARPS>
__global__ static void __launch_bounds__(Warps * 32, R == 1 ? 16 / Warps : 1)
fa_fwd_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int t, int c, int nh, float scale,
              int bf16)
{
	static_assert(Warps == 4 || Warps == 8, "query tiles of 64 or 128 R");
	const int threads = Warps * 32, qt = R * Warps / 4;   /* query tiles of FA_TILE a block */
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *walk = qs + qt * FA_TILE_VALUES;  /* then per set k, v */
	int warp = threadIdx.x >> 5;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.y - 1 - blockIdx.y) * qt * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	int wrow = q0 + warp * 16 * R;     /* the warp's first row; tile i's from wrow + 16 i */
	int kend = min(t, q0 + qt * FA_TILE);   /* the keys any query of the block sees */
	float sl2 = scale * FA_LOG2E;      /* scores in base 2 */
	if (Pipe) {                        /* the first key tile's, beside q's */
		tile_async<threads>(walk, base + c, ld, 0, t);
		tile_async<threads>(walk + FA_TILE_VALUES, base + 2 * c, ld, 0, t);
		cp_async_commit();
	}
#pragma unroll
	for (int i = 0; i < qt; i++)       /* 64-row tiles, one after the other: one of 64 qt */
		load_tile<threads>(qs + i * FA_TILE_VALUES, base, ld, q0 + i * FA_TILE, t);
	__syncthreads();
	uint32_t qf[R][FA_HS / 16][4];
#pragma unroll
	for (int i = 0; i < R; i++)
		warp_rows(qf[i], qs, (wrow - q0) + 16 * i);

	fa_fwd_rows<R> st;
	fwd_rows_init(st);
	int set = 0;
	for (int k0 = 0; k0 < kend; k0 += FA_TILE, set ^= Pipe ? 1 : 0) {
		uint16_t *ks = kv_tiles<Pipe, threads>(walk, set, base, ld, c, k0, kend, t);
		if (k0 > wrow + 16 * R - 1)    /* every key after every row of the warp's */
			continue;
		float s[R][FA_TILE / 8][4];
		warp_abt_rows<T, R>(s, qf, ks);
		fwd_tile<T, R>(st, s, ks + FA_TILE_VALUES, k0, wrow, sl2, bf16);
	}
	fwd_rows_store(st, out, lse, bh, nh, t, c, wrow, sl2, bf16);
}

/* The forward of fa_fwd_kernel (4 warps of 16 rows, pipelined) with each
 * key tile's scores a tile ahead, FlashAttention-3's overlap within a warp
 * on mma.sync: a step issues the products q k^T of the next key tile, then
 * works this tile's softmax (fmax, shuffles, exp2: the ALU and SFU pipes)
 * while the tensor cores run them, where fa_fwd_kernel's warp waits for
 * each tile's scores before it can start on them. The same products and
 * the same fwd_tile on them in the same order: the same bits.
 *
 * Shared memory as fa_fwd_kernel's pipelined one (q, then two k and two v
 * tiles), but k runs a tile ahead of v: at step j the block reads k of
 * tile j + 1 and v of tile j while the copies of k of j + 2 and v of j + 1
 * land in the slots that step j - 1 read. Two tiles of scores live at
 * once (about 32 registers more a thread): the step is written out for
 * both roles (sa, sb) so no scores are moved between registers. */
template <typename T>
__global__ static void __launch_bounds__(FA_THREADS)
fa_fwd_ahead_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int t, int c, int nh,
                    float scale, int bf16)
{
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *kslot = qs + FA_TILE_VALUES;
	uint16_t *vslot = kslot + 2 * FA_TILE_VALUES;   /* tile j's k in kslot[j % 2], v alike */
	int warp = threadIdx.x >> 5;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.y - 1 - blockIdx.y) * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	int wrow = q0 + warp * 16;         /* the warp's first row */
	int kend = min(t, q0 + FA_TILE), tiles = (kend + FA_TILE - 1) / FA_TILE;
	float sl2 = scale * FA_LOG2E;
	/* k of tile 0 in a group of its own, then k of tile 1 and v of tile 0 */
	tile_async<FA_THREADS>(kslot, base + c, ld, 0, t);
	cp_async_commit();
	if (tiles > 1)
		tile_async<FA_THREADS>(kslot + FA_TILE_VALUES, base + c, ld, FA_TILE, t);
	tile_async<FA_THREADS>(vslot, base + 2 * c, ld, 0, t);
	cp_async_commit();
	load_tile<FA_THREADS>(qs, base, ld, q0, t);
	cp_async_wait<1>();                /* k of tile 0 */
	__syncthreads();
	uint32_t qf[1][FA_HS / 16][4];
	warp_rows(qf[0], qs, wrow - q0);
	fa_fwd_rows<1> st;
	fwd_rows_init(st);
	float sa[1][FA_TILE / 8][4], sb[1][FA_TILE / 8][4];
	warp_abt_rows<T, 1>(sa, qf, kslot);   /* every row sees key 0 */

	/* step j: cur holds tile j's scores; next gets tile j + 1's */
	auto step = [&](float (&cur)[1][FA_TILE / 8][4], float (&next)[1][FA_TILE / 8][4], int j) {
		int k0 = j * FA_TILE, odd = j & 1;
		cp_async_wait<0>();            /* k of tile j + 1, v of tile j */
		__syncthreads();               /* ... everyone's; and step j - 1's reads done */
		if (j + 2 < tiles)
			tile_async<FA_THREADS>(kslot + odd * FA_TILE_VALUES, base + c, ld, k0 + 2 * FA_TILE,
			                       t);
		if (j + 1 < tiles)
			tile_async<FA_THREADS>(vslot + (odd ^ 1) * FA_TILE_VALUES, base + 2 * c, ld,
			                       k0 + FA_TILE, t);
		cp_async_commit();
		/* (every tile up to the diagonal reaches every warp's rows: no
		 * skips in a block of one query tile) */
		if (j + 1 < tiles)
			warp_abt_rows<T, 1>(next, qf, kslot + (odd ^ 1) * FA_TILE_VALUES);
		fwd_tile<T, 1>(st, cur, vslot + odd * FA_TILE_VALUES, k0, wrow, sl2, bf16);
	};
	for (int j = 0; j < tiles; j += 2) {
		step(sa, sb, j);
		if (j + 1 < tiles)
			step(sb, sa, j + 1);
	}
	fwd_rows_store(st, out, lse, bh, nh, t, c, wrow, sl2, bf16);
}

/* ---- backward ----------------------------------------------------------------- */

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
 * MinBlocks: the blocks an SM must be able to hold at once, which caps a
 * thread's registers (1: no cap, 196-208 registers, two blocks of 4 warps
 * an SM; 3: 168, none spilled but with AddDq 8 bytes;
 * kern_attention_flash_more_blocks; 8 warps: about 200, one block).
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
 * tile). Part: the query columns taken at a time, FA_TILE for the whole
 * tile (216 registers, two blocks an SM all the same; ptxas, CUDA 13.0,
 * sm_90). dk and dv are the same bits whatever Warps, AddDq and Part. */
template <typename T, bool Pipe, int MinBlocks = 1, bool AddDq = false, int Warps = FA_WARPS,
          int Part = FA_KV_PART>
__global__ static void __launch_bounds__(Warps * 32, MinBlocks)
fa_bwd_kv_kernel(uint16_t *dqkv, float *dq_acc, const uint16_t *dout, const uint16_t *qkv,
                 const float *lse, const float *dd, int t, int c, int nh, float scale, int bf16)
{
	static_assert(Warps == 4 || Warps == 8, "a key tile of 64 or 128");
	const int threads = Warps * 32, kt = Warps / 4;   /* key tiles of FA_TILE a block */
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *ks = (uint16_t *)smem, *vs = ks + kt * FA_TILE_VALUES;
	uint16_t *walk = vs + kt * FA_TILE_VALUES;
	float *rows = (float *)(walk + fa_walk<Pipe>::sets * FA_BWD_WALK_TILES * FA_TILE_VALUES);
	uint16_t *dss = (uint16_t *)(rows + fa_walk<Pipe>::sets * 2 * FA_TILE);   /* AddDq's ds^T */
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	int bh = blockIdx.x, b = bh / nh, h = bh % nh;
	int k0 = blockIdx.y * kt * FA_TILE;   /* the longest walks first: from the first keys */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const uint16_t *dbase = dout + (size_t)b * t * c + (size_t)h * FA_HS;
	const float *lse_bh = lse + (size_t)bh * t, *dd_bh = dd + (size_t)bh * t;
	int key0 = k0 + warp * 16 + g;     /* this lane's keys: key0 and key0 + 8 */
	float sl2 = scale * FA_LOG2E;
	if (Pipe) {                        /* the first query tile's, beside k's and v's */
		tile_async<threads>(walk, base, ld, k0, t);
		tile_async<threads>(walk + FA_TILE_VALUES, dbase, c, k0, t);
		rows_async<threads>(rows, lse_bh, k0, t);
		rows_async<threads>(rows + FA_TILE, dd_bh, k0, t);
		cp_async_commit();
	}
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
	for (int q0 = k0; q0 < t; q0 += FA_TILE, set ^= Pipe ? 1 : 0) {
		uint16_t *qs = walk + set * FA_BWD_WALK_TILES * FA_TILE_VALUES;
		uint16_t *dos = qs + FA_TILE_VALUES;
		float *lse_s = rows + set * 2 * FA_TILE, *dd_s = lse_s + FA_TILE;
		if (Pipe) {
			/* as kv_tiles: this tile's copies landed, one barrier, then
			 * the next tile's into the set the last step read */
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
		} else {
			__syncthreads();           /* the last tile's readers are done */
			load_tile<threads>(qs, base, ld, q0, t);
			load_tile<threads>(dos, dbase, c, q0, t);
			for (int i = threadIdx.x; i < FA_TILE; i += threads) {
				int qi = q0 + i;
				lse_s[i] = qi < t ? lse_bh[qi] : 0.0f;
				dd_s[i] = qi < t ? dd_bh[qi] : 0.0f;
			}
			__syncthreads();
		}
		/* the query tile in parts of Part columns, each through
		 * its scores, dp, ds and its k16 steps of the two products
		 * before the next: the same steps in the same order as the
		 * whole tile at once, so the same bits, for a part's registers
		 * instead of the tile's (an SM's third block) */
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

/* one block per 16 Warps queries (a query tile, or two with 8 warps): dq
 * of its queries over the keys they see. Shared memory: q, dout (Warps / 4
 * tiles each), then per set k, v. MinBlocks as the dk, dv kernel's (4
 * warps: 3, 156 registers, three blocks an SM; 4: 128, none spilled
 * either, kern_attention_flash_more_blocks; 8 warps: 2, 128). A warp whose
 * rows all come before a key tile (with 8 warps, the first four at the
 * block's last tile) skips it: every probability there is zero, so the
 * same bits as with 4 warps. Part: the keys taken at a time, FA_TILE for
 * the whole tile (4 warps at 3 blocks an SM: 168 registers, none
 * spilled). The same bits whatever Part. */
template <typename T, bool Pipe, int MinBlocks = 3, int Warps = FA_WARPS, int Part = FA_Q_PART>
__global__ static void __launch_bounds__(Warps * 32, MinBlocks)
fa_bwd_q_kernel(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                const float *dd, int t, int c, int nh, float scale, int bf16)
{
	static_assert(Warps == 4 || Warps == 8, "query tiles of 64 or 128");
	const int threads = Warps * 32, qt = Warps / 4;   /* query tiles of FA_TILE a block */
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
	if (Pipe) {                        /* the first key tile's, beside q's and dout's */
		tile_async<threads>(walk, base + c, ld, 0, t);
		tile_async<threads>(walk + FA_TILE_VALUES, base + 2 * c, ld, 0, t);
		cp_async_commit();
	}
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
	for (int k0 = 0; k0 < kend; k0 += FA_TILE, set ^= Pipe ? 1 : 0) {
		uint16_t *ks = kv_tiles<Pipe, threads>(walk, set, base, ld, c, k0, kend, t);
		uint16_t *vs = ks + FA_TILE_VALUES;
		int wr = q0 + warp * 16;       /* the warp's first row */
		if (k0 > wr + 15)              /* every key after every row of the warp's */
			continue;
		/* the key tile in parts of Part keys, as the dk, dv kernel
		 * takes its query tile: the same steps in the same order (the
		 * same bits) for a part's registers */
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
