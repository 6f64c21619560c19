/* kernels/matmul_lt_cuda.cu - matmul_cuda.cu's GEMMs through cuBLASLt
 * (matmul_lt_cuda.h): the problems' plans (the heuristic's algorithm,
 * cached by everything it sees), the refusals said once, and the two
 * tunings of an algorithm at a problem's first call: the any-bits one
 * (kern_matmul_cuda_gemm_tune, its picks kept in a file for a resume) and
 * the same-bits one (kern_matmul_cuda_gemm_same, the picks with the
 * default path's bits, timed as the kernels' variants are).
 */
#include "matmul_lt_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "cuda_sizes.h"
#include "matmul_cuda.h"
#include "matmul_lt_kernels.cuh"
#include "tune_table.h"

/* a GPT step's epilogue problems (forward bias, GELU, DGELU, the bias
 * gradients) take about ten plans, and about thirty with every 16-bit GEMM
 * tuned (kern_matmul_cuda_gemm_tune); a full ring would plan and, for a
 * refused problem, say so again at each turn (a tuned one: time it again) */
#define LT_CACHE 128
/* the timed runs of each candidate, after one untimed */
#define LT_TUNE_RUNS 3
/* the heuristic's candidates the same-bits tuning asks for (plan_same):
 * with the default, at most KERN_CUDA_VARIANTS_MOST variants */
#define LT_SAME_CANDIDATES 8

static long g_lt_refused;              /* cuBLASLt problems without an algorithm */
static int g_tune;                     /* 0 off; else the candidates a problem times */
static long g_tuned, g_tuned_other;    /* problems tuned; those not on the first candidate */
static long g_tune_reused;             /* problems that took a pick from the file */
static struct kern_tune_table g_picks;  /* the picks so far (kern_matmul_cuda_gemm_tune_file) */
static char *g_picks_path;             /* their file, or NULL */
static int g_same;                     /* the same-bits tuning (off: matmul_cuda.h) */
static long g_same_checked;            /* problems whose candidates' bits were compared */
static long g_same_other;              /* those that kept another algorithm than the default */

extern "C" long kern_matmul_cuda_lt_refused(void)
{
	return g_lt_refused;
}

/* off by default; candidates >= 0 sets it (0 or 1: off; at most
 * KERN_GEMM_TUNE_MOST), -1 only asks */
extern "C" int kern_matmul_cuda_gemm_tune(int candidates)
{
	int prev = g_tune;
	if (candidates >= 0)
		g_tune = kern_gemm_tune_count(candidates);
	return prev;
}

extern "C" long kern_matmul_cuda_gemm_tuned(long *other)
{
	if (other)
		*other = g_tuned_other;
	return g_tuned;
}

extern "C" long kern_matmul_cuda_gemm_tune_reused(void)
{
	return g_tune_reused;
}

/* off until a GPU run shows it wins (matmul_cuda.h); on >= 0 sets it,
 * -1 only asks */
extern "C" int kern_matmul_cuda_gemm_same(int on)
{
	return kern_cuda_switch(&g_same, on);
}

extern "C" long kern_matmul_cuda_gemm_same_checked(long *other)
{
	if (other)
		*other = g_same_other;
	return g_same_checked;
}

/* Whether a GEMM's first call looks for faster algorithms with the default
 * path's bits: neither tuned (which may change the bits) nor told not to */
static int same_bits_tuning(void)
{
	return !kern_matmul_cuda_gemm_tune(-1) && kern_matmul_cuda_gemm_same(-1) &&
	       kern_cuda_kernel_tune(-1);
}

int kern_lt_plain(void)
{
	return kern_matmul_cuda_gemm_tune(-1) || same_bits_tuning();
}

/* ---- plans ----------------------------------------------------------------- */

