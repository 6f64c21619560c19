/* kernels/blas.h - single-precision GEMM through the system BLAS.
 *
 * The BLAS library is loaded at run time (dlopen) rather than linked, so that
 * OPENBLAS_CORETYPE can be chosen from the CPU's features before OpenBLAS
 * initialises: Debian's OpenBLAS 0.3.21 takes some current x86 CPUs for a
 * Prescott and runs ~5x slower. The caller chooses (struct kern_blas_choice:
 * the trainer's options blas and openblas_coretype); this file reads no
 * environment.
 */
#ifndef LARCH_KERNELS_BLAS_H
#define LARCH_KERNELS_BLAS_H

#include <stddef.h>

enum kern_trans { KERN_NO_TRANS = 111, KERN_TRANS = 112 }; /* CBLAS values */

/* Which library runs GEMMs, and OpenBLAS's core type. */
struct kern_blas_choice {
	const char *library;       /* a CBLAS (OpenBLAS, BLIS) by path or soname; NULL or "":
	                              LARCH_BLAS_CANDIDATES (the build's) in order */
	const char *coretype;      /* OPENBLAS_CORETYPE for OpenBLAS; NULL or "": the family
	                              that suits this CPU's features, unless the
	                              environment already names one */
};

/* Loads the BLAS library once (thread-safe, idempotent): the first call's
 * choice (borrowed for the call; NULL: the defaults) decides. Returns 0, or
 * -1 with a message in err. Every kern_sgemm call loads it too, with the
 * defaults, and aborts with that message if it cannot: call this first
 * where a clean error or a choice matters. */
int kern_blas_init(const struct kern_blas_choice *choice, char *err, size_t errlen);

/* Row-major C[m,n] = alpha * op(A) @ op(B) + beta * C, as cblas_sgemm. */
void kern_sgemm(enum kern_trans ta, enum kern_trans tb, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc);

/* Sets the BLAS library's thread count (kern_set_threads calls it). */
void kern_blas_set_threads(int n);

/* GEMM trace, for benchmarks: records the kern_sgemm calls made between
 * start and stop (shapes, scalars and operand pointers) so that
 * kern_sgemm_trace_replay can run the same GEMMs again back to back, with
 * nothing else between them: the GEMM time of a training step alone.
 *
 * Recording is thread-safe. A call made inside an OpenMP parallel region
 * is recorded with its thread number and team size; replay runs the calls
 * made inside parallel regions between two calls made outside any in one
 * parallel region of that team size, each thread repeating its own calls in
 * their order, so that replay groups the GEMMs as the step did (OpenBLAS's
 * OpenMP build runs single-threaded inside a parallel region). Replay
 * leaves out the barriers inside those regions, which can only make it
 * faster. Calls made outside parallel regions replay one by one.
 *
 * Replay reads and writes through the recorded pointers: the buffers must
 * still be allocated, and their contents (outputs, and beta != 0
 * accumulators) are overwritten with meaningless values. The trace is
 * process-wide; start, stop, replay and clear must not run concurrently
 * with each other. */

/* Drops any previous trace and starts recording. */
void kern_sgemm_trace_start(void);
/* Stops recording. Returns the calls recorded, or -1 when memory ran out
 * (the trace is then empty); *flops (may be NULL) gets their FLOPs, 2mnk each. */
long kern_sgemm_trace_stop(double *flops);
/* Runs the recorded calls again (does nothing while recording). */
void kern_sgemm_trace_replay(void);
/* Frees the trace. */
void kern_sgemm_trace_clear(void);

/* One line saying which library, core type and thread count run GEMMs,
 * e.g. "OpenBLAS 0.3.21 USE_OPENMP, core SkylakeX, 2 threads". Static storage. */
const char *kern_blas_describe(void);

#endif
