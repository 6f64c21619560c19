/* tests/unit/cuda_shim.c - a CPU stand-in for the entry points of
 * larch_kernels_cuda that the trainer's GPU models call, for
 * test_model_cuda.c: "device" buffers are host memory (filled with NaN
 * bytes when allocated, so that reading one before it was written shows),
 * and each kern_<op>_cuda runs kern_<op>_cpu, the very kernel the CPU model
 * runs. What this checks is the GPU models' own logic (buffers, the order
 * of ops, parameter offsets, weights up and gradients down, grad_ready
 * order, scoring) against the CPU models, bit for bit; the CUDA kernels
 * themselves are checked against the CPU references on a GPU (tests/gpu).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
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
#include "kernels/tune_table.h"
#include "trainer/comm.h"
#include "trainer/cuda_backend.h"

long cuda_shim_live_buffers;             /* allocated and not freed */

int kern_cuda_device_count(char *why, size_t whylen)
{
	(void)why, (void)whylen;
	return 1;
}

int kern_cuda_device_query(int index, struct kern_cuda_device *dev, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	memset(dev, 0, sizeof *dev);
	dev->index = index;
	snprintf(dev->name, sizeof dev->name, "CPU shim");
	dev->cc_major = 9;
	dev->mem_total = dev->mem_free = (size_t)16 << 30;  /* for the scripts' plans */
	return 0;
}

/* as the real one's, for the benchmarks that read the free memory from it */
void kern_cuda_device_describe(const struct kern_cuda_device *dev, char *buf, size_t len)
{
	const double gib = 1024.0 * 1024.0 * 1024.0;
	snprintf(buf, len, "%s, %.1f GiB (%.1f free)", dev->name, (double)dev->mem_total / gib,
	         (double)dev->mem_free / gib);
}

int kern_cuda_use_device(int index, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	return index == 0 ? 0 : -1;
}

int kern_cuda_current_device(void)
{
	return 0;
}

int kern_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	*free_bytes = *total_bytes = (size_t)1 << 40;
	return 0;
}

double kern_cuda_peak_fp32(int index)
{
	(void)index;
	return 1e12;
}

double kern_cuda_peak_tensor16(int index, double sheet, const char **basis)
{
	(void)index, (void)sheet;
	if (basis)
		*basis = "the stand-in's";
	return 8e12;
}

/* kern_cuda_alloc_bytes's figures: a buffer's size sits in a header before
 * it (cudaMalloc's 256-byte alignment kept) */
#define SHIM_HEAD 256
static size_t shim_alloc_now, shim_alloc_peak;

static void shim_account(size_t add, size_t sub)
{
	shim_alloc_now = shim_alloc_now + add - sub;
	if (shim_alloc_now > shim_alloc_peak)
		shim_alloc_peak = shim_alloc_now;
}

void *kern_cuda_malloc(size_t bytes)
{
	if (!bytes)
		return NULL;
	size_t whole = (SHIM_HEAD + bytes + SHIM_HEAD - 1) / SHIM_HEAD * SHIM_HEAD;
	unsigned char *raw = aligned_alloc(SHIM_HEAD, whole);
	if (!raw) {
		fprintf(stderr, "cuda_shim: out of memory (%zu bytes)\n", bytes);
		abort();
	}
	memcpy(raw, &bytes, sizeof bytes);
	void *p = raw + SHIM_HEAD;
	memset(p, 0xff, bytes);            /* NaN in every float */
	cuda_shim_live_buffers++;
	shim_account(bytes, 0);
	return p;
}

void kern_cuda_free(void *dev)
{
	if (!dev)
		return;
	unsigned char *raw = (unsigned char *)dev - SHIM_HEAD;
	size_t bytes;
	memcpy(&bytes, raw, sizeof bytes);
	cuda_shim_live_buffers--;
	shim_account(0, bytes);
	free(raw);
}

void kern_cuda_alloc_bytes(size_t *now, size_t *peak)
{
	*now = shim_alloc_now;
	*peak = shim_alloc_peak;
}

void kern_cuda_upload(void *dev_dst, const void *host_src, size_t bytes)
{
	if (bytes)
		memcpy(dev_dst, host_src, bytes);
}

void *kern_cuda_dup(const void *host_src, size_t bytes)
{
	void *p = kern_cuda_malloc(bytes);
	if (p)
		memcpy(p, host_src, bytes);
	return p;
}

void kern_cuda_download(void *host_dst, const void *dev_src, size_t bytes)
{
	if (bytes)
		memcpy(host_dst, dev_src, bytes);
}

void kern_cuda_zero(void *dev, size_t bytes)
{
	if (bytes)
		memset(dev, 0, bytes);
}

/* ---- the ops, as the CPU model runs them ------------------------------------ */

/* the GEMM operands' type (kern_matmul_cuda_operands) */
static int shim_operands = KERN_MM_FP32;

/* The workspaces the CUDA library takes through kern_cuda_malloc on its
 * first GEMM: cuBLASLt's, and cuBLAS's own unless the GEMMs are 16-bit and
 * tuned (every one of them through cuBLASLt then, matmul_cuda.h). The
 * stand-in needs none, so it counts each, once, without holding them. */
int kern_matmul_cuda_gemm_tune(int candidates);

static void shim_workspaces(void)
{
	static int lt, cublas;
	if (!lt) {
		lt = 1;
		shim_account(KERN_CUBLASLT_WORKSPACE_BYTES, 0);
	}
	if (!cublas && (shim_operands == KERN_MM_FP32 || !kern_matmul_cuda_gemm_tune(-1))) {
		cublas = 1;
		shim_account(KERN_CUBLAS_WORKSPACE_BYTES, 0);
	}
}

/* x[0..n) stored as the 16-bit operands' type holds it, as the element-wise
 * kernels store their outputs (cuda_common.h) */
static void store16(float *x, long n)
{
	if (shim_operands == KERN_MM_BF16)
		kern_round_bf16_cpu(x, n);
	else if (shim_operands == KERN_MM_FP16)
		kern_round_fp16_cpu(x, n);
}

/* x[0..n) read as the 16-bit operands' type holds it, as the GEMMs' operand
 * copies and the element-wise kernels' loads read it (cuda_common.h): x
 * itself in fp32, else a rounded copy in *tmp (free it; NULL otherwise). */
static const float *as16(const float *x, long n, float **tmp)
{
	*tmp = NULL;
	if (shim_operands == KERN_MM_FP32 || !x)
		return x;
	if (!(*tmp = malloc(sizeof(float) * (size_t)(n ? n : 1))))
		abort();
	memcpy(*tmp, x, sizeof(float) * (size_t)n);
	store16(*tmp, n);
	return *tmp;
}