/* One cuBLASLt problem, column-major: D[m, n] (rows ldd apart, type dt) =
 * op(A) op(B) + beta D with op(A) = A^T (A [k, m], lda) for ta T or A
 * ([m, k], lda) for N, op(B) likewise (B [n, k] for tb T, [k, n] for N;
 * ldb), A and B of type ab, fp32 sums; the epilogue epi, with a bias of D's
 * type (BIAS in; BGRADB out, the sums of op(B) over k) and (GELU_AUX_BIAS
 * out, DGELU in) an aux matrix of D's type and shape, rows aux_ld apart.
 * Plans are cached by everything the heuristic sees, pointer alignments
 * included (the bias's too: the heuristic reads the alignment of the bias
 * and aux pointers set in the descriptor, cublasLt.h) and the candidates
 * asked of it (1, or those a tuned problem times) and whether they are
 * held to the default's bits (same); beta is the call's. */
struct lt_key {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldd;
	cudaDataType ab, dt;
	cublasLtEpilogue_t epi;
	long aux_ld;                       /* 0: no aux matrix */
	unsigned align[6];                 /* A, B, C (= D), D, aux, bias; 0: none */
	int cands;
	int same;                          /* the same-bits tuning (plan_same) */
};

struct lt_plan {
	int used;
	struct lt_key key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, d;
	cublasLtMatmulAlgo_t algo;
	int ok;                            /* 0: no algorithm for this problem, the caller's
	                                    * other path */
	int untimed;                       /* candidates to time at its first call (plan_tune,
	                                    * plan_same) */
	int cublas;                        /* 1: plan_same kept the caller's cuBLAS call, which
	                                    * lt_gemm leaves to the caller (returns 0) */
};

/* the candidates the heuristic gave the plan made last (plan_get), its
 * estimate's best first: a new plan's first call times them (lt_gemm) */
static cublasLtMatmulHeuristicResult_t g_cand[KERN_GEMM_TUNE_MOST];
static int g_ncand;

static cublasLtHandle_t g_lt;
static void *g_lt_workspace;
static struct lt_plan g_plans[LT_CACHE];
static int g_plan_next;

/* the largest power of two <= 256 that divides p */
static unsigned ptr_align(const void *p)
{
	uintptr_t v = (uintptr_t)p | 256;
	return (unsigned)(v & -v);
}

static void plan_release(struct lt_plan *p)
{
	if (!p->used)
		return;
	cublasLtMatrixLayoutDestroy(p->a);
	cublasLtMatrixLayoutDestroy(p->b);
	cublasLtMatrixLayoutDestroy(p->d);
	cublasLtMatmulDescDestroy(p->desc);
	memset(p, 0, sizeof *p);
}

static void plans_release_all(void)
{
	for (int i = 0; i < LT_CACHE; i++)
		plan_release(&g_plans[i]);
	g_plan_next = 0;
}

extern "C" int kern_matmul_cuda_gemm_tune_file(const char *path)
{
	free(g_picks_path);
	g_picks_path = NULL;
	kern_tune_table_free(&g_picks);
	plans_release_all();               /* every problem looks its pick up again */
	if (!path || !*path)
		return 0;
	char why[512] = "";
	int skipped = 0;
	if (kern_tune_table_load(&g_picks, path, &skipped, why, sizeof why) != 0) {
		fprintf(stderr, "larch: cuBLASLt tuning: %s: the picks are not kept\n", why);
		kern_tune_table_free(&g_picks);
		return -1;
	}
	g_picks_path = strdup(path);
	if (skipped)
		fprintf(stderr, "larch: cuBLASLt tuning: %s: %d lines that do not parse left out\n",
		        path, skipped);
	return g_picks.n;
}

/* The caller's other path runs for this problem from now on; said once per
 * plan, so that a run can tell a refused epilogue from a fused one. */
static void plan_refuse(struct lt_plan *p, const char *why, cublasStatus_t st, int found)
{
	const struct lt_key *key = &p->key;
	p->ok = 0;
	g_lt_refused++;
	fprintf(stderr,
	        "larch: cuBLASLt: %s (%s, %d found) for epilogue %d, ops %c%c, "
	        "m %d n %d k %d, types %d/%d, alignments %u %u %u %u %u %u: unfused path\n",
	        why, cublasGetStatusString(st), found, (int)key->epi,
	        key->ta == CUBLAS_OP_T ? 'T' : 'N', key->tb == CUBLAS_OP_T ? 'T' : 'N', key->m,
	        key->n, key->k, (int)key->ab, (int)key->dt, key->align[0], key->align[1],
	        key->align[2], key->align[3], key->align[4], key->align[5]);
}

