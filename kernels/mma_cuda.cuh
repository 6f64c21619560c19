/* kernels/mma_cuda.cuh - warp-level tensor-core primitives whose register
 * layouts the PTX ISA documents ("Matrix Fragments for mma.m16n8k16",
 * "ldmatrix"), for kernels that keep products in registers and work on them
 * there (attention_flash_*.cuh). sm_80 or later; CUDA C++ (nvcc).
 *
 * In a warp, lane l is in group g = l / 4 and is thread q = l % 4 of it.
 * A 32-bit register holds two 16-bit values, the first in its low half.
 *
 *   mma16816: d[16, 8] += a[16, 16] b[16, 8], fp32 sums of 16-bit products.
 *     a: a[0] holds (g, 2q..2q+1), a[1] (g + 8, 2q..), a[2] (g, 2q + 8..),
 *        a[3] (g + 8, 2q + 8..);
 *     b: b0 holds (2q..2q+1, g), b1 (2q + 8..2q + 9, g);
 *     d: d[0], d[1] (g, 2q..2q+1), d[2], d[3] (g + 8, 2q..2q+1).
 *   So d's two registers of a row, as two values a register, are a's
 *   layout: an accumulator of [16, 16] (two d's side by side) is an a
 *   operand once packed (pack16x2), which is how a kernel feeds products
 *   to the next product without shared memory.
 *
 *   ldsm_x4 / ldsm_x4_t: four 8x8 16-bit matrices from shared memory, lanes
 *     8i..8i+7 giving the addresses of matrix i's rows (16-byte aligned);
 *     r[i] gets (g, 2q..2q+1) of matrix i, or with _t of its transpose.
 *   ldsm_at gives lane l's address for the matrices (r0, c0), (r0 + 8, c0),
 *   (r0, c0 + 8), (r0 + 8, c0 + 8) of a row-major tile. What one load of
 *   the [16, 16] block X at (r0, c0) gives:
 *     ldsm_x4 (X as a):  the a operand {r[0], r[1], r[2], r[3]};
 *     ldsm_x4 (b = X^T, X's rows the n index, as keys in q k^T): b0, b1 of
 *       n = r0.. in {r[0], r[2]}, of n = r0 + 8.. in {r[1], r[3]};
 *     ldsm_x4_t (b = X, X's rows the k index, as values in p v): b0, b1 of
 *       n = c0.. in {r[0], r[1]}, of n = c0 + 8.. in {r[2], r[3]}.
 *
 * tests/unit/cuda_emu.hh brings its own versions of these (it defines
 * KERN_MMA_EMULATED), the documented layouts written out lane by lane, so
 * that a kernel's use of them runs on the CPU. */
#ifndef LARCH_KERNELS_MMA_CUDA_CUH
#define LARCH_KERNELS_MMA_CUDA_CUH

#include <stdint.h>

#include "precision_cuda.cuh"

/* lane's address in a row-major tile (rows ld values apart) for the four
 * matrices of the [16, 16] block at (r0, c0) */
__device__ static inline const uint16_t *ldsm_at(const uint16_t *tile, int ld, int r0, int c0,
                                                 int lane)
{
	return tile + (r0 + (lane & 7) + (lane >> 3 & 1) * 8) * ld + c0 + (lane >> 4) * 8;
}

#ifndef KERN_MMA_EMULATED

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "kernels/mma_cuda.cuh: mma.m16n8k16 with bf16 needs sm_80 or later"
#endif

__device__ static inline void ldsm_x4(uint32_t r[4], const uint16_t *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

__device__ static inline void ldsm_x4_t(uint32_t r[4], const uint16_t *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

/* d += a b with T the 16-bit type (__nv_bfloat16 or __half) */
template <typename T>
__device__ static inline void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

template <>
__device__ inline void mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ inline void mma16816<__half>(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
	             "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async: a copy of 16 bytes (cp_async16) or 4 (cp_async4) from global
 * memory at src to shared memory at dst, of which the first `valid` bytes
 * are read and the rest zeros (valid 0: src is not read, but must be a
 * global address), issued now and landing later: cp_async_commit closes
 * the thread's copies issued since the last commit into a group, and
 * cp_async_wait<n> waits until all but the newest n groups have landed.
 * Other threads see them only after a __syncthreads that follows the wait.
 * (sm_80 and later.) */
__device__ static inline void cp_async16(void *dst, const void *src, int valid)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src),
	             "r"(valid)
	             : "memory");
}

__device__ static inline void cp_async4(void *dst, const void *src, int valid)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(a), "l"(src), "r"(valid)
	             : "memory");
}

__device__ static inline void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ static inline void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* dst[0] += a and dst[1] += b in global memory, atomically, the old values
 * not read back (red): one vector operation on sm_90, two before. dst
 * 8-byte aligned. */
__device__ static inline void red_add2(float *dst, float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b)
	             : "memory");
#else
	atomicAdd(dst, a);
	atomicAdd(dst + 1, b);
#endif
}

/* lo and hi rounded to nearest even in one instruction, as a register
 * (the bits of to16_bits, NaNs aside) */
__device__ static inline uint32_t pack16x2(float lo, float hi, int bf16)
{
	if (bf16) {
		__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
		return __bfloat16_as_ushort(v.x) | (uint32_t)__bfloat16_as_ushort(v.y) << 16;
	}
	__half2 v = __floats2half2_rn(lo, hi);
	return __half_as_ushort(v.x) | (uint32_t)__half_as_ushort(v.y) << 16;
}

#else

__device__ static inline uint32_t pack16x2(float lo, float hi, int bf16)
{
	return to16_bits(lo, bf16) | (uint32_t)to16_bits(hi, bf16) << 16;
}

#endif

#endif