/* with 16-bit operands att is left rounded, as attention_cuda.h says */
void kern_attention_fwd_cuda(float *out, float *preatt, float *att, const float *qkv, int b,
                             int t, int c, int nh)
{
	float *t1;
	kern_attention_fwd_cpu(out, preatt, att, as16(qkv, (long)b * t * 3 * c, &t1), b, t, c, nh);
	store16(att, (long)b * nh * t * t);
	free(t1);
}

/* datt as the CUDA backward leaves it: dpreatt whole, zeros where the mask
 * hides a score (the CPU kernel leaves those as they were) */
static void datt_masked_zeros(float *datt, int b, int t, int nh)
{
	if (!datt)
		return;
	for (long m = 0; m < (long)b * nh; m++)
		for (int i = 0; i < t; i++)
			for (int j = i + 1; j < t; j++)
				datt[(m * t + i) * t + j] = 0.0f;
}

/* the backward, overwriting dqkv (set) or adding into it */
static void attention_bwd(int set, float *dqkv, float *dpreatt, float *datt, const float *dout,
                          const float *qkv, const float *att, int b, int t, int c, int nh)
{
	float *t1, *t2;
	long btc = (long)b * t * c;
	(set ? kern_attention_bwd_set_cpu : kern_attention_bwd_cpu)(
		dqkv, dpreatt, datt, as16(dout, btc, &t1), as16(qkv, 3 * btc, &t2), att, b, t, c, nh);
	datt_masked_zeros(datt, b, t, nh);
	free(t1);
	free(t2);
}

void kern_attention_bwd_set_cuda(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                 const float *qkv, const float *att, int b, int t, int c, int nh)
{
	attention_bwd(1, dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh);
}

void kern_embedding_fwd_cuda(float *out, const int *tokens, const float *wte, const float *wpe,
                             int b, int t, int c)
{
	kern_embedding_fwd_cpu(out, tokens, wte, wpe, b, t, c);
	store16(out, (long)b * t * c);
}

void kern_embedding_bwd_cuda(float *dwte, float *dwpe, const float *dout, const int *tokens,
                             int b, int t, int c, int vocab)
{
	kern_embedding_bwd_cpu(dwte, dwpe, dout, tokens, b, t, c, vocab);
}

void kern_gelu_fwd_cuda(float *out, const float *inp, long n)
{
	float *t1;
	kern_gelu_fwd_cpu(out, as16(inp, n, &t1), n);
	store16(out, n);
	free(t1);
}

/* the backward, overwriting dinp (set) or adding into it */
static void gelu_bwd(int set, float *dinp, const float *inp, const float *dout, long n)
{
	float *t1, *t2;
	(set ? kern_gelu_bwd_set_cpu : kern_gelu_bwd_cpu)(dinp, as16(inp, n, &t1),
	                                                   as16(dout, n, &t2), n);
	store16(dinp, n);
	free(t1);
	free(t2);
}

void kern_gelu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	gelu_bwd(1, dinp, inp, dout, n);
}

void kern_relu_fwd_cuda(float *out, const float *inp, long n)
{
	kern_relu_fwd_cpu(out, inp, n);
}

void kern_relu_bwd_set_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	kern_relu_bwd_set_cpu(dinp, inp, dout, n);
}

/* the switch kept, one way here: the two ops, whose bits the GPU's one
 * kernel gives */
static int shim_ln_residual = 1;

int kern_layernorm_cuda_fuse_residual(int on)
{
	int prev = shim_ln_residual;
	if (on >= 0)
		shim_ln_residual = on != 0;
	return prev;
}

/* counted, so that a test can tell the GPU GPT calls it */
long cuda_shim_ln_residual_calls;

void kern_residual_layernorm_fwd_act_cuda(int a16, void *res, void *out, float *mean,
                                          float *rstd, const void *a, const void *b,
                                          const float *weight, const float *bias, int n, int c)
{
	cuda_shim_ln_residual_calls++;
	kern_residual_fwd_act_cuda(a16, res, a, b, (long)n * c);
	kern_layernorm_fwd_act_cuda(a16, out, mean, rstd, res, weight, bias, n, c);
}

void kern_layernorm_fwd_cuda(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, int n, int c)
{
	float *t1;
	kern_layernorm_fwd_cpu(out, mean, rstd, as16(inp, (long)n * c, &t1), weight, bias, n, c);
	store16(out, (long)n * c);
	free(t1);
}

static void layernorm_bwd(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, int n, int c, int set)
{
	float *t1, *t2;
	long nc = (long)n * c;
	(set ? kern_layernorm_bwd_set_cpu : kern_layernorm_bwd_cpu)(
		dinp, dweight, dbias, as16(dout, nc, &t1), as16(inp, nc, &t2), weight, mean, rstd, n, c);
	store16(dinp, nc);
	free(t1);
	free(t2);
}

void kern_layernorm_bwd_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int n, int c)
{
	layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 0);
}

void kern_layernorm_bwd_set_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, const float *mean,
                                 const float *rstd, int n, int c)
{
	layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 1);
}

/* The weights' 16-bit copy the model keeps (kern_matmul_cuda_weights16):
 * the GEMMs read a weight or bias in it from there, as the CUDA version
 * does, so that a copy the model let go stale, or a gap it did not zero,
 * shows as a difference from the CPU model. */
static struct kern_w16 kept;

void kern_matmul_cuda_weights16(const float *w, const uint16_t *w16, long n, long pad_at,
                                long pad, int dtype)
{
	kept = (struct kern_w16){ .w = w16 && n > 0 ? w : NULL, .w16 = w16, .n = n,
		                  .pad_at = pad_at, .pad = pad, .dtype = dtype };
}

static float *from16(const void *x, long n);

/* x[0..n) as the GEMMs read it (the bias too: its 16-bit value): from the
 * kept copy where it lies there as kern_w16_place says (NULL else), decoded
 * into a buffer to free. With a padded ld (zeros > 0) the copy's gap must
 * follow x and hold zeros, which the CUDA GEMM multiplies with the
 * padding. */
static float *kept_values(const float *x, long n, long zeros)
{
	long at = kept.dtype == shim_operands && x ? kern_w16_place(&kept, x, n) : -1;
	if (at < 0)
		return NULL;
	const uint16_t *h = kept.w16 + at;
	if (zeros > 0) {
		if (at + n != kept.pad_at || zeros > kept.pad) {
			fprintf(stderr, "cuda_shim: a padded GEMM's weight is kept without its gap\n");
			abort();
		}
		for (long j = 0; j < zeros; j++)
			if (h[n + j] != 0) {
				fprintf(stderr, "cuda_shim: the kept weights' gap holds %#x at %ld\n",
				        h[n + j], j);
				abort();
			}
	}
	return from16(h, n);
}

/* as16 for a GEMM's weight or bias: the kept copy's values, else as16 */
static const float *weight16(const float *x, long n, long zeros, float **tmp)
{
	if ((*tmp = kept_values(x, n, zeros)))
		return *tmp;
	return as16(x, n, tmp);
}