/* g_cand[0..*found) with first the algorithm an untuned plan of the
 * problem takes, the heuristic's answer when asked for one (which need not
 * lead its longer list): the default path the same-bits tuning holds the
 * others to */
static void default_first(const struct lt_plan *p, cublasLtMatmulPreference_t pref, int *found)
{
	cublasLtMatmulHeuristicResult_t one;
	int got = 0;
	if (cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->a, p->b, p->d, p->d, pref, 1, &one,
	                                   &got) != CUBLAS_STATUS_SUCCESS ||
	    got < 1)
		return;
	int at = 0;
	while (at < *found && memcmp(&g_cand[at].algo, &one.algo, sizeof one.algo) != 0)
		at++;
	if (at == *found && *found < KERN_GEMM_TUNE_MOST)
		(*found)++;                /* not in the list: one more */
	else if (at == *found)
		at--;                      /* the list full: its last makes room */
	memmove(&g_cand[1], &g_cand[0], sizeof g_cand[0] * (size_t)at);
	g_cand[0] = one;
}

static struct lt_plan *plan_get(const struct lt_key *key, const void *bias, const void *aux)
{
	for (int i = 0; i < LT_CACHE; i++) {
		struct lt_plan *p = &g_plans[i];
		if (p->used && memcmp(&p->key, key, sizeof *key) == 0)
			return p;
	}
	if (!g_lt) {
		KERN_CUBLAS_CHECK(cublasLtCreate(&g_lt));
		g_lt_workspace = kern_cuda_malloc(KERN_CUBLASLT_WORKSPACE_BYTES);
	}
	struct lt_plan *p = &g_plans[g_plan_next];
	g_plan_next = (g_plan_next + 1) % LT_CACHE;
	plan_release(p);
	p->used = 1;
	p->key = *key;

	KERN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA,
	                                                 &key->ta, sizeof key->ta));
	KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB,
	                                                 &key->tb, sizeof key->tb));
	KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
	                                                 &key->epi, sizeof key->epi));
	/* the heuristic reads these pointers' alignment, not their data: a
	 * bias left NULL would read as aligned to anything */
	if (bias)
		KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
	if (key->aux_ld) {
		int64_t ld = key->aux_ld;
		KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
		KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
	}
	int am = key->ta == CUBLAS_OP_T ? key->k : key->m, an = key->ta == CUBLAS_OP_T ? key->m
	                                                                                : key->k;
	int bm = key->tb == CUBLAS_OP_T ? key->n : key->k, bn = key->tb == CUBLAS_OP_T ? key->k
	                                                                                : key->n;
	KERN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, key->ab, am, an, key->lda));
	KERN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, key->ab, bm, bn, key->ldb));
	KERN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, key->dt, key->m, key->n, key->ldd));

	cublasLtMatmulPreference_t pref;
	KERN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	uint64_t ws = KERN_CUBLASLT_WORKSPACE_BYTES;
	KERN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	const cublasLtMatmulPreferenceAttributes_t attr[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
	};
	for (int i = 0; i < 4; i++) {
		uint32_t al = key->align[i];
		KERN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &al, sizeof al));
	}
	/* split-K partial sums in fp32 (the compute type, or an fp32
	 * output), never in a 16-bit output's type: sums rounded once, as the
	 * fallbacks round them */
	uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
	if (key->dt == CUDA_R_32F)
		red |= CUBLASLT_REDUCTION_SCHEME_INPLACE;
	KERN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
		pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
	int found = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->a, p->b, p->d, p->d,
	                                                   pref, key->cands, g_cand, &found);
	if (st == CUBLAS_STATUS_SUCCESS && found > 0 && key->same)
		default_first(p, pref, &found);
	cublasLtMatmulPreferenceDestroy(pref);
	g_ncand = st == CUBLAS_STATUS_SUCCESS ? found : 0;
	if (g_ncand > 0) {
		p->ok = 1;
		p->algo = g_cand[0].algo;
		/* the same-bits tuning of a GEMM without epilogue weighs even one
		 * candidate against cuBLAS's call */
		p->untimed = g_ncand > (key->same && key->epi == CUBLASLT_EPILOGUE_DEFAULT ? 0 : 1);
	} else if (key->same && key->epi == CUBLASLT_EPILOGUE_DEFAULT) {
		/* the same-bits tuning of a GEMM without epilogue, with nothing
		 * to weigh against cuBLAS's call: that call, the default path
		 * (not a fallback to say) */
		p->ok = 1;
		p->cublas = 1;
	} else {
		plan_refuse(p, "no algorithm", st, found);
	}
	return p;
}

