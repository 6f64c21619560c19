/* kernels/attention_flash_cuda.cuh - the device code of the fused
 * (flash) causal attention, attention_flash_cuda.cu's kernels (that file
 * says how they work). A header of its own so that tests/unit/test_flash_emu
 * can run the same kernels on the CPU through an emulation of the few CUDA
 * and WMMA features they use; CUDA C++ otherwise (nvcc). The includer
 * brings nvcuda::wmma (<mma.h>) and the 16-bit types (<cuda_bf16.h>,
 * <cuda_fp16.h>). */
#ifndef LARCH_KERNELS_ATTENTION_FLASH_CUDA_CUH
#define LARCH_KERNELS_ATTENTION_FLASH_CUDA_CUH

#include <math.h>
#include <stdint.h>

#include "precision_cuda.cuh"

using namespace nvcuda;

#define FA_HS 64                       /* head size */
#define FA_TILE 64                     /* queries or keys a tile */
#define FA_WARPS 4                     /* 16 rows of the tile each */
#define FA_THREADS (FA_WARPS * 32)
#define FA_LD (FA_HS + 8)              /* a 16-bit tile's row stride (values) */
#define FA_LDS 68                      /* a warp buffer's fp32 row stride */
#define FA_TILE_VALUES (FA_TILE * FA_LD)
/* floats of one warp's buffer: 16 fp32 rows of FA_LDS, or two 16-bit
 * [16, FA_LD] (p and ds), whichever is larger */
#define FA_WBUF (16 * FA_LD)

/* the block's dynamic shared memory, 128-byte aligned (the CPU emulation
 * brings its own) */
#ifndef KERN_DYNAMIC_SMEM
#define KERN_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;

/* Rows [r0, r0 + 64) of one head's 64 columns of src (rows ld values apart)
 * into a tile, zeros for rows at or past t. 16-byte copies. */
__device__ static void load_tile(uint16_t *dst, const uint16_t *src, long ld, int r0, int t)
{
	for (int i = threadIdx.x; i < FA_TILE * (FA_HS / 8); i += FA_THREADS) {
		int r = i / (FA_HS / 8), col = i % (FA_HS / 8) * 8;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (r0 + r < t)
			v = *(const uint4 *)(src + (size_t)(r0 + r) * ld + col);
		*(uint4 *)(dst + r * FA_LD + col) = v;
	}
}

/* s[16, 64] (fp32, rows FA_LDS apart) = a[16, 64] b[64, 64]^T: a this
 * warp's 16 rows of a tile, b a whole tile, both 16-bit rows of FA_LD. */
template <typename T>
__device__ static void warp_abt(float *s, const uint16_t *a, const uint16_t *b)
{
	acc_frag acc[FA_TILE / 16];
#pragma unroll
	for (int n = 0; n < FA_TILE / 16; n++)
		wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
	for (int k = 0; k < FA_HS / 16; k++) {
		wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
		wmma::load_matrix_sync(fa, (const T *)(a + k * 16), FA_LD);
#pragma unroll
		for (int n = 0; n < FA_TILE / 16; n++) {
			/* b^T's (k, j) is b[j][k]: column-major with b's row stride */
			wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
			wmma::load_matrix_sync(fb, (const T *)(b + n * 16 * FA_LD + k * 16), FA_LD);
			wmma::mma_sync(acc[n], fa, fb, acc[n]);
		}
	}
#pragma unroll
	for (int n = 0; n < FA_TILE / 16; n++)
		wmma::store_matrix_sync(s + n * 16, acc[n], FA_LDS, wmma::mem_row_major);
}

/* acc[16, 64] += p[16, 64] x[64, 64]: p 16-bit rows of FA_LD (a warp
 * buffer), x a tile. */
template <typename T>
__device__ static void warp_ab(acc_frag *acc, const uint16_t *p, const uint16_t *x)
{
#pragma unroll
	for (int k = 0; k < FA_TILE / 16; k++) {
		wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
		wmma::load_matrix_sync(fa, (const T *)(p + k * 16), FA_LD);
#pragma unroll
		for (int n = 0; n < FA_HS / 16; n++) {
			wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
			wmma::load_matrix_sync(fb, (const T *)(x + k * 16 * FA_LD + n * 16), FA_LD);
			wmma::mma_sync(acc[n], fa, fb, acc[n]);
		}
	}
}

