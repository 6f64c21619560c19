/* kernels/parallel.c - see parallel.h. */
#include "parallel.h"

#include <omp.h>

#include "blas.h"

int kern_threads(void)
{
	return omp_get_max_threads();
}

void kern_set_threads(int n)
{
	if (n < 1)
		n = 1;
	omp_set_num_threads(n);
	kern_blas_set_threads(n);
}