/* the bytes of an element of the problem's D */
static int d_bytes(const struct lt_key *k)
{
	return k->dt == CUDA_R_32F ? (int)sizeof(float) : (int)sizeof(uint16_t);
}

/* Scratch of the problem's D's shape on the stream, for the tunings' runs
 * of a GEMM that adds (they must not add into the caller's D); NULL where
 * it cannot be had (the tuning then leaves the default) */
static void *d_scratch(const struct lt_key *k)
{
	size_t bytes = (size_t)d_bytes(k) * ((size_t)(k->n - 1) * (size_t)k->ldd + (size_t)k->m);
	void *p = NULL;
	if (cudaMallocAsync(&p, bytes, kern_cuda_stream()) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return p;
}

/* algo's time on the plan's problem in ms, the least of LT_TUNE_RUNS runs
 * after an untimed one, D = d; negative where cuBLASLt refuses it at the
 * call (it checks before it launches anything) */
static float time_algo(const struct lt_plan *p, const cublasLtMatmulAlgo_t *algo, const void *a,
                       const void *b, float beta, void *d, cudaEvent_t ev[2])
{
	const float one = 1.0f;
	cudaStream_t s = kern_cuda_stream();
	float least = -1.0f;
	for (int r = 0; r <= LT_TUNE_RUNS; r++) {
		KERN_CUDA_CHECK(cudaEventRecord(ev[0], s));
		cublasStatus_t st = cublasLtMatmul(g_lt, p->desc, &one, a, p->a, b, p->b, &beta, d,
		                                   p->d, d, p->d, algo, g_lt_workspace,
		                                   KERN_CUBLASLT_WORKSPACE_BYTES, s);
		if (st != CUBLAS_STATUS_SUCCESS)
			return -1.0f;
		KERN_CUDA_CHECK(cudaEventRecord(ev[1], s));
		KERN_CUDA_CHECK(cudaEventSynchronize(ev[1]));
		float ms = 0.0f;
		KERN_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
		if (r > 0 && (least < 0.0f || ms < least))
			least = ms;
	}
	return least;
}

/* The problem's shape, types, epilogue, alignments and candidates as text
 * without spaces, for the keys of its picks */
static void problem_text(const struct lt_key *k, char *out, size_t n)
{
	snprintf(out, n,
	         "ops=%c%c;m=%d;n=%d;k=%d;ld=%d,%d,%d;types=%d,%d;epi=%d;aux=%ld;"
	         "align=%u,%u,%u,%u,%u,%u;cands=%d",
	         k->ta == CUBLAS_OP_T ? 'T' : 'N', k->tb == CUBLAS_OP_T ? 'T' : 'N', k->m, k->n,
	         k->k, k->lda, k->ldb, k->ldd, (int)k->ab, (int)k->dt, (int)k->epi, k->aux_ld,
	         k->align[0], k->align[1], k->align[2], k->align[3], k->align[4], k->align[5],
	         k->cands);
}

/* The problem's line key in the picks' file (tune_table.h): the device and
 * cuBLASLt's version, under which a stored algorithm holds, then the plan's
 * key */
static void pick_key(const struct lt_key *k, char *out, size_t n)
{
	static char dev[64];
	if (!dev[0]) {
		cudaDeviceProp prop;
		int d = kern_cuda_current_device();
		if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
			(void)cudaGetLastError();
			snprintf(prop.name, sizeof prop.name, "device%d", d);
		}
		snprintf(dev, sizeof dev, "%.63s", prop.name);
		for (char *c = dev; *c; c++)
			if (*c <= ' ' || *c > '~')
				*c = '_';
	}
	char problem[KERN_TUNE_KEY - 96];   /* room for the device's name and the version */
	problem_text(k, problem, sizeof problem);
	snprintf(out, n, "%s;cublasLt=%zu;%s", dev, cublasLtGetVersion(), problem);
}

