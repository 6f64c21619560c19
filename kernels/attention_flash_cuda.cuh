/* kernels/attention_flash_cuda.cuh - the device code of the fused
 * (flash) causal attention that its forward and backward kernels share
 * (attention_flash_fwd_cuda.cuh, attention_flash_bwd_cuda.cuh; the host
 * side, attention_flash_cuda.cu, says how they work): the tile sizes, the
 * tiles' copies into shared memory, the warp-level products on them, the
 * grid. Headers of their own so that tests/unit/test_flash_emu can run the
 * same kernels on the CPU through an emulation of the few CUDA features
 * and tensor-core primitives they use; CUDA C++ otherwise (nvcc). The
 * includer brings the 16-bit types (<cuda_bf16.h>, <cuda_fp16.h>). */
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
 * and, for dk and dv, the rows' lse and D: two sets, the next one's copies
 * (cp.async) landing while this one is computed on */
#define FA_BWD_WALK_TILES 2
#define FA_WALK_SETS 2

/* A walk over the key tiles (forward, dq) at tile k0 of those below kend:
 * the k and v tiles of k0 in shared memory for every thread of the block
 * (the returned k tile, v after it). They landed from the copies the last
 * step (or the kernel's start, for set 0) began: one barrier, after this
 * thread's wait for its copies, makes every thread's visible, and since
 * every thread has then also finished the last step's reads of the other
 * set, the next tile's copies go there right after it, and land while
 * the block computes on this one. */
template <int Threads = FA_THREADS>
__device__ static uint16_t *kv_tiles(uint16_t *walk, int set, const uint16_t *base, long ld,
                                     int c, int k0, int kend, int t)
{
	uint16_t *ks = walk + set * FA_BWD_WALK_TILES * FA_TILE_VALUES;
	cp_async_wait<0>();                /* this tile's copies, the only ones in flight */
	__syncthreads();
	if (k0 + FA_TILE < kend) {         /* the next tile's, into the set the last step read */
		uint16_t *nk = walk + (set ^ 1) * FA_BWD_WALK_TILES * FA_TILE_VALUES;
		tile_async<Threads>(nk, base + c, ld, k0 + FA_TILE, t);
		tile_async<Threads>(nk + FA_TILE_VALUES, base + 2 * c, ld, k0 + FA_TILE, t);
		cp_async_commit();
	}
	return ks;
}

#endif
