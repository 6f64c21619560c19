/* kernels/cuda_common.h - what the CUDA kernels and their callers share:
 * check macros, the device query, device buffers and the stream the kernels
 * run on. C and CUDA C++ both include it; the functions are extern "C" and
 * live in cuda_common.cu (library larch_kernels_cuda).
 *
 * Streams: every kern_*_cuda function enqueues its work on the library's
 * current stream, kern_cuda_stream(), which is the legacy default stream (0)
 * until kern_cuda_set_stream() names another; cuBLAS runs on it too. The
 * functions return once the work is enqueued, except those that return a
 * value to the host (the norms), which wait for it. One host thread drives
 * the GPU: the stream, the cuBLAS handles and the scratch buffers are
 * process-wide and not locked.
 */
#ifndef LARCH_KERNELS_CUDA_COMMON_H
#define LARCH_KERNELS_CUDA_COMMON_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda_opts.h"
#include "kernels/cuda_sizes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checks ---------------------------------------------------------------- */

/* Prints "larch: FILE:LINE: WHAT: ERR" to stderr and aborts. */
void kern_cuda_fail(const char *file, int line, const char *what, const char *err)
	__attribute__((noreturn));
/* Launch check behind KERN_CUDA_CHECK_LAUNCH: a bad launch configuration
 * aborts at once; with kern_cuda_opts's sync it also waits for the kernel,
 * so that a fault inside it is reported at its launch site. */
void kern_cuda_check_launch(const char *file, int line);

/* ---- the caller's choices ----------------------------------------------------- */

/* Sets the caller's choices (kernels/cuda_opts.h); a pick that does not parse aborts with the reason (a
 * run told what to pick that cannot). Call before the first kernel. */
void kern_cuda_set_opts(const struct kern_cuda_opts *opts);

#define KERN_CUDA_CHECK(call)                                                          \
	do {                                                                           \
		cudaError_t kern_cuda_err_ = (call);                                   \
		if (kern_cuda_err_ != cudaSuccess)                                     \
			kern_cuda_fail(__FILE__, __LINE__, #call,                      \
			               cudaGetErrorString(kern_cuda_err_));            \
	} while (0)

#define KERN_CUBLAS_CHECK(call)                                                        \
	do {                                                                           \
		cublasStatus_t kern_cublas_st_ = (call);                               \
		if (kern_cublas_st_ != CUBLAS_STATUS_SUCCESS)                          \
			kern_cuda_fail(__FILE__, __LINE__, #call,                      \
			               cublasGetStatusString(kern_cublas_st_));        \
	} while (0)

/* After every kernel launch. */
#define KERN_CUDA_CHECK_LAUNCH() kern_cuda_check_launch(__FILE__, __LINE__)

/* ---- devices ------------------------------------------------------------- */

struct kern_cuda_device {
	int index;
	char name[256];
	int cc_major, cc_minor;        /* compute capability, 9.0 for H100/H200 */
	int sm_count;                  /* multiprocessors */
	size_t mem_total, mem_free;    /* bytes; free at the time of the query */
	size_t l2_bytes;
	size_t smem_block_optin;       /* shared memory a block may opt in to */
	int driver_version, runtime_version; /* e.g. 13000 for 13.0 */
};

/* The number of CUDA devices; 0 when there is no GPU, no driver or the
 * driver is too old, and then why (may be NULL) gets the runtime's reason.
 * Never aborts. */
int kern_cuda_device_count(char *why, size_t whylen);

/* Fills *dev for device index. Returns 0, or -1 with the reason in why. */
int kern_cuda_device_query(int index, struct kern_cuda_device *dev, char *why, size_t whylen);

/* "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB (78.5 free), driver 13.0,
 * runtime 13.0" into buf. */
void kern_cuda_device_describe(const struct kern_cuda_device *dev, char *buf, size_t len);

/* Makes device index the calling thread's. 0, or -1 with why. */
int kern_cuda_use_device(int index, char *why, size_t whylen);
/* The calling thread's device (0 when the runtime cannot say). */
int kern_cuda_current_device(void);
/* Free and total bytes of the current device; 0, or -1 (both 0). */
int kern_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Peak FP32 FLOP/s on device index's CUDA cores (SMs x FP32 lanes x 2 x
 * clock): the denominator of an FP32 run's MFU; 0 when unknown. */
double kern_cuda_peak_fp32(int index);
/* Peak dense fp16/bf16 FLOP/s on device index's tensor cores, the
 * denominator of a 16-bit run's MFU: sheet, the caller's data-sheet figure
 * for the part (trainer/gpu_parts.h: the figure published MFUs divide by),
 * where it is > 0, else SMs x FLOPs per SM and clock x the maximum clock;
 * basis (may be NULL) gets which of the two. 0 when unknown. */
