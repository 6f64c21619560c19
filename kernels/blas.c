/* kernels/blas.c - the system BLAS, loaded at run time; see blas.h. */
#include "blas.h"

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

#ifndef LARCH_BLAS_CANDIDATES
#define LARCH_BLAS_CANDIDATES "libopenblas.so.0:libblas.so.3"
#endif

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta,
                         float *c, int ldc);

enum { CBLAS_ROW_MAJOR = 101 };

static struct {
	pthread_once_t once;
	int ok;
	sgemm_fn sgemm;
	void (*set_threads)(int);      /* openblas_set_num_threads or bli_thread_set_num_threads */
	char *(*corename)(void);       /* OpenBLAS only */
	char *(*config)(void);         /* OpenBLAS only */
	const char *coretype_source;   /* who chose OPENBLAS_CORETYPE */
	char path[1024];
	char err[1400];
	char desc[2048];
} blas = { .once = PTHREAD_ONCE_INIT };

/* kern_blas_init's choice while it loads the library (NULL: the defaults) */
static _Atomic(const struct kern_blas_choice *) pending;
static pthread_mutex_t choose_lock = PTHREAD_MUTEX_INITIALIZER;

/* The OpenBLAS kernel family that suits this CPU, from its features rather
 * than its model number (which OpenBLAS 0.3.21 does not know for current
 * CPUs and then treats as a Prescott). */
static const char *best_coretype(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
#endif
	return NULL;
}

static int try_open(const char *path)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(blas.err, sizeof blas.err, "cannot load BLAS library %s: %s", path, dlerror());
		return -1;
	}
	sgemm_fn fn = (sgemm_fn)dlsym(lib, "cblas_sgemm");
	if (!fn) {
		snprintf(blas.err, sizeof blas.err, "%s has no cblas_sgemm", path);
		dlclose(lib);
		return -1;
	}
	blas.sgemm = fn;
	blas.set_threads = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
	if (!blas.set_threads)
		blas.set_threads = (void (*)(int))dlsym(lib, "bli_thread_set_num_threads");
	blas.corename = (char *(*)(void))dlsym(lib, "openblas_get_corename");
	blas.config = (char *(*)(void))dlsym(lib, "openblas_get_config");
	snprintf(blas.path, sizeof blas.path, "%s", path);
	return 0;
}

static void load_once(void)
{
	const struct kern_blas_choice *c = atomic_load(&pending);
	const char *core = c && c->coretype && *c->coretype ? c->coretype : NULL;
	blas.coretype_source = "user";
	if (core) {
		setenv("OPENBLAS_CORETYPE", core, 1);
	} else if ((core = best_coretype())) {
		setenv("OPENBLAS_CORETYPE", core, 0);    /* (the environment's stays) */
		blas.coretype_source = "larch";
	} else {
		blas.coretype_source = "auto";
	}

	const char *chosen = c ? c->library : NULL;
	if (chosen && *chosen) {
		blas.ok = try_open(chosen) == 0;
	} else {
		char list[] = LARCH_BLAS_CANDIDATES;
		char *save = NULL;
		for (char *p = strtok_r(list, ":", &save); p && !blas.ok; p = strtok_r(NULL, ":", &save))
			blas.ok = try_open(p) == 0;
	}
	if (!blas.ok)
		return;
	if (blas.set_threads)
		blas.set_threads(kern_threads());

	if (blas.config && blas.corename)
		snprintf(blas.desc, sizeof blas.desc, "%s (%s), core %s (chosen by %s), %d threads",
		         blas.path, blas.config(), blas.corename(), blas.coretype_source, kern_threads());
	else
		snprintf(blas.desc, sizeof blas.desc, "%s, %d threads", blas.path, kern_threads());
}

int kern_blas_init(const struct kern_blas_choice *choice, char *err, size_t errlen)
{
	pthread_mutex_lock(&choose_lock);
	atomic_store(&pending, choice);
	pthread_once(&blas.once, load_once);
	atomic_store(&pending, NULL);
	pthread_mutex_unlock(&choose_lock);
	if (!blas.ok) {
		if (err && errlen)
			snprintf(err, errlen, "%s", blas.err);
		return -1;
	}
	return 0;
}

void kern_blas_set_threads(int n)
{
	pthread_once(&blas.once, load_once);
	if (blas.ok && blas.set_threads)
		blas.set_threads(n);
}

