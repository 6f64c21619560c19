/* kernels/cuda_opts.h - the choices a user of the CUDA kernels (the
 * trainer, a test) makes for the whole process, handed to
 * kern_cuda_set_opts (cuda_common.h). The kernels read no environment:
 * larch-train reads them with its other options (trainer/options.h: the
 * cuda_* rows) and passes them down here. Plain C, no CUDA headers, so that code built
 * without the toolkit fills one. */
#ifndef LARCH_KERNELS_CUDA_OPTS_H
#define LARCH_KERNELS_CUDA_OPTS_H

/* A zeroed struct is the default. */
struct kern_cuda_opts {
	int sync;                          /* wait for each kernel at its launch check, so
	                                    * that a fault is reported at its launch site */
	/* picks made already for the same-bits variants ("KEY=N" entries apart
	 * by spaces: kern_cuda_variant_pick), or "default" for every op's
	 * default, untimed (kern_cuda_kernel_tune off); NULL or "" for none */
	const char *kernel_picks;
};

#endif
