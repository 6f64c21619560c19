/* kernels/attention_cuda.h - causal multi-head self-attention on the GPU
 * (attention_cuda.cu); the contract is attention.h's. Pointers are device
 * pointers; the work goes on kern_cuda_stream().
 *
 * As the optimised CPU version does, these work in att and datt in place:
 * preatt and dpreatt are not used and may be NULL. Backward adds into dqkv
 * (the _set version overwrites it) and overwrites datt with dpreatt. The
 * results are bit-identical from run to run.
 *
 * With 16-bit GEMM operands (kern_matmul_cuda_operands: a bf16 or fp16
 * model) the forward leaves att rounded to that type, as 16-bit storage
 * would hold it: the probabilities the product with v used. */
#ifndef LARCH_KERNELS_ATTENTION_CUDA_H
#define LARCH_KERNELS_ATTENTION_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_attention_fwd_cuda(float *out, float *preatt, float *att, const float *qkv,
                             int b, int t, int c, int nh);
void kern_attention_bwd_cuda(float *dqkv, float *dpreatt, float *datt, const float *dout,
                             const float *qkv, const float *att, int b, int t, int c, int nh);
void kern_attention_bwd_set_cuda(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                 const float *qkv, const float *att, int b, int t, int c,
                                 int nh);

/* The same on activations stored as a16 says (cuda_common.h). With
 * KERN_ACT_16, out, qkv, dout and dqkv are packed 16-bit values, and so is
 * att [b, nh, t, t]: the probabilities, rounded, as the products with v and
 * q, k use them. preatt [b, nh, t, t] is then the forward's fp32 scratch for
 * the scores (required), datt the backward's (dout v^T); dpreatt is not
 * used. */
void kern_attention_fwd_act_cuda(int a16, void *out, float *preatt, void *att, const void *qkv,
                                 int b, int t, int c, int nh);
void kern_attention_bwd_set_act_cuda(int a16, void *dqkv, float *dpreatt, float *datt,
                                     const void *dout, const void *qkv, const void *att, int b,
                                     int t, int c, int nh);

/* Fused (flash) causal attention on 16-bit activations
 * (attention_flash_cuda.cu): out and qkv packed 16-bit values of the
 * operands' type, as with KERN_ACT_16, but no [b, nh, t, t] anywhere; the
 * forward leaves each row's log-sum-exp of the scaled scores in lse
 * [b, nh, t] (fp32), which the backward takes with the forward's out to
 * recompute the probabilities. The probabilities are rounded to 16 bits for
 * their product with v as att is; the backward overwrites dqkv (the _set
 * semantics). 16-bit operands (kern_matmul_cuda_operands) and head size
 * 64 only: kern_attention_flash_supported says whether a shape can run. */
int kern_attention_flash_supported(int t, int c, int nh);
/* The switches below that give the same values either way fix a variant
 * when set (in the environment, to any value; through the call, away from
 * the default); where none is, a shape's first call times the forward's
 * variants and each backward kernel's and keeps the fastest
 * (kern_cuda_kernel_tune, cuda_common.h). */
/* Whether the fused forward and backward copy their next tiles while they
 * compute
 * (cp.async into a second set of tiles): on unless LARCH_CUDA_FLASH_PIPE=0
 * is in the environment; on >= 0 sets it, -1 only asks. Returns the
 * previous setting. The same values either way. */
int kern_attention_flash_pipeline(int on);
/* The fused backward's two kernels: dk and dv, and dq. */
enum kern_flash_kernel { KERN_FLASH_BWD_KV, KERN_FLASH_BWD_Q };
/* Whether an SM holds one more block of the pipelined backward's kernel k
 * than its registers allow, with them capped (__launch_bounds__): the
 * dk, dv kernel 3 instead of 2 (168 registers instead of 202), the dq
 * kernel 4 instead of 3 (128 instead of 156), none spilled. Off unless
 * LARCH_CUDA_FLASH_MORE_BLOCKS names the kernel ("kv", "q", "kv q"); on >= 0
 * sets it, -1 only asks. Returns the previous setting. The same values
 * either way. Blocks of 8 warps (kern_attention_flash_block) leave it
 * aside. */
