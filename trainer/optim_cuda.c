/* trainer/optim_cuda.c - the optimizers' kernels on a GPU (optim.h's
 * struct trn_optim_kernels over kernels/optimizer_cuda.h): an optimizer
 * moved here (trn_optim_move_to) keeps its state in device memory and
 * steps the GPU model's device copies of the weights and gradients. The
 * updates give the CPU's bits (kernels/optimizer_cuda.cu is built without
 * FMA contraction); the norms sum in another order. */
#include "optim.h"

#include "kernels/cuda_common.h"
#include "kernels/optimizer_cuda.h"
#include "kernels/precision_cuda.h"

static void *dev_alloc_zeroed(size_t bytes)
{
	void *p = kern_cuda_malloc(bytes ? bytes : sizeof(float));
	kern_cuda_zero(p, bytes ? bytes : sizeof(float));
	return p;
}

const struct trn_optim_kernels trn_optim_cuda_kernels = {
	.name = "cuda",
	.sumsq = kern_sumsq_cuda,
	.scale = kern_scale_cuda,
	.nonfinite = kern_nonfinite_cuda,
	.sgd = kern_sgd_update_cuda,
	.adamw = kern_adamw_update_cuda,
	.lars = kern_lars_update_cuda,
	.lamb_moments = kern_lamb_moments_cuda,
	.lamb_apply = kern_lamb_apply_cuda,
	.alloc_zeroed = dev_alloc_zeroed,
	.release = kern_cuda_free,
	.zero = kern_cuda_zero,
	.to_host = kern_cuda_download,
	.from_host = kern_cuda_upload,
};
