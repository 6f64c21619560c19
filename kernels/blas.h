/* kernels/blas.h - single-precision GEMM through the system BLAS.
 *
 * The BLAS library is loaded at run time (dlopen) rather than linked, so that
 * OPENBLAS_CORETYPE can be chosen from the CPU's features before OpenBLAS
 * initialises: Debian's OpenBLAS 0.3.21 takes some current x86 CPUs for a
 * Prescott and runs ~5x slower. A user's own OPENBLAS_CORETYPE is respected.
 * LARCH_BLAS=/path/to/libblas.so picks the library (any CBLAS: OpenBLAS, BLIS).
 */
#ifndef LARCH_KERNELS_BLAS_H
#define LARCH_KERNELS_BLAS_H

#include <stddef.h>

enum kern_trans { KERN_NO_TRANS = 111, KERN_TRANS = 112 }; /* CBLAS values */

/* Loads the BLAS library once (thread-safe, idempotent). Returns 0, or -1
 * with a message in err. Every kern_sgemm call loads it too, and aborts with
 * that message if it cannot: call this first where a clean error matters. */
int kern_blas_init(char *err, size_t errlen);

/* Row-major C[m,n] = alpha * op(A) @ op(B) + beta * C, as cblas_sgemm. */
void kern_sgemm(enum kern_trans ta, enum kern_trans tb, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb,
                float beta, float *c, int ldc);

/* Sets the BLAS library's thread count (kern_set_threads calls it). */
void kern_blas_set_threads(int n);

/* One line saying which library, core type and thread count run GEMMs,
 * e.g. "OpenBLAS 0.3.21 USE_OPENMP, core SkylakeX, 2 threads". Static storage. */
const char *kern_blas_describe(void);

#endif
