/* trainer/export_hf.h - a checkpoint's weights in Hugging Face's layout
 * (export_hf.c), and back (init_hf.c).
 *
 * Export (larch-train --export, larch export) writes DIR/model.safetensors
 * and DIR/config.json from a larch checkpoint and the spec it was trained
 * with:
 *  - "hf-gpt2": the tensor names and layouts of transformers'
 *    GPT2LMHeadModel: transformer.wte.weight [V, C], transformer.wpe.weight
 *    [T, C], transformer.h.{i}.ln_1/ln_2.weight/bias,
 *    transformer.h.{i}.attn.c_attn/attn.c_proj/mlp.c_fc/mlp.c_proj.weight/bias
 *    (Conv1D: weight [in, out], the transpose of larch's [out, in]),
 *    transformer.ln_f.weight/bias; the head is tied to wte and, as
 *    save_pretrained writes it, not stored (no lm_head.weight). fp32.
 *  - "hf-mlp": layers.{i}.weight [out, in] (torch.nn.Linear's layout) and
 *    layers.{i}.bias, i from 0, with a config.json of model_type
 *    "larch-mlp" (in_features, hidden, out_features, activation).
 * The safetensors metadata is {"format": "pt"} (what transformers expects).
 *
 * Import (init.hf): the same directory, or a GPT2LMHeadModel's from
 * save_pretrained (names with or without "transformer.", F32, F16 or BF16,
 * wpe with at least the spec's seq rows, an lm_head.weight only when equal
 * to wte), into a model built for a spec whose dimensions config.json must
 * match. Both files are opened with trn_input_open under the run's input
 * policy; messages name the field "init.hf", the file and what differs.
 */
#ifndef LARCH_TRAINER_EXPORT_HF_H
#define LARCH_TRAINER_EXPORT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model.h"
#include "spec/input.h"
#include "spec/spec.h"

/* Exports the checkpoint at ckpt_path in format ("hf-gpt2" or "hf-mlp")
 * into out_dir (created if missing; existing files of the same names are
 * replaced atomically). spec_path NULL: the spec.json of the checkpoint's
 * job dir (CKPT/../../spec.json); the spec's hash must be the checkpoint's.
 * 0, or -1 with err set. */
int trn_export_hf(const char *ckpt_path, const char *spec_path, const char *format,
                  const char *out_dir, struct trn_err *err);

/* Loads the directory dir (init.hf) into m, built for spec: config.json
 * checked against spec and m, every parameter from model.safetensors.
 * inputs borrowed (NULL confines nothing). 0, or -1 with err set. */
int trn_hf_load(struct trn_model *m, const struct trn_spec *spec, const char *dir,
                const struct trn_input_policy *inputs, struct trn_err *err);

/* What the probe checks of init.hf (probe.h): config.json against spec and
 * the model's sizes, a and b (gpt: its vocabulary; mlp: the data's input
 * features and classes), and model.safetensors's header. 0, or -1. */
int trn_hf_check(const struct trn_spec *spec, const char *dir, long a, long b,
                 const struct trn_input_policy *inputs, struct trn_err *err);

/* ---- shared by export_hf.c and init_hf.c, not for other callers ---- */

struct trn_ckpt;

/* layer_norm_epsilon in config.json: KERN_LAYERNORM_EPS (1e-5f, kernels/layernorm.h)
 * as transformers writes it */
#define TRN_HF_LN_EPS 1e-5

/* The Hugging Face name of larch parameter name of a model of type (for
 * GPT-2 without "transformer."), into out, and whether its 2-D layout is
 * transposed there; -1 when the name is not one of the model's. */
int trn_hf_name(enum trn_model_type type, const char *name, char *out, size_t len,
                int *transpose);

/* A tensor of an open safetensors file as its (checked) header says; data
 * points into the file's mapping (borrowed, not aligned beyond 1). */
struct trn_hf_tensor {
	const char *dtype;
	int ndim;
	long shape[4];
	long numel;
	const uint8_t *data;
};

/* 0 and t filled, or -1 when c has no tensor name or it has over 4 dims. */
int trn_hf_tensor(const struct trn_ckpt *c, const char *name, struct trn_hf_tensor *t);
/* "[a, b]" */
void trn_hf_shape_text(char *buf, size_t len, int ndim, const long *shape);
/* dst[c][r] = src[r][c] for src [rows, cols] */
void trn_hf_transpose(float *dst, const float *src, long rows, long cols);

#endif