double kern_cuda_peak_tensor16(int index, double sheet, const char **basis);

/* ---- GEMM operands ------------------------------------------------------------- */

/* The operands of the GEMMs of matmul_cuda.cu and attention_cuda.cu: 0 fp32
 * (plain FP32 cuBLAS), 1 fp16, 2 bf16 (converted to 16 bits for the tensor
 * cores, fp32 sums and results); matmul_cuda.h's KERN_MM_* and
 * kern_matmul_cuda_operands set it. */
int kern_cuda_gemm_operands(void);
void kern_cuda_set_gemm_operands(int dtype);

/* A process-wide on/off switch of the kernels' (kern_<op>_cuda_<what>(on)):
 * on >= 0 sets *state, -1 only asks. Returns the setting before the call. */
int kern_cuda_switch(int *state, int on);
/* With 16-bit operands the element-wise kernels also store what they write
 * as 16-bit values (rounded to nearest even, held in their fp32 buffers),
 * as the CPU model rounds after them: LayerNorm's output and input gradient,
 * GELU's and the residual's outputs and gradients, the embedding's output,
 * softmax + cross-entropy's dlogits (not the parameter gradients, which the
 * trainer rounds when final, nor the losses and statistics). And they read
 * their activation inputs as 16-bit values (LayerNorm's input and output
 * gradient, GELU's input and output gradient, the residual's inputs, the
 * logits in softmax + cross-entropy and the argmax, the output gradient in
 * matmul's bias gradient), as the GEMMs do through their 16-bit operand
 * copies: a GEMM's fp32 output then needs no rounding pass of its own
 * before those read it. */
/* Activations stored as 16 bits: the _act_cuda entry points of the ops a
 * GPT runs (layernorm, matmul, attention, gelu, residual, embedding,
 * softmax + cross-entropy) take their activations and activation gradients
 * as void pointers and an a16 flag. a16 0: fp32 buffers, exactly as the
 * plain entry points (which call them so). a16 1, with 16-bit operands
 * only: the buffers hold packed 16-bit values of the operands' type (half
 * the bytes), read exactly and written rounded to nearest even, the CPU's
 * bits, in the op's own store; the GEMMs read them in place and write their
 * outputs as 16 bits from fp32 sums (cuBLAS rounds to nearest). Parameters,
 * their gradients and the ops' statistics (LayerNorm's mean and rstd, the
 * losses and lse) stay fp32 either way. */
#define KERN_ACT_F32 0
#define KERN_ACT_16 1
/* kern_cuda_gemm_operands() for an op on activations stored as a16 says;
 * aborts, naming op, where a16 asks for 16 bits and the operands are fp32. */
int kern_cuda_act_operands(int a16, const char *op);

/* ---- the stream and the cuBLAS handle -------------------------------------- */

cudaStream_t kern_cuda_stream(void);
void kern_cuda_set_stream(cudaStream_t stream);

/* The process's cuBLAS handle (created on first use, plain FP32 math, no
 * atomics), bound to kern_cuda_stream(). */
cublasHandle_t kern_cuda_cublas(void);

/* Waits for the stream; aborts with the error if a kernel on it failed. */
void kern_cuda_sync(void);

/* ---- device memory ------------------------------------------------------- */

/* cudaMalloc that aborts with the size on failure; NULL for 0 bytes. */
void *kern_cuda_malloc(size_t bytes);
/* Accepts NULL. */
void kern_cuda_free(void *dev);
/* What kern_cuda_malloc's buffers hold now and have held at most at once
 * (bytes): larch's own device memory, which larch plan predicts; not the
 * CUDA context, the libraries' own, or the scratch pool (below). */
void kern_cuda_alloc_bytes(size_t *now, size_t *peak);
/* The device workspaces' sizes: cuda_sizes.h. */
/* Copies between host and device on the stream and waits for the copy. */
void kern_cuda_upload(void *dev_dst, const void *host_src, size_t bytes);
void kern_cuda_download(void *host_dst, const void *dev_src, size_t bytes);
/* Pins host memory [p, p + bytes) for fast copies (cudaHostRegister); 0, or
 * -1 when the driver refuses (the copies then still work, slower). Undo it
 * with kern_cuda_host_unregister before the memory is freed. */
int kern_cuda_host_register(void *p, size_t bytes);
void kern_cuda_host_unregister(void *p);
/* kern_cuda_malloc + kern_cuda_upload; returns a new buffer the caller frees. */
void *kern_cuda_dup(const void *host_src, size_t bytes);
/* Copies bytes from device memory to device memory on the stream (no wait). */
void kern_cuda_copy(void *dev_dst, const void *dev_src, size_t bytes);
/* Zeroes bytes at dev on the stream (no wait). */
void kern_cuda_zero(void *dev, size_t bytes);

