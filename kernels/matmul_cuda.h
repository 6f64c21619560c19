/* kernels/matmul_cuda.h - fully connected layer on the GPU (matmul_cuda.cu);
 * the contract is matmul.h's: out = inp @ weight^T + bias, backward adds into
 * dweight and dbias and, except in the _set version, into dinp. Pointers are
 * device pointers; the work goes on kern_cuda_stream().
 *
 * GEMMs run in plain FP32 (no TF32) through cuBLAS; the bias gradient is a
 * column sum of our own in a fixed order.
 * Every result is bit-identical from run to run on the same GPU model and
 * library versions, unless the 16-bit GEMMs are tuned
 * (kern_matmul_cuda_gemm_tune), whose pick of algorithm may vary. */
#ifndef LARCH_KERNELS_MATMUL_CUDA_H
#define LARCH_KERNELS_MATMUL_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void kern_matmul_fwd_cuda(float *out, const float *inp, const float *weight,
                          const float *bias, int n, int c, int oc);
void kern_matmul_bwd_cuda(float *dinp, float *dweight, float *dbias,
                          const float *dout, const float *inp, const float *weight,
                          int n, int c, int oc);
void kern_matmul_bwd_set_cuda(float *dinp, float *dweight, float *dbias,
                              const float *dout, const float *inp, const float *weight,
                              int n, int c, int oc);

/* The same with out's (dout's) rows ldo (ldd) floats apart, ldo >= oc: out
 * and dout span n * ldo floats. The padding columns of dout are never used
 * (NaN there does no harm); those of out are left as they were, except that
 * a forward with 16-bit operands, no bias and ldo a multiple of 8 writes
 * zeros there (its GEMM runs over all ldo columns). A row stride that is a multiple of 8 lets
 * cuBLAS use its aligned kernels where oc is odd, as GPT-2's vocabulary
 * (50257) is. */
void kern_matmul_fwd_ld_cuda(float *out, int ldo, const float *inp, const float *weight,
                             const float *bias, int n, int c, int oc);
void kern_matmul_bwd_set_ld_cuda(float *dinp, float *dweight, float *dbias,
                                 const float *dout, int ldd, const float *inp,
                                 const float *weight, int n, int c, int oc);

/* How the forward adds the bias, for tests and benchmarks: 1 (the default)
 * in the GEMM's epilogue (cuBLASLt), 0 by writing the bias into out and
 * letting the GEMM add onto it (cuBLAS, beta = 1). Returns the previous
 * setting. */
int kern_matmul_cuda_fused_bias(int on);

/* How the 16-bit backward's weight gradient GEMM treats an output count oc
 * that is not a multiple of 8 (GPT-2's vocabulary, 50257), for tests and
 * benchmarks: 1 in two GEMMs, the columns up to the last multiple of 64
 * and the rest (cuBLAS takes an odd oc off its sm90 kernels for the whole
 * GEMM), 0 (the default, until a GPU run shows the split wins) in one. The same sums either way, each over the rows in the
 * algorithm's order. Returns the previous setting. */
int kern_matmul_cuda_split_odd(int on);

/* The GEMMs' operands: KERN_MM_FP32 (the default: cuBLAS in plain FP32), or
 * KERN_MM_BF16 / KERN_MM_FP16: inp, weight and dout are converted to 16 bits
 * (exactly, when they hold 16-bit values, as mixed precision's activations
 * and weights do) and multiplied on the tensor cores with fp32 sums and fp32
 * results (cublasGemmEx, CUBLAS_COMPUTE_32F): the numerics of a 16-bit GEMM
 * with fp32 accumulation. The bias and its gradient stay fp32. Process-wide;
 * returns the previous setting. */
enum { KERN_MM_FP32, KERN_MM_FP16, KERN_MM_BF16 };
int kern_matmul_cuda_operands(int dtype);

