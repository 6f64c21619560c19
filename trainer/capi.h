/* trainer/capi.h - a flat C API over the trainer's model, optimizer,
 * schedule and mixed-precision code, for tools and the numeric tests (Python
 * ctypes): plain types only, opaque handles, errors as text in a caller's
 * buffer.
 */
#ifndef LARCH_TRAINER_CAPI_H
#define LARCH_TRAINER_CAPI_H

#include <stdint.h>

struct trn_capi_model;
struct trn_capi_optim;
struct trn_capi_loss_scale;

/* A model for spec_json's "model" with data of the given shape: in_dim and
 * n_classes for the mlp, vocab for gpt (the data's; the spec may ask for
 * more). Returns NULL with err filled. Weights are initialised from the seed. */
struct trn_capi_model *trn_capi_model_new(const char *spec_json, int in_dim, int n_classes,
                                          int vocab, int max_batch, char *err, int errlen);
void trn_capi_model_free(struct trn_capi_model *h);
long trn_capi_model_n_floats(const struct trn_capi_model *h);
int trn_capi_model_n_params(const struct trn_capi_model *h);
/* Name of parameter i with its offset and element count (borrowed). */
const char *trn_capi_model_param(const struct trn_capi_model *h, int i, long *offset, long *numel);
float *trn_capi_model_weights(struct trn_capi_model *h);   /* [n_floats], writable */
float *trn_capi_model_grads(struct trn_capi_model *h);     /* [n_floats] */
/* Zeroes the gradients, runs forward and backward on n samples (x [n, in_dim]
 * for the mlp; tokens and targets [n, seq] for gpt, x NULL) and returns the
 * mean loss; NaN for n outside [1, max_batch] or out of memory. For a model
 * whose precision.compute is fp16 or bf16 the mlp's x is rounded to it first
 * (into a copy; the caller's array is not written), as the trainer does with
 * its input features; the weights are used as they are, so a caller that
 * wants the trainer's behaviour rounds them too. */
double trn_capi_model_step(struct trn_capi_model *h, const float *x, const int *tokens,
                           const int *targets, int n);
/* The same with backward's scale: the gradients are scale * d(mean loss)/dw
 * (the loss scale of fp16 training, applied before the 16-bit gradients are
 * stored, so they can underflow or overflow). trn_capi_model_step is scale 1. */
double trn_capi_model_step_scaled(struct trn_capi_model *h, const float *x, const int *tokens,
                                  const int *targets, int n, float scale);

/* A gpt's forward on tokens [n, seq]: its logits [n, seq, vocab] into out
 * (the weights as they are; the gradients untouched). 0, or -1 for a model
 * that is not a gpt or n outside [1, max_batch]. */
int trn_capi_model_gpt_logits(struct trn_capi_model *h, const int *tokens, int n, float *out);

/* An optimizer from spec_json's "optimizer" over n tensors named names[i]
 * with numels[i] elements laid out back to back. */
struct trn_capi_optim *trn_capi_optim_new(const char *spec_json, const char *const *names,
                                          const long *numels, int n, char *err, int errlen);
void trn_capi_optim_free(struct trn_capi_optim *h);
void trn_capi_optim_step(struct trn_capi_optim *h, float *w, const float *g, double lr);
/* The optimizer's first (m) and second (v) moment buffers, or NULL. */
float *trn_capi_optim_state(struct trn_capi_optim *h, int which);

/* The learning rate of step (0-based) for spec_json with the given steps per
 * epoch and total steps; NaN with err filled for a bad spec. */
double trn_capi_schedule_lr(const char *spec_json, long steps_per_epoch, long total_steps,
                            long step, char *err, int errlen);

/* The 16-bit conversions of kernels/precision.h over n elements (fp16 and
 * bf16 as uint16_t bit patterns), the in-place rounding through fp16 or bf16,
 * and the inf/NaN check (1 if any). */
void trn_capi_fp32_to_fp16(uint16_t *out, const float *inp, long n);
void trn_capi_fp16_to_fp32(float *out, const uint16_t *inp, long n);
void trn_capi_fp32_to_bf16(uint16_t *out, const float *inp, long n);
void trn_capi_bf16_to_fp32(float *out, const uint16_t *inp, long n);
void trn_capi_round_fp16(float *x, long n);
void trn_capi_round_bf16(float *x, long n);
int trn_capi_nonfinite(const float *x, long n);

/* The loss scaler (trainer/loss_scale.h) for spec_json's "precision".
 * Returns NULL with err filled for a bad spec. */
struct trn_capi_loss_scale *trn_capi_loss_scale_new(const char *spec_json, char *err, int errlen);
void trn_capi_loss_scale_free(struct trn_capi_loss_scale *h);
/* One step: 1 to apply it, 0 to skip it (its gradients had an inf or NaN). */
int trn_capi_loss_scale_update(struct trn_capi_loss_scale *h, int found_nonfinite);
/* The current scale, and the counters where the pointers are not NULL. */
double trn_capi_loss_scale_state(const struct trn_capi_loss_scale *h, long *clean_steps,
                                 long *skipped);
/* "none", "static" or "dynamic" (static storage). */
const char *trn_capi_loss_scale_mode(const struct trn_capi_loss_scale *h);

#endif