/* The GEMMs on their operands as 16-bit copies hold them (the bias and the
 * results fp32). */
void kern_matmul_fwd_cuda(float *out, const float *inp, const float *weight, const float *bias,
                          int n, int c, int oc)
{
	kern_matmul_fwd_ld_cuda(out, oc, inp, weight, bias, n, c, oc);
}

void kern_matmul_bwd_set_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, int n, int c, int oc)
{
	kern_matmul_bwd_set_ld_cuda(dinp, dweight, dbias, dout, oc, inp, weight, n, c, oc);
}

/* The strided versions: rows ld apart gathered into (scattered from) n x v
 * contiguous floats, where the CPU kernel runs; read as 16-bit values when
 * the operands are (as16). */
static float *packed(const float *x, int ld, int n, int v)
{
	float *p = calloc((size_t)n * (size_t)v, sizeof(float));
	if (!p)
		abort();
	if (x)
		for (int r = 0; r < n; r++)
			memcpy(p + (size_t)r * v, x + (size_t)r * ld, sizeof(float) * (size_t)v);
	if (x)
		store16(p, (long)n * v);
	return p;
}

static void unpack(float *x, int ld, const float *p, int n, int v)
{
	for (int r = 0; r < n; r++)
		memcpy(x + (size_t)r * ld, p + (size_t)r * v, sizeof(float) * (size_t)v);
}

/* Whether a strided forward writes zeros in out's padding columns: with
 * 16-bit operands, no bias and an aligned ldo its GEMM runs over all ldo
 * columns (matmul_cuda.cu), the padding's rows of weight zeros. */
static int pads_zeros(int ldo, int oc, int c, const float *bias)
{
	return shim_operands != KERN_MM_FP32 && !bias && c > 0 && ldo > oc && ldo % 8 == 0;
}

/* The GEMMs' tuning: the switch kept as matmul_cuda.cu keeps it, and the
 * picks' file kept as it keeps it (kernels/tune_table.h), one line a GEMM
 * problem the first time one runs, its "algorithm" the problem's number:
 * no cuBLASLt here to time, but the trainer's side of the file (its place
 * in the job directory, a resume reading it back) runs as on a GPU. */
static int shim_gemm_tune;
static struct kern_tune_table shim_picks;
static char *shim_picks_path;
static long shim_tune_reused;

int kern_matmul_cuda_gemm_tune(int candidates)
{
	int prev = shim_gemm_tune;
	if (candidates >= 0)
		shim_gemm_tune = kern_gemm_tune_count(candidates);
	return prev;
}

int kern_matmul_cuda_gemm_tune_file(const char *path)
{
	free(shim_picks_path);
	shim_picks_path = NULL;
	kern_tune_table_free(&shim_picks);
	if (!path || !*path)
		return 0;
	char why[512];
	if (kern_tune_table_load(&shim_picks, path, NULL, why, sizeof why) != 0) {
		fprintf(stderr, "larch: cuBLASLt tuning: %s: the picks are not kept\n", why);
		return -1;
	}
	shim_picks_path = strdup(path);
	return shim_picks.n;
}

/* a GEMM problem (what, n, c, oc) run with tuning on: its pick from the
 * file, or a new one added */
static void shim_tune(const char *what, int n, int c, int oc)
{
	if (!kern_matmul_cuda_gemm_tune(-1) || !shim_picks_path)
		return;
	char key[128], why[512];
	snprintf(key, sizeof key, "shim;%s;n=%d;c=%d;oc=%d;cands=%d", what, n, c, oc,
	         shim_gemm_tune);
	if (kern_tune_table_find(&shim_picks, key)) {
		shim_tune_reused++;
		return;
	}
	uint64_t algo[KERN_TUNE_WORDS] = { (uint64_t)shim_picks.n + 1 };
	if (kern_tune_table_add(&shim_picks, shim_picks_path, key, algo, why, sizeof why) != 0)
		fprintf(stderr, "larch: cuBLASLt tuning: %s: the pick is not kept\n", why);
}

/* The strided forward; bias16: the bias read as a 16-bit value, as a GEMM
 * with a 16-bit output takes it (an fp32 output takes the fp32 bias). */
static void fwd_ld(float *out, int ldo, const float *inp, const float *weight, const float *bias,
                   int n, int c, int oc, int bias16)
{
	shim_workspaces();
	shim_tune("fwd", n, c, oc);
	long zeros = ldo > oc && ldo % 8 == 0 && !bias ? (long)(ldo - oc) * c : 0;
	float *o = packed(NULL, ldo, n, oc), *t1, *t2, *t3 = NULL;
	kern_matmul_fwd_cpu(o, as16(inp, (long)n * c, &t1), weight16(weight, (long)oc * c, zeros, &t2),
	                    bias && bias16 ? weight16(bias, oc, 0, &t3) : bias, n, c, oc);
	unpack(out, ldo, o, n, oc);
	/* as matmul_cuda.h says: a 16-bit forward without a bias runs its GEMM
	 * over all ldo columns, so the padding gets zeros (times zero rows) */
	if (pads_zeros(ldo, oc, c, bias))
		for (int r = 0; r < n; r++)
			memset(out + (size_t)r * ldo + oc, 0, sizeof(float) * (size_t)(ldo - oc));
	free(o);
	free(t1);
	free(t2);
	free(t3);
}

void kern_matmul_fwd_ld_cuda(float *out, int ldo, const float *inp, const float *weight,
                             const float *bias, int n, int c, int oc)
{
	fwd_ld(out, ldo, inp, weight, bias, n, c, oc, 0);
}

void kern_matmul_bwd_set_ld_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                 int ldd, const float *inp, const float *weight, int n, int c,
                                 int oc)
{
	shim_tune("bwd", n, c, oc);
	long zeros = ldd > oc && ldd % 8 == 0 ? (long)(ldd - oc) * c : 0;
	float *d = packed(dout, ldd, n, oc), *t1, *t2;
	kern_matmul_bwd_set_cpu(dinp, dweight, dbias, d, as16(inp, (long)n * c, &t1),
	                        weight16(weight, (long)oc * c, zeros, &t2), n, c, oc);
	free(d);
	free(t1);
	free(t2);
}

void kern_residual_fwd_cuda(float *out, const float *a, const float *b, long n)
{
	float *t1, *t2;
	kern_residual_fwd_cpu(out, as16(a, n, &t1), as16(b, n, &t2), n);
	store16(out, n);
	free(t1);
	free(t2);
}

void kern_softmax_xent_fwd_cuda(float *losses, float *lse, const float *logits,
                                const int *targets, int n, int v)
{
	kern_softmax_xent_fwd_ld_cuda(losses, lse, logits, v, targets, n, v);
}

