/* kernels/blas.c - the system BLAS, loaded at run time; see blas.h. */
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
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
	blas.coretype_source = "user";
	if (!getenv("OPENBLAS_CORETYPE")) {
		const char *core = best_coretype();
		if (core) {
			setenv("OPENBLAS_CORETYPE", core, 0);
			blas.coretype_source = "larch";
		} else {
			blas.coretype_source = "auto";
		}
	}

	const char *chosen = getenv("LARCH_BLAS");
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

int kern_blas_init(char *err, size_t errlen)
{
	pthread_once(&blas.once, load_once);
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

void kern_sgemm(enum kern_trans ta, enum kern_trans tb, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc)
{
	pthread_once(&blas.once, load_once);
	if (!blas.ok) {
		fprintf(stderr, "larch: %s\n", blas.err);
		abort();
	}
	blas.sgemm(CBLAS_ROW_MAJOR, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *kern_blas_describe(void)
{
	pthread_once(&blas.once, load_once);
	return blas.ok ? blas.desc : blas.err;
}