/* p's pick from the picks' file: 1 when the file has one that cuBLASLt
 * still takes for the problem (and our workspace holds), set in p */
static int pick_stored(struct lt_plan *p, const char *key)
{
	const uint64_t *words = kern_tune_table_find(&g_picks, key);
	if (!words)
		return 0;
	cublasLtMatmulAlgo_t algo;
	static_assert(sizeof algo.data == sizeof(uint64_t) * KERN_TUNE_WORDS, "an algorithm's words");
	memcpy(algo.data, words, sizeof algo.data);
	cublasLtMatmulHeuristicResult_t res;
	if (cublasLtMatmulAlgoCheck(g_lt, p->desc, p->a, p->b, p->d, p->d, &algo, &res) !=
	            CUBLAS_STATUS_SUCCESS ||
	    res.workspaceSize > KERN_CUBLASLT_WORKSPACE_BYTES)
		return 0;
	p->algo = algo;
	g_tune_reused++;
	return 1;
}

/* Times the heuristic's candidates for plan p (g_cand, just made) on the
 * first call's operands and keeps the fastest, as cuDNN's benchmark mode
 * does: D is d itself where beta is 0 (the call then writes it again), a
 * scratch matrix of its shape otherwise, since the runs must not add into
 * d; an epilogue's output (the aux matrix, the bias gradient) is written
 * again by the call too. Where that scratch cannot be had, or no candidate
 * runs, the heuristic's first stays. Said on stderr where the pick is
 * another. */
static void plan_tune(struct lt_plan *p, const void *a, const void *b, float beta, void *d)
{
	const struct lt_key *key = &p->key;
	p->untimed = 0;
	char text[KERN_TUNE_KEY];
	if (g_picks_path) {
		pick_key(key, text, sizeof text);
		if (pick_stored(p, text))
			return;
	}
	void *dst = beta != 0.0f ? d_scratch(key) : d;
	if (!dst)
		return;
	cudaEvent_t ev[2];
	KERN_CUDA_CHECK(cudaEventCreate(&ev[0]));
	KERN_CUDA_CHECK(cudaEventCreate(&ev[1]));
	int n = g_ncand, pick = -1;
	float ms[KERN_GEMM_TUNE_MOST];
	for (int i = 0; i < n; i++) {
		ms[i] = time_algo(p, &g_cand[i].algo, a, b, beta, dst, ev);
		if (ms[i] >= 0.0f && (pick < 0 || ms[i] < ms[pick]))
			pick = i;
	}
	KERN_CUDA_CHECK(cudaEventDestroy(ev[0]));
	KERN_CUDA_CHECK(cudaEventDestroy(ev[1]));
	if (dst != d)
		KERN_CUDA_CHECK(cudaFreeAsync(dst, kern_cuda_stream()));
	if (pick < 0)
		return;
	g_tuned++;
	p->algo = g_cand[pick].algo;
	if (g_picks_path) {
		char why[512];
		uint64_t words[KERN_TUNE_WORDS];
		memcpy(words, p->algo.data, sizeof words);
		if (kern_tune_table_add(&g_picks, g_picks_path, text, words, why, sizeof why) != 0)
			fprintf(stderr, "larch: cuBLASLt tuning: %s: the pick is not kept\n", why);
	}
	if (pick == 0)
		return;
	g_tuned_other++;
	char first[48] = "refused";
	if (ms[0] >= 0.0f)
		snprintf(first, sizeof first, "%.4f ms, x%.2f", ms[0], ms[0] / ms[pick]);
	fprintf(stderr,
	        "larch: cuBLASLt tuned: epilogue %d, ops %c%c, m %d n %d k %d: candidate %d of %d, "
	        "%.4f ms (the heuristic's first: %s)\n",
	        (int)key->epi, key->ta == CUBLAS_OP_T ? 'T' : 'N', key->tb == CUBLAS_OP_T ? 'T' : 'N',
	        key->m, key->n, key->k, pick + 1, n, ms[pick], first);
}

