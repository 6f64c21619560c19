/* kernels/optimizer_simd.h - the optimizer's loops over one span of a tensor,
 * a set per instruction set, and the choice among them. The loops are
 * internal to kernels/ (optimizer_cpu.c runs them on its threads); the
 * choice is the caller's: the trainer's option cpu_isa, and the tests and
 * benchmark that run each set, through kern_optim_set_isa.
 *
 * Every set computes the header's formulas (optimizer.h) with the same
 * float operations in the same order: plain multiplies and adds (no FMA),
 * exact division and a correctly rounded square root. The updates come out
 * bit for bit equal to the reference on every set. Sums of squares go to
 * OPT_LANES double accumulators, element i of a span to lane i % OPT_LANES,
 * added up in lane order: the same bits on every set too.
 */
#ifndef LARCH_KERNELS_OPTIMIZER_SIMD_H
#define LARCH_KERNELS_OPTIMIZER_SIMD_H

#define OPT_LANES 32

enum kern_isa {
	KERN_ISA_SCALAR,            /* plain C, any CPU */
	KERN_ISA_AVX2,              /* 8 floats a vector */
	KERN_ISA_AVX512,            /* 16 floats a vector (AVX-512F) */
	KERN_ISA_COUNT
};

/* Adam's scalars (AdamW and LAMB), as the kern_*_cpu calls take them. */
struct opt_adam {
	float lr, b1, b2, eps, wd, bc1, bc2;
};

/* One instruction set's loops over [0, n), single-threaded. The arguments
 * are the kern_*_cpu calls' (optimizer.h); sumsq and lamb_moments return
 * their span's sum. */
struct opt_loops {
	double (*sumsq)(const float *x, long n);
	void (*scale)(float *x, long n, float s);
	void (*sgd)(float *w, float *m, const float *g, long n, float lr, float mu, float wd,
	            int nesterov);
	void (*adamw)(float *w, float *m, float *v, const float *g, long n,
	              const struct opt_adam *a);
	void (*lars)(float *w, float *m, const float *g, long n, float step, float mu, float wd);
	double (*lamb_moments)(float *m, float *v, const float *g, const float *w, long n,
	                       const struct opt_adam *a);
	void (*lamb_apply)(float *w, const float *m, const float *v, long n, float step,
	                   const struct opt_adam *a);
};

/* optimizer_simd.c compiled with -mavx2 and with -mavx512f (x86-64 only,
 * where kernels/CMakeLists.txt defines LARCH_OPT_SIMD). */
extern const struct opt_loops kern_optim_loops_avx2;
extern const struct opt_loops kern_optim_loops_avx512;

/* The set the kern_*_cpu updates and norms run on: kern_optim_set_isa's,
 * else the widest this CPU has (kern_isa_widest). */
enum kern_isa kern_optim_isa(void);

/* The widest set this CPU and build run. */
enum kern_isa kern_isa_widest(void);

/* The loops of kern_optim_isa()'s set: for kernels that run the updates on
 * spans of their own (quant8_cpu.c's fused int8 updates, block by block). */
const struct opt_loops *kern_optim_loops(void);

/* Makes them run on isa from now on (tests, benchmarks; not while a
 * kern_*_cpu call runs). Returns 0, or -1 when this CPU or this build lacks
 * isa, which changes nothing. */
int kern_optim_set_isa(enum kern_isa isa);

/* Whether this CPU and build can run isa. */
int kern_isa_supported(enum kern_isa isa);

/* "scalar", "avx2", "avx512"; kern_isa_parse returns -1 for other names. */
const char *kern_isa_name(enum kern_isa isa);
int kern_isa_parse(const char *name);

#endif
