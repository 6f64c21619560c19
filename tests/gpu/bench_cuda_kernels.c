/* tests/gpu/bench_cuda_kernels.c - each CUDA kernel beside its optimised CPU
 * version on the same shapes: milliseconds per call, GB/s (bytes the kernel
 * must move at least) or GFLOP/s (matmul), and the ratio CPU / GPU.
 *
 *   bench_cuda_kernels [--quick] [--threads N] [--only SUBSTRING]
 *
 * GPU times come from CUDA events around a block of back-to-back calls after
 * warm-up calls (the block lasts >= 50 ms); CPU times from the wall clock,
 * calls repeated for >= 0.3 s (at least once). --quick shrinks the shapes
 * and the time spent. Shapes: GPT-2 small (B*T = 8192 tokens, C = 768,
 * vocabulary 50257; softmax over 1024 rows) and the Fashion-MNIST MLP
 * (784-1024-1024-10). Backward kernels add into their outputs, so the
 * repeated calls see growing gradients: harmless for timing. Not a test: it
 * never fails on a figure; it exits 77 without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "kernels/blas.h"
#include "kernels/cuda_common.h"
#include "kernels/embedding.h"
#include "kernels/embedding_cuda.h"
#include "kernels/gelu.h"
#include "kernels/gelu_cuda.h"
#include "kernels/layernorm.h"
#include "kernels/layernorm_cuda.h"
#include "kernels/matmul.h"
#include "kernels/matmul_cuda.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_cuda.h"
#include "kernels/parallel.h"
#include "kernels/precision.h"
#include "kernels/precision_cuda.h"
#include "kernels/quant8.h"
#include "kernels/quant8_cuda.h"
#include "kernels/relu.h"
#include "kernels/relu_cuda.h"
#include "kernels/residual.h"
#include "kernels/residual_cuda.h"
#include "kernels/softmax_xent.h"
#include "kernels/softmax_xent_cuda.h"

static int quick;
static const char *only;

/* ---- buffers ---------------------------------------------------------------- */

static uint64_t rng = 1;

static float *hbuf(long n, float lo, float hi)
{
	float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	if (!p) {
		fprintf(stderr, "bench: out of host memory (%ld floats)\n", n);
		exit(1);
	}
	/* a cheap LCG: filling gigabytes with splitmix would dominate */
	uint32_t s = (uint32_t)(rng++ * 2654435761u);
	for (long i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		p[i] = lo + (hi - lo) * (float)(s >> 8) * (1.0f / 16777216.0f);
	}
	return p;
}

