/* kernels/embedding_cuda.h - token + position embedding on the GPU
 * (embedding_cuda.cu); the contract is embedding.h's. Pointers (tokens too)
 * are device pointers; the work goes on kern_cuda_stream().
 *
 * Backward adds into dwte and dwpe in the reference's order (positions in
 * order for each row of dwte, batches in order for each row of dwpe), so
 * both equal the reference's bits. */
#ifndef LARCH_KERNELS_EMBEDDING_CUDA_H
#define LARCH_KERNELS_EMBEDDING_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void kern_embedding_fwd_cuda(float *out, const int *tokens, const float *wte,
                             const float *wpe, int b, int t, int c);
void kern_embedding_bwd_cuda(float *dwte, float *dwpe, const float *dout,
                             const int *tokens, int b, int t, int c, int vocab);

/* The same with out (dout) stored as a16 says (cuda_common.h). */
void kern_embedding_fwd_act_cuda(int a16, void *out, const int *tokens, const float *wte,
                                 const float *wpe, int b, int t, int c);
void kern_embedding_bwd_act_cuda(int a16, float *dwte, float *dwpe, const void *dout,
                                 const int *tokens, int b, int t, int c, int vocab);

#ifdef __cplusplus
}
#endif

#endif
