/* tests/unit/cuda_emu.hh - just enough of CUDA's device side to run a few
 * of our kernels on the CPU (C++20), for tests that check a kernel's logic
 * where no GPU is: indexing, tiling, masking, the order of its barriers.
 *
 * A launch runs the grid's blocks one after another; a block's threads are
 * fibers (a stack each, switched by emu_ctx_switch) that one OS thread runs
 * in turn, each until it reaches
 * a barrier (__syncthreads, __syncwarp) or ends: a barrier lets its
 * threads on once all of them reached it, so a kernel that reads what
 * another thread has not written yet, or skips a barrier, reads stale data
 * here as on a GPU. The launch always runs the first thread that may run,
 * in index order, so that a warp runs ahead of the later ones as far as
 * its barriers let it, and a read that races another warp's write reads
 * the stale value; after each __syncthreads (and in every other block)
 * the order is the reverse, for the earlier warps' writes. Threads
 * that all wait with none left to run are a kernel that would hang on a
 * GPU: the launch says so and aborts. (Fibers, not OS threads: a barrier
 * of a thousand threads is a thousand context switches through the
 * kernel, which made these tests take minutes; and a switch of our own,
 * not swapcontext, which makes a system call per switch and, under ASan,
 * clears the shadow of the whole stack it switches to.)
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

#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
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

/* the running thread's (set at each switch to it) */
inline dim3 threadIdx, blockIdx;
inline unsigned emu_tid;               /* the thread's linear index in its block */
inline dim3 blockDim, gridDim;

/* a barrier of `expected` threads: those waiting at it (by index) */
struct emu_bar {
	unsigned expected = 0, count = 0;
	std::vector<unsigned> waiting;
};

/* cp.async's copies (below) */
struct emu_copy {
	void *dst;
	const void *src;
	int bytes, valid;
};

/* emu_ctx_switch(&save, to): saves the callee-saved registers on this
 * stack and its pointer in save, then takes up the stack at to where a
 * switch left it (or emu_fiber_init made it) and returns there */
#if !defined(__x86_64__)
#error "cuda_emu.hh switches stacks on x86-64 only"
#endif
extern "C" void emu_ctx_switch(void **save, void *to);
asm(R"(
	.pushsection .text
	.globl emu_ctx_switch
	.type emu_ctx_switch, @function
emu_ctx_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_ctx_switch, .-emu_ctx_switch
	.popsection
)");

/* a block's thread: its stack and where it stopped, and whether it waits
 * or ended */
struct emu_fiber {
	void *sp;
	char *stack;                       /* emu_stack(i): kept from launch to launch */
	int waiting, done;
	std::vector<std::vector<emu_copy>> groups;   /* cp.async: committed, oldest first */
	std::vector<emu_copy> open;                  /* issued, not committed */
};

/* the block's barriers, threads and the warps' exchange slots */
struct emu_block {
	emu_bar all;
	std::vector<emu_bar> warps;
	std::vector<emu_fiber> fibers;
	std::vector<uint32_t> slot;
	std::vector<unsigned char> wide;   /* emu_gather's: 64 bytes a thread */
	int reverse;                       /* the launch's order: the last thread first */
	void *sched_sp = nullptr;          /* the launch's own stack, where it stopped */
	const void *sched_stack = nullptr; /* its stack (the sanitizer's fiber switches) */
	size_t sched_size = 0;
	const std::function<void()> *kernel = nullptr;
};
inline emu_block *emu_cur;

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

/* The running thread gives the OS thread back to the launch (it waits at
 * a barrier: it runs again once let on). */
