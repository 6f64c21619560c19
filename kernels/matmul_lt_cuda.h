/* kernels/matmul_lt_cuda.h - the GEMMs matmul_cuda.cu runs through
 * cuBLASLt (matmul_lt_cuda.cu): those with an epilogue, and with a tuning
 * on those without. Internal to the CUDA kernels (CUDA C++); the switches
 * and counters callers see are in matmul_cuda.h. */
#ifndef LARCH_KERNELS_MATMUL_LT_CUDA_H
#define LARCH_KERNELS_MATMUL_LT_CUDA_H

#include <cublasLt.h>

/* One cuBLASLt problem, column-major: D[m, n] (rows ldd apart, type dt) =
 * op(A) op(B) + beta D with op(A) = A^T (A [k, m], lda) for ta T or A
 * ([m, k], lda) for N, op(B) likewise (B [n, k] for tb T, [k, n] for N;
 * ldb), A and B of type ab, fp32 sums; the epilogue epi, with a bias of
 * D's type (BIAS in; BGRADB out, the sums of op(B) over k) and
 * (GELU_AUX_BIAS out, DGELU in) an aux matrix of D's type and shape, rows
 * aux_ld apart; a problem's first call tunes its algorithm where a tuning
 * is on (kern_matmul_cuda_gemm_tune, kern_matmul_cuda_gemm_same). Returns
 * 1 when done; 0 when cuBLASLt has no algorithm for it, the bias or aux
 * matrix is not as the epilogue needs it, or (without epilogue) the
 * same-bits tuning kept cuBLAS's call: nothing is done then, and the
 * caller takes its other path. Borrows every pointer for the call. */
int kern_lt_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const void *a, int lda, const void *b, int ldb, float beta, void *d, int ldd,
                 cudaDataType ab, cudaDataType dt, cublasLtEpilogue_t epi, const void *bias,
                 const void *aux, long aux_ld);

/* Whether the 16-bit GEMMs without epilogue go through kern_lt_gemm (a
 * tuning on), else straight to cuBLAS's call. */
int kern_lt_plain(void);

#endif