/* The caller's 16-bit copy (of KERN_MM_* type dtype) of the fp32 weights
 * w[0..n): the GEMMs read a weight or bias that lies in w[0..n) with 16-bit
 * operands of that type from w16 instead of converting it at each call, at
 * w16 + i for w + i, but past a gap of pad values at pad_at: w16 + i + pad
 * for i >= pad_at. Those pad values must be zeros: they are the rows a
 * padded ld adds to the weight that ends at pad_at (the _ld functions
 * below, ldo or ldd > oc), which then needs no padded copy either. Only
 * where the copy is 16-byte aligned (the scratch copies are; cuBLASLt's
 * bias epilogue needs it): a tensor at an odd offset is converted as
 * before. The caller keeps w16 equal to w's values (which must be 16-bit
 * values) for as long as it is set, and sets it again (NULL: none) when
 * that stops. */
void kern_matmul_cuda_weights16(const float *w, const uint16_t *w16, long n, long pad_at,
                                long pad, int dtype);

/* Such a copy, as registered, and where it holds x[0..len): the index into
 * w16 of x's first value, or -1 when it does not hold x (outside it, across
 * its gap) or holds it not 16-byte aligned. matmul_cuda.cu's GEMMs and the
 * CPU stand-in of them (tests/unit/cuda_shim.c) look up so. */
struct kern_w16 {
	const float *w;                    /* NULL: none */
	const uint16_t *w16;
	long n, pad_at, pad;
	int dtype;                         /* KERN_MM_* */
};

static inline long kern_w16_place(const struct kern_w16 *k, const float *x, long len)
{
	uintptr_t a = (uintptr_t)x, w = (uintptr_t)k->w;
	if (!k->w || a < w || (a - w) % sizeof(float) != 0)
		return -1;
	long i = (long)((a - w) / sizeof(float));
	if (i > k->n - len || (i < k->pad_at && i + len > k->pad_at))
		return -1;
	long at = i + (i >= k->pad_at ? k->pad : 0);
	return (uintptr_t)(k->w16 + at) % 16 == 0 ? at : -1;
}

/* The same on activations (out, inp; dinp, dout) stored as a16 says
 * (cuda_common.h). With KERN_ACT_16 the GEMMs read the 16-bit activations
 * in place and write out and dinp as 16 bits, rounded from the fp32 sums
 * (the bias added before, in cuBLASLt's epilogue: the bias and weight must
 * hold 16-bit values, as a mixed-precision model's do); dweight and dbias
 * get fp32 sums. In the _ld
 * backward with ldd > oc, dout's padding columns are read (times zero rows
 * of weight) and must hold finite values: zero them once. */
void kern_matmul_fwd_act_cuda(int a16, void *out, const void *inp, const float *weight,
                              const float *bias, int n, int c, int oc);
void kern_matmul_fwd_ld_act_cuda(int a16, void *out, int ldo, const void *inp,
                                 const float *weight, const float *bias, int n, int c, int oc);
void kern_matmul_bwd_set_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const float *weight, int n,
                                  int c, int oc);
void kern_matmul_bwd_set_ld_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                     const void *dout, int ldd, const void *inp,
                                     const float *weight, int n, int c, int oc);

/* A fully connected layer followed by GELU, as a GPT's MLP has it:
 *   forward   pre = inp weight^T + bias, out = gelu(pre)    (out, pre [n, oc])
 *   backward  for the layer that reads out (inp here is that out, [n, c]),
 *             dpre = gelu'(pre) * (dout weight)             (dpre, pre [n, c])
 *             with dweight and dbias as kern_matmul_bwd_set_act_cuda's.
 * Without kern_matmul_cuda_fused_gelu, or with fp32 buffers, they are
 * kern_matmul_*_act_cuda and kern_gelu_*_act_cuda one after the other. With
 * it and 16-bit storage, GELU goes into the GEMM's epilogue (cuBLASLt's
 * GELU_AUX_BIAS forward, writing pre beside out; DGELU backward, reading
 * it), where cuBLASLt has an algorithm for the shape: GELU then takes the
 * fp32 sum where the separate kernel takes pre rounded to 16 bits (and its
 * gradient the product's fp32 sum), so the values move by about a 16-bit
 * spacing; tests/gpu/test_cuda_act16.c holds them to that. */
void kern_matmul_gelu_fwd_act_cuda(int a16, void *out, void *pre, const void *inp,
                                   const float *weight, const float *bias, int n, int c, int oc);
void kern_matmul_bwd_set_dgelu_act_cuda(int a16, void *dpre, float *dweight, float *dbias,
                                        const void *dout, const void *inp, const float *weight,
                                        const void *pre, int n, int c, int oc);
