/* trainer/capi.h - a flat C API over the trainer's model, optimizer and
 * schedule code, for tools and the numeric tests (Python ctypes): plain
 * types only, opaque handles, errors as text in a caller's buffer.
 */
#ifndef LARCH_TRAINER_CAPI_H
#define LARCH_TRAINER_CAPI_H

struct trn_capi_model;
struct trn_capi_optim;

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
 * mean loss. */
double trn_capi_model_step(struct trn_capi_model *h, const float *x, const int *tokens,
                           const int *targets, int n);

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

#endif
