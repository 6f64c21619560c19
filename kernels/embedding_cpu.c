/* kernels/embedding_cpu.c - token + position embedding (see embedding.h):
 * reference and threaded version.
 *
 * The backward pass scatters rows of dout into dwte rows chosen by the
 * tokens, so two positions with the same token would race if positions were
 * split among threads. The channels are split instead: a thread owns a slice
 * of every row and walks the positions in order, which is the reference's
 * order, so the result equals the reference and does not depend on the
 * thread count. */
#include "embedding.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many output elements the work runs on one thread. */
#define EMB_PAR_MIN 32768L
/* Channel slices are whole cache lines so that threads share none. */
#define EMB_ALIGN 16

void kern_embedding_fwd_ref(float *out, const int *tokens, const float *wte,
                            const float *wpe, int b, int t, int c)
{
	for (int i = 0; i < b; i++)
		for (int p = 0; p < t; p++) {
			float *o = out + ((size_t)i * t + p) * c;
			const float *we = wte + (size_t)tokens[(size_t)i * t + p] * c;
			for (int j = 0; j < c; j++)
				o[j] = wpe ? we[j] + wpe[(size_t)p * c + j] : we[j];
		}
}

void kern_embedding_bwd_ref(float *dwte, float *dwpe, const float *dout,
                            const int *tokens, int b, int t, int c, int vocab)
{
	(void)vocab; /* only checked in debug builds */
	for (int i = 0; i < b; i++)
		for (int p = 0; p < t; p++) {
			const float *d = dout + ((size_t)i * t + p) * c;
			int tok = tokens[(size_t)i * t + p];
			assert(tok >= 0 && tok < vocab);
			for (int j = 0; j < c; j++) {
				if (dwte)
					dwte[(size_t)tok * c + j] += d[j];
				if (dwpe)
					dwpe[(size_t)p * c + j] += d[j];
			}
		}
}

void kern_embedding_fwd_cpu(float *out, const int *tokens, const float *wte,
                            const float *wpe, int b, int t, int c)
{
	long rows = (long)b * t;
#pragma omp parallel for schedule(static) if (rows * c > EMB_PAR_MIN)
	for (long r = 0; r < rows; r++) {
		float *o = out + (size_t)r * c;
		const float *we = wte + (size_t)tokens[r] * c;
		if (wpe) {
			const float *wp = wpe + (size_t)(r % t) * c;
#pragma omp simd
			for (int j = 0; j < c; j++)
				o[j] = we[j] + wp[j];
		} else {
			memcpy(o, we, sizeof(float) * (size_t)c);
		}
	}
}

/* Adds dout[:, j0:j1] into the same columns of dwte and dwpe, positions in
 * order. */
static void embedding_bwd_cols(float *dwte, float *dwpe, const float *dout,
                               const int *tokens, int b, int t, int c, int j0, int j1)
{
	for (int i = 0; i < b; i++)
		for (int p = 0; p < t; p++) {
			size_t r = (size_t)i * t + p;
			const float *d = dout + r * c;
			if (dwte) {
				float *g = dwte + (size_t)tokens[r] * c;
#pragma omp simd
				for (int j = j0; j < j1; j++)
					g[j] += d[j];
			}
			if (dwpe) {
				float *g = dwpe + (size_t)p * c;
#pragma omp simd
				for (int j = j0; j < j1; j++)
					g[j] += d[j];
			}
		}
}

void kern_embedding_bwd_cpu(float *dwte, float *dwpe, const float *dout,
                            const int *tokens, int b, int t, int c, int vocab)
{
	(void)vocab; /* only checked in debug builds */
	if (!dwte && !dwpe)
		return;
#ifndef NDEBUG
	for (long r = 0; r < (long)b * t; r++)
		assert(tokens[r] >= 0 && tokens[r] < vocab);
#endif
	long work = (long)b * t * c;
	if (work <= EMB_PAR_MIN) {
		embedding_bwd_cols(dwte, dwpe, dout, tokens, b, t, c, 0, c);
		return;
	}
	int nslices = (c + EMB_ALIGN - 1) / EMB_ALIGN;
#pragma omp parallel
	{
		/* a static split of the slices: thread k of nt gets a contiguous run */
		int k = 0, nt = 1;
#ifdef _OPENMP
		k = omp_get_thread_num();
		nt = omp_get_num_threads();
#endif
		int s0 = (int)((long)nslices * k / nt), s1 = (int)((long)nslices * (k + 1) / nt);
		int j0 = s0 * EMB_ALIGN, j1 = s1 * EMB_ALIGN < c ? s1 * EMB_ALIGN : c;
		if (j0 < j1)
			embedding_bwd_cols(dwte, dwpe, dout, tokens, b, t, c, j0, j1);
	}
}