void kern_softmax_xent_bwd_set_cuda(float *dlogits, float dloss, const float *logits,
                                    const float *lse, const int *targets, int n, int v)
{
	kern_softmax_xent_bwd_set_ld_cuda(dlogits, dloss, logits, v, lse, targets, n, v);
}

void kern_softmax_xent_fwd_ld_cuda(float *losses, float *lse, const float *logits, int ld,
                                   const int *targets, int n, int v)
{
	float *x = packed(logits, ld, n, v);
	kern_softmax_xent_fwd_cpu(losses, lse, x, targets, n, v);
	free(x);
}

void kern_softmax_xent_bwd_set_ld_cuda(float *dlogits, float dloss, const float *logits, int ld,
                                       const float *lse, const int *targets, int n, int v)
{
	float *x = packed(logits, ld, n, v), *d = packed(NULL, ld, n, v);
	kern_softmax_xent_bwd_set_cpu(d, dloss, x, lse, targets, n, v);
	store16(d, (long)n * v);
	unpack(dlogits, ld, d, n, v);
	free(x);
	free(d);
}

void kern_argmax_rows_ld_cuda(int *best, const float *logits, int ld, int n, int v)
{
	float *x = packed(logits, ld, n, v);
	for (int r = 0; r < n; r++) {
		const float *row = x + (long)r * v;
		int b = 0;
		for (int j = 1; j < v; j++)
			if (row[j] > row[b])
				b = j;
		best[r] = b;
	}
	free(x);
}

/* ---- what only the GPU tests call (tests/gpu, built against this shim too) ---- */

/* The accumulating backwards (+=), with the 16-bit stores and loads of
 * their _set versions above, so that tests/gpu/test_cuda_*.c run here: their
 * own logic (sizes, expectations, memory they read) checked without a GPU. */
void kern_gelu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	gelu_bwd(0, dinp, inp, dout, n);
}

void kern_relu_bwd_cuda(float *dinp, const float *inp, const float *dout, long n)
{
	kern_relu_bwd_cpu(dinp, inp, dout, n);
}

void kern_residual_bwd_cuda(float *da, float *db, const float *dout, long n)
{
	kern_residual_bwd_cpu(da, db, dout, n);
	store16(da, n);
	store16(db, n);
}

void kern_matmul_bwd_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int n, int c, int oc)
{
	float *t1, *t2, *t3;
	kern_matmul_bwd_cpu(dinp, dweight, dbias, as16(dout, (long)n * oc, &t1),
	                    as16(inp, (long)n * c, &t2), weight16(weight, (long)oc * c, 0, &t3), n, c,
	                    oc);
	free(t1);
	free(t2);
	free(t3);
}

void kern_attention_bwd_cuda(float *dqkv, float *dpreatt, float *datt, const float *dout,
                             const float *qkv, const float *att, int b, int t, int c, int nh)
{
	attention_bwd(0, dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh);
}

void kern_softmax_xent_bwd_cuda(float *dlogits, float dloss, const float *logits,
                                const float *lse, const int *targets, int n, int v)
{
	/* as the CUDA kernel: the _set values added (the test's "adds" is
	 * initial + set bit for bit), then stored */
	long nv = (long)n * v;
	float *t1, *g = malloc(sizeof(float) * (size_t)(nv > 0 ? nv : 1));
	if (!g)
		abort();
	kern_softmax_xent_bwd_set_cpu(g, dloss, as16(logits, nv, &t1), lse, targets, n, v);
	for (long i = 0; i < nv; i++)
		dlogits[i] += g[i];
	store16(dlogits, nv);
	free(g);
	free(t1);
}

void kern_argmax_rows_cuda(int *best, const float *logits, int n, int v)
{
	kern_argmax_rows_ld_cuda(best, logits, v, n, v);
}

void kern_sumsq_cuda_dev(double *result, const float *x, long n)
{
	*result = kern_sumsq_cpu(x, n);
}

int kern_matmul_cuda_fused_bias(int on)
{
	(void)on;
	return 1;                          /* the bias is added as the epilogue would */
}

int kern_matmul_cuda_split_odd(int on)
{
	(void)on;
	return 0;                          /* (one CPU GEMM here either way) */
}

int kern_cuda_gemm_operands(void)
{
	return shim_operands;
}

void kern_cuda_set_gemm_operands(int dtype)
{
	shim_operands = dtype;
}

void kern_cuda_sync(void)
{
}

/* the switch kept; the shim's ops have one way each, so nothing is timed */
static int shim_kernel_tune = 1;

int kern_cuda_kernel_tune(int on)
{
	int prev = shim_kernel_tune;
	if (on >= 0)
		shim_kernel_tune = on != 0;
	return prev;
}

long kern_cuda_variants_tuned(void)
{
	return 0;
}

/* the caller's choices: "default" picks turn the timing off, as on a GPU
 * (nothing here is timed either way) */
void kern_cuda_set_opts(const struct kern_cuda_opts *opts)
{
	if (opts->kernel_picks && strcmp(opts->kernel_picks, "default") == 0)
		shim_kernel_tune = 0;
}

/* ---- 16-bit activations (cuda_common.h) -------------------------------------- */

/* Each _act op with a16 runs the fp32 version above on fp32 copies of its
 * packed inputs (exact) and packs its outputs, rounded, as the CUDA kernels
 * store them: every activation the GPU model keeps is then the CPU model's
 * value after its rounding, in half the bytes. */
static void act_check(int a16)
{
	if (a16 && shim_operands == KERN_MM_FP32) {
		fprintf(stderr, "cuda_shim: 16-bit activations with fp32 GEMM operands\n");
		abort();
	}
}

static float *from16(const void *x, long n)
{
	float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	if (!f)
		abort();
	if (shim_operands == KERN_MM_BF16)
		kern_bf16_to_fp32_cpu(f, x, n);
	else
		kern_fp16_to_fp32_cpu(f, x, n);
	return f;
}

/* a fresh fp32 buffer of n values, NaN until written */
static float *fresh32(long n)
{
	float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	if (!f)
		abort();
	memset(f, 0xff, sizeof(float) * (size_t)(n > 0 ? n : 1));
	return f;
}

static void to16(void *dst, const float *x, long n)
{
	if (shim_operands == KERN_MM_BF16)
		kern_fp32_to_bf16_cpu(dst, x, n);
	else
		kern_fp32_to_fp16_cpu(dst, x, n);
}

void kern_embedding_fwd_act_cuda(int a16, void *out, const int *tokens, const float *wte,
                                 const float *wpe, int b, int t, int c)
{
	act_check(a16);
	if (!a16) {
		kern_embedding_fwd_cuda(out, tokens, wte, wpe, b, t, c);
		return;
	}
	long n = (long)b * t * c;
	float *o = fresh32(n);
	kern_embedding_fwd_cuda(o, tokens, wte, wpe, b, t, c);
	to16(out, o, n);
	free(o);
}