int kern_attention_flash_more_blocks(enum kern_flash_kernel k, int on);
/* How many rows of queries a warp of the fused forward takes: 16 (the
 * default) or 32, where each fragment of k and v it reads from shared
 * memory serves twice the rows, for about twice the registers (fewer
 * blocks an SM). 32 if LARCH_CUDA_FLASH_FWD_ROWS=32 is in the environment;
 * rows 16 or 32 sets it, anything else only asks. Returns the previous
 * setting. The same values either way. */
int kern_attention_flash_fwd_rows(int rows);
/* The queries (forward, dq) or keys (dk, dv) a block of the fused
 * attention's kernels takes: 64 (4 warps, the default) or 128 (8 warps:
 * each tile a block copies into shared memory serves twice the rows, and
 * dq added atomically takes 128-key blocks). 128 if
 * LARCH_CUDA_FLASH_BLOCK=128 is in the environment; rows 64 or 128 sets
 * it, anything else only asks. Returns the previous setting. The same
 * values either way. */
int kern_attention_flash_block(int rows);
/* Whether the fused forward computes each key tile's scores a tile ahead,
 * the tensor cores running the next tile's q k^T while the warp works
 * this tile's softmax (FlashAttention-3's overlap, on mma.sync), for about
 * 32 registers more a thread (three blocks an SM instead of four). On if
 * LARCH_CUDA_FLASH_FWD_AHEAD=1 is in the environment; on >= 0 sets it,
 * -1 only asks. Returns the previous setting. Pipelined only (with
 * kern_attention_flash_pipeline off it runs the plain forward); the rows
 * and block switches above take precedence. The same values either way. */
int kern_attention_flash_fwd_ahead(int on);
/* Whether the fused backward's two kernels take each tile of their walk
 * whole (the dk, dv kernel a query tile's 64 columns at once, the dq
 * kernel a key tile's 64 keys) instead of in halves: more independent
 * products and exponentials in flight a warp, for registers (the dk, dv
 * kernel 216 instead of 202, still two blocks an SM; the dq kernel 168
 * instead of 156, three). On if LARCH_CUDA_FLASH_WHOLE_TILES=1 is in the
 * environment; on >= 0 sets it, -1 only asks. Returns the previous
 * setting. Pipelined only; the dk, dv kernel not where it adds dq
 * atomically; the block and one-block-more switches above take
 * precedence. The same values either way. */
int kern_attention_flash_whole_tiles(int on);
/* Whether the fused backward computes dq in its dk, dv kernel and adds it
 * to an fp32 copy by atomic adds, rounded to 16 bits at the end
 * (FlashAttention-2's: five tile products a pair of tiles where its
 * separate dq kernel makes it seven; b x t x c floats of scratch), instead
 * of in a kernel of its own: the keys of that kernel's blocks, 64 (4
 * warps) or 128 (8 warps: half the adds), or 0 for the dq kernel. 0 unless
 * LARCH_CUDA_FLASH_DQ is "atomic" (64) or "atomic128" (128) in the
 * environment; keys 0, 64 or 128 sets it, anything else only asks.
 * Returns the previous setting. dq within rounding of the dq kernel's, but
 * not the same bits on every run (the adds' order); dk and dv the same
 * bits. */
int kern_attention_flash_dq_atomic(int keys);
void kern_attention_flash_fwd_cuda(void *out, float *lse, const void *qkv, int b, int t, int c,
                                   int nh);
void kern_attention_flash_bwd_set_cuda(void *dqkv, const void *dout, const void *out,
                                       const void *qkv, const float *lse, int b, int t, int c,
                                       int nh);

#ifdef __cplusplus
}
#endif

#endif
