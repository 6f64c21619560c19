/* tests/unit/cuda_emu.hh - just enough of CUDA's device side to run a few
 * of our kernels on the CPU (C++20), for tests that check a kernel's logic
 * where no GPU is: indexing, tiling, masking, the order of its barriers.
 *
 * A launch runs the grid's blocks one after another; a block's threads are
 * real threads (std::thread), so __syncthreads and __syncwarp are
 * barriers: a kernel that reads what another thread has not written yet,
 * or skips a barrier, reads stale data here as on a GPU (or deadlocks).
 * A kernel's __shared__ arrays become static ones, and dynamic shared
 * memory (KERN_DYNAMIC_SMEM) one buffer, each block's in turn.
 *
 * WMMA (nvcuda::wmma, 16x16x16): every lane of a warp holds the whole
 * fragment and does the whole operation, which is what a warp-collective
 * operation looks like from any one lane; loads and stores read and write
 * the documented layouts (row_major: element (r, c) at p[r * ldm + c];
 * col_major: at p[c * ldm + r]). Products and sums in fp32, in k order.
 * A store is seen by the whole warp at once (each lane writes it all), so
 * a missing __syncwarp after one goes unnoticed; one before a load does
 * not (the lanes read, then meet).
 * The 16-bit types are their bit patterns. What this cannot show: timing,
 * occupancy, bank conflicts, and alignment faults.
 */
#ifndef LARCH_TESTS_CUDA_EMU_HH
#define LARCH_TESTS_CUDA_EMU_HH

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
/* a kernel's __shared__ arrays: one for all threads (blocks run in turn) */
#define __shared__ static

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 {
	uint32_t x, y;
};
struct alignas(16) uint4 {
	uint32_t x, y, z, w;
};
struct alignas(16) float4 {
	float x, y, z, w;
};
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w)
{
	return uint4{ x, y, z, w };
}
static inline float4 make_float4(float x, float y, float z, float w)
{
	return float4{ x, y, z, w };
}

inline thread_local dim3 threadIdx, blockIdx;
inline thread_local unsigned emu_tid;  /* the thread's linear index in its block */
inline dim3 blockDim, gridDim;

/* the block's barriers and the warps' exchange slots */
struct emu_block {
	std::unique_ptr<std::barrier<>> all;
	std::vector<std::unique_ptr<std::barrier<>>> warps;
	std::vector<uint32_t> slot;
};
inline emu_block *emu_cur;

/* dynamic shared memory (one translation unit a test) */
alignas(128) unsigned char emu_smem[1 << 17];
#define KERN_DYNAMIC_SMEM(name) unsigned char *name = emu_smem

static inline void __syncthreads()
{
	emu_cur->all->arrive_and_wait();
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)mask;
	emu_cur->warps[emu_tid / 32]->arrive_and_wait();
}

static inline uint32_t __float_as_uint(float f)
{
	uint32_t u;
	std::memcpy(&u, &f, sizeof u);
	return u;
}

static inline float __uint_as_float(uint32_t u)
{
	float f;
	std::memcpy(&f, &u, sizeof f);
	return f;
}

static inline float __fadd_rn(float a, float b)
{
	return a + b;
}

static inline float __fmul_rn(float a, float b)
{
	return a * b;
}

static inline int min(int a, int b)
{
	return a < b ? a : b;
}

/* every lane of the warp puts its value, then takes lane src's */
template <typename V>
static inline V emu_exchange(V v, unsigned src)
{
	static_assert(sizeof(V) == 4, "32-bit values");
	unsigned base = emu_tid - emu_tid % 32;
	uint32_t bits;
	std::memcpy(&bits, &v, 4);
	emu_cur->slot[emu_tid] = bits;
	__syncwarp();
	bits = emu_cur->slot[base + src];
	__syncwarp();
	std::memcpy(&v, &bits, 4);
	return v;
}

template <typename V>
static inline V __shfl_xor_sync(unsigned mask, V v, int off)
{
	(void)mask;
	return emu_exchange(v, (emu_tid % 32) ^ (unsigned)off);
}

template <typename V>
static inline V __shfl_sync(unsigned mask, V v, int src)
{
	(void)mask;
	return emu_exchange(v, (unsigned)src);
}

/* Runs kernel() as every thread of every block of grid x block. */
static inline void emu_launch(dim3 grid, dim3 block, const std::function<void()> &kernel)
{
	gridDim = grid;
	blockDim = block;
	unsigned n = block.x * block.y * block.z;
	for (unsigned by = 0; by < grid.y; by++)
		for (unsigned bx = 0; bx < grid.x; bx++) {
			emu_block b;
			b.all = std::make_unique<std::barrier<>>(n);
			for (unsigned w = 0; w < (n + 31) / 32; w++)
				b.warps.push_back(std::make_unique<std::barrier<>>(
					n - w * 32 < 32 ? n - w * 32 : 32));
			b.slot.assign(n, 0);
			emu_cur = &b;
			std::vector<std::thread> threads;
			for (unsigned i = 0; i < n; i++)
				threads.emplace_back([&, i] {
					emu_tid = i;
					threadIdx = dim3(i % block.x, i / block.x % block.y,
					                 i / (block.x * block.y));
					blockIdx = dim3(bx, by, 0);
					kernel();
				});
			for (auto &t : threads)
				t.join();
			emu_cur = nullptr;
		}
}

/* ---- 16-bit types and WMMA -------------------------------------------------- */

struct __half {
	uint16_t bits;
};
struct __nv_bfloat16 {
	uint16_t bits;
};

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
	float x[16 * 16];
};

float emu_value(const __half *p);
float emu_value(const __nv_bfloat16 *p);

template <typename Use, typename T, typename Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p,
                                    unsigned ldm)
{
	constexpr bool col = std::is_same_v<Layout, col_major>;
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++)
			f.x[r * 16 + c] = emu_value(col ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c);
	__syncwarp();
}

static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v)
{
	for (float &e : f.x)
		e = v;
}

template <typename T, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
	float out[256];
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float s = c.x[i * 16 + j];
			for (int k = 0; k < 16; k++)
				s += a.x[i * 16 + k] * b.x[k * 16 + j];
			out[i * 16 + j] = s;
		}
	std::memcpy(d.x, out, sizeof out);
}

/* every lane writes the whole tile (the same values), then the warp meets */
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout)
{
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++)
			p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] =
				f.x[r * 16 + c];
	__syncwarp();
}

} // namespace wmma
} // namespace nvcuda

#endif
