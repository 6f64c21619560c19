/* kernels/matmul_kernels.cuh - the device code of matmul_cuda.cu (the
 * bias's broadcast and fallback store, the bias gradient's column sums), in
 * a header of its own so that tests/unit/test_act16_emu can run the same
 * kernels on the CPU (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise;
 * the includer brings matmul_cuda.h (KERN_MM_BF16). */
#ifndef LARCH_KERNELS_MATMUL_KERNELS_CUH
#define LARCH_KERNELS_MATMUL_KERNELS_CUH

#include <stdint.h>

#include "precision_cuda.cuh"

/* bias gradient: rows per partial, and the blocks' shapes (32 threads wide) */
#define DBIAS_ROWS 128
#define DBIAS_TY 16
#define DBIAS_FY 16

/* out[i, o] = bias[o] (or 0 without bias), rows ldo apart */
__global__ static void broadcast_rows_kernel(float *out, const float *bias, long total, int oc,
                                             int ldo)
{
	long stride = (long)gridDim.x * blockDim.x;
	for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride)
		out[k / oc * ldo + k % oc] = bias ? bias[k % oc] : 0.0f;
}

/* out[i, o] = round16(tmp[i, o] + bias[o]), rows ldo apart: the fused
 * bias's fallback with 16-bit activations (tmp fp32, n x oc; NULL: zeros,
 * an empty product's) */
__global__ static void bias_store16_kernel(uint16_t *out, const float *tmp, const float *bias,
                                           long total, int oc, int ldo, int ops)
{
	long stride = (long)gridDim.x * blockDim.x;
	for (long k = (long)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride)
		out[k / oc * ldo + k % oc] =
			to16_bits((tmp ? tmp[k] : 0.0f) + bias[k % oc], ops == KERN_MM_BF16);
}

/* The columns a thread of dbias_partial_kernel sums, as dout's rows (ldd
 * apart, oc used) allow, up to most: 8, one 16-byte access of 16-bit
 * values (a16) or two float4s, with rows on 16 bytes and oc and ldd
 * multiples of 8; 4, an 8-byte access (a16) or a float4, with rows on 8
 * (a16) or 16 bytes and multiples of 4; else 1. */
static inline int dbias_columns(const void *dout, int oc, int ldd, int a16, int most)
{
	uintptr_t p = (uintptr_t)dout;
	if (most >= 8 && oc % 8 == 0 && ldd % 8 == 0 && p % 16 == 0)
		return 8;
	if (most >= 4 && oc % 4 == 0 && ldd % 4 == 0 && p % (a16 ? 8 : 16) == 0)
		return 4;
	return 1;
}

/* part[chunk, o] = sum of dout[i, o] over the chunk's DBIAS_ROWS rows,
 * thread row ty summing rows ty, ty + DBIAS_TY, ... in order, then the
 * block the thread rows in order: the same bits whatever W. Block (32,
 * DBIAS_TY), a thread W adjacent columns (dbias_columns; the grid's x
 * covers oc in 32 W); a thread's rows unrolled so that several of its
 * 16-byte reads are in flight at once. */
template <int W>
__global__ static void dbias_partial_kernel(double *part, const void *dout, int n, int oc,
                                            int ldd, int a16, int ops)
{
	static_assert(W == 1 || W == 4 || W == 8, "columns a thread");
	static_assert(W <= DBIAS_TY, "a thread row a column of the thread's in the last sum");
	__shared__ double acc[DBIAS_TY][W][32];   /* [ty][column of W][tx]: no bank conflicts */
	int r0 = blockIdx.y * DBIAS_ROWS;
	int r1 = min(n, r0 + DBIAS_ROWS);
	int o = (blockIdx.x * 32 + threadIdx.x) * W;
	double s[W];
	for (int k = 0; k < W; k++)
		s[k] = 0;
	if (o < oc) {
#pragma unroll 4
		for (int i = r0 + threadIdx.y; i < r1; i += DBIAS_TY) {
			size_t at = (size_t)i * ldd + o;
			float x[W];
			if constexpr (W == 8) {
				act_ld8(dout, at / 8, a16, ops, x);
			} else if constexpr (W == 4) {
				float4 v = act_ld4(dout, (long)(at / 4), a16, ops);
				x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
			} else {
				x[0] = act_ld(dout, at, a16, ops);
			}
			for (int k = 0; k < W; k++)
				s[k] += x[k];
		}
	}
	for (int k = 0; k < W; k++)
		acc[threadIdx.y][k][threadIdx.x] = s[k];
	__syncthreads();
	/* thread row k sums column k of its lane's W over the thread rows */
	int k = threadIdx.y;
	if (k < W && o < oc) {
		double t = acc[0][k][threadIdx.x];
		for (int y = 1; y < DBIAS_TY; y++)
			t += acc[y][k][threadIdx.x];
		part[(size_t)blockIdx.y * oc + o + k] = t;
	}
}

/* dbias[o] += sum over chunks of part[chunk, o]: thread row ty sums chunks
 * ty, ty + DBIAS_FY, ... in order, then row 0 adds those in order. Block
 * (32, DBIAS_FY). */
__global__ static void dbias_final_kernel(float *dbias, const double *part, int nchunk, int oc)
{
	__shared__ double acc[DBIAS_FY][32];
	int o = blockIdx.x * 32 + threadIdx.x;
	double s = 0;
	if (o < oc)
		for (int k = threadIdx.y; k < nchunk; k += DBIAS_FY)
			s += part[(size_t)k * oc + o];
	acc[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && o < oc) {
		for (int y = 1; y < DBIAS_FY; y++)
			s += acc[y][threadIdx.x];
		dbias[o] += (float)s;
	}
}

#endif