/* The warp's accumulators [16, 64] times scale, rounded to 16 bits, into
 * rows row0 .. row0 + 15 (those below t) of dst (rows ld values apart),
 * through the warp's buffer. */
__device__ static void warp_store(uint16_t *dst, long ld, int row0, int t, acc_frag *acc,
                                  float *wb, float scale, int bf16)
{
	__syncwarp();
#pragma unroll
	for (int n = 0; n < FA_HS / 16; n++)
		wmma::store_matrix_sync(wb + n * 16, acc[n], FA_LDS, wmma::mem_row_major);
	__syncwarp();
	int lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
	if (row0 + row < t) {
		uint16_t *o = dst + (size_t)(row0 + row) * ld + half;
		const float *src = wb + row * FA_LDS + half;
		for (int j = 0; j < 32; j++)
			o[2 * j] = to16_bits(src[2 * j] * scale, bf16);
	}
	__syncwarp();
}

/* a lane's 32 values (its columns of its row: lane_col) into the warp
 * buffer as 16 bits, rows FA_LD apart */
__device__ static void lane_put16(uint16_t *buf, const float *v, int bf16)
{
	int lane = threadIdx.x & 31;
	uint16_t *d = buf + (lane >> 1) * FA_LD + (lane & 1);
#pragma unroll
	for (int j = 0; j < 32; j++)
		d[2 * j] = to16_bits(v[j], bf16);
}

/* ---- forward ------------------------------------------------------------------ */

template <typename T>
__global__ static void __launch_bounds__(FA_THREADS)
fa_fwd_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int t, int c, int nh, float scale,
              int bf16)
{
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *ks = qs + FA_TILE_VALUES, *vs = ks + FA_TILE_VALUES;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
	float *wb = (float *)(vs + FA_TILE_VALUES) + warp * FA_WBUF;
	int bh = blockIdx.y, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.x - 1 - blockIdx.x) * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const uint16_t *qw = qs + warp * 16 * FA_LD;
	int qi = q0 + warp * 16 + row;     /* this lane's query */
	int kend = min(t, q0 + FA_TILE);   /* the keys any query of the tile sees */
	load_tile(qs, base, ld, q0, t);

	/* 1: max and sum of exp over this lane's half of the row, online */
	float m = -INFINITY, l = 0.0f;
	for (int k0 = 0; k0 < kend; k0 += FA_TILE) {
		__syncthreads();
		load_tile(ks, base + c, ld, k0, t);
		__syncthreads();
		warp_abt<T>(wb, qw, ks);
		__syncwarp();
		const float *sr = wb + row * FA_LDS + half;
		for (int j = 0; j < 32; j++) {
			int kj = k0 + 2 * j + half;
			if (kj > qi || qi >= t)
				break;
			float s = sr[2 * j] * scale;
			if (s > m) {
				l = l * expf(m - s) + 1.0f;
				m = s;
			} else {
				l += expf(s - m);
			}
		}
		__syncwarp();
	}
	float m2 = __shfl_xor_sync(0xffffffffu, m, 1), l2 = __shfl_xor_sync(0xffffffffu, l, 1);
	float mx = fmaxf(m, m2);
	float sum = (m == -INFINITY ? 0.0f : l * expf(m - mx)) +
	            (m2 == -INFINITY ? 0.0f : l2 * expf(m2 - mx));
	float row_lse = mx + logf(sum);

	/* 2: out = round16(exp(s - lse)) v */
	acc_frag acc[FA_HS / 16];