void kern_embedding_bwd_act_cuda(int a16, float *dwte, float *dwpe, const void *dout,
                                 const int *tokens, int b, int t, int c, int vocab)
{
	act_check(a16);
	if (!a16) {
		kern_embedding_bwd_cuda(dwte, dwpe, dout, tokens, b, t, c, vocab);
		return;
	}
	float *d = from16(dout, (long)b * t * c);
	kern_embedding_bwd_cuda(dwte, dwpe, d, tokens, b, t, c, vocab);
	free(d);
}

void kern_layernorm_fwd_act_cuda(int a16, void *out, float *mean, float *rstd, const void *inp,
                                 const float *weight, const float *bias, int n, int c)
{
	act_check(a16);
	if (!a16) {
		kern_layernorm_fwd_cuda(out, mean, rstd, inp, weight, bias, n, c);
		return;
	}
	long nc = (long)n * c;
	float *x = from16(inp, nc), *o = fresh32(nc);
	kern_layernorm_fwd_cuda(o, mean, rstd, x, weight, bias, n, c);
	to16(out, o, nc);
	free(x);
	free(o);
}

static void layernorm_bwd_act(int a16, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const float *weight,
                              const float *mean, const float *rstd, int n, int c, int set)
{
	act_check(a16);
	if (!a16) {
		layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, set);
		return;
	}
	long nc = (long)n * c;
	float *d = from16(dout, nc), *x = from16(inp, nc);
	float *di = set ? fresh32(nc) : from16(dinp, nc);
	layernorm_bwd(di, dweight, dbias, d, x, weight, mean, rstd, n, c, set);
	to16(dinp, di, nc);
	free(d);
	free(x);
	free(di);
}

void kern_layernorm_bwd_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                 const void *dout, const void *inp, const float *weight,
                                 const float *mean, const float *rstd, int n, int c)
{
	layernorm_bwd_act(a16, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 0);
}

void kern_layernorm_bwd_set_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                     const void *dout, const void *inp, const float *weight,
                                     const float *mean, const float *rstd, int n, int c)
{
	layernorm_bwd_act(a16, dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c, 1);
}

/* rows of v values ld apart: the 16-bit ones as fp32 (the padding NaN) */
static float *from16_rows(const void *x, int ld, int n, int v)
{
	float *f = fresh32((long)n * ld);
	for (int r = 0; r < n; r++) {
		float *row = from16((const uint16_t *)x + (size_t)r * ld, v);
		memcpy(f + (size_t)r * ld, row, sizeof(float) * (size_t)v);
		free(row);
	}
	return f;
}

static void to16_rows(void *dst, int ld, const float *x, int n, int v)
{
	for (int r = 0; r < n; r++)
		to16((uint16_t *)dst + (size_t)r * ld, x + (size_t)r * ld, v);
}

void kern_matmul_fwd_ld_act_cuda(int a16, void *out, int ldo, const void *inp,
                                 const float *weight, const float *bias, int n, int c, int oc)
{
	act_check(a16);
	if (!a16) {
		kern_matmul_fwd_ld_cuda(out, ldo, inp, weight, bias, n, c, oc);
		return;
	}
	float *x = from16(inp, (long)n * c), *o = fresh32((long)n * ldo);
	fwd_ld(o, ldo, x, weight, bias, n, c, oc, 1);
	to16_rows(out, ldo, o, n, pads_zeros(ldo, oc, c, bias) ? ldo : oc);  /* the zeros too */
	free(x);
	free(o);
}

void kern_matmul_fwd_act_cuda(int a16, void *out, const void *inp, const float *weight,
                              const float *bias, int n, int c, int oc)
{
	kern_matmul_fwd_ld_act_cuda(a16, out, oc, inp, weight, bias, n, c, oc);
}

/* matmul_cuda.h: with ldd > oc (a multiple of 8) the CUDA backward reads
 * dout's padding columns, which must hold finite values */
static void check_padding(const void *dout, int ldd, int n, int oc)
{
	if (ldd <= oc || ldd % 8)
		return;
	for (int r = 0; r < n; r++) {
		float *pad = from16((const uint16_t *)dout + (size_t)r * ldd + oc, ldd - oc);
		for (int j = 0; j < ldd - oc; j++)
			if (!isfinite(pad[j])) {
				fprintf(stderr, "cuda_shim: matmul backward: dout's padding holds %g at "
				        "row %d, column %d\n", pad[j], r, oc + j);
				abort();
			}
		free(pad);
	}
}

void kern_matmul_bwd_set_ld_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                     const void *dout, int ldd, const void *inp,
                                     const float *weight, int n, int c, int oc)
{
	act_check(a16);
	if (!a16) {
		kern_matmul_bwd_set_ld_cuda(dinp, dweight, dbias, dout, ldd, inp, weight, n, c, oc);
		return;
	}
	check_padding(dout, ldd, n, oc);
	float *d = from16_rows(dout, ldd, n, oc), *x = from16(inp, (long)n * c);
	float *di = dinp ? fresh32((long)n * c) : NULL;
	kern_matmul_bwd_set_ld_cuda(di, dweight, dbias, d, ldd, x, weight, n, c, oc);
	if (dinp)
		to16(dinp, di, (long)n * c);
	free(d);
	free(x);
	free(di);
}

void kern_matmul_bwd_set_act_cuda(int a16, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const float *weight, int n,
                                  int c, int oc)
{
	kern_matmul_bwd_set_ld_act_cuda(a16, dinp, dweight, dbias, dout, oc, inp, weight, n, c, oc);
}

/* preatt and datt are the CUDA version's fp32 scratch: left NaN here, so
 * that a model reading them after the op shows */
void kern_attention_fwd_act_cuda(int a16, void *out, float *preatt, void *att, const void *qkv,
                                 int b, int t, int c, int nh)
{
	act_check(a16);
	if (!a16) {
		kern_attention_fwd_cuda(out, preatt, att, qkv, b, t, c, nh);
		return;
	}
	long btc = (long)b * t * c, att_n = (long)b * nh * t * t;
	float *x = from16(qkv, 3 * btc), *o = fresh32(btc), *a = fresh32(att_n);
	kern_attention_fwd_cuda(o, NULL, a, x, b, t, c, nh);
	to16(out, o, btc);
	to16(att, a, att_n);
	memset(preatt, 0xff, sizeof(float) * (size_t)att_n);
	free(x);
	free(o);
	free(a);
}

void kern_attention_bwd_set_act_cuda(int a16, void *dqkv, float *dpreatt, float *datt,
                                     const void *dout, const void *qkv, const void *att, int b,
                                     int t, int c, int nh)
{
	act_check(a16);
	if (!a16) {
		kern_attention_bwd_set_cuda(dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh);
		return;
	}
	long btc = (long)b * t * c, att_n = (long)b * nh * t * t;
	float *d = from16(dout, btc), *x = from16(qkv, 3 * btc), *a = from16(att, att_n);
	float *dx = fresh32(3 * btc);
	kern_attention_bwd_set_cuda(dx, NULL, datt, d, x, a, b, t, c, nh);
	to16(dqkv, dx, 3 * btc);
	memset(datt, 0xff, sizeof(float) * (size_t)att_n);
	free(d);
	free(x);
	free(a);
	free(dx);
}

