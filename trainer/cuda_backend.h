/* trainer/cuda_backend.h - the GPU backend of larch-train, loaded when a run
 * asks for a GPU.
 *
 * The GPU models and the optimizers' device kernels (trainer/<x>_cuda.c) are
 * a library of their own, liblarch_trainer_cuda.so, linked with the CUDA
 * runtime and cuBLAS. larch-train and liblarch_trainer.so do not link it:
 * loading cuBLAS costs a CPU-only run ~200 MiB of resident memory and start-
 * up time, so it is dlopen'ed once, by the first run that asks for a GPU,
 * from the directory that holds liblarch_trainer.so, or from the file the
 * option cuda_backend names.
 *
 * The GPU path reads no environment: its settings are rows of the options
 * table (options.h: cuda_backend, cuda_sync, cuda_kernel_picks), which
 * trn_model_new_on (model.h) hands here: the file to load, and the
 * kernels' part (struct kern_cuda_opts) to the backend's model_new.
 */
#ifndef LARCH_TRAINER_CUDA_BACKEND_H
#define LARCH_TRAINER_CUDA_BACKEND_H

#include <stdio.h>

#include "data.h"
#include "kernels/cuda_opts.h"
#include "err.h"
#include "spec/spec.h"

struct trn_comm;
struct trn_model;
struct trn_optim_kernels;

struct trn_cuda_backend {
	/* trn_model_new on CUDA device `device` (model_cuda.h), the kernels set
	 * to kopts (borrowed; its text is kept by the kernels) */
	struct trn_model *(*model_new)(const struct trn_spec *spec, const struct trn_dataset *ds,
	                               int max_batch, int device,
	                               const struct kern_cuda_opts *kopts, struct trn_err *err);
	/* the devices, one line each; returns how many */
	int (*print_devices)(FILE *out);
	const struct trn_optim_kernels *optim;  /* optim.h: the kernels on the device */
	/* A communicator of host's ranks for device `device`'s memory (NCCL,
	 * its unique id sent over host; comm.h), not owning host; NULL with err
	 * where the backend has none or it fails. trn_comm_open_device calls it. */
	struct trn_comm *(*comm_open)(struct trn_comm *host, int device, struct trn_err *err);
	/* Where the tuned GEMMs' picks are kept (a spec's "deterministic":
	 * false: the job directory's gemm-tune.txt, kernels/matmul_cuda.h), so that a run
	 * that goes on from the job's checkpoints takes the same algorithms;
	 * nothing when tuning is off. */
	void (*gemm_tune_dir)(const char *job_dir);
};

/* The backend's comm_open (comm_nccl_cuda.c). */
struct trn_comm *trn_cuda_comm_open(struct trn_comm *host, int device, struct trn_err *err);

/* The backend, loaded from file (NULL: liblarch_trainer_cuda.so beside
 * liblarch_trainer.so) by the first call, which alone loads: later calls
 * return what it loaded, whatever file they name. NULL with err saying why
 * (a build without CUDA, or the library or its CUDA libraries not
 * loadable). */
const struct trn_cuda_backend *trn_cuda_backend_load(const char *file, struct trn_err *err);

/* The backend trn_cuda_backend_load loaded (code that runs on a GPU model
 * made through it); NULL with err when none is. */
const struct trn_cuda_backend *trn_cuda_backend_get(struct trn_err *err);

/* The library's one entry point (model_cuda.c). */
const struct trn_cuda_backend *trn_cuda_backend_entry(void);

#endif