#pragma unroll
	for (int n = 0; n < FA_HS / 16; n++)
		wmma::fill_fragment(acc[n], 0.0f);
	for (int k0 = 0; k0 < kend; k0 += FA_TILE) {
		__syncthreads();
		load_tile(ks, base + c, ld, k0, t);
		load_tile(vs, base + 2 * c, ld, k0, t);
		__syncthreads();
		warp_abt<T>(wb, qw, ks);
		__syncwarp();
		float p[32];
		const float *sr = wb + row * FA_LDS + half;
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int kj = k0 + 2 * j + half;
			p[j] = kj <= qi && qi < t ? expf(sr[2 * j] * scale - row_lse) : 0.0f;
		}
		__syncwarp();                  /* every lane has read its scores */
		lane_put16((uint16_t *)wb, p, bf16);
		__syncwarp();
		warp_ab<T>(acc, (const uint16_t *)wb, vs);
	}
	warp_store(out + (size_t)b * t * c + (size_t)h * FA_HS, c, q0 + warp * 16, t, acc, wb, 1.0f,
	           bf16);
	if (half == 0 && qi < t)
		lse[(size_t)bh * t + qi] = row_lse;
}

/* ---- backward ----------------------------------------------------------------- */

/* dd[bh, i] = sum over the head's 64 columns of dout * out at row i: a warp
 * a row, two columns a lane, then the butterfly (a fixed order) */
__global__ static void fa_rowdot_kernel(float *dd, const uint16_t *dout, const uint16_t *out,
                                        int b, int t, int c, int nh, int bf16)
{
	long r = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (r >= (long)b * nh * t)
		return;
	int lane = threadIdx.x & 31;
	int i = (int)(r % t), bh = (int)(r / t), bb = bh / nh, h = bh % nh;
	size_t at = ((size_t)bb * t + i) * c + (size_t)h * FA_HS + 2 * lane;
	float s = of16_bits(dout[at], bf16) * of16_bits(out[at], bf16) +
	          of16_bits(dout[at + 1], bf16) * of16_bits(out[at + 1], bf16);
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	if (lane == 0)
		dd[r] = s;
}

/* one block per key tile: dk and dv of its 64 keys over every query that
 * sees them */
template <typename T>
__global__ static void __launch_bounds__(FA_THREADS)
fa_bwd_kv_kernel(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                 const float *dd, int t, int c, int nh, float scale, int bf16)
{
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *ks = (uint16_t *)smem, *vs = ks + FA_TILE_VALUES, *qs = vs + FA_TILE_VALUES;
	uint16_t *dos = qs + FA_TILE_VALUES;
	float *wbs = (float *)(dos + FA_TILE_VALUES);
	float *lse_s = wbs + FA_WARPS * FA_WBUF, *dd_s = lse_s + FA_TILE;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
	float *wb = wbs + warp * FA_WBUF;
	uint16_t *p16 = (uint16_t *)wb, *ds16 = p16 + 16 * FA_LD;
	int bh = blockIdx.y, b = bh / nh, h = bh % nh;
	int k0 = blockIdx.x * FA_TILE;
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	const uint16_t *dbase = dout + (size_t)b * t * c + (size_t)h * FA_HS;
	int kj = k0 + warp * 16 + row;     /* this lane's key */
	load_tile(ks, base + c, ld, k0, t);
	load_tile(vs, base + 2 * c, ld, k0, t);

	acc_frag dk[FA_HS / 16], dv[FA_HS / 16];
#pragma unroll
	for (int n = 0; n < FA_HS / 16; n++) {
		wmma::fill_fragment(dk[n], 0.0f);
		wmma::fill_fragment(dv[n], 0.0f);
	}
	for (int q0 = k0; q0 < t; q0 += FA_TILE) {
		__syncthreads();
		load_tile(qs, base, ld, q0, t);
		load_tile(dos, dbase, c, q0, t);
		for (int i = threadIdx.x; i < FA_TILE; i += FA_THREADS) {
			int q = q0 + i;
			lse_s[i] = q < t ? lse[(size_t)bh * t + q] : 0.0f;
			dd_s[i] = q < t ? dd[(size_t)bh * t + q] : 0.0f;
		}
		__syncthreads();
		/* p^T: the scores of this warp's keys against the tile's queries */
		warp_abt<T>(wb, ks + warp * 16 * FA_LD, qs);
		__syncwarp();
		float p[32], ds[32];
		const float *sr = wb + row * FA_LDS + half;
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int q = q0 + 2 * j + half;
			p[j] = kj <= q && q < t && kj < t
			               ? expf(sr[2 * j] * scale - lse_s[2 * j + half]) : 0.0f;
		}
		__syncwarp();
		/* dp^T = v dout^T for this warp's keys */
		warp_abt<T>(wb, vs + warp * 16 * FA_LD, dos);
		__syncwarp();
#pragma unroll
		for (int j = 0; j < 32; j++)
			ds[j] = p[j] * (sr[2 * j] - dd_s[2 * j + half]);
		__syncwarp();
		lane_put16(p16, p, bf16);
		lane_put16(ds16, ds, bf16);
		__syncwarp();
		warp_ab<T>(dv, p16, dos);
		warp_ab<T>(dk, ds16, qs);
	}
	uint16_t *dbase3 = dqkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	warp_store(dbase3 + c, ld, k0 + warp * 16, t, dk, wb, scale, bf16);
	warp_store(dbase3 + 2 * c, ld, k0 + warp * 16, t, dv, wb, 1.0f, bf16);
}

