/* kernels/embedding.h - token + position embedding.
 *
 * tokens [b, t] in [0, vocab), wte [vocab, c], wpe [t_max >= t, c] or NULL,
 * out [b, t, c] = wte[tokens] + wpe[position]. Backward adds into dwte and
 * dwpe (NULL to skip); the CPU version is deterministic (no atomics; the
 * same thread count gives the same bits).
 */
#ifndef LARCH_KERNELS_EMBEDDING_H
#define LARCH_KERNELS_EMBEDDING_H

void kern_embedding_fwd_ref(float *out, const int *tokens, const float *wte,
                            const float *wpe, int b, int t, int c);
void kern_embedding_fwd_cpu(float *out, const int *tokens, const float *wte,
                            const float *wpe, int b, int t, int c);

void kern_embedding_bwd_ref(float *dwte, float *dwpe, const float *dout,
                            const int *tokens, int b, int t, int c, int vocab);
void kern_embedding_bwd_cpu(float *dwte, float *dwpe, const float *dout,
                            const int *tokens, int b, int t, int c, int vocab);

#endif