static inline void emu_yield(void)
{
	emu_fiber &f = emu_cur->fibers[emu_tid];
#if EMU_ASAN
	void *fake = nullptr;
	__sanitizer_start_switch_fiber(&fake, emu_cur->sched_stack, emu_cur->sched_size);
#endif
	emu_ctx_switch(&f.sp, emu_cur->sched_sp);
#if EMU_ASAN
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static inline void emu_bar_wait(emu_bar &b)
{
	if (++b.count == b.expected) {     /* the last to arrive: everyone on */
		b.count = 0;
		for (unsigned i : b.waiting)
			emu_cur->fibers[i].waiting = 0;
		b.waiting.clear();
		return;
	}
	b.waiting.push_back(emu_tid);
	emu_cur->fibers[emu_tid].waiting = 1;
	emu_yield();
}

/* dynamic shared memory (one translation unit a test) */
alignas(128) unsigned char emu_smem[1 << 17];
#define KERN_DYNAMIC_SMEM(name) unsigned char *name = emu_smem

static inline void __syncthreads()
{
	if (emu_cur->all.count + 1 == emu_cur->all.expected)
		emu_cur->reverse ^= 1;         /* the last one: the order turns */
	emu_bar_wait(emu_cur->all);
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)mask;
	emu_bar_wait(emu_cur->warps[emu_tid / 32]);
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

/* a fiber's start: the kernel, then back to the launch for good (its
 * stack is not returned to) */
static void emu_fiber_main(void)
{
#if EMU_ASAN
	__sanitizer_finish_switch_fiber(nullptr, &emu_cur->sched_stack, &emu_cur->sched_size);
#endif
	(*emu_cur->kernel)();
	emu_fiber &f = emu_cur->fibers[emu_tid];
	f.done = 1;
#if EMU_ASAN
	__sanitizer_start_switch_fiber(nullptr, emu_cur->sched_stack, emu_cur->sched_size);
#endif
	emu_ctx_switch(&f.sp, emu_cur->sched_sp);
	std::abort();                      /* never switched to again */
}

/* a thread's stack: the kernels' locals (the tensor-core emulation's
 * operands are the largest), more under the sanitizer's redzones */
#define EMU_STACK ((EMU_ASAN ? 256 : 64) * 1024)

/* Thread i's stack, mapped on first use and kept for the process: a
 * launch of a thousand threads would otherwise map (and, under ASan,
 * poison) a thousand stacks, launch after launch */
static char *emu_stack(unsigned i)
{
	static std::vector<char *> stacks;
	while (stacks.size() <= i) {
		void *p = mmap(nullptr, EMU_STACK, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			std::perror("cuda_emu: mmap");
			std::abort();
		}
		stacks.push_back((char *)p);
	}
	return stacks[i];
}

/* The launch runs f until it waits or ends */
__attribute__((noinline)) static void emu_switch_to(emu_block &b, emu_fiber &f)
{
#if EMU_ASAN
	void *fake = nullptr;
	__sanitizer_start_switch_fiber(&fake, f.stack, EMU_STACK);
#endif
	emu_ctx_switch(&b.sched_sp, f.sp);
#if EMU_ASAN
	__sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

/* f's stack, as emu_ctx_switch leaves one: six registers' slots, then
 * emu_fiber_main's address for its ret, then a return address slot, so
 * that emu_fiber_main starts with the stack aligned as after a call */
static void emu_fiber_init(emu_fiber &f)
{
	uintptr_t top = ((uintptr_t)f.stack + EMU_STACK) & ~(uintptr_t)15;
	void **p = (void **)top;
	*--p = nullptr;
	*--p = (void *)emu_fiber_main;
	for (int i = 0; i < 6; i++)
		*--p = nullptr;
	f.sp = p;
}

/* Runs kernel() as every thread of every block of grid x block. */
static inline void emu_launch(dim3 grid, dim3 block, const std::function<void()> &kernel)
{
	gridDim = grid;
	blockDim = block;
	unsigned n = block.x * block.y * block.z;
	emu_block b;
	b.kernel = &kernel;
	b.fibers.resize(n);
	for (unsigned i = 0; i < n; i++)
		b.fibers[i].stack = emu_stack(i);
	b.slot.assign(n, 0);
	b.wide.assign((size_t)n * 64, 0);
	emu_cur = &b;
	for (unsigned by = 0; by < grid.y; by++)
		for (unsigned bx = 0; bx < grid.x; bx++) {
			b.all = emu_bar{ n, 0, {} };
			b.warps.clear();
			for (unsigned w = 0; w < (n + 31) / 32; w++)
				b.warps.push_back(emu_bar{ n - w * 32 < 32 ? n - w * 32 : 32, 0, {} });
			for (unsigned i = 0; i < n; i++) {
				emu_fiber &f = b.fibers[i];
				f.waiting = f.done = 0;
				f.groups.clear();
				f.open.clear();
				emu_fiber_init(f);
			}
			b.reverse = (int)((bx + by) % 2);
			for (unsigned left = n; left > 0;) {
				unsigned i = n;
				for (unsigned k = 0; k < n && i == n; k++) {
					unsigned j = b.reverse ? n - 1 - k : k;
					if (!b.fibers[j].done && !b.fibers[j].waiting)
						i = j;
				}
				if (i == n) {
					std::fprintf(stderr, "cuda_emu: block (%u, %u): every thread left waits "
					             "at a barrier the others never reach (a GPU would hang)\n",
					             bx, by);
					std::abort();
				}
				emu_fiber &f = b.fibers[i];
				emu_tid = i;
				threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
				blockIdx = dim3(bx, by, 0);
				emu_switch_to(b, f);
				left -= f.done;
			}
		}
	emu_cur = nullptr;
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
static inline void emu_cp_async(void *dst, const void *src, int bytes, int valid)
{
	emu_cur->fibers[emu_tid].open.push_back(emu_copy{ dst, src, bytes, valid });
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
	emu_fiber &f = emu_cur->fibers[emu_tid];
	f.groups.push_back(f.open);
	f.open.clear();
}

template <int N>
static inline void cp_async_wait(void)
{
	emu_fiber &f = emu_cur->fibers[emu_tid];
	while (f.groups.size() > (size_t)N) {
		for (const emu_copy &c : f.groups.front()) {
			std::memset(c.dst, 0, (size_t)c.bytes);
			std::memcpy(c.dst, c.src, (size_t)c.valid);
		}
		f.groups.erase(f.groups.begin());
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