/* The fused attention: the CPU model's attention on the same 16-bit values
 * (its out, its gradients: the model's orchestration is what is checked
 * here; the kernels' numerics in test_flash_emu and on a GPU), and each
 * row's log-sum-exp of the scaled scores into lse. The backward takes att
 * again from a forward on its qkv and checks that lse and out are what the
 * forward left for that qkv: a model handing over another block's shows. */
long cuda_shim_flash_calls;

/* the setting kept, for the tests of what a model asks for; the shim's
 * backward has no atomics (one way either way) */
static int shim_dq_atomic;

int kern_attention_flash_dq_atomic(int keys)
{
	int prev = shim_dq_atomic;
	if (keys == 0 || keys == 128)
		shim_dq_atomic = keys;
	return prev;
}

int kern_attention_flash_supported(int t, int c, int nh)
{
	return t > 0 && nh > 0 && c == nh * 64;
}

/* out (fp32) and att (rounded) of qkv (16-bit values) by the CPU model's
 * kernel, and the rows' log-sum-exp of the scaled scores (in double) */
static void flash_ref(float *out, float *att, float *lse, const float *qkv, int b, int t, int c,
                      int nh)
{
	int hs = c / nh;
	double scale = 1.0 / sqrt((double)hs);
	kern_attention_fwd_cpu(out, NULL, att, qkv, b, t, c, nh);
	store16(att, (long)b * nh * t * t);   /* as the model keeps it */
	for (long r = 0; r < (long)b * nh * t; r++) {
		int i = (int)(r % t), h = (int)(r / t % nh), bb = (int)(r / t / nh);
		const float *q = qkv + ((size_t)bb * t + i) * 3 * c + (size_t)h * hs;
		double m = -INFINITY, sum = 0;
		for (int pass = 0; pass < 2; pass++)
			for (int j = 0; j <= i; j++) {
				const float *k = qkv + ((size_t)bb * t + j) * 3 * c + c + (size_t)h * hs;
				double dot = 0;
				for (int d = 0; d < hs; d++)
					dot += (double)q[d] * k[d];
				if (pass == 0)
					m = fmax(m, dot * scale);
				else
					sum += exp(dot * scale - m);
			}
		lse[r] = (float)(m + log(sum));
	}
}

void kern_attention_flash_fwd_cuda(void *out, float *lse, const void *qkv, int b, int t, int c,
                                   int nh)
{
	act_check(1);
	if (!kern_attention_flash_supported(t, c, nh))
		abort();
	cuda_shim_flash_calls++;
	long btc = (long)b * t * c;
	float *x = from16(qkv, 3 * btc), *o = fresh32(btc), *a = fresh32((long)b * nh * t * t);
	flash_ref(o, a, lse, x, b, t, c, nh);
	to16(out, o, btc);
	free(x);
	free(o);
	free(a);
}

void kern_attention_flash_bwd_set_cuda(void *dqkv, const void *dout, const void *out,
                                       const void *qkv, const float *lse, int b, int t, int c,
                                       int nh)
{
	act_check(1);
	if (!kern_attention_flash_supported(t, c, nh))
		abort();
	cuda_shim_flash_calls++;
	long btc = (long)b * t * c, att_n = (long)b * nh * t * t, rows = (long)b * nh * t;
	float *x = from16(qkv, 3 * btc), *o = fresh32(btc), *a = fresh32(att_n);
	float *l = fresh32(rows), *d = from16(dout, btc), *dx = fresh32(3 * btc);
	float *datt = fresh32(att_n);
	uint16_t *o16 = malloc(sizeof *o16 * (size_t)btc);
	if (!o16)
		abort();
	flash_ref(o, a, l, x, b, t, c, nh);
	to16(o16, o, btc);
	if (memcmp(l, lse, sizeof(float) * (size_t)rows) != 0 ||
	    memcmp(o16, out, sizeof *o16 * (size_t)btc) != 0) {
		fprintf(stderr, "cuda_shim: flash attention backward: lse or out is not the "
		        "forward's of this qkv\n");
		abort();
	}
	kern_attention_bwd_set_cpu(dx, NULL, datt, d, x, a, b, t, c, nh);
	to16(dqkv, dx, 3 * btc);
	free(x);
	free(o);
	free(a);
	free(l);
	free(d);
	free(dx);
	free(datt);
	free(o16);
}

void kern_gelu_fwd_act_cuda(int a16, void *out, const void *inp, long n)
{
	act_check(a16);
	if (!a16) {
		kern_gelu_fwd_cuda(out, inp, n);
		return;
	}
	float *x = from16(inp, n), *o = fresh32(n);
	kern_gelu_fwd_cuda(o, x, n);
	to16(out, o, n);
	free(x);
	free(o);
}

void kern_gelu_bwd_set_act_cuda(int a16, void *dinp, const void *inp, const void *dout, long n)
{
	act_check(a16);
	if (!a16) {
		kern_gelu_bwd_set_cuda(dinp, inp, dout, n);
		return;
	}
	float *x = from16(inp, n), *d = from16(dout, n), *di = fresh32(n);
	kern_gelu_bwd_set_cuda(di, x, d, n);
	to16(dinp, di, n);
	free(x);
	free(d);
	free(di);
}

/* the fc layer and its GELU: the two ops one after the other, the CPU
 * model's numerics, fused or not (which only moves bits on a GPU) */
static int shim_fused_gelu;

int kern_matmul_cuda_fused_gelu(int on)
{
	int prev = shim_fused_gelu;
	shim_fused_gelu = !!on;
	return prev;
}

long kern_matmul_cuda_lt_refused(void)
{
	return 0;                          /* no cuBLASLt here to refuse */
}

long kern_matmul_cuda_fused_gelu_gemms(void)
{
	return 0;
}

long kern_matmul_cuda_gemm_tuned(long *other)
{
	if (other)
		*other = 0;
	return 0;
}

long kern_matmul_cuda_gemm_tune_reused(void)
{
	return shim_tune_reused;
}

/* the same-bits tuning: the switch is kept; the GEMMs here are the CPU's,
 * with no other algorithm to check */
static int shim_gemm_same;

int kern_matmul_cuda_gemm_same(int on)
{
	int prev = shim_gemm_same;
	if (on >= 0)
		shim_gemm_same = on != 0;
	return prev;
}

long kern_matmul_cuda_gemm_same_checked(long *other)
{
	if (other)
		*other = 0;
	return 0;
}