/* Whether those fuse GELU into the GEMMs (the library's default 0; the GPU
 * GPT turns it on with 16-bit activations, trainer/spec/plan.h).
 * Returns the previous setting. */
int kern_matmul_cuda_fused_gelu(int on);
/* How many GEMMs have taken GELU into their epilogue so far (those cuBLASLt
 * had an algorithm for), for tests and benchmarks. */
long kern_matmul_cuda_fused_gelu_gemms(void);
/* How many cuBLASLt problems (an epilogue, shape, types and pointer
 * alignments) cuBLASLt has had no algorithm for so far; each took the
 * unfused path and was named once on stderr. For tests and benchmarks. */
long kern_matmul_cuda_lt_refused(void);
/* Whether the 16-bit GEMMs are tuned with the bits free to move, as
 * cuDNN's benchmark mode tunes convolutions: 0 (off, the default) each
 * runs cuBLAS's or cuBLASLt's heuristic's pick, or the fastest with its
 * bits (kern_matmul_cuda_gemm_same, below); n >= 2 each runs through
 * cuBLASLt (the GEMMs with no epilogue too) and a problem's first call
 * (shape, types, epilogue, alignments) times the heuristic's first n
 * candidates on its operands, the problem keeping the fastest from then
 * on: one synchronizing pass of a few runs of each, in a training run's
 * first step. The sums' order is
 * the algorithm's, so that the bits may differ from run to run (each pick
 * is the same on every later call). Off by default (the trainer turns it
 * on for a spec's "deterministic": false); candidates >= 0 sets it (2 to
 * 16, or 0 or 1: off), -1 only asks. Returns the previous setting. */
int kern_matmul_cuda_gemm_tune(int candidates);
/* How many problems have been tuned so far, and (other, when not NULL)
 * how many of them picked other than the heuristic's first (each named
 * once on stderr, with both times), for tests and benchmarks. */
long kern_matmul_cuda_gemm_tuned(long *other);
/* The file the tuned GEMMs' picks are kept in (kernels/tune_table.h), or
 * NULL for none (the default): a problem whose pick the file holds (the
 * same device, cuBLASLt version, shape, types, epilogue and alignments)
 * takes it without timing, where cuBLASLt still accepts it; each new pick
 * is added to the file. So a run that goes on from a checkpoint in the same
 * job directory computes with the algorithms of the run before it, and
 * gives its bits. Drops every cached plan. Returns the picks read, or -1
 * when the file cannot be read (said on stderr; no file kept then). */
int kern_matmul_cuda_gemm_tune_file(const char *path);
/* How many problems took their pick from that file so far. */
long kern_matmul_cuda_gemm_tune_reused(void);
/* Whether, without that tuning, the GEMMs are tuned for the same bits: a
 * problem's first call (shape, types, epilogue, alignments) runs its
 * default path (cuBLAS's call for a 16-bit GEMM without epilogue, else
 * cuBLASLt's heuristic's first algorithm) and up to 7 more of cuBLASLt's
 * candidates on its operands (from one pattern of C where it adds), keeps those whose
 * outputs (D, and the epilogue's aux matrix or bias gradient) hash the same
 * as the default's, and times them with the default as the kernels'
 * variants are timed (kern_cuda_variant_pick, cuda_common.h: "larch:
 * kernels timed: gemm;..." on stderr, and kern_cuda_opts's kernel_picks
 * takes such picks): the default path's bits whichever is kept, so a run
 * stays deterministic. Each problem checked is said on stderr ("larch: GEMM
 * same bits: ...: k of n candidates give the default's bits"). Off by
 * default (never run on a GPU: until one shows it wins), and only while
 * kern_cuda_kernel_tune is on; on >= 0 sets it, -1 only asks. Returns the previous setting. */
int kern_matmul_cuda_gemm_same(int on);
/* How many problems the same-bits tuning has checked so far, and (other,
 * when not NULL) how many of them kept another algorithm than the
 * default path's, for tests and benchmarks. */
long kern_matmul_cuda_gemm_same_checked(long *other);

#ifdef __cplusplus
}
#endif

#endif
