/* kernels/matmul_kernels.cuh - the device code of matmul_cuda.cu (the
 * bias's broadcast and fallback store, the bias gradient's column sums), in
 * a header of its own so that tests/unit/test_act16_emu can run the same
 * kernels on the CPU (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise;
 * the includer brings matmul_cuda.h (KERN_MM_BF16). */
#ifndef LARCH_KERNELS_MATMUL_KERNELS_CUH
#define LARCH_KERNELS_MATMUL_KERNELS_CUH

#include <stdint.h>

#include "precision_cuda.cuh"

/* bias gradient: rows per partial, and the block shape (32 columns wide) */
#define DBIAS_ROWS 256
#define DBIAS_TY 8
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

/* Whether dbias_partial_kernel may read dout's rows (ldd apart, oc used)
 * four columns an access: rows on 16 bytes (8 with a16), oc a multiple of 4. */
static inline int dbias_vec_ok(const void *dout, int oc, int ldd, int a16)
{
	return oc % 4 == 0 && ldd % 4 == 0 && (uintptr_t)dout % (a16 ? 8 : 16) == 0;
}

/* part[chunk, o] = sum of dout[i, o] over the chunk's rows, in row order per
 * thread row (ty) and then over ty in order. Block (32, DBIAS_TY); a thread
 * a column, or with vec (dbias_vec_ok; the grid's x a quarter as wide) four
 * adjacent columns, each summed in the same order: the same bits. */
__global__ static void dbias_partial_kernel(double *part, const void *dout, int n, int oc,
                                            int ldd, int vec, int a16, int ops)
{
	__shared__ double acc[DBIAS_TY][4][32];   /* [ty][column of four][tx]: no bank conflicts */
	int r0 = blockIdx.y * DBIAS_ROWS;
	int r1 = min(n, r0 + DBIAS_ROWS);
	if (vec) {
		int o4 = (blockIdx.x * 32 + threadIdx.x) * 4;
		double s4[4] = { 0, 0, 0, 0 };
		if (o4 < oc)
			for (int i = r0 + threadIdx.y; i < r1; i += DBIAS_TY) {
				float4 d = act_ld4(dout, (long)(((size_t)i * ldd + o4) / 4), a16, ops);
				s4[0] += d.x;
				s4[1] += d.y;
				s4[2] += d.z;
				s4[3] += d.w;
			}
		for (int k = 0; k < 4; k++)
			acc[threadIdx.y][k][threadIdx.x] = s4[k];
		__syncthreads();
		if (threadIdx.y == 0 && o4 < oc)
			for (int k = 0; k < 4; k++) {
				double t = s4[k];
				for (int y = 1; y < DBIAS_TY; y++)
					t += acc[y][k][threadIdx.x];
				part[(size_t)blockIdx.y * oc + o4 + k] = t;
			}
		return;
	}
	int o = blockIdx.x * 32 + threadIdx.x;
	double s = 0;
	if (o < oc)
		for (int i = r0 + threadIdx.y; i < r1; i += DBIAS_TY)
			s += act_ld(dout, (size_t)i * ldd + o, a16, ops);
	acc[threadIdx.y][0][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && o < oc) {
		for (int y = 1; y < DBIAS_TY; y++)
			s += acc[y][0][threadIdx.x];
		part[(size_t)blockIdx.y * oc + o] = s;
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
