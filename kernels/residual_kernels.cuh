/* kernels/residual_kernels.cuh - the device code of residual_cuda.cu, in
 * a header of its own so that tests/unit/test_act16_emu can run the same
 * kernels on the CPU (tests/unit/cuda_emu.hh). CUDA C++ (nvcc) otherwise. */
#ifndef LARCH_KERNELS_RESIDUAL_KERNELS_CUH
#define LARCH_KERNELS_RESIDUAL_KERNELS_CUH

#include "elementwise_cuda.cuh"
#include "precision_cuda.cuh"

__global__ static void residual_fwd_kernel(void *out, const void *a, const void *b, long n,
                                           int vec, int a16, int ops)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 x = act_ld4(a, k, a16, ops), y = act_ld4(b, k, a16, ops);
			act_st4(out, k, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w), a16, ops);
		},
		[=](long k) {
			act_st(out, k, act_ld(a, k, a16, ops) + act_ld(b, k, a16, ops), a16, ops);
		});
}

__global__ static void residual_bwd_kernel(float *da, float *db, const float *dout, long n,
                                           int vec, int ops)
{
	grid_stride4(
		n, vec,
		[=](long k) {
			float4 g = ((const float4 *)dout)[k];
			float4 x = ((const float4 *)da)[k], y = ((const float4 *)db)[k];
			((float4 *)da)[k] =
				store16x4(make_float4(x.x + g.x, x.y + g.y, x.z + g.z, x.w + g.w), ops);
			((float4 *)db)[k] =
				store16x4(make_float4(y.x + g.x, y.y + g.y, y.z + g.z, y.w + g.w), ops);
		},
		[=](long k) {
			float g = dout[k];
			da[k] = store16(da[k] + g, ops);
			db[k] = store16(db[k] + g, ops);
		});
}

#endif
