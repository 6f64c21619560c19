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
/* Whether the fused backward computes dq in its dk, dv kernel and adds it
 * to an fp32 copy by atomic adds, rounded to 16 bits at the end
 * (FlashAttention-2's: five tile products a pair of tiles where its
 * separate dq kernel makes it seven; b x t x c floats of scratch), instead
 * of in a kernel of its own: the keys of that kernel's blocks, 128
 * (8 warps), or 0 for the dq kernel (the default). keys 0 or 128 sets it,
 * anything else only asks; the trainer sets it from the spec's
 * "deterministic" (trainer/spec/plan.h).
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
