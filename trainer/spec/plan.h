/* trainer/spec/plan.h - the memory preflight: what one rank of a spec holds,
 * item by item, computed from the spec and the data's shape without
 * allocating the model or loading the data.
 *
 * One function for everyone who needs the numbers: `larch plan` prints the
 * table, larchd refuses (422) a job whose plan does not fit the partition's
 * nodes, and larch-train prints its run's plan (trn_plan_make_run) in its
 * header as its memory report, with the same printer (trn_plan_print), and
 * holds its measured peak against it at the end. The model sizes come from
 * trn_model_layout, i.e. from the same walks that lay the real buffers out.
 *
 * Where items live. On the CPU backend (resources.gpus_per_node 0) every
 * item is host memory. 16-bit values are held in floats (4 bytes) on both
 * backends, but for a 16-bit GPT's activations on a GPU, which are 16-bit
 * values (2 bytes; its attention scratch and statistics stay fp32).
 * A GPU holds the parameters, gradients and activations (and in 16 bits,
 * unless the params are offloaded, a 16-bit copy of the params for the
 * GEMMs, params16); its model keeps
 * host copies of the parameters and gradients too, and a stage for adding
 * each backward's gradients into them (host_copy). Only a run that steps
 * on the device (one rank, nothing offloaded; its optimizer state fp32 or
 * int8) holds the master weights and the optimizer state there; its checkpoints bring
 * both to the host. Every other GPU run steps on the host (the ranks reduce
 * host gradients over MPI), and its master weights, optimizer state and
 * ZeRO-1 gradient shard are host memory. offload.optimizer "cpu"
 * (opt_offload.h) adds the host's copy of the range's gradients and the
 * parameters' two staging buffers. With offload.params "cpu" the params and
 * grads items are their working copies: two blocks' staging and, on a GPU,
 * the resident tensors (on the CPU those are used in place in the host
 * copies, the param_offload item); the optimizer offload then works in those
 * host copies in place, and fp32 master weights are the params themselves
 * (on a GPU in 16 bits too: it rounds them as it reads them). When the
 * update follows backward (trn_spec_streams_update) the optimizer offload
 * copies nothing, and with offload.params the host keeps only the resident
 * tensors' gradients and two windows of a block.
 */
#ifndef LARCH_TRAINER_PLAN_H
#define LARCH_TRAINER_PLAN_H

#include <jansson.h>
#include <stdio.h>

#include "trainer/data.h"
#include "trainer/err.h"
#include "spec.h"

enum trn_plan_item {
	TRN_PLAN_PARAMS,
	TRN_PLAN_GRADS,
	TRN_PLAN_PARAMS16,            /* a 16-bit GPU model's copy of its params for the GEMMs */
	TRN_PLAN_GRAD_SHARD,          /* ZeRO-1: this rank's averaged fp32 gradients */
	TRN_PLAN_MASTER,              /* fp32 master weights, when not the parameters themselves */
	TRN_PLAN_OPTIMIZER,           /* m, v (momentum): fp32, or int8 codes and block scales */
	TRN_PLAN_GRAD_HOST,           /* offload.optimizer "cpu": the host's fp32 gradients of the range */
	TRN_PLAN_PARAM_STAGING,       /* offload.optimizer "cpu": two host buffers for the params */
	TRN_PLAN_ACTIVATIONS,         /* at the micro-batch, as offload.activations keeps them */
	TRN_PLAN_ACT_OFFLOAD,         /* offload.activations "cpu": the host store */
	TRN_PLAN_PARAM_OFFLOAD,       /* offload.params "cpu": the host params and grads */
	TRN_PLAN_HOST_COPY,           /* a GPU model's host params and grads, and its grad stages */
	TRN_PLAN_CHECKPOINT,          /* ZeRO-1 rank 0: the gathered state while it writes */
	TRN_PLAN_DATA,                /* the loaded data set and a micro-batch */
	TRN_PLAN_WORKSPACE,           /* a GPU's: cuBLAS's and cuBLASLt's workspaces, the
	                               * batch's tokens and targets (and the next one's) */
	TRN_PLAN_RUNTIME,             /* the process's own: code and libraries, threads, the
	                               * BLAS's packing buffers (TRN_PLAN_RUNTIME_BYTES + up to
	                               * TRN_PLAN_BLAS_BYTES, as large as the largest GEMM
	                               * operand) */
	TRN_PLAN_LOADER,              /* what loading the data holds beyond what training
	                               * holds after it: idx files' bytes while they are
	                               * converted to floats (0 when training holds more) */
	TRN_PLAN_N
};

