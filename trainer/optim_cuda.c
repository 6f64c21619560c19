/* trainer/optim_cuda.c - the optimizers' kernels on a GPU (optim.h's
 * struct trn_optim_kernels over kernels/optimizer_cuda.h): an optimizer
 * moved here (trn_optim_move_to) keeps its state in device memory (fp32,
 * or int8 codes and scales) and steps the GPU model's device copies of the
 * weights and gradients. The updates give the CPU's bits
 * (kernels/optimizer_cuda.cu and quant8_cuda.cu are built without FMA
 * contraction); fp32 state's norms sum in another order, int8 state's LAMB
 * norm in the CPU's. */
#include "optim.h"

#include "kernels/cuda_common.h"
#include "kernels/optimizer_cuda.h"
#include "kernels/precision_cuda.h"
#include "kernels/quant8_cuda.h"

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
	.sgd_q8 = kern_sgd_update_q8_cuda,
	.adamw_q8 = kern_adamw_update_q8_cuda,
	.lars_q8 = kern_lars_update_q8_cuda,
	.lamb_norm_q8 = kern_lamb_norm_q8_cuda,
	.lamb_q8 = kern_lamb_update_q8_cuda,
	.alloc_zeroed = dev_alloc_zeroed,
	.release = kern_cuda_free,
	.zero = kern_cuda_zero,
	.to_host = kern_cuda_download,
	.from_host = kern_cuda_upload,
};