/* ---- the same-bits tuning -------------------------------------------------- */

/* A problem's first call runs its default path (cuBLAS's call for a GEMM
 * without epilogue, else the heuristic's first algorithm) and each of the
 * heuristic's other candidates on the call's own operands, and hashes what
 * each writes (D, and the epilogue's aux matrix or bias gradient): the
 * candidates whose hashes are the default's give its bits, each output
 * summed in the same order (cuBLAS's and cuBLASLt's results are the same
 * bits run to run for one algorithm). Those are the problem's variants for
 * kern_cuda_variant_pick, which times them and keeps the fastest, as it
 * does for the kernels' variants: the results are the default path's bits
 * whichever wins, so the run stays deterministic (the spec's default),
 * where the any-bits tuning (kern_matmul_cuda_gemm_tune) is not. Where C
 * is read (beta != 0) every run starts from the same C, a pattern in
 * scratch (bits_fill_kernel), never the caller's. */

/* what a GEMM writes: D and, by its epilogue, an aux matrix or a bias gradient */
enum { SAME_D = 1, SAME_AUX = 2, SAME_BIAS = 4 };

/* the outputs of epilogue e (SAME_*), or -1 for one this file does not use
 * (its outputs unknown here: not tuned) */
static int epilogue_outputs(cublasLtEpilogue_t e)
{
	switch (e) {
	case CUBLASLT_EPILOGUE_DEFAULT:
	case CUBLASLT_EPILOGUE_BIAS:
	case CUBLASLT_EPILOGUE_DGELU:
		return SAME_D;
	case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
		return SAME_D | SAME_AUX;
	case CUBLASLT_EPILOGUE_BGRADA:
	case CUBLASLT_EPILOGUE_BGRADB:
		return SAME_D | SAME_BIAS;
	default:
		return -1;
	}
}

/* One problem's variants: 0 the default path, then the heuristic's other
 * candidates in its order; D is the call's own where beta is 0, else
 * scratch */
struct same_runs {
	const struct lt_plan *p;
	const void *a, *b;
	float beta;
	void *d;
	int cublas;                        /* variant 0 is cuBLAS's call */
	int n;
	const cublasLtMatmulAlgo_t *algo[KERN_CUDA_VARIANTS_MOST];
};

/* Enqueues r's variant v; 0 when cuBLASLt refused it (it checks before it
 * launches anything) */