/* The runtime's fixed cost, measured: a CPU run of a GPT of 0.1 M parameters
 * peaks this far above its other items (the C library, jansson, libcrypto,
 * libcurl, OpenMP, the BLAS's code, larch's own), and the BLAS's packing
 * buffers at most this much more (OpenBLAS 0.3.21). */
#define TRN_PLAN_RUNTIME_BYTES (17.0 * 1024 * 1024)
#define TRN_PLAN_BLAS_BYTES (20.0 * 1024 * 1024)

struct trn_plan {
	int ranks, zero, gpus;        /* gpus: per node (0: the CPU backend) */
	int ranks_per_node;
	long micro;
	long n_params;                /* floats in the model */
	long shard;                   /* floats this rank's optimizer owns */
	double bytes[TRN_PLAN_N];     /* per rank (rank 0 where ranks differ) */
	int on_host[TRN_PLAN_N];      /* 1: host memory; 0: the device's */
	double host_bytes;            /* per rank */
	double device_bytes;          /* per rank (per GPU); 0 on the CPU backend */
	/* what the items are, for trn_plan_print's dtypes and notes */
	enum trn_dtype compute;       /* the model's values */
	enum trn_offload act_offload, param_offload, opt_offload;
	int n_state;                  /* the optimizer's state: 0, 1 (m) or 2 (m and v) */
	int state_int8;               /* ... as int8 codes and a scale per block */
	int resident;                 /* a GPU run that steps on the device */
	int streamed;                 /* the update follows backward (trn_spec_streams_update) */
	int act16;                    /* the activations are 16-bit values (a 16-bit GPT on a GPU) */
	double act_none_bytes;        /* the activations with offload.activations "none" */
};

/* How the GPU GPT lays out its activations (model_gpt_cuda.c), which larch
 * plan counts; from the spec alone, never the environment, so that larchd's
 * preflight, larch plan and the run give the same answer: a16, 16-bit
 * compute keeps them as 16-bit values; flash, with a16 and head size 64,
 * the fused attention keeps each row's log-sum-exp where the GEMM path
 * (any other head size) keeps [T, T]; gelu_fused, with a16, GELU in the fc
 * GEMMs' epilogues (the same memory); flash_dq_atomic, with flash, the keys
 * of the blocks of its backward that add dq atomically into fp32 scratch
 * of [B, T, C], 0 for none: 128 when the spec says "deterministic": false
 * (the adds' order varies from run to run), else 0. */
/* The GPU GPT's logits rows: the vocabulary rounded up to a multiple of
 * TRN_GPT_LOGITS_ALIGN (model_gpt_cuda.c), and so are the rows of its
 * 16-bit copy of the token embedding (params16). */
#define TRN_GPT_LOGITS_ALIGN 64
static inline long trn_gpt_logits_rows(long vocab)
{
	return (vocab + TRN_GPT_LOGITS_ALIGN - 1) / TRN_GPT_LOGITS_ALIGN * TRN_GPT_LOGITS_ALIGN;
}

struct trn_gpt_gpu_layout {
	int a16, flash, gelu_fused;
	int flash_dq_atomic;               /* the fused backward's dq in fp32 scratch: its
	                                    * blocks' keys (attention_cuda.h), or 0 */
};
#define TRN_FLASH_HEAD_SIZE 64
void trn_gpt_gpu_layout(const struct trn_spec_model *model, enum trn_dtype compute,
                        int nondeterministic, struct trn_gpt_gpu_layout *out);

/* Whether a GPU model of compute dtype keeps a 16-bit copy of its params
 * for the GEMMs (params16, model_cuda.h): in 16 bits without offload.params. */
int trn_gpu_weights16(enum trn_dtype compute, int params_offloaded);

/* The candidates a GPU run's 16-bit GEMMs time at their first call
 * (kern_matmul_cuda_gemm_tune), 0 for none: TRN_GPU_GEMM_TUNE_CANDIDATES
 * when the spec says "deterministic": false (the picks, and so the bits,
 * may differ from run to run; a run that goes on from the job's checkpoint
 * takes its picks from the job directory), else 0. Tuned, every 16-bit GEMM goes through cuBLASLt, and a
 * fused-attention GPT then makes no call that allocates cuBLAS's own
 * workspace, which larch plan leaves out. */
#define TRN_GPU_GEMM_TUNE_CANDIDATES 8
int trn_gpu_gemm_tune(int nondeterministic);

/* trn_plan_make's answer for a model whose buffers at the micro-batch would
 * be petabytes: no plan (its sizes would overflow), and nothing can fit. */