void kern_matmul_gelu_fwd_act_cuda(int a16, void *out, void *pre, const void *inp,
                                   const float *weight, const float *bias, int n, int c, int oc)
{
	kern_matmul_fwd_act_cuda(a16, pre, inp, weight, bias, n, c, oc);
	kern_gelu_fwd_act_cuda(a16, out, pre, (long)n * oc);
}

void kern_matmul_bwd_set_dgelu_act_cuda(int a16, void *dpre, float *dweight, float *dbias,
                                        const void *dout, const void *inp, const float *weight,
                                        const void *pre, int n, int c, int oc)
{
	kern_matmul_bwd_set_act_cuda(a16, dpre, dweight, dbias, dout, inp, weight, n, c, oc);
	kern_gelu_bwd_set_act_cuda(a16, dpre, pre, dpre, (long)n * c);
}

void kern_residual_fwd_act_cuda(int a16, void *out, const void *a, const void *b, long n)
{
	act_check(a16);
	if (!a16) {
		kern_residual_fwd_cuda(out, a, b, n);
		return;
	}
	float *x = from16(a, n), *y = from16(b, n), *o = fresh32(n);
	kern_residual_fwd_cuda(o, x, y, n);
	to16(out, o, n);
	free(x);
	free(y);
	free(o);
}

void kern_softmax_xent_fwd_ld_act_cuda(int a16, float *losses, float *lse, const void *logits,
                                       int ld, const int *targets, int n, int v)
{
	act_check(a16);
	if (!a16) {
		kern_softmax_xent_fwd_ld_cuda(losses, lse, logits, ld, targets, n, v);
		return;
	}
	float *x = from16_rows(logits, ld, n, v);
	kern_softmax_xent_fwd_ld_cuda(losses, lse, x, ld, targets, n, v);
	free(x);
}

void kern_softmax_xent_bwd_set_ld_act_cuda(int a16, void *dlogits, float dloss,
                                           const void *logits, int ld, const float *lse,
                                           const int *targets, int n, int v)
{
	act_check(a16);
	if (!a16) {
		kern_softmax_xent_bwd_set_ld_cuda(dlogits, dloss, logits, ld, lse, targets, n, v);
		return;
	}
	float *x = from16_rows(logits, ld, n, v), *d = fresh32((long)n * ld);
	kern_softmax_xent_bwd_set_ld_cuda(d, dloss, x, ld, lse, targets, n, v);
	to16_rows(dlogits, ld, d, n, v);
	free(x);
	free(d);
}

/* the two in turn (the kernel's contract: the same values); counted for
 * tests that check a model took the one-pass path */
long cuda_shim_xent_fused_calls;

void kern_softmax_xent_fwd_bwd_set_ld_act_cuda(int a16, float *losses, float *lse,
                                               void *dlogits, float dloss, const void *logits,
                                               int ld, const int *targets, int n, int v)
{
	cuda_shim_xent_fused_calls++;
	kern_softmax_xent_fwd_ld_act_cuda(a16, losses, lse, logits, ld, targets, n, v);
	kern_softmax_xent_bwd_set_ld_act_cuda(a16, dlogits, dloss, logits, ld, lse, targets, n, v);
}

void kern_argmax_rows_ld_act_cuda(int a16, int *best, const void *logits, int ld, int n, int v)
{
	act_check(a16);
	if (!a16) {
		kern_argmax_rows_ld_cuda(best, logits, ld, n, v);
		return;
	}
	float *x = from16_rows(logits, ld, n, v);
	kern_argmax_rows_ld_cuda(best, x, ld, n, v);
	free(x);
}

/* ---- the optimizers (trainer/optim_cuda.c's table) ------------------------------ */

double kern_sumsq_cuda(const float *x, long n)
{
	return kern_sumsq_cpu(x, n);
}

void kern_scale_cuda(float *x, long n, float s)
{
	kern_scale_cpu(x, n, s);
}

void kern_sgd_update_cuda(float *w, float *m, const float *g, long n, float lr, float mu,
                          float wd, int nesterov)
{
	kern_sgd_update_cpu(w, m, g, n, lr, mu, wd, nesterov);
}

void kern_adamw_update_cuda(float *w, float *m, float *v, const float *g, long n, float lr,
                            float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	kern_adamw_update_cpu(w, m, v, g, n, lr, b1, b2, eps, wd, bc1, bc2);
}

void kern_lars_update_cuda(float *w, float *m, const float *g, long n, float step, float mu,
                           float wd)
{
	kern_lars_update_cpu(w, m, g, n, step, mu, wd);
}

double kern_lamb_moments_cuda(float *m, float *v, const float *g, const float *w, long n,
                              float b1, float b2, float eps, float wd, float bc1, float bc2)
{
	return kern_lamb_moments_cpu(m, v, g, w, n, b1, b2, eps, wd, bc1, bc2);
}

void kern_lamb_apply_cuda(float *w, const float *m, const float *v, long n, float step,
                          float eps, float wd, float bc1, float bc2)
{
	kern_lamb_apply_cpu(w, m, v, n, step, eps, wd, bc1, bc2);
}

void kern_sgd_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n, float lr,
                             float mu, float wd, int nesterov)
{
	kern_sgd_update_q8_cpu(w, mq, ms, g, n, lr, mu, wd, nesterov);
}

void kern_adamw_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                               const float *g, long n, float lr, float b1, float b2, float eps,
                               float wd, float bc1, float bc2)
{
	kern_adamw_update_q8_cpu(w, mq, ms, vq, vs, g, n, lr, b1, b2, eps, wd, bc1, bc2);
}

void kern_lars_update_q8_cuda(float *w, int8_t *mq, float *ms, const float *g, long n,
                              float step, float mu, float wd)
{
	kern_lars_update_q8_cpu(w, mq, ms, g, n, step, mu, wd);
}

double kern_lamb_norm_q8_cuda(const int8_t *mq, const float *ms, const uint8_t *vq,
                              const float *vs, const float *g, const float *w, long n, float b1,
                              float b2, float eps, float wd, float bc1, float bc2)
{
	return kern_lamb_norm_q8_cpu(mq, ms, vq, vs, g, w, n, b1, b2, eps, wd, bc1, bc2);
}

void kern_lamb_update_q8_cuda(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                              const float *g, long n, float step, float b1, float b2, float eps,
                              float wd, float bc1, float bc2)
{
	kern_lamb_update_q8_cpu(w, mq, ms, vq, vs, g, n, step, b1, b2, eps, wd, bc1, bc2);
}

/* ---- 16-bit storage and GEMM operands ------------------------------------------ */

void kern_round_fp16_cuda(float *x, long n)
{
	kern_round_fp16_cpu(x, n);
}

void kern_round_bf16_cuda(float *x, long n)
{
	kern_round_bf16_cpu(x, n);
}

void kern_fp32_to_fp16_cuda(uint16_t *out, const float *inp, long n)
{
	kern_fp32_to_fp16_cpu(out, inp, n);
}