static int same_launch(const struct same_runs *r, int v)
{
	const struct lt_plan *p = r->p;
	const struct lt_key *k = &p->key;
	const float one = 1.0f;
	if (v == 0 && r->cublas) {
		KERN_CUBLAS_CHECK(cublasGemmEx(kern_cuda_cublas(), k->ta, k->tb, k->m, k->n, k->k, &one,
		                               r->a, k->ab, k->lda, r->b, k->ab, k->ldb, &r->beta, r->d,
		                               k->dt, k->ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
		return 1;
	}
	return cublasLtMatmul(g_lt, p->desc, &one, r->a, p->a, r->b, p->b, &r->beta, r->d, p->d,
	                      r->d, p->d, r->algo[v], g_lt_workspace,
	                      KERN_CUBLASLT_WORKSPACE_BYTES,
	                      kern_cuda_stream()) == CUBLAS_STATUS_SUCCESS;
}

/* kern_cuda_variant_fn: a variant timed has run once already */
static void same_run(void *ctx, int v)
{
	if (!same_launch((const struct same_runs *)ctx, v))
		kern_cuda_fail(__FILE__, __LINE__, "cublasLtMatmul", "an algorithm that ran refused");
}

/* h[0..3) += the hashes of D, the aux matrix and the bias gradient (those
 * the epilogue writes, outs) */
static void same_hash(unsigned long long *h, const struct lt_key *k, int outs, const void *d,
                      const void *aux, const void *bias)
{
	cudaStream_t s = kern_cuda_stream();
	int es = d_bytes(k);
	unsigned grid = kern_cuda_grid((long)k->m * k->n, 256);
	grid = grid < 512 ? grid : 512;    /* an atomic add a thread, to one place */
	bits_hash_kernel<<<grid, 256, 0, s>>>(h, d, es, k->m, k->n, k->ldd);
	KERN_CUDA_CHECK_LAUNCH();
	if (outs & SAME_AUX) {
		bits_hash_kernel<<<grid, 256, 0, s>>>(h + 1, aux, es, k->m, k->n, k->aux_ld);
		KERN_CUDA_CHECK_LAUNCH();
	}
	if (outs & SAME_BIAS) {          /* BGRADA sums over m's rows, BGRADB n's */
		long len = k->epi == CUBLASLT_EPILOGUE_BGRADA ? k->m : k->n;
		bits_hash_kernel<<<1, 256, 0, s>>>(h + 2, bias, es, len, 1, len);
		KERN_CUDA_CHECK_LAUNCH();
	}
}

/* ok[v] = whether r's variant v writes variant 0's bits (ok[0]: whether it
 * ran), each from the same C where the GEMM adds; the count of v > 0 */
static int same_check(struct same_runs *r, int outs, const void *bias, const void *aux,
                      unsigned char *ok)
{
	const struct lt_key *key = &r->p->key;
	cudaStream_t s = kern_cuda_stream();
	int es = d_bytes(key);
	size_t hbytes = sizeof(unsigned long long) * 3 * (size_t)r->n;
	unsigned long long *hd = (unsigned long long *)kern_cuda_scratch_alloc(hbytes);
	KERN_CUDA_CHECK(cudaMemsetAsync(hd, 0, hbytes, s));
	for (int v = 0; v < r->n; v++) {
		if (r->beta != 0.0f) {
			unsigned grid = kern_cuda_grid((long)key->m * key->n, 256);
			bits_fill_kernel<<<grid, 256, 0, s>>>(r->d, es, key->dt == CUDA_R_16BF, key->m,
			                                      key->n, key->ldd);
			KERN_CUDA_CHECK_LAUNCH();
		}
		ok[v] = (unsigned char)same_launch(r, v);
		if (ok[v])
			same_hash(hd + 3 * v, key, outs, r->d, aux, bias);
	}
	unsigned long long h[3 * KERN_CUDA_VARIANTS_MOST];
	KERN_CUDA_CHECK(cudaMemcpyAsync(h, hd, hbytes, cudaMemcpyDeviceToHost, s));
	KERN_CUDA_CHECK(cudaStreamSynchronize(s));
	kern_cuda_scratch_free(hd);
	int same = 0;
	for (int v = 1; v < r->n; v++) {
		ok[v] = ok[v] && ok[0] && memcmp(&h[3 * v], &h[0], sizeof h[0] * 3) == 0;
		same += ok[v];
	}
	return same;
}

/* The same-bits tuning of plan p (made by this call: g_cand holds its
 * candidates) on the call's operands, bias and aux as the call has them:
 * p->algo and p->cublas set to the pick. A pick kept or given for the
 * problem (kern_cuda_variant_kept) is taken as it is; else the candidates
 * are checked (said on stderr: how many give the default's bits) and
 * those that do timed with the default. Nothing changes where the scratch
 * cannot be had. */
static void plan_same(struct lt_plan *p, const void *a, const void *b, float beta, void *d,
                      const void *bias, const void *aux)
{
	const struct lt_key *key = &p->key;
	p->untimed = 0;
	p->cublas = key->epi == CUBLASLT_EPILOGUE_DEFAULT;   /* the default path, unless picked */
	int outs = epilogue_outputs(key->epi);
	if (outs < 0)
		return;
	struct same_runs r;
	memset(&r, 0, sizeof r);
	r.p = p, r.a = a, r.b = b, r.beta = beta, r.d = d;
	r.cublas = key->epi == CUBLASLT_EPILOGUE_DEFAULT;
	/* the variants: the default, then each candidate that is not it */
	char names[KERN_CUDA_VARIANTS_MOST][24];
	const char *name[KERN_CUDA_VARIANTS_MOST];
	for (int i = r.cublas ? -1 : 0; i < g_ncand && r.n < KERN_CUDA_VARIANTS_MOST; i++) {
		r.algo[r.n] = i < 0 ? NULL : &g_cand[i].algo;
		if (i < 0)
			snprintf(names[r.n], sizeof names[r.n], "cuBLAS");
		else
			snprintf(names[r.n], sizeof names[r.n], "candidate %d", i + 1);
		name[r.n] = names[r.n];
		r.n++;
	}
	char text[KERN_TUNE_KEY];
	memcpy(text, "gemm;", 5);
	problem_text(key, text + 5, sizeof text - 5);
	int pick = kern_cuda_variant_kept(text);
	if (pick >= r.n)
		kern_cuda_fail(__FILE__, __LINE__, text, "a pick past the problem's candidates");
	if (pick < 0) {
		void *c = NULL;
		if (beta != 0.0f) {
			c = d_scratch(key);
			if (!c)
				return;
			r.d = c;
		}
		unsigned char ok[KERN_CUDA_VARIANTS_MOST];
		int same = same_check(&r, outs, bias, aux, ok);
		g_same_checked++;
		fprintf(stderr,
		        "larch: GEMM same bits: %s: %d of %d candidates give the default's bits\n",
		        text, same, r.n - 1);
		/* kept even where only the default is offered: a later plan of the
		 * problem, or a run given the picks (profile_gpt.py's under ncu),
		 * then checks nothing again */
		pick = ok[0] ? kern_cuda_variant_pick_some(text, r.n, name, ok, same_run, &r) : 0;
		if (c)
			KERN_CUDA_CHECK(cudaFreeAsync(c, kern_cuda_stream()));
	}
	p->cublas = r.cublas && pick == 0;
	if (pick > 0) {
		p->algo = *r.algo[pick];
		g_same_other++;
	}
}

int kern_lt_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const void *a, int lda, const void *b, int ldb, float beta, void *d, int ldd,
                 cudaDataType ab, cudaDataType dt, cublasLtEpilogue_t epi, const void *bias,
                 const void *aux, long aux_ld)
{
	/* cuBLASLt takes no alignment preference for the bias or the aux
	 * matrix: give it only 16-byte aligned ones (cudaMalloc's are, and the
	 * arena's buffers), in case the epilogue reads them in vectors; the aux
	 * matrix's rows a multiple of 8 apart (cublasLt.h) */
	if ((bias && ptr_align(bias) < 16) || (aux && (ptr_align(aux) < 16 || aux_ld % 8)))
		return 0;
	struct lt_key key;
	memset(&key, 0, sizeof key);       /* the padding too: keys compare by memcmp */
	key.ta = ta, key.tb = tb;
	key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
	key.ab = ab, key.dt = dt, key.epi = epi;
	key.aux_ld = aux ? aux_ld : 0;
	int tune = kern_matmul_cuda_gemm_tune(-1);
	key.same = !tune && same_bits_tuning();
	key.cands = tune ? tune : key.same ? LT_SAME_CANDIDATES : 1;
	unsigned al[6] = { ptr_align(a),           ptr_align(b),
	                   ptr_align(d),           ptr_align(d),
	                   aux ? ptr_align(aux) : 0, bias ? ptr_align(bias) : 0 };
	memcpy(key.align, al, sizeof al);
	struct lt_plan *p = plan_get(&key, bias, aux);
	if (!p->ok)
		return 0;
	if (bias)
		KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
	if (aux)
		KERN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
			p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
	if (p->untimed && key.same)
		plan_same(p, a, b, beta, d, bias, aux);
	else if (p->untimed)
		plan_tune(p, a, b, beta, d);
	if (p->cublas)
		return 0;
	const float one = 1.0f;
	cublasStatus_t st = cublasLtMatmul(g_lt, p->desc, &one, a, p->a, b, p->b, &beta, d, p->d, d,
	                                   p->d, &p->algo, g_lt_workspace,
	                                   KERN_CUBLASLT_WORKSPACE_BYTES, kern_cuda_stream());
	/* refused at the call, as cuBLASLt checks it before it launches
	 * anything: the other path then, as for a refused heuristic */
	if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
		plan_refuse(p, "call refused", st, 1);
		return 0;
	}
	KERN_CUBLAS_CHECK(st);
	return 1;
}