/* ---- copies beside the compute stream ----------------------------------------- */

/* Channels 0 .. KERN_CUDA_COPY_CHANNELS - 1 of copies on a copy stream of
 * their own (non-blocking, so that it overlaps even the legacy default
 * stream): a copy starts once the work enqueued on kern_cuda_stream() so far
 * is done (it may read what that work writes, and overwrite what it reads),
 * and runs beside the work enqueued after it. One copy in flight per
 * channel: starting another on the same channel orders it after the first.
 * For copies to or from the host to overlap, pin the host memory
 * (kern_cuda_host_register). */
#define KERN_CUDA_COPY_CHANNELS 9
void kern_cuda_copy_async(int chan, void *dst, const void *src, size_t bytes);
/* The work enqueued on kern_cuda_stream() from now on waits for chan's last
 * copy; the host does not wait. */
void kern_cuda_copy_wait(int chan);
/* The host waits for chan's last copy (its destination is the host's to
 * read or the source the host's to write). */
void kern_cuda_copy_wait_host(int chan);

/* Stream-ordered scratch for the kernels' partial sums (cudaMallocAsync on
 * the stream, from the device's memory pool, which keeps what it once held:
 * after the first step no call maps memory): valid for work enqueued on the
 * stream until kern_cuda_scratch_free. Aborts on failure; NULL for 0 bytes. */
void *kern_cuda_scratch_alloc(size_t bytes);
void kern_cuda_scratch_free(void *dev);
/* The most memory the scratch pool has held at once (bytes; 0 unknown). */
size_t kern_cuda_scratch_peak(void);

/* ---- same-bits variants, timed ---------------------------------------------- */

/* Some ops have several kernels, or ways through them, that give the same
 * bits and differ only in time (their variants: the cross-entropy's one
 * pass or two, the residual + LayerNorm's one kernel or two). With tuning
 * on, an op whose variant nothing fixes (its API switch at the default)
 * times its variants at its first call for a shape and keeps the fastest,
 * as cuDNN's benchmark mode does for convolutions: results are the same
 * bits whichever wins. On unless kern_cuda_opts's kernel_picks is
 * "default"; on >= 0 sets it, -1 only asks; returns the setting before
 * the call. */
int kern_cuda_kernel_tune(int on);

/* Enqueues variant i (0 the default) of an op on kern_cuda_stream(). It
 * writes only what no variant reads, so that it may run again. */
typedef void (*kern_cuda_variant_fn)(void *ctx, int variant);

/* The most variants one key may time. */
#define KERN_CUDA_VARIANTS_MOST 8

/* The variant of the op and shape that key names (printable, no spaces,
 * under KERN_TUNE_KEY characters: the op, the type and every size that
 * may change the pick) among n, names[i] naming variant i: the pick kept
 * for key, or given for it in kern_cuda_opts's kernel_picks ("KEY=N"
 * entries apart by spaces: kern_tune_picks_parse; a run's timing left out,
 * as profile_gpt.py does under ncu); else 0 where tuning is off or n < 2;
 * else each variant timed (cudaEvents, the host waiting) over two blocks
 * of three runs back to back, each block behind an untimed run, the
 * fastest by the lesser block's mean kept (kern_tune_fastest: the default
 * unless beaten by more than 2%) and
 * said on stderr with every variant's time ("larch: kernels timed:
 * KEY=N (name): name ms, ..."). The caller then runs the pick: its outputs
 * are those of the last variant timed until then. An entry that does not
 * parse, or a pick past n, aborts with the reason. */
int kern_cuda_variant_pick(const char *key, int n, const char *const names[],
                           kern_cuda_variant_fn run, void *ctx);
/* kern_cuda_variant_pick among the variants v with ok[v] set (ok NULL:
 * all): the others are not timed (nor named) and not picked unless kept
 * or given for the key. Where only one is offered it is kept untimed
 * (said on stderr as "the only way offered"), so that the key has a pick
 * that a later call, or kern_cuda_opts's kernel_picks, takes as it is. */
int kern_cuda_variant_pick_some(const char *key, int n, const char *const names[],
                                const unsigned char *ok, kern_cuda_variant_fn run, void *ctx);
/* The pick kept for key, or given for it in kern_cuda_opts's picks; -1
 * for none (nothing timed). */
int kern_cuda_variant_kept(const char *key);

/* The keys timed so far in this process. */
long kern_cuda_variants_tuned(void);

/* ---- launch shapes --------------------------------------------------------- */

/* Blocks for a grid-stride loop over n items with threads per block: enough
 * to fill the device (a few waves) and no more than the items need; >= 1. */
unsigned kern_cuda_grid(long n, int threads);

#ifdef __cplusplus
}
#endif

#endif