static float *dbuf(const float *h, long n)
{
	return kern_cuda_dup(h, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* ---- timing ----------------------------------------------------------------- */

typedef void (*run_fn)(void *ctx);

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double time_cpu_ms(run_fn f, void *ctx)
{
	double budget = quick ? 0.1 : 0.3;
	f(ctx); /* warm-up: page faults, thread start, BLAS packing buffers */
	int reps = 0;
	double t0 = now_s(), t;
	do {
		f(ctx);
		reps++;
		t = now_s() - t0;
	} while (t < budget && reps < 1000);
	return t * 1e3 / reps;
}

static double time_gpu_ms(run_fn f, void *ctx)
{
	cudaEvent_t a, b;
	KERN_CUDA_CHECK(cudaEventCreate(&a));
	KERN_CUDA_CHECK(cudaEventCreate(&b));
	for (int i = 0; i < 3; i++)
		f(ctx);
	/* one timed call to size the block */
	KERN_CUDA_CHECK(cudaEventRecord(a, kern_cuda_stream()));
	f(ctx);
	KERN_CUDA_CHECK(cudaEventRecord(b, kern_cuda_stream()));
	KERN_CUDA_CHECK(cudaEventSynchronize(b));
	float ms = 0;
	KERN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
	double target = quick ? 20.0 : 50.0;
	int reps = ms > 0 ? (int)(target / ms) : 1000;
	if (reps < 5)
		reps = 5;
	if (reps > 2000)
		reps = 2000;
	KERN_CUDA_CHECK(cudaEventRecord(a, kern_cuda_stream()));
	for (int i = 0; i < reps; i++)
		f(ctx);
	KERN_CUDA_CHECK(cudaEventRecord(b, kern_cuda_stream()));
	KERN_CUDA_CHECK(cudaEventSynchronize(b));
	KERN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
	KERN_CUDA_CHECK(cudaEventDestroy(a));
	KERN_CUDA_CHECK(cudaEventDestroy(b));
	return (double)ms / reps;
}

/* amount: bytes (flops = 0) or floating-point operations (flops = 1) */
static void bench(const char *op, const char *shape, double amount, int flops, run_fn cpu,
                  run_fn gpu, void *ctx)
{
	char name[128];
	snprintf(name, sizeof name, "%s %s", op, shape);
	if (only && !strstr(name, only))
		return;
	double c = cpu ? time_cpu_ms(cpu, ctx) : NAN;
	double g = time_gpu_ms(gpu, ctx);
	const char *unit = flops ? "GFLOP/s" : "GB/s";
	printf("%-22s %-24s cpu %9.3f ms %8.1f %-7s | gpu %8.4f ms %8.1f %-7s | x%.1f\n", op, shape,
	       c, amount / (c * 1e-3) / 1e9, unit, g, amount / (g * 1e-3) / 1e9, unit, c / g);
	fflush(stdout);
}

/* ---- elementwise ------------------------------------------------------------ */

struct ew {
	long n;
	float *x, *y, *z, *d_x, *d_y, *d_z;
};

static void ew_init(struct ew *e, long n)
{
	e->n = n;
	e->x = hbuf(n, -4, 4);
	e->y = hbuf(n, -1, 1);
	e->z = hbuf(n, -1, 1);
	e->d_x = dbuf(e->x, n);
	e->d_y = dbuf(e->y, n);
	e->d_z = dbuf(e->z, n);
}

static void ew_free(struct ew *e)
{
	free(e->x), free(e->y), free(e->z);
	kern_cuda_free(e->d_x), kern_cuda_free(e->d_y), kern_cuda_free(e->d_z);
}

#define EW_PAIR(name, cpu_call, gpu_call)                                                  \
	static void name##_c(void *p)                                                      \
	{                                                                                  \
		struct ew *e = p;                                                          \
		cpu_call;                                                                  \
	}                                                                                  \
	static void name##_g(void *p)                                                      \
	{                                                                                  \
		struct ew *e = p;                                                          \
		gpu_call;                                                                  \
	}

EW_PAIR(gelu_fwd, kern_gelu_fwd_cpu(e->z, e->x, e->n), kern_gelu_fwd_cuda(e->d_z, e->d_x, e->n))
EW_PAIR(gelu_bwd, kern_gelu_bwd_cpu(e->z, e->x, e->y, e->n),
        kern_gelu_bwd_cuda(e->d_z, e->d_x, e->d_y, e->n))
EW_PAIR(gelu_bwd_set, kern_gelu_bwd_set_cpu(e->z, e->x, e->y, e->n),
        kern_gelu_bwd_set_cuda(e->d_z, e->d_x, e->d_y, e->n))
EW_PAIR(relu_fwd, kern_relu_fwd_cpu(e->z, e->x, e->n), kern_relu_fwd_cuda(e->d_z, e->d_x, e->n))
EW_PAIR(relu_bwd, kern_relu_bwd_cpu(e->z, e->x, e->y, e->n),
        kern_relu_bwd_cuda(e->d_z, e->d_x, e->d_y, e->n))
EW_PAIR(residual_fwd, kern_residual_fwd_cpu(e->z, e->x, e->y, e->n),
        kern_residual_fwd_cuda(e->d_z, e->d_x, e->d_y, e->n))
EW_PAIR(residual_bwd, kern_residual_bwd_cpu(e->x, e->y, e->z, e->n),
        kern_residual_bwd_cuda(e->d_x, e->d_y, e->d_z, e->n))

static void bench_elementwise(long tokens, int c)
{
	char shape[64];
	struct ew e;
	long n = tokens * 4 * c; /* the MLP block's hidden activations */
	snprintf(shape, sizeof shape, "n=%ld", n);
	ew_init(&e, n);
	bench("gelu fwd", shape, 8.0 * n, 0, gelu_fwd_c, gelu_fwd_g, &e);
	bench("gelu bwd", shape, 16.0 * n, 0, gelu_bwd_c, gelu_bwd_g, &e);
	bench("gelu bwd_set", shape, 12.0 * n, 0, gelu_bwd_set_c, gelu_bwd_set_g, &e);
	bench("relu fwd", shape, 8.0 * n, 0, relu_fwd_c, relu_fwd_g, &e);
	bench("relu bwd", shape, 16.0 * n, 0, relu_bwd_c, relu_bwd_g, &e);
	ew_free(&e);

	n = tokens * c; /* the residual stream */
	snprintf(shape, sizeof shape, "n=%ld", n);
	ew_init(&e, n);
	bench("residual fwd", shape, 12.0 * n, 0, residual_fwd_c, residual_fwd_g, &e);
	bench("residual bwd", shape, 20.0 * n, 0, residual_bwd_c, residual_bwd_g, &e);
	ew_free(&e);
}

/* ---- layernorm --------------------------------------------------------------- */

struct lnb {
	int n, c;
	float *inp, *w, *b, *out, *mean, *rstd, *dout, *dinp, *dw, *db;
	float *d_inp, *d_w, *d_b, *d_out, *d_mean, *d_rstd, *d_dout, *d_dinp, *d_dw, *d_db;
};

static void ln_fwd_c(void *p)
{
	struct lnb *l = p;
	kern_layernorm_fwd_cpu(l->out, l->mean, l->rstd, l->inp, l->w, l->b, l->n, l->c);
}

static void ln_fwd_g(void *p)
{
	struct lnb *l = p;
	kern_layernorm_fwd_cuda(l->d_out, l->d_mean, l->d_rstd, l->d_inp, l->d_w, l->d_b, l->n, l->c);
}

static void ln_bwd_c(void *p)
{
	struct lnb *l = p;
	kern_layernorm_bwd_cpu(l->dinp, l->dw, l->db, l->dout, l->inp, l->w, l->mean, l->rstd,
	                       l->n, l->c);
}

static void ln_bwd_g(void *p)
{
	struct lnb *l = p;
	kern_layernorm_bwd_cuda(l->d_dinp, l->d_dw, l->d_db, l->d_dout, l->d_inp, l->d_w, l->d_mean,
	                        l->d_rstd, l->n, l->c);
}

static void bench_layernorm(int n, int c)
{
	struct lnb l = { .n = n, .c = c };
	long nc = (long)n * c;
	l.inp = hbuf(nc, -2, 3), l.out = hbuf(nc, 0, 0), l.dout = hbuf(nc, -1, 1);
	l.dinp = hbuf(nc, 0, 0), l.w = hbuf(c, 0.5f, 1.5f), l.b = hbuf(c, -0.5f, 0.5f);
	l.dw = hbuf(c, 0, 0), l.db = hbuf(c, 0, 0), l.mean = hbuf(n, 0, 0), l.rstd = hbuf(n, 0, 0);
	l.d_inp = dbuf(l.inp, nc), l.d_out = dbuf(l.out, nc), l.d_dout = dbuf(l.dout, nc);
	l.d_dinp = dbuf(l.dinp, nc), l.d_w = dbuf(l.w, c), l.d_b = dbuf(l.b, c);
	l.d_dw = dbuf(l.dw, c), l.d_db = dbuf(l.db, c), l.d_mean = dbuf(l.mean, n);
	l.d_rstd = dbuf(l.rstd, n);
	ln_fwd_c(&l); /* mean and rstd for backward */
	ln_fwd_g(&l);
	char shape[64];
	snprintf(shape, sizeof shape, "n=%d c=%d", n, c);
	bench("layernorm fwd", shape, 8.0 * nc, 0, ln_fwd_c, ln_fwd_g, &l);
	bench("layernorm bwd", shape, 16.0 * nc, 0, ln_bwd_c, ln_bwd_g, &l);
	free(l.inp), free(l.out), free(l.dout), free(l.dinp), free(l.w), free(l.b), free(l.dw);
	free(l.db), free(l.mean), free(l.rstd);
	kern_cuda_free(l.d_inp), kern_cuda_free(l.d_out), kern_cuda_free(l.d_dout);
	kern_cuda_free(l.d_dinp), kern_cuda_free(l.d_w), kern_cuda_free(l.d_b);
	kern_cuda_free(l.d_dw), kern_cuda_free(l.d_db), kern_cuda_free(l.d_mean);
	kern_cuda_free(l.d_rstd);
}

/* The rows of a kernel pair timed with vector accesses (ms[0][pass]) and
 * one element an access (ms[1][pass]), bytes[pass] moved each: ms, GB/s
 * and the ratio, per pass */
static void print_vec_rows(const char *name, const char *vec, const char *const pass[2],
                           double ms[2][2], const double bytes[2])
{
	for (int i = 0; i < 2; i++)
		printf("%-40s %-7s: %s an access %8.4f ms %7.1f GB/s, one %8.4f ms %7.1f GB/s, x%.2f\n",
		       name, pass[i], vec, ms[0][i], bytes[i] / (ms[0][i] * 1e-3) / 1e9, ms[1][i],
		       bytes[i] / (ms[1][i] * 1e-3) / 1e9, ms[1][i] / ms[0][i]);
	fflush(stdout);
}

/* LayerNorm as the GPT's bf16 step runs it: activations packed as 16 bits;
 * buffers on 8 bytes (the kernels read and write four elements an access)
 * beside the same buffers one element on (one at a time) */
struct ln16 {
	int n, c, off;
	uint16_t *inp, *out, *dout, *dinp;
	float *w, *b, *dw, *db, *mean, *rstd;
};

static void ln16_fwd(void *p)
{
	struct ln16 *l = p;
	kern_layernorm_fwd_act_cuda(KERN_ACT_16, l->out + l->off, l->mean, l->rstd,
	                            l->inp + l->off, l->w, l->b, l->n, l->c);
}

static void ln16_bwd(void *p)
{
	struct ln16 *l = p;
	kern_layernorm_bwd_act_cuda(KERN_ACT_16, l->dinp + l->off, l->dw, l->db, l->dout + l->off,
	                            l->inp + l->off, l->w, l->mean, l->rstd, l->n, l->c);
}

/* the residual connection into dinp (as the next block's input) from inp
 * and dout (the sublayer's output), and the LayerNorm of it into out */
static void ln16_res_fwd(void *p)
{
	struct ln16 *l = p;
	kern_residual_layernorm_fwd_act_cuda(KERN_ACT_16, l->dinp, l->out, l->mean, l->rstd, l->inp,
	                                     l->dout, l->w, l->b, l->n, l->c);
}

static void bench_layernorm16(int n, int c)
{
	char name[128];
	snprintf(name, sizeof name, "layernorm bf16 n=%d c=%d", n, c);
	if (only && !strstr(name, only))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	long nc = (long)n * c + 1;
	float *h = hbuf(nc, -2, 3), *d = dbuf(h, nc), *hw = hbuf(c, 0.5f, 1.5f);
	struct ln16 l = { .n = n, .c = c };
	l.inp = kern_cuda_malloc(2 * (size_t)nc), l.out = kern_cuda_malloc(2 * (size_t)nc);
	l.dout = kern_cuda_malloc(2 * (size_t)nc), l.dinp = kern_cuda_malloc(2 * (size_t)nc);
	kern_fp32_to_bf16_cuda(l.inp, d, nc);
	kern_fp32_to_bf16_cuda(l.dout, d, nc);
	kern_fp32_to_bf16_cuda(l.dinp, d, nc);
	l.w = dbuf(hw, c), l.b = dbuf(hw, c), l.dw = dbuf(hw, c), l.db = dbuf(hw, c);
	l.mean = kern_cuda_malloc(sizeof(float) * (size_t)n);
	l.rstd = kern_cuda_malloc(sizeof(float) * (size_t)n);
	double ms[2][2];
	for (int k = 0; k < 2; k++) {
		l.off = k;              /* 0: on 8 bytes; 1: not */
		ln16_fwd(&l);
		ms[k][0] = time_gpu_ms(ln16_fwd, &l);
		ms[k][1] = time_gpu_ms(ln16_bwd, &l);
	}
	/* bytes: forward reads inp, writes out; backward reads dout and inp
	 * and adds into dinp */
	double bytes[2] = { 4.0 * n * c, 8.0 * n * c };
	const char *pass[2] = { "fwd", "bwd" };
	print_vec_rows(name, "four", pass, ms, bytes);
	l.off = 0;
	/* the residual connection and the LayerNorm after it in one kernel
	 * (kern_layernorm_cuda_fuse_residual, the default) beside the two:
	 * bytes the one must move, reading two inputs and writing two outputs */
	double ms_res[2];
	for (int k = 0; k < 2; k++) {
		int fused = kern_layernorm_cuda_fuse_residual(k == 0);
		ms_res[k] = time_gpu_ms(ln16_res_fwd, &l);
		kern_layernorm_cuda_fuse_residual(fused);
	}
	printf("%-40s res+fwd: one kernel %8.4f ms %7.1f GB/s, two %8.4f ms, x%.2f\n", name,
	       ms_res[0], 8.0 * n * c / (ms_res[0] * 1e-3) / 1e9, ms_res[1], ms_res[1] / ms_res[0]);
	fflush(stdout);
	free(h), free(hw);
	kern_cuda_free(d), kern_cuda_free(l.inp), kern_cuda_free(l.out), kern_cuda_free(l.dout);
	kern_cuda_free(l.dinp), kern_cuda_free(l.w), kern_cuda_free(l.b), kern_cuda_free(l.dw);
	kern_cuda_free(l.db), kern_cuda_free(l.mean), kern_cuda_free(l.rstd);
	kern_matmul_cuda_operands(prev);
}

/* ---- softmax + cross-entropy ------------------------------------------------- */

struct sx {
	int n, v;
	float *logits, *losses, *lse, *dl;
	int *targets;
	float *d_logits, *d_losses, *d_lse, *d_dl;
	int *d_targets;
};

static void sx_fwd_c(void *p)
{
	struct sx *s = p;
	kern_softmax_xent_fwd_cpu(s->losses, s->lse, s->logits, s->targets, s->n, s->v);
}

static void sx_fwd_g(void *p)
{
	struct sx *s = p;
	kern_softmax_xent_fwd_cuda(s->d_losses, s->d_lse, s->d_logits, s->d_targets, s->n, s->v);
}

static void sx_bwd_c(void *p)
{
	struct sx *s = p;
	kern_softmax_xent_bwd_set_cpu(s->dl, 1.0f / s->n, s->logits, s->lse, s->targets, s->n, s->v);
}

static void sx_bwd_g(void *p)
{
	struct sx *s = p;
	kern_softmax_xent_bwd_set_cuda(s->d_dl, 1.0f / s->n, s->d_logits, s->d_lse, s->d_targets,
	                               s->n, s->v);
}

static void bench_softmax_xent(int n, int v)
{
	struct sx s = { .n = n, .v = v };
	long nv = (long)n * v;
	s.logits = hbuf(nv, -8, 8), s.dl = hbuf(nv, 0, 0), s.losses = hbuf(n, 0, 0);
	s.lse = hbuf(n, 0, 0);
	s.targets = malloc(sizeof(int) * (size_t)n);
	for (int i = 0; i < n; i++)
		s.targets[i] = (int)((i * 7919L) % v);
	s.d_logits = dbuf(s.logits, nv), s.d_dl = dbuf(s.dl, nv), s.d_losses = dbuf(s.losses, n);
	s.d_lse = dbuf(s.lse, n);
	s.d_targets = kern_cuda_dup(s.targets, sizeof(int) * (size_t)n);
	sx_fwd_c(&s);
	sx_fwd_g(&s);
	char shape[64];
	snprintf(shape, sizeof shape, "n=%d v=%d", n, v);
	bench("softmax_xent fwd", shape, 4.0 * nv, 0, sx_fwd_c, sx_fwd_g, &s);
	bench("softmax_xent bwd_set", shape, 8.0 * nv, 0, sx_bwd_c, sx_bwd_g, &s);
	free(s.logits), free(s.dl), free(s.losses), free(s.lse), free(s.targets);
	kern_cuda_free(s.d_logits), kern_cuda_free(s.d_dl), kern_cuda_free(s.d_losses);
	kern_cuda_free(s.d_lse), kern_cuda_free(s.d_targets);
}

/* The GPT's logits as its training step has them: bf16 values packed in
 * rows ld apart; with ld a multiple of 8 (the model pads the vocabulary's
 * rows to 64) the kernels read and write eight at a time, with ld = that +
 * 1 one at a time: the two side by side */
struct sx16 {
	int n, v, ld;
	void *logits, *dl;
	float *losses, *lse;
	int *targets;
};

static void sx16_fwd(void *p)
{
	struct sx16 *s = p;
	kern_softmax_xent_fwd_ld_act_cuda(KERN_ACT_16, s->losses, s->lse, s->logits, s->ld,
	                                  s->targets, s->n, s->v);
}

static void sx16_bwd(void *p)
{
	struct sx16 *s = p;
	kern_softmax_xent_bwd_set_ld_act_cuda(KERN_ACT_16, s->dl, 1.0f / s->n, s->logits, s->ld,
	                                      s->lse, s->targets, s->n, s->v);
}

static void sx16_both(void *p)
{
	sx16_fwd(p);
	sx16_bwd(p);
}

static void sx16_one_pass(void *p)
{
	struct sx16 *s = p;
	kern_softmax_xent_fwd_bwd_set_ld_act_cuda(KERN_ACT_16, s->losses, s->lse, s->dl,
	                                          1.0f / s->n, s->logits, s->ld, s->targets, s->n,
	                                          s->v);
}

static void bench_softmax_xent16(int n, int v)
{
	char name[128];
	snprintf(name, sizeof name, "softmax_xent bf16 n=%d v=%d", n, v);
	if (only && !strstr(name, only))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	int vp = (v + 63) / 64 * 64;
	long big = (long)n * (vp + 1);
	float *h = hbuf(big, -8, 8), *d = dbuf(h, big);
	int *t = malloc(sizeof(int) * (size_t)n);
	for (int i = 0; i < n; i++)
		t[i] = (int)((i * 7919L) % v);
	struct sx16 s = { .n = n, .v = v };
	s.logits = kern_cuda_malloc(2 * (size_t)big);
	kern_fp32_to_bf16_cuda(s.logits, d, big);
	s.dl = kern_cuda_malloc(2 * (size_t)big);
	s.losses = kern_cuda_malloc(sizeof(float) * (size_t)n);
	s.lse = kern_cuda_malloc(sizeof(float) * (size_t)n);
	s.targets = kern_cuda_dup(t, sizeof(int) * (size_t)n);
	double ms[2][2];
	for (int k = 0; k < 2; k++) {
		s.ld = vp + k;           /* 0: rows on 16 bytes; 1: not */
		sx16_fwd(&s);
		ms[k][0] = time_gpu_ms(sx16_fwd, &s);
		ms[k][1] = time_gpu_ms(sx16_bwd, &s);
	}
	double bytes[2] = { 2.0 * n * v, 4.0 * n * v };
	const char *pass[2] = { "fwd", "bwd_set" };
	print_vec_rows(name, "eight", pass, ms, bytes);
	/* a training step's: the forward and backward in one pass, beside the
	 * two kernels (rows on 16 bytes); GB/s of the one pass's own bytes */
	s.ld = vp;
	double two = time_gpu_ms(sx16_both, &s), one = time_gpu_ms(sx16_one_pass, &s);
	printf("%-40s fwd+bwd_set: one pass %8.4f ms %6.0f GB/s, two kernels %8.4f ms, x%.2f\n",
	       name, one, 4.0 * n * v / (one * 1e-3) / 1e9, two, two / one);
	fflush(stdout);
	free(h), free(t);
	kern_cuda_free(d), kern_cuda_free(s.logits), kern_cuda_free(s.dl);
	kern_cuda_free(s.losses), kern_cuda_free(s.lse), kern_cuda_free(s.targets);
	kern_matmul_cuda_operands(prev);
}

/* ---- optimizer --------------------------------------------------------------- */

struct ob {
	long n;
	float *w, *m, *v, *g, *d_w, *d_m, *d_v, *d_g;
	/* int8 state (quant8.h): codes and block scales, host and device */
	int8_t *mq, *d_mq;
	uint8_t *vq, *d_vq;
	float *ms, *vs, *d_ms, *d_vs;
	double sink;
};

#define OPT_PAIR(name, cpu_call, gpu_call)                                                 \
	static void name##_c(void *p)                                                      \
	{                                                                                  \
		struct ob *o = p;                                                          \
		cpu_call;                                                                  \
	}                                                                                  \
	static void name##_g(void *p)                                                      \
	{                                                                                  \
		struct ob *o = p;                                                          \
		gpu_call;                                                                  \
	}

OPT_PAIR(sumsq, o->sink += kern_sumsq_cpu(o->g, o->n), o->sink += kern_sumsq_cuda(o->d_g, o->n))
OPT_PAIR(sgd, kern_sgd_update_cpu(o->w, o->m, o->g, o->n, 1e-3f, 0.9f, 1e-4f, 0),
         kern_sgd_update_cuda(o->d_w, o->d_m, o->d_g, o->n, 1e-3f, 0.9f, 1e-4f, 0))
OPT_PAIR(adamw,
         kern_adamw_update_cpu(o->w, o->m, o->v, o->g, o->n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.1f,
                               0.5f, 0.1f),
         kern_adamw_update_cuda(o->d_w, o->d_m, o->d_v, o->d_g, o->n, 1e-4f, 0.9f, 0.999f, 1e-8f,
                                0.1f, 0.5f, 0.1f))
OPT_PAIR(lars, kern_lars_update_cpu(o->w, o->m, o->g, o->n, 1e-3f, 0.9f, 1e-4f),
         kern_lars_update_cuda(o->d_w, o->d_m, o->d_g, o->n, 1e-3f, 0.9f, 1e-4f))
OPT_PAIR(lamb_moments,
         o->sink += kern_lamb_moments_cpu(o->m, o->v, o->g, o->w, o->n, 0.9f, 0.999f, 1e-6f,
                                          0.01f, 0.5f, 0.1f),
         o->sink += kern_lamb_moments_cuda(o->d_m, o->d_v, o->d_g, o->d_w, o->n, 0.9f, 0.999f,
                                           1e-6f, 0.01f, 0.5f, 0.1f))
OPT_PAIR(lamb_apply,
         kern_lamb_apply_cpu(o->w, o->m, o->v, o->n, 1e-6f, 1e-6f, 0.01f, 0.5f, 0.1f),
         kern_lamb_apply_cuda(o->d_w, o->d_m, o->d_v, o->n, 1e-6f, 1e-6f, 0.01f, 0.5f, 0.1f))

OPT_PAIR(adamw_q8,
         kern_adamw_update_q8_cpu(o->w, o->mq, o->ms, o->vq, o->vs, o->g, o->n, 1e-4f, 0.9f,
                                  0.999f, 1e-8f, 0.1f, 0.5f, 0.1f),
         kern_adamw_update_q8_cuda(o->d_w, o->d_mq, o->d_ms, o->d_vq, o->d_vs, o->d_g, o->n,
                                   1e-4f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 0.1f))
OPT_PAIR(lamb_norm_q8,
         o->sink += kern_lamb_norm_q8_cpu(o->mq, o->ms, o->vq, o->vs, o->g, o->w, o->n, 0.9f,
                                          0.999f, 1e-6f, 0.01f, 0.5f, 0.1f),
         o->sink += kern_lamb_norm_q8_cuda(o->d_mq, o->d_ms, o->d_vq, o->d_vs, o->d_g, o->d_w,
                                           o->n, 0.9f, 0.999f, 1e-6f, 0.01f, 0.5f, 0.1f))

/* n bytes of host data in a new device buffer */
static void *dbytes(const void *h, size_t n)
{
	void *d = kern_cuda_malloc(n);
	kern_cuda_upload(d, h, n);
	return d;
}

/* int8 state's AdamW and LAMB norm beside the fp32 ones: bytes moved are
 * w, g (read), w (written), the codes of m and v (read and written) */
static void bench_optimizer_q8(struct ob *o)
{
	long n = o->n, nb = kern_q8_blocks(n);
	o->mq = malloc((size_t)n), o->vq = malloc((size_t)n);
	o->ms = malloc(sizeof(float) * (size_t)nb), o->vs = malloc(sizeof(float) * (size_t)nb);
	if (!o->mq || !o->vq || !o->ms || !o->vs)
		abort();
	kern_q8_quantize_s_cpu(o->m, n, o->mq, o->ms);
	kern_q8_quantize_u_cpu(o->v, n, o->vq, o->vs);
	o->d_mq = dbytes(o->mq, (size_t)n), o->d_vq = dbytes(o->vq, (size_t)n);
	o->d_ms = dbuf(o->ms, nb), o->d_vs = dbuf(o->vs, nb);
	char shape[64];
	snprintf(shape, sizeof shape, "n=%ld", n);
	bench("adamw update int8", shape, 16.0 * n, 0, adamw_q8_c, adamw_q8_g, o);
	bench("lamb norm int8", shape, 10.0 * n, 0, lamb_norm_q8_c, lamb_norm_q8_g, o);
	free(o->mq), free(o->vq), free(o->ms), free(o->vs);
	kern_cuda_free(o->d_mq), kern_cuda_free(o->d_vq), kern_cuda_free(o->d_ms);
	kern_cuda_free(o->d_vs);
}

static void bench_optimizer(long n)
{
	struct ob o = { .n = n };
	o.w = hbuf(n, -1, 1), o.m = hbuf(n, -0.01f, 0.01f), o.v = hbuf(n, 0, 1e-4f);
	o.g = hbuf(n, -1e-3f, 1e-3f);
	o.d_w = dbuf(o.w, n), o.d_m = dbuf(o.m, n), o.d_v = dbuf(o.v, n), o.d_g = dbuf(o.g, n);
	char shape[64];
	snprintf(shape, sizeof shape, "n=%ld", n);
	bench("sumsq", shape, 4.0 * n, 0, sumsq_c, sumsq_g, &o);
	bench("sgd update", shape, 20.0 * n, 0, sgd_c, sgd_g, &o);
	bench("adamw update", shape, 28.0 * n, 0, adamw_c, adamw_g, &o);
	bench("lars update", shape, 20.0 * n, 0, lars_c, lars_g, &o);
	bench("lamb moments", shape, 24.0 * n, 0, lamb_moments_c, lamb_moments_g, &o);
	bench("lamb apply", shape, 16.0 * n, 0, lamb_apply_c, lamb_apply_g, &o);
	bench_optimizer_q8(&o);
	free(o.w), free(o.m), free(o.v), free(o.g);
	kern_cuda_free(o.d_w), kern_cuda_free(o.d_m), kern_cuda_free(o.d_v), kern_cuda_free(o.d_g);
}

/* ---- embedding --------------------------------------------------------------- */

struct eb {
	int b, t, c, vocab;
	int *tokens, *d_tokens;
	float *wte, *wpe, *out, *dwte, *dwpe;
	float *d_wte, *d_wpe, *d_out, *d_dwte, *d_dwpe;
};

static void emb_fwd_c(void *p)
{
	struct eb *e = p;
	kern_embedding_fwd_cpu(e->out, e->tokens, e->wte, e->wpe, e->b, e->t, e->c);
}

static void emb_fwd_g(void *p)
{
	struct eb *e = p;
	kern_embedding_fwd_cuda(e->d_out, e->d_tokens, e->d_wte, e->d_wpe, e->b, e->t, e->c);
}

static void emb_bwd_c(void *p)
{
	struct eb *e = p;
	kern_embedding_bwd_cpu(e->dwte, e->dwpe, e->out, e->tokens, e->b, e->t, e->c, e->vocab);
}

static void emb_bwd_g(void *p)
{
	struct eb *e = p;
	kern_embedding_bwd_cuda(e->d_dwte, e->d_dwpe, e->d_out, e->d_tokens, e->b, e->t, e->c,
	                        e->vocab);
}

static void bench_embedding(int b, int t, int c, int vocab)
{
	struct eb e = { .b = b, .t = t, .c = c, .vocab = vocab };
	long rows = (long)b * t, vc = (long)vocab * c, tc = (long)t * c;
	e.tokens = malloc(sizeof(int) * (size_t)rows);
	for (long i = 0; i < rows; i++)
		e.tokens[i] = (int)((i * 2654435761u) % (unsigned)vocab);
	e.wte = hbuf(vc, -0.1f, 0.1f), e.wpe = hbuf(tc, -0.1f, 0.1f), e.out = hbuf(rows * c, 0, 0);
	e.dwte = hbuf(vc, 0, 0), e.dwpe = hbuf(tc, 0, 0);
	e.d_tokens = kern_cuda_dup(e.tokens, sizeof(int) * (size_t)rows);
	e.d_wte = dbuf(e.wte, vc), e.d_wpe = dbuf(e.wpe, tc), e.d_out = dbuf(e.out, rows * c);
	e.d_dwte = dbuf(e.dwte, vc), e.d_dwpe = dbuf(e.dwpe, tc);
	char shape[64];
	snprintf(shape, sizeof shape, "b=%d t=%d c=%d", b, t, c);
	/* forward: a wte row and a wpe row read, an out row written, per token;
	 * backward: dout read, a dwte row read and written per token (at
	 * most), dwpe read and written once */
	bench("embedding fwd", shape, 12.0 * rows * c, 0, emb_fwd_c, emb_fwd_g, &e);
	bench("embedding bwd", shape, 12.0 * rows * c + 8.0 * tc, 0, emb_bwd_c, emb_bwd_g, &e);
	free(e.tokens), free(e.wte), free(e.wpe), free(e.out), free(e.dwte), free(e.dwpe);
	kern_cuda_free(e.d_tokens), kern_cuda_free(e.d_wte), kern_cuda_free(e.d_wpe);
	kern_cuda_free(e.d_out), kern_cuda_free(e.d_dwte), kern_cuda_free(e.d_dwpe);
}

/* ---- attention ---------------------------------------------------------------- */

struct ab {
	int b, t, c, nh;
	float *qkv, *out, *att, *datt, *dqkv;
	float *d_qkv, *d_out, *d_att, *d_datt, *d_dqkv;
};

static void att_fwd_c(void *p)
{
	struct ab *a = p;
	kern_attention_fwd_cpu(a->out, NULL, a->att, a->qkv, a->b, a->t, a->c, a->nh);
}

static void att_fwd_g(void *p)
{
	struct ab *a = p;
	kern_attention_fwd_cuda(a->d_out, NULL, a->d_att, a->d_qkv, a->b, a->t, a->c, a->nh);
}

static void att_bwd_c(void *p)
{
	struct ab *a = p;
	kern_attention_bwd_set_cpu(a->dqkv, NULL, a->datt, a->out, a->qkv, a->att, a->b, a->t, a->c,
	                           a->nh);
}

static void att_bwd_g(void *p)
{
	struct ab *a = p;
	kern_attention_bwd_set_cuda(a->d_dqkv, NULL, a->d_datt, a->d_out, a->d_qkv, a->d_att, a->b,
	                            a->t, a->c, a->nh);
}

static void bench_attention(int b, int t, int c, int nh)
{
	struct ab a = { .b = b, .t = t, .c = c, .nh = nh };
	long btc = (long)b * t * c, tt = (long)b * nh * t * t;
	a.qkv = hbuf(3 * btc, -1, 1), a.out = hbuf(btc, 0, 0), a.att = hbuf(tt, 0, 0);
	a.datt = hbuf(tt, 0, 0), a.dqkv = hbuf(3 * btc, 0, 0);
	a.d_qkv = dbuf(a.qkv, 3 * btc), a.d_out = dbuf(a.out, btc), a.d_att = dbuf(a.att, tt);
	a.d_datt = dbuf(a.datt, tt), a.d_dqkv = dbuf(a.dqkv, 3 * btc);
	att_fwd_c(&a); /* att for backward */
	att_fwd_g(&a);
	char shape[64];
	snprintf(shape, sizeof shape, "b=%d t=%d c=%d nh=%d", b, t, c, nh);
	/* the useful (causal) half of the [t, t] products: 2 products forward,
	 * 4 backward, each 2 t t hs / 2 per head */
	double flop = 2.0 * b * c * (double)t * t / 2;
	bench("attention fwd", shape, 2 * flop, 1, att_fwd_c, att_fwd_g, &a);
	bench("attention bwd_set", shape, 4 * flop, 1, att_bwd_c, att_bwd_g, &a);
	free(a.qkv), free(a.out), free(a.att), free(a.datt), free(a.dqkv);
	kern_cuda_free(a.d_qkv), kern_cuda_free(a.d_out), kern_cuda_free(a.d_att);
	kern_cuda_free(a.d_datt), kern_cuda_free(a.d_dqkv);
}

/* bf16 attention on 16-bit activations: the GEMM path (cuBLAS batched
 * GEMMs, the [t, t] softmax, att kept as 16 bits) beside the fused one,
 * forward and backward, GPU only */
struct ab16 {
	int b, t, c, nh;
	void *qkv, *out, *att, *dout, *dqkv;
	float *scratch, *lse;
};

static void att16_fwd_gemm(void *p)
{
	struct ab16 *a = p;
	kern_attention_fwd_act_cuda(KERN_ACT_16, a->out, a->scratch, a->att, a->qkv, a->b, a->t,
	                            a->c, a->nh);
}

static void att16_bwd_gemm(void *p)
{
	struct ab16 *a = p;
	kern_attention_bwd_set_act_cuda(KERN_ACT_16, a->dqkv, NULL, a->scratch, a->dout, a->qkv,
	                                a->att, a->b, a->t, a->c, a->nh);
}

static void att16_fwd_flash(void *p)
{
	struct ab16 *a = p;
	kern_attention_flash_fwd_cuda(a->out, a->lse, a->qkv, a->b, a->t, a->c, a->nh);
}

static void att16_bwd_flash(void *p)
{
	struct ab16 *a = p;
	kern_attention_flash_bwd_set_cuda(a->dqkv, a->dout, a->out, a->qkv, a->lse, a->b, a->t,
	                                  a->c, a->nh);
}

static void bench_attention16(int b, int t, int c, int nh)
{
	char name[128];
	snprintf(name, sizeof name, "attention bf16 b=%d t=%d c=%d nh=%d", b, t, c, nh);
	if (only && !strstr(name, only))
		return;
	if (!kern_attention_flash_supported(t, c, nh))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	struct ab16 a = { .b = b, .t = t, .c = c, .nh = nh };
	long btc = (long)b * t * c, tt = (long)b * nh * t * t;
	float *h = hbuf(3 * btc, -1, 1), *d = dbuf(h, 3 * btc);
	a.qkv = kern_cuda_malloc(2 * 3 * (size_t)btc);
	kern_fp32_to_bf16_cuda(a.qkv, d, 3 * btc);
	a.out = kern_cuda_malloc(2 * (size_t)btc);
	a.dout = kern_cuda_malloc(2 * (size_t)btc);
	kern_fp32_to_bf16_cuda(a.dout, d, btc);
	a.dqkv = kern_cuda_malloc(2 * 3 * (size_t)btc);
	a.att = kern_cuda_malloc(2 * (size_t)tt);
	a.scratch = kern_cuda_malloc(sizeof(float) * (size_t)tt);
	a.lse = kern_cuda_malloc(sizeof(float) * (size_t)b * nh * t);
	double flop = 2.0 * b * c * (double)t * t / 2;
	att16_fwd_gemm(&a);
	double fg = time_gpu_ms(att16_fwd_gemm, &a), bg = time_gpu_ms(att16_bwd_gemm, &a);
	att16_fwd_flash(&a);
	double ff = time_gpu_ms(att16_fwd_flash, &a), bf = time_gpu_ms(att16_bwd_flash, &a);
	printf("%-40s fwd: gemm %8.4f ms %7.1f TFLOP/s, flash %8.4f ms %7.1f TFLOP/s, gemm/flash "
	       "x%.2f\n", name, fg, 2 * flop / (fg * 1e-3) / 1e12, ff, 2 * flop / (ff * 1e-3) / 1e12,
	       fg / ff);
	printf("%-40s bwd: gemm %8.4f ms %7.1f TFLOP/s, flash %8.4f ms %7.1f TFLOP/s, gemm/flash "
	       "x%.2f\n", name, bg, 4 * flop / (bg * 1e-3) / 1e12, bf, 4 * flop / (bf * 1e-3) / 1e12,
	       bg / bf);
	/* dq added atomically by the dk, dv kernel (five tile products a pair
	 * of tiles) in blocks of 128 keys, beside the dq kernel of its own
	 * (seven) */
	for (int keys = 128; keys <= 128; keys *= 2) {
		int dqa = kern_attention_flash_dq_atomic(keys);
		double ba = time_gpu_ms(att16_bwd_flash, &a);
		kern_attention_flash_dq_atomic(dqa);
		printf("%-40s flash bwd: dq added atomically, %d keys a block %8.4f ms %7.1f TFLOP/s, "
		       "dq kernel %8.4f ms, x%.2f\n", name, keys, ba, 4 * flop / (ba * 1e-3) / 1e12, bf,
		       bf / ba);
	}
	fflush(stdout);
	free(h);
	kern_cuda_free(d), kern_cuda_free(a.qkv), kern_cuda_free(a.out), kern_cuda_free(a.dout);
	kern_cuda_free(a.dqkv), kern_cuda_free(a.att), kern_cuda_free(a.scratch);
	kern_cuda_free(a.lse);
	kern_matmul_cuda_operands(prev);
}

/* ---- matmul ------------------------------------------------------------------ */

struct mmb {
	int n, c, oc, bias;
	float *inp, *w, *b, *out, *dout, *dinp, *dw, *db;
	float *d_inp, *d_w, *d_b, *d_out, *d_dout, *d_dinp, *d_dw, *d_db;
};

static void mm_fwd_c(void *p)
{
	struct mmb *m = p;
	kern_matmul_fwd_cpu(m->out, m->inp, m->w, m->bias ? m->b : NULL, m->n, m->c, m->oc);
}

static void mm_fwd_g(void *p)
{
	struct mmb *m = p;
	kern_matmul_fwd_cuda(m->d_out, m->d_inp, m->d_w, m->bias ? m->d_b : NULL, m->n, m->c, m->oc);
}

static void mm_bwd_c(void *p)
{
	struct mmb *m = p;
	kern_matmul_bwd_set_cpu(m->dinp, m->dw, m->bias ? m->db : NULL, m->dout, m->inp, m->w,
	                        m->n, m->c, m->oc);
}

static void mm_bwd_g(void *p)
{
	struct mmb *m = p;
	kern_matmul_bwd_set_cuda(m->d_dinp, m->d_dw, m->bias ? m->d_db : NULL, m->d_dout, m->d_inp,
	                         m->d_w, m->n, m->c, m->oc);
}

static void bench_matmul(const char *label, int n, int c, int oc, int bias, int cpu_too)
{
	struct mmb m = { .n = n, .c = c, .oc = oc, .bias = bias };
	long nc = (long)n * c, no = (long)n * oc, occ = (long)oc * c;
	m.inp = hbuf(nc, -1, 1), m.w = hbuf(occ, -0.05f, 0.05f), m.b = hbuf(oc, -0.1f, 0.1f);
	m.out = hbuf(no, 0, 0), m.dout = hbuf(no, -1e-3f, 1e-3f), m.dinp = hbuf(nc, 0, 0);
	m.dw = hbuf(occ, 0, 0), m.db = hbuf(oc, 0, 0);
	m.d_inp = dbuf(m.inp, nc), m.d_w = dbuf(m.w, occ), m.d_b = dbuf(m.b, oc);
	m.d_out = dbuf(m.out, no), m.d_dout = dbuf(m.dout, no), m.d_dinp = dbuf(m.dinp, nc);
	m.d_dw = dbuf(m.dw, occ), m.d_db = dbuf(m.db, oc);
	char op[64], shape[64];
	snprintf(shape, sizeof shape, "%d x %d -> %d", n, c, oc);
	double flops = 2.0 * n * c * oc;
	snprintf(op, sizeof op, "matmul fwd %s", label);
	bench(op, shape, flops, 1, cpu_too ? mm_fwd_c : NULL, mm_fwd_g, &m);
	if (bias) {
		snprintf(op, sizeof op, "matmul fwd %s unfused", label);
		int prev = kern_matmul_cuda_fused_bias(0);
		bench(op, shape, flops, 1, NULL, mm_fwd_g, &m);
		kern_matmul_cuda_fused_bias(prev);
	}
	snprintf(op, sizeof op, "matmul bwd %s", label);
	bench(op, shape, 2 * flops, 1, cpu_too ? mm_bwd_c : NULL, mm_bwd_g, &m);
	free(m.inp), free(m.w), free(m.b), free(m.out), free(m.dout), free(m.dinp), free(m.dw);
	free(m.db);
	kern_cuda_free(m.d_inp), kern_cuda_free(m.d_w), kern_cuda_free(m.d_b);
	kern_cuda_free(m.d_out), kern_cuda_free(m.d_dout), kern_cuda_free(m.d_dinp);
	kern_cuda_free(m.d_dw), kern_cuda_free(m.d_db);
}

/* A 16-bit layer's forward and _set backward on 16-bit activations, its
 * weights converted to 16 bits by each GEMM or read from a kept 16-bit copy
 * (kern_matmul_cuda_weights16, as a 16-bit GPU model keeps them). */
struct kb16 {
	int n, c, oc, kept;
	int ldd;                       /* split_bwd: dout's rows, ldd apart */
	void *inp, *out, *dout, *dinp;
	float *w, *b, *dw, *db;
	uint16_t *w16;
};

static void kept16_step(void *p)
{
	struct kb16 *k = p;
	long occ = (long)k->oc * k->c;
	kern_matmul_cuda_weights16(k->kept ? k->w : NULL, k->kept ? k->w16 : NULL, occ + k->oc, 0,
	                           0, KERN_MM_BF16);
	kern_matmul_fwd_act_cuda(KERN_ACT_16, k->out, k->inp, k->w, k->b, k->n, k->c, k->oc);
	kern_matmul_bwd_set_act_cuda(KERN_ACT_16, k->dinp, k->dw, k->db, k->dout, k->inp, k->w,
	                             k->n, k->c, k->oc);
	kern_matmul_cuda_weights16(NULL, NULL, 0, 0, 0, KERN_MM_FP32);
}

/* k's buffers for a bf16 layer n x c -> oc: the weight (bf16 values) with
 * its bias after it and their kept 16-bit copy, 16-bit input and output
 * gradient (random), zeroed weight and bias gradients */
static void kb16_alloc(struct kb16 *k)
{
	long nc = (long)k->n * k->c, no = (long)k->n * k->oc, occ = (long)k->oc * k->c;
	float *h = hbuf(occ + k->oc, -0.05f, 0.05f), *a = hbuf(nc > no ? nc : no, -1, 1);
	kern_round_bf16_cpu(h, occ + k->oc);
	k->w = dbuf(h, occ + k->oc);        /* the weight, its bias after it */
	k->b = k->w + occ;
	k->w16 = kern_cuda_malloc(sizeof(uint16_t) * (size_t)(occ + k->oc));
	kern_fp32_to_bf16_cuda(k->w16, k->w, occ + k->oc);
	float *d = dbuf(a, nc > no ? nc : no);
	k->inp = kern_cuda_malloc(2 * (size_t)nc), k->dinp = kern_cuda_malloc(2 * (size_t)nc);
	k->out = kern_cuda_malloc(2 * (size_t)no), k->dout = kern_cuda_malloc(2 * (size_t)no);
	kern_fp32_to_bf16_cuda(k->inp, d, nc);
	kern_fp32_to_bf16_cuda(k->dout, d, no);
	k->dw = kern_cuda_malloc(sizeof(float) * (size_t)occ);
	k->db = kern_cuda_malloc(sizeof(float) * (size_t)k->oc);
	kern_cuda_zero(k->dw, sizeof(float) * (size_t)occ);
	kern_cuda_zero(k->db, sizeof(float) * (size_t)k->oc);
	free(h), free(a);
	kern_cuda_free(d);
}

static void kb16_free(struct kb16 *k)
{
	kern_cuda_free(k->w), kern_cuda_free(k->w16), kern_cuda_free(k->inp);
	kern_cuda_free(k->dinp), kern_cuda_free(k->out), kern_cuda_free(k->dout);
	kern_cuda_free(k->dw), kern_cuda_free(k->db);
}

static void bench_kept16(const char *label, int n, int c, int oc)
{
	char name[128];
	snprintf(name, sizeof name, "matmul bf16 %s weights %d x %d -> %d", label, n, c, oc);
	if (only && !strstr(name, only))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	struct kb16 k = { .n = n, .c = c, .oc = oc };
	kb16_alloc(&k);
	double ms[2];
	for (k.kept = 0; k.kept < 2; k.kept++)
		ms[k.kept] = time_gpu_ms(kept16_step, &k);
	double flop = 6.0 * n * c * oc;
	printf("%-40s fwd+bwd: converted %8.4f ms %7.1f TFLOP/s, kept %8.4f ms %7.1f TFLOP/s, "
	       "converted/kept x%.2f\n", name, ms[0], flop / (ms[0] * 1e-3) / 1e12, ms[1],
	       flop / (ms[1] * 1e-3) / 1e12, ms[0] / ms[1]);
	fflush(stdout);
	kb16_free(&k);
	kern_matmul_cuda_operands(prev);
}

/* A bf16 layer's forward and backward as bench_kept16 times them (weights
 * kept as 16 bits), on cuBLAS's and cuBLASLt's heuristics' picks, with
 * the GEMMs tuned for the same bits (kern_matmul_cuda_gemm_same: the
 * default and those of 7 candidates that give its bits) and with them
 * tuned (kern_matmul_cuda_gemm_tune: the fastest of 8 candidates each);
 * the tuning timed at the first call, inside the warm-up. */
static void bench_tuned(const char *label, int n, int c, int oc)
{
	char name[128];
	snprintf(name, sizeof name, "matmul bf16 %s tuned %d x %d -> %d", label, n, c, oc);
	if (only && !strstr(name, only))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	struct kb16 k = { .n = n, .c = c, .oc = oc, .kept = 1 };
	kb16_alloc(&k);
	double ms[3];                      /* the heuristics', same bits, tuned */
	long other0 = 0, tuned0 = kern_matmul_cuda_gemm_tuned(&other0), other = 0;
	long same_other0 = 0, same0 = kern_matmul_cuda_gemm_same_checked(&same_other0);
	for (int i = 0; i < 3; i++) {
		int was = kern_matmul_cuda_gemm_tune(i == 2 ? 8 : 0);
		int was_same = kern_cuda_kernel_tune(i == 1);
		ms[i] = time_gpu_ms(kept16_step, &k);
		kern_cuda_kernel_tune(was_same);
		kern_matmul_cuda_gemm_tune(was);
	}
	long tuned = kern_matmul_cuda_gemm_tuned(&other) - tuned0, same_other = 0;
	long same = kern_matmul_cuda_gemm_same_checked(&same_other) - same0;
	double tf = 6.0 * n * c * oc / 1e9;   /* GFLOP: over ms, TFLOP/s */
	printf("%-40s fwd+bwd: heuristic %8.4f ms %7.1f TFLOP/s, same bits %8.4f ms %7.1f "
	       "TFLOP/s, tuned %8.4f ms %7.1f TFLOP/s, heuristic/same x%.2f, heuristic/tuned "
	       "x%.2f (another pick: %ld of %ld GEMMs same bits, %ld of %ld tuned)\n", name, ms[0],
	       tf / ms[0], ms[1], tf / ms[1], ms[2], tf / ms[2], ms[0] / ms[1], ms[0] / ms[2],
	       same_other - same_other0, same, other - other0, tuned);
	fflush(stdout);
	kb16_free(&k);
	kern_matmul_cuda_operands(prev);
}

/* A bf16 layer's weight gradient alone (no dinp, no bias) with an odd
 * output count, dout's rows padded to ldd as the GPT pads its logits: in
 * two GEMMs (kern_matmul_cuda_split_odd, off by default) or in one. */
static void split_bwd(void *p)
{
	struct kb16 *k = p;
	kern_matmul_bwd_set_ld_act_cuda(KERN_ACT_16, NULL, k->dw, NULL, k->dout, k->ldd, k->inp,
	                                k->w, k->n, k->c, k->oc);
}

static void bench_split_odd(const char *label, int n, int c, int oc, int ldd)
{
	char name[128];
	snprintf(name, sizeof name, "matmul bf16 %s dweight %d x %d -> %d", label, n, c, oc);
	if (only && !strstr(name, only))
		return;
	int prev = kern_matmul_cuda_operands(KERN_MM_BF16);
	struct kb16 k = { .n = n, .c = c, .oc = ldd };   /* dout [n, ldd], weights to spare */
	kb16_alloc(&k);
	k.oc = oc;
	k.ldd = ldd;
	double ms[2];                      /* [0] split, [1] whole */
	for (int i = 0; i < 2; i++) {
		int was = kern_matmul_cuda_split_odd(i == 0);
		ms[i] = time_gpu_ms(split_bwd, &k);
		kern_matmul_cuda_split_odd(was);
	}
	double flop = 2.0 * n * c * oc;
	printf("%-40s dW: two GEMMs %8.4f ms %7.1f TFLOP/s, one %8.4f ms %7.1f TFLOP/s, "
	       "one/two x%.2f\n", name, ms[0], flop / (ms[0] * 1e-3) / 1e12, ms[1],
	       flop / (ms[1] * 1e-3) / 1e12, ms[1] / ms[0]);
	fflush(stdout);
	kb16_free(&k);
	kern_matmul_cuda_operands(prev);
}

int main(int argc, char **argv)
{
	int threads = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			quick = 1;
		} else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
			threads = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
			only = argv[++i];
		} else {
			fprintf(stderr, "usage: bench_cuda_kernels [--quick] [--threads N] "
			        "[--only SUBSTRING]\n");
			return 2;
		}
	}
	char why[256] = "";
	if (kern_cuda_device_count(why, sizeof why) == 0) {
		printf("no CUDA device: skipping (%s)\n", why);
		return 77;
	}
	struct kern_cuda_device dev;
	if (kern_cuda_device_query(0, &dev, why, sizeof why) != 0) {
		printf("no usable CUDA device: skipping (%s)\n", why);
		return 77;
	}
	if (threads > 0)
		kern_set_threads(threads);
	/* each row runs the kernels it names: no op times its variants at its
	 * first call and takes another (kern_cuda_kernel_tune) */
	kern_cuda_kernel_tune(0);
	char line[512];
	kern_cuda_device_describe(&dev, line, sizeof line);
	printf("gpu: %s\n", line);
	printf("cpu: %d threads; BLAS: %s\n", kern_threads(), kern_blas_describe());
	printf("(GB/s: bytes each kernel must read and write; GFLOP/s: matmul 2 n c oc forward, "
	       "twice that backward; attention the causal half of its [t, t] products; "
	       "xR: cpu time / gpu time)\n");

	long tokens = quick ? 1024 : 8192;
	int c = 768;
	bench_elementwise(tokens, c);
	bench_layernorm((int)tokens, c);
	bench_layernorm16((int)tokens, c);
	bench_softmax_xent(quick ? 128 : 1024, 50257);
	bench_softmax_xent16(quick ? 1024 : 8192, 50257);
	bench_optimizer(quick ? (4L << 20) : (32L << 20));
	bench_embedding(quick ? 1 : 8, 1024, c, 50257);
	bench_attention(quick ? 1 : 8, 1024, c, 12);
	bench_attention16(quick ? 1 : 8, 1024, c, 12);

	/* GPT-2 small's linear layers, then the Fashion-MNIST MLP's */
	int n = (int)tokens;
	bench_matmul("gpt qkv", n, c, 3 * c, 1, 1);
	bench_matmul("gpt attproj", n, c, c, 1, 1);
	bench_matmul("gpt fc", n, c, 4 * c, 1, 1);
	bench_matmul("gpt fcproj", n, 4 * c, c, 1, 1);
	bench_matmul("gpt lm_head", n, c, 50257, 0, !quick);
	/* GPT-2 small's fc with its weights kept as 16 bits or converted, at a
	 * large micro-batch and at one sequence (a large model's small one) */
	bench_kept16("gpt fc", n, c, 4 * c);
	bench_kept16("gpt fc", 1024, c, 4 * c);
	/* GPT-2's lm_head weight gradient (the vocabulary odd, the logits'
	 * rows padded) at micro-batch 8 */
	bench_split_odd("gpt lm_head", 8192, c, 50257, 50304);
	/* GPT-2 small's layers with the GEMMs tuned, at micro-batches 8 and 32 */
	static const int tune_rows[] = { 8192, 32768 };
	for (int i = 0; i < (quick ? 1 : 2); i++) {
		bench_tuned("gpt qkv", tune_rows[i], c, 3 * c);
		bench_tuned("gpt attproj", tune_rows[i], c, c);
		bench_tuned("gpt fc", tune_rows[i], c, 4 * c);
		bench_tuned("gpt fcproj", tune_rows[i], 4 * c, c);
	}
	int mb = quick ? 1024 : 8192;
	bench_matmul("mlp in", mb, 784, 1024, 1, 1);
	bench_matmul("mlp hidden", mb, 1024, 1024, 1, 1);
	bench_matmul("mlp out", mb, 1024, 10, 1, 1);
	kern_cuda_sync();
	return 0;
}