#define TRN_PLAN_TOO_LARGE (-2)

/* TRN_PLAN_TOO_LARGE with err when spec's model is that at its micro-batch
 * whatever the data (a GPT's sizes are its own; an MLP's widths without
 * the data's are a lower bound), else 0: larchd refuses such a job before
 * it looks at any file. */
int trn_plan_too_large(const struct trn_spec *spec, struct trn_err *err);

/* The plan of spec at micro-batch micro (0: the spec's) for data of the
 * given shape (trn_dataset_shape, or trn_dataset_shape_from_json of what
 * larch-train --probe printed; borrowed): opens no file. 0, -1 with err
 * (the model is invalid), or TRN_PLAN_TOO_LARGE with err. */
int trn_plan_make_shape(struct trn_plan *p, const struct trn_spec *spec,
                        const struct trn_dataset *shape, long micro, struct trn_err *err);

/* The plan of a running larch-train (train.c: its header, and its peak
 * beside the plan at the end): spec's at its micro-batch for the loaded data
 * (shape, borrowed), with what the run decided that the spec leaves open:
 * on_gpu (1: one GPU per rank, whatever resources.gpus_per_node says; 0:
 * the CPU backend) and resident (1: it steps on the device, as several ranks
 * do over a device communicator; a spec's plan assumes that of one rank
 * alone). 0, or -1 with err. */
int trn_plan_make_run(struct trn_plan *p, const struct trn_spec *spec,
                      const struct trn_dataset *shape, int on_gpu, int resident,
                      struct trn_err *err);

/* trn_plan_make_shape with the shape read from spec's data files (opened
 * unconfined; remembered while they are unchanged). -1 with err also when
 * the shape cannot be read. */
int trn_plan_make(struct trn_plan *p, const struct trn_spec *spec, long micro,
                  struct trn_err *err);

/* The largest micro-batch up to the spec's whose plan for data of the shape
 * has host bytes per node <= host_limit and device bytes <= device_limit (a
 * limit 0: none); 0 when not even 1 fits, -1 with err when planning
 * failed. Opens no file. */
long trn_plan_max_micro_shape(const struct trn_spec *spec, const struct trn_dataset *shape,
                              double host_limit, double device_limit, struct trn_err *err);

/* trn_plan_max_micro_shape with the shape read as trn_plan_make reads it. */
long trn_plan_max_micro(const struct trn_spec *spec, double host_limit, double device_limit,
                        struct trn_err *err);

const char *trn_plan_item_name(enum trn_plan_item item);

/* The table that larch plan and larch-train's header print (plan_print.c):
 * a line "memory plan per rank: ..." (parameters, micro-batch, ranks, ZeRO-1,
 * CPU or GPU), then one line per item that is not 0,
 *   "  NAME  MiB MiB  host|device  DTYPE  NOTE"
 * (DTYPE the values' (fp32, bf16, fp16, int8; - for a mix), the note what
 * the item is made of, how it is sharded or offloaded, and "held in floats"
 * where 16-bit values take 4 bytes), a line "  NAME  -  none: WHY" for an
 * item the offloads or ZeRO leave out, and the totals: "  host  MiB MiB",
 * on a GPU "  device  MiB MiB  per GPU", with several ranks on a node
 * "  node  MiB MiB  host, N ranks per node". */
void trn_plan_print(FILE *f, const struct trn_plan *p);

/* Whether p has host bytes per node <= host_limit and device bytes <=
 * device_limit (a limit 0: none). */
int trn_plan_fits(const struct trn_plan *p, double host_limit, double device_limit);

/* {"ranks", "micro", "params", "items": {name: bytes}, "host_bytes_per_rank",
 * "host_bytes_per_node", "device_bytes_per_gpu"}; NULL when out of memory. */
json_t *trn_plan_json(const struct trn_plan *p);

/* spec's plan p against limits, as larch plan --json and larch-train --plan
 * print it: trn_plan_json's object, and with a limit (not 0) "fits" and
 * "largest_micro" (the spec's micro-batch when it fits, else
 * trn_plan_max_micro's: 0 when not even 1 fits). *fits: whether it fits.
 * NULL with err when out of memory or planning failed. */
json_t *trn_plan_json_within(const struct trn_plan *p, const struct trn_spec *spec,
                             double host_limit, double device_limit, int *fits,
                             struct trn_err *err);

/* The peak resident memory of this process so far (VmHWM), in bytes; 0 when
 * it cannot be read. */
double trn_plan_peak_rss(void);

#endif