void kern_fp32_to_bf16_cuda(uint16_t *out, const float *inp, long n)
{
	kern_fp32_to_bf16_cpu(out, inp, n);
}

void kern_publish16_cuda(float *out, uint16_t *out16, const float *inp, long n, int bf16)
{
	if (bf16) {
		kern_fp32_to_bf16_cpu(out16, inp, n);
		kern_bf16_to_fp32_cpu(out, out16, n);
	} else {
		kern_fp32_to_fp16_cpu(out16, inp, n);
		kern_fp16_to_fp32_cpu(out, out16, n);
	}
}

/* The CPU's GEMMs on operands that hold 16-bit values already are what a
 * 16-bit GEMM with fp32 sums computes: nothing to switch. */
int kern_matmul_cuda_operands(int dtype)
{
	int prev = shim_operands;
	shim_operands = dtype;
	return prev;
}

/* Copies beside the compute stream: each is done at its wait, the latest
 * moment at which the copy stream could have finished it, so that a missing
 * wait (or a source rewritten before the copy could have read it) shows as
 * wrong bits, as in trainer/param_offload.c's CPU engine. */
static struct {
	void *dst;
	const void *src;
	size_t bytes;
} pending[KERN_CUDA_COPY_CHANNELS];

static void copy_land(int chan)
{
	if (chan < 0 || chan >= KERN_CUDA_COPY_CHANNELS)
		abort();
	if (pending[chan].bytes)
		memcpy(pending[chan].dst, pending[chan].src, pending[chan].bytes);
	pending[chan].bytes = 0;
}

void kern_cuda_copy_async(int chan, void *dst, const void *src, size_t bytes)
{
	copy_land(chan);                   /* one in flight per channel, in order */
	pending[chan].dst = dst;
	pending[chan].src = src;
	pending[chan].bytes = bytes;
}

void kern_cuda_copy_wait(int chan)
{
	copy_land(chan);
}

void kern_cuda_copy_wait_host(int chan)
{
	copy_land(chan);
}

void kern_cuda_copy(void *dev_dst, const void *dev_src, size_t bytes)
{
	if (bytes)
		memcpy(dev_dst, dev_src, bytes);
}

int kern_nonfinite_cuda(const float *x, long n)
{
	return kern_nonfinite_cpu(x, n);
}

/* pinning is a no-op on host memory that is already host memory */
int kern_cuda_host_register(void *p, size_t bytes)
{
	(void)p, (void)bytes;
	return 0;
}

void kern_cuda_host_unregister(void *p)
{
	(void)p;
}

size_t kern_cuda_scratch_peak(void)
{
	return 0;
}

/* ---- the device communicator ---------------------------------------------------- */

/* The backend's device communicator (trainer/comm_nccl_cuda.c on a GPU):
 * here "device" memory is host memory, so each collective is the host
 * communicator's own, and a run that keeps its gradients and weights on
 * the device reduces them with the very calls and order of a CPU run. */
struct shim_comm {
	struct trn_comm base;
	struct trn_comm *host;
};

static struct trn_comm *shim_host(struct trn_comm *c)
{
	return ((struct shim_comm *)c)->host;
}

static int shim_allreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_err *err)
{
	return trn_comm_allreduce_f32(shim_host(c), buf, n, err);
}

static int shim_allreduce_f64(struct trn_comm *c, double *buf, long n, struct trn_err *err)
{
	return trn_comm_allreduce_f64(shim_host(c), buf, n, err);
}

static int shim_iallreduce_f32(struct trn_comm *c, float *buf, long n,
                               struct trn_comm_req **req, struct trn_err *err)
{
	return trn_comm_iallreduce_f32(shim_host(c), buf, n, req, err);
}

static int shim_ireduce_scatter_f32(struct trn_comm *c, const float *send, float *recv,
                                    const int *counts, struct trn_comm_req **req,
                                    struct trn_err *err)
{
	return trn_comm_ireduce_scatter_f32(shim_host(c), send, recv, counts, req, err);
}

static int shim_allgather_f32(struct trn_comm *c, float *buf, const long *counts,
                              const long *displs, struct trn_err *err)
{
	return trn_comm_allgather_f32(shim_host(c), buf, counts, displs, err);
}

static int shim_gather_f32(struct trn_comm *c, const float *send, float *recv,
                           const long *counts, const long *displs, int root,
                           struct trn_err *err)
{
	return trn_comm_gather_f32(shim_host(c), send, recv, counts, displs, root, err);
}

static int shim_wait(struct trn_comm *c, struct trn_comm_req *req, struct trn_err *err)
{
	return trn_comm_wait(shim_host(c), req, err);
}

static void shim_progress(struct trn_comm *c)
{
	trn_comm_progress(shim_host(c));
}

static int shim_bcast(struct trn_comm *c, void *buf, long bytes, int root, struct trn_err *err)
{
	return trn_comm_bcast(shim_host(c), buf, bytes, root, err);
}

static int shim_barrier(struct trn_comm *c, struct trn_err *err)
{
	return trn_comm_barrier(shim_host(c), err);
}

static void shim_abort(struct trn_comm *c, int code)
{
	trn_comm_abort(shim_host(c), code);
}

static void shim_close(struct trn_comm *c)
{
	free(c);
}

static const struct trn_comm_ops shim_comm_ops = {
	.name = "shim",
	.allreduce_f32 = shim_allreduce_f32,
	.allreduce_f64 = shim_allreduce_f64,
	.iallreduce_f32 = shim_iallreduce_f32,
	.ireduce_scatter_f32 = shim_ireduce_scatter_f32,
	.allgather_f32 = shim_allgather_f32,
	.gather_f32 = shim_gather_f32,
	.wait = shim_wait,
	.progress = shim_progress,
	.bcast = shim_bcast,
	.barrier = shim_barrier,
	.abort = shim_abort,
	.close = shim_close,
};

struct trn_comm *trn_cuda_comm_open(struct trn_comm *host, int device, struct trn_err *err)
{
	(void)device;
	/* LARCH_SHIM_NO_DEVICE_COMM=all, or a rank: as a backend without one
	 * (built without NCCL), or one whose NCCL failed on that rank */
	const char *no = getenv("LARCH_SHIM_NO_DEVICE_COMM");
	if (no && *no && (strcmp(no, "all") == 0 || atoi(no) == host->rank)) {
		trn_err_set(err, "the CPU shim's device communicator is off (rank %d)", host->rank);
		return NULL;
	}
	struct shim_comm *c = calloc(1, sizeof *c);
	if (!c) {
		trn_err_set(err, "device communicator: out of memory");
		return NULL;
	}
	c->base = (struct trn_comm){ .ops = &shim_comm_ops, .rank = host->rank, .size = host->size };
	c->host = host;
	return &c->base;
}