/* ---- GEMM trace (see blas.h) ---------------------------------------------- */

struct gemm_call {
	enum kern_trans ta, tb;
	int m, n, k, lda, ldb, ldc;
	float alpha, beta;
	const float *a, *b;
	float *c;
	long group;                    /* -1 outside parallel regions, else the calls
	                                  outside them recorded before this one */
	int thread, team;              /* omp_get_thread_num(), omp_get_num_threads() */
};

static struct {
	pthread_mutex_t lock;
	atomic_int on;                 /* read by every kern_sgemm */
	int failed;                    /* out of memory while recording */
	long serial;                   /* calls recorded outside parallel regions */
	struct gemm_call *calls;
	long n, cap;
} trace = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void trace_record(const struct gemm_call *call)
{
	int par = omp_in_parallel();
	int thread = omp_get_thread_num(), team = omp_get_num_threads();
	pthread_mutex_lock(&trace.lock);
	if (!trace.failed && trace.n == trace.cap) {
		long cap = trace.cap ? 2 * trace.cap : 256;
		struct gemm_call *grown = realloc(trace.calls, sizeof *grown * (size_t)cap);
		if (grown) {
			trace.calls = grown;
			trace.cap = cap;
		} else {
			trace.failed = 1;
		}
	}
	if (!trace.failed) {
		struct gemm_call *r = &trace.calls[trace.n++];
		*r = *call;
		r->group = par ? trace.serial : -1;
		r->thread = par ? thread : 0;
		r->team = par ? team : 1;
		if (!par)
			trace.serial++;
	}
	pthread_mutex_unlock(&trace.lock);
}

static void run_call(const struct gemm_call *r)
{
	blas.sgemm(CBLAS_ROW_MAJOR, r->ta, r->tb, r->m, r->n, r->k, r->alpha, r->a, r->lda,
	           r->b, r->ldb, r->beta, r->c, r->ldc);
}

void kern_sgemm_trace_start(void)
{
	kern_sgemm_trace_clear();
	atomic_store(&trace.on, 1);
}

long kern_sgemm_trace_stop(double *flops)
{
	atomic_store(&trace.on, 0);
	long n = trace.n;
	if (trace.failed) {
		kern_sgemm_trace_clear();
		n = -1;
	}
	if (flops) {
		*flops = 0;
		for (long i = 0; i < trace.n; i++)
			*flops += 2.0 * trace.calls[i].m * trace.calls[i].n * trace.calls[i].k;
	}
	return n;
}

void kern_sgemm_trace_replay(void)
{
	if (atomic_load(&trace.on) || trace.n == 0)
		return;
	pthread_once(&blas.once, load_once);
	const struct gemm_call *calls = trace.calls;
	for (long i = 0; i < trace.n;) {
		if (calls[i].group < 0) {
			run_call(&calls[i++]);
			continue;
		}
		/* the run of calls made in parallel regions since the last serial one */
		long j = i;
		int team = 1;
		while (j < trace.n && calls[j].group == calls[i].group) {
			if (calls[j].team > team)
				team = calls[j].team;
			j++;
		}
#pragma omp parallel num_threads(team)
		{
			int me = omp_get_thread_num();
			for (long r = i; r < j; r++)
				if (calls[r].thread == me)
					run_call(&calls[r]);
		}
		i = j;
	}
}

void kern_sgemm_trace_clear(void)
{
	atomic_store(&trace.on, 0);
	free(trace.calls);
	trace.calls = NULL;
	trace.n = trace.cap = trace.serial = 0;
	trace.failed = 0;
}

void kern_sgemm(enum kern_trans ta, enum kern_trans tb, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc)
{
	pthread_once(&blas.once, load_once);
	if (!blas.ok) {
		fprintf(stderr, "larch: %s\n", blas.err);
		abort();
	}
	if (atomic_load_explicit(&trace.on, memory_order_relaxed))
		trace_record(&(struct gemm_call){ .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
		                                  .lda = lda, .ldb = ldb, .ldc = ldc,
		                                  .alpha = alpha, .beta = beta,
		                                  .a = a, .b = b, .c = c });
	blas.sgemm(CBLAS_ROW_MAJOR, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *kern_blas_describe(void)
{
	pthread_once(&blas.once, load_once);
	return blas.ok ? blas.desc : blas.err;
}
