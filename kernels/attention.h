/* kernels/attention.h - causal multi-head self-attention (GPT-2).
 *
 * qkv [b, t, 3c] holds q, k, v side by side on the last axis (c each), c
 * split into nh heads of hs = c / nh. out [b, t, c] is the heads' outputs
 * concatenated (before the output projection). Scores are scaled by
 * 1/sqrt(hs) and masked so position i sees positions <= i.
 *
 * Forward saves att [b, nh, t, t], the post-softmax weights (entries above
 * the diagonal are 0). Backward adds into dqkv (the _set backward overwrites
 * it); datt [b, nh, t, t] is scratch it overwrites. preatt and dpreatt [b, nh, t, t] are scratch for the
 * reference versions; the optimised versions work in att and datt in place
 * and accept NULL for them.
 */
#ifndef LARCH_KERNELS_ATTENTION_H
#define LARCH_KERNELS_ATTENTION_H

void kern_attention_fwd_ref(float *out, float *preatt, float *att, const float *qkv,
                            int b, int t, int c, int nh);
void kern_attention_fwd_cpu(float *out, float *preatt, float *att, const float *qkv,
                            int b, int t, int c, int nh);

void kern_attention_bwd_ref(float *dqkv, float *dpreatt, float *datt, const float *dout,
                            const float *qkv, const float *att, int b, int t, int c, int nh);
void kern_attention_bwd_cpu(float *dqkv, float *dpreatt, float *datt, const float *dout,
                            const float *qkv, const float *att, int b, int t, int c, int nh);
void kern_attention_bwd_set_ref(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                const float *qkv, const float *att, int b, int t, int c, int nh);
void kern_attention_bwd_set_cpu(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                const float *qkv, const float *att, int b, int t, int c, int nh);

#endif
