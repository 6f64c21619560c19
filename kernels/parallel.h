/* kernels/parallel.h - the thread count shared by our kernels and BLAS.
 *
 * The CPU kernels use OpenMP with static schedules and never reduce floats in
 * a thread-dependent order: the same thread count gives bit-identical results.
 */
#ifndef LARCH_KERNELS_PARALLEL_H
#define LARCH_KERNELS_PARALLEL_H

/* Threads used by kernels and BLAS: OMP_NUM_THREADS if set, else the CPUs in
 * this process's affinity mask. */
int kern_threads(void);

/* Sets the thread count for our kernels and the BLAS library (n >= 1). */
void kern_set_threads(int n);

#endif
