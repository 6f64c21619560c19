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
 * The tensor cores' warp-level primitives of kernels/mma_cuda.cuh
 * (ldmatrix, mma.m16n8k16) gather the warp's registers or addresses and
 * give each lane the values the PTX ISA's layout tables say it holds, so a
 * kernel that puts a value in the wrong lane's register computes the wrong
 * product here too. ldmatrix checks that each row address is 16-byte
 * aligned; mma sums in fp32 in k order.
 * The 16-bit types are their bit patterns. What this cannot show: timing,
 * occupancy, bank conflicts, and other alignment faults.
 */
#ifndef LARCH_TESTS_CUDA_EMU_HH
#define LARCH_TESTS_CUDA_EMU_HH

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#define __launch_bounds__(...)
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
	std::vector<unsigned char> wide;   /* emu_gather's: 64 bytes a thread */
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

/* an atomic add to global memory (what comes back: the old value) */
static inline float atomicAdd(float *p, float v)
{
	return std::atomic_ref<float>(*p).fetch_add(v);
}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
	return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
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

/* every lane of the warp puts v, then takes all 32 lanes' */
template <typename V>
static inline void emu_gather(const V &v, V all[32])
{
	static_assert(sizeof(V) <= 64, "at most 64 bytes a lane");
	unsigned base = emu_tid - emu_tid % 32;
	std::memcpy(&emu_cur->wide[(size_t)emu_tid * 64], &v, sizeof v);
	__syncwarp();
	for (unsigned l = 0; l < 32; l++)
		std::memcpy(&all[l], &emu_cur->wide[(size_t)(base + l) * 64], sizeof(V));
	__syncwarp();
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
			b.wide.assign((size_t)n * 64, 0);
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

/* ---- 16-bit types ------------------------------------------------------------ */

struct __half {
	uint16_t bits;
};
struct __nv_bfloat16 {
	uint16_t bits;
};

/* the value of a 16-bit pattern, bf16 or fp16 (the test defines it) */
float emu_of16(uint16_t bits, bool bf16);

/* ---- kernels/mma_cuda.cuh's primitives, lane by lane ---------------------- */

#define KERN_MMA_EMULATED 1

/* ldmatrix .x4: lane l gets, of matrix i (rows at lanes 8i..8i+7's
 * addresses), row l / 4's values 2 (l % 4) and 2 (l % 4) + 1; transposed,
 * the rows 2 (l % 4) and 2 (l % 4) + 1's value l / 4 */
static inline void emu_ldsm(uint32_t r[4], const uint16_t *p, bool trans)
{
	if ((uintptr_t)p % 16) {
		std::fprintf(stderr, "cuda_emu: ldmatrix row address %p is not 16-byte aligned\n",
		             (const void *)p);
		std::abort();
	}
	const uint16_t *rows[32];
	emu_gather(p, rows);
	unsigned lane = emu_tid % 32, g = lane / 4, q = lane % 4;
	for (int i = 0; i < 4; i++) {
		uint16_t lo, hi;
		if (trans) {
			lo = rows[8 * i + 2 * q][g];
			hi = rows[8 * i + 2 * q + 1][g];
		} else {
			lo = rows[8 * i + g][2 * q];
			hi = rows[8 * i + g][2 * q + 1];
		}
		r[i] = lo | (uint32_t)hi << 16;
	}
}

static inline void ldsm_x4(uint32_t r[4], const uint16_t *p)
{
	emu_ldsm(r, p, false);
}

/* cp.async: each thread's copies wait in its own queue, in groups, and
 * land only at cp_async_wait (all but the newest n groups), so that a
 * kernel that reads a tile before waiting for it reads the old one here
 * too; the bytes are read from global memory when they land, as late as a
 * GPU may read them. */
struct emu_copy {
	void *dst;
	const void *src;
	int bytes, valid;
};
inline thread_local std::vector<std::vector<emu_copy>> emu_groups;  /* committed, oldest first */
inline thread_local std::vector<emu_copy> emu_open;                 /* issued, not committed */

static inline void emu_cp_async(void *dst, const void *src, int bytes, int valid)
{
	emu_open.push_back(emu_copy{ dst, src, bytes, valid });
}

static inline void cp_async16(void *dst, const void *src, int valid)
{
	emu_cp_async(dst, src, 16, valid);
}

static inline void cp_async4(void *dst, const void *src, int valid)
{
	emu_cp_async(dst, src, 4, valid);
}

static inline void cp_async_commit(void)
{
	emu_groups.push_back(emu_open);
	emu_open.clear();
}

template <int N>
static inline void cp_async_wait(void)
{
	while (emu_groups.size() > (size_t)N) {
		for (const emu_copy &c : emu_groups.front()) {
			std::memset(c.dst, 0, (size_t)c.bytes);
			std::memcpy(c.dst, c.src, (size_t)c.valid);
		}
		emu_groups.erase(emu_groups.begin());
	}
}

static inline void ldsm_x4_t(uint32_t r[4], const uint16_t *p)
{
	emu_ldsm(r, p, true);
}

static inline void red_add2(float *dst, float a, float b)
{
	if ((uintptr_t)dst % 8) {
		std::fprintf(stderr, "cuda_emu: red.v2.f32 address %p is not 8-byte aligned\n",
		             (const void *)dst);
		std::abort();
	}
	atomicAdd(dst, a);
	atomicAdd(dst + 1, b);
}

/* mma.m16n8k16 with fp32 accumulators: the warp's a and b registers
 * gathered into the [16, 16] and [16, 8] operands by the layout tables,
 * then this lane's four elements of d */
template <typename T>
static inline void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
	struct regs {
		uint32_t a[4], b[2];
	} mine = { { a[0], a[1], a[2], a[3] }, { b0, b1 } }, all[32];
	emu_gather(mine, all);
	auto value = [](uint32_t reg, int high) {
		return emu_of16((uint16_t)(high ? reg >> 16 : reg & 0xffffu),
		                std::is_same_v<T, __nv_bfloat16>);
	};
	float am[16][16], bm[16][8];
	for (unsigned l = 0; l < 32; l++) {
		unsigned g = l / 4, q = l % 4;
		for (int i = 0; i < 8; i++) {
			unsigned row = g + ((i / 2) % 2) * 8, col = 2 * q + i % 2 + (i / 4) * 8;
			am[row][col] = value(all[l].a[i / 2], i % 2);
		}
		for (int i = 0; i < 4; i++)
			bm[2 * q + i % 2 + (i / 2) * 8][g] = value(all[l].b[i / 2], i % 2);
	}
	unsigned lane = emu_tid % 32, g = lane / 4, q = lane % 4;
	for (int i = 0; i < 4; i++) {
		unsigned row = g + (i / 2) * 8, col = 2 * q + i % 2;
		float s = d[i];
		for (int k = 0; k < 16; k++)
			s += am[row][k] * bm[k][col];
		d[i] = s;
	}
}

#endif