/* one block per query tile: dq of its 64 queries over the keys they see */
template <typename T>
__global__ static void __launch_bounds__(FA_THREADS)
fa_bwd_q_kernel(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse,
                const float *dd, int t, int c, int nh, float scale, int bf16)
{
	KERN_DYNAMIC_SMEM(smem);
	uint16_t *qs = (uint16_t *)smem, *dos = qs + FA_TILE_VALUES, *ks = dos + FA_TILE_VALUES;
	uint16_t *vs = ks + FA_TILE_VALUES;
	float *wbs = (float *)(vs + FA_TILE_VALUES);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = lane >> 1, half = lane & 1;
	float *wb = wbs + warp * FA_WBUF;
	uint16_t *ds16 = (uint16_t *)wb + 16 * FA_LD;
	int bh = blockIdx.y, b = bh / nh, h = bh % nh;
	int q0 = (gridDim.x - 1 - blockIdx.x) * FA_TILE;   /* the longest walks first */
	long ld = 3L * c;
	const uint16_t *base = qkv + (size_t)b * t * ld + (size_t)h * FA_HS;
	int qi = q0 + warp * 16 + row;
	int kend = min(t, q0 + FA_TILE);
	load_tile(qs, base, ld, q0, t);
	load_tile(dos, dout + (size_t)b * t * c + (size_t)h * FA_HS, c, q0, t);
	float row_lse = qi < t ? lse[(size_t)bh * t + qi] : 0.0f;
	float row_dd = qi < t ? dd[(size_t)bh * t + qi] : 0.0f;

	acc_frag dq[FA_HS / 16];
#pragma unroll
	for (int n = 0; n < FA_HS / 16; n++)
		wmma::fill_fragment(dq[n], 0.0f);
	for (int k0 = 0; k0 < kend; k0 += FA_TILE) {
		__syncthreads();
		load_tile(ks, base + c, ld, k0, t);
		load_tile(vs, base + 2 * c, ld, k0, t);
		__syncthreads();
		warp_abt<T>(wb, qs + warp * 16 * FA_LD, ks);
		__syncwarp();
		float p[32], ds[32];
		const float *sr = wb + row * FA_LDS + half;
#pragma unroll
		for (int j = 0; j < 32; j++) {
			int k = k0 + 2 * j + half;
			p[j] = k <= qi && qi < t ? expf(sr[2 * j] * scale - row_lse) : 0.0f;
		}
		__syncwarp();
		warp_abt<T>(wb, dos + warp * 16 * FA_LD, vs);
		__syncwarp();
#pragma unroll
		for (int j = 0; j < 32; j++)
			ds[j] = p[j] * (sr[2 * j] - row_dd);
		__syncwarp();
		lane_put16(ds16, ds, bf16);
		__syncwarp();
		warp_ab<T>(dq, ds16, ks);
	}
	warp_store(dqkv + (size_t)b * t * ld + (size_t)h * FA_HS, ld, q0 + warp * 16, t, dq, wb,
	           scale, bf16);
}

#endif
