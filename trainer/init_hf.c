/* trainer/init_hf.c - init.hf: a Hugging Face directory into a model (see
 * export_hf.h). config.json is checked against the spec first, then every
 * parameter of the model's table is read by its Hugging Face name
 * (trn_hf_name), converted to fp32 and transposed where the layouts differ.
 */
#include "export_hf.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "kernels/precision.h"

#define CONFIG_MAX (1 << 20)            /* a config.json larger than this is not one */

/* config.json of dir under inputs, a new reference, or NULL with err. */
static json_t *read_config(const char *path, const struct trn_input_policy *inputs,
                           struct trn_err *err)
{
	int fd = trn_input_open(path, inputs, "init.hf", err);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size > CONFIG_MAX) {
		close(fd);
		trn_err_set(err, "init.hf: %s: larger than %d KiB, not a config.json", path,
		            CONFIG_MAX >> 10);
		return NULL;
	}
	json_error_t jerr;
	char why[JSON_ERROR_TEXT_LENGTH];
	json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
	close(fd);
	if (!j) {
		trn_err_set(err, "init.hf: %s: not valid JSON: %s (line %d)", path,
		            trn_json_error_text(&jerr, why, sizeof why), jerr.line);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		trn_err_set(err, "init.hf: %s: not a JSON object", path);
		return NULL;
	}
	return j;
}

/* config key as an integer equal to want (what names the spec's side). */
static int want_int(const json_t *cfg, const char *path, const char *key, long want,
                    const char *what, struct trn_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!json_is_integer(v))
		return trn_err_set(err, "init.hf: %s: %s is missing or not an integer", path, key);
	if (json_integer_value(v) != want)
		return trn_err_set(err, "init.hf: %s: %s is %lld, but %s is %ld", path, key,
		                   (long long)json_integer_value(v), what, want);
	return 0;
}

/* an optional boolean of config that must be want when present */
static int want_bool(const json_t *cfg, const char *path, const char *key, int want,
                     const char *why, struct trn_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v) || json_is_true(v) != want)
		return trn_err_set(err, "init.hf: %s: %s must be %s: %s", path, key,
		                   want ? "true" : "false", why);
	return 0;
}

/* a string of config that, when present (or always, with required), is one of ok */
static int want_string(const json_t *cfg, const char *path, const char *key, int required,
                       const char *const *ok, const char *why, struct trn_err *err)
{
	json_t *v = json_object_get(cfg, key);
	if (!v && !required)
		return 0;
	for (int i = 0; json_is_string(v) && ok[i]; i++)
		if (strcmp(json_string_value(v), ok[i]) == 0)
			return 0;
	return trn_err_set(err, "init.hf: %s: %s must be \"%s\": %s", path, key, ok[0], why);
}

static int check_gpt_config(const json_t *cfg, const char *path, const struct trn_spec *s,
                            long V, struct trn_err *err)
{
	static const char *const gpt2[] = { "gpt2", NULL };
	static const char *const gelu[] = { "gelu_new", "gelu_pytorch_tanh", NULL };
	if (want_string(cfg, path, "model_type", 1, gpt2, "a gpt model starts from GPT-2", err) ||
	    want_int(cfg, path, "n_layer", s->model.layers, "the spec's model.layers", err) ||
	    want_int(cfg, path, "n_head", s->model.heads, "the spec's model.heads", err) ||
	    want_int(cfg, path, "n_embd", s->model.dim, "the spec's model.dim", err) ||
	    want_int(cfg, path, "vocab_size", V,
	             "the model's vocabulary (model.vocab, else the data's)", err))
		return -1;
	json_t *np = json_object_get(cfg, "n_positions");
	if (!json_is_integer(np))
		return trn_err_set(err, "init.hf: %s: n_positions is missing or not an integer", path);
	if (json_integer_value(np) < s->model.seq)
		return trn_err_set(err, "init.hf: %s: n_positions is %lld, fewer than the spec's "
		                   "model.seq %d", path, (long long)json_integer_value(np),
		                   s->model.seq);
	json_t *inner = json_object_get(cfg, "n_inner");
	if (inner && !json_is_null(inner) &&
	    want_int(cfg, path, "n_inner", 4L * s->model.dim, "4 * the spec's model.dim", err))
		return -1;
	json_t *eps = json_object_get(cfg, "layer_norm_epsilon");
	if (eps && !(json_is_number(eps) &&
	             fabs(json_number_value(eps) - TRN_HF_LN_EPS) <= 1e-12))
		return trn_err_set(err, "init.hf: %s: layer_norm_epsilon must be 1e-05, the "
		                   "epsilon of larch's LayerNorm", path);
	if (want_string(cfg, path, "activation_function", 0, gelu,
	                "larch's GPT computes GELU's tanh approximation", err) ||
	    want_bool(cfg, path, "tie_word_embeddings", 1,
	              "larch's GPT ties its head to the token embedding", err) ||
	    want_bool(cfg, path, "scale_attn_weights", 1,
	              "larch's attention scales by 1/sqrt(head size)", err) ||
	    want_bool(cfg, path, "scale_attn_by_inverse_layer_idx", 0,
	              "larch's attention does not scale by the layer", err))
		return -1;
	return 0;
}

static int check_mlp_config(const json_t *cfg, const char *path, const struct trn_spec *s,
                            long in, long out, struct trn_err *err)
{
	static const char *const mlp[] = { "larch-mlp", NULL };
	static const char *const relu[] = { "relu", NULL }, *const gelu[] = { "gelu_new", NULL };
	if (want_string(cfg, path, "model_type", 1, mlp, "an mlp starts from larch's MLP export",
	                err) ||
	    want_int(cfg, path, "in_features", in, "the data's input size", err) ||
	    want_int(cfg, path, "out_features", out, "the data's classes", err) ||
	    want_string(cfg, path, "activation", 1,
	                s->model.activation == TRN_ACT_GELU ? gelu : relu,
	                "the spec's model.activation", err))
		return -1;
	json_t *h = json_object_get(cfg, "hidden");
	int same = json_is_array(h) && json_array_size(h) == (size_t)s->model.n_hidden;
	for (int i = 0; same && i < s->model.n_hidden; i++) {
		json_t *v = json_array_get(h, (size_t)i);
		same = json_is_integer(v) && json_integer_value(v) == s->model.hidden[i];
	}
	if (!same)
		return trn_err_set(err, "init.hf: %s: hidden differs from the spec's model.hidden",
		                   path);
	return 0;
}

/* Copies tensor v (F32, F16 or BF16) into dst, converting. */
static void convert(float *dst, const struct trn_hf_tensor *v, long numel)
{
	if (strcmp(v->dtype, "F32") == 0) {
		memcpy(dst, v->data, sizeof(float) * (size_t)numel);
		return;
	}
	int bf = strcmp(v->dtype, "BF16") == 0;
	for (long i = 0; i < numel; i++) {
		uint16_t h;
		memcpy(&h, v->data + 2 * i, 2);
		dst[i] = bf ? kern_bf16_to_fp32(h) : kern_fp16_to_fp32(h);
	}
}

/* Loads HF tensor hf (prefixed or not) into larch parameter p of m. */
static int load_one(struct trn_model *m, const struct trn_param *p, const struct trn_ckpt *c,
                    const char *path, const char *hf, int tr, int prefix, float *scratch,
                    struct trn_err *err)
{
	char name[TRN_PARAM_NAME + 32];
	struct trn_hf_tensor v;
	snprintf(name, sizeof name, "%s%s", prefix ? "transformer." : "", hf);
	if (trn_hf_tensor(c, name, &v) != 0 && (!prefix || trn_hf_tensor(c, hf, &v) != 0))
		return trn_err_set(err, "init.hf: %s: tensor %s is missing", path, name);
	if (strcmp(v.dtype, "F32") != 0 && strcmp(v.dtype, "F16") != 0 &&
	    strcmp(v.dtype, "BF16") != 0)
		return trn_err_set(err, "init.hf: %s: tensor %s: dtype %s, expected F32, F16 or BF16",
		                   path, name, v.dtype);
	long want[4];
	int ndim = p->ndim;
	for (int d = 0; d < ndim; d++)
		want[d] = p->shape[d];
	if (tr)
		want[0] = p->shape[1], want[1] = p->shape[0];
	/* GPT-2's wpe may hold more positions than the spec's seq: the first rows */
	int wpe = prefix && strcmp(hf, "wpe.weight") == 0;
	int ok = v.ndim == ndim;
	for (int d = 0; ok && d < ndim; d++)
		ok = wpe && d == 0 ? v.shape[0] >= want[0] : v.shape[d] == want[d];
	if (!ok) {
		char have_s[96], want_s[96];
		trn_hf_shape_text(have_s, sizeof have_s, v.ndim, v.shape);
		trn_hf_shape_text(want_s, sizeof want_s, ndim, want);
		return trn_err_set(err, "init.hf: %s: tensor %s has shape %s, the spec's model needs "
		                   "%s%s", path, name, have_s, want_s, wpe ? " (or more rows)" : "");
	}
	float *dst = m->w + p->offset;
	if (!tr) {
		convert(dst, &v, p->numel);
		return 0;
	}
	convert(scratch, &v, p->numel);
	trn_hf_transpose(dst, scratch, want[0], want[1]);
	return 0;
}

/* dir's config.json checked against spec (a, b: check_config's) and its
 * model.safetensors opened into c; 0, or -1 with err. */
static int open_dir(struct trn_ckpt *c, const struct trn_spec *spec, const char *dir, long a,
                    long b, const struct trn_input_policy *inputs, char *st_path,
                    struct trn_err *err)
{
	char cfg_path[PATH_MAX];
	if (snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir) >= (int)sizeof cfg_path ||
	    snprintf(st_path, PATH_MAX, "%s/model.safetensors", dir) >= PATH_MAX)
		return trn_err_set(err, "init.hf: %s: path too long", dir);
	json_t *cfg = read_config(cfg_path, inputs, err);
	if (!cfg)
		return -1;
	int rc = spec->model.type == TRN_MODEL_GPT ? check_gpt_config(cfg, cfg_path, spec, a, err)
	                                           : check_mlp_config(cfg, cfg_path, spec, a, b, err);
	json_decref(cfg);
	if (rc != 0)
		return -1;
	return trn_ckpt_open_input(c, st_path, inputs, "init.hf", err);
}

int trn_hf_check(const struct trn_spec *spec, const char *dir, long a, long b,
                 const struct trn_input_policy *inputs, struct trn_err *err)
{
	struct trn_ckpt c;
	char st_path[PATH_MAX];
	if (open_dir(&c, spec, dir, a, b, inputs, st_path, err) != 0)
		return -1;
	trn_ckpt_close(&c);
	return 0;
}

int trn_hf_load(struct trn_model *m, const struct trn_spec *spec, const char *dir,
                const struct trn_input_policy *inputs, struct trn_err *err)
{
	int gpt = spec->model.type == TRN_MODEL_GPT, rc = 0;
	long a = gpt ? m->params[0].shape[0] : m->params[0].shape[1];
	long b = gpt ? 0 : m->params[m->n_params - 2].shape[0];
	struct trn_ckpt c;
	char st_path[PATH_MAX];
	if (open_dir(&c, spec, dir, a, b, inputs, st_path, err) != 0)
		return -1;
	long most = 1;
	for (int i = 0; i < m->n_params; i++)
		if (m->params[i].numel > most)
			most = m->params[i].numel;
	float *scratch = malloc(sizeof(float) * (size_t)most);
	if (!scratch) {
		trn_ckpt_close(&c);
		return trn_err_set(err, "init.hf: out of memory");
	}
	for (int i = 0; i < m->n_params && rc == 0; i++) {
		const struct trn_param *p = &m->params[i];
		char hf[TRN_PARAM_NAME + 16];
		int tr;
		if (trn_hf_name(spec->model.type, p->name, hf, sizeof hf, &tr) != 0)
			rc = trn_err_set(err, "init.hf: parameter %s has no Hugging Face name", p->name);
		else
			rc = load_one(m, p, &c, st_path, hf, tr, gpt, scratch, err);
	}
	/* an lm_head.weight is only the tied wte stored twice */
	struct trn_hf_tensor head;
	if (rc == 0 && gpt && trn_hf_tensor(&c, "lm_head.weight", &head) == 0) {
		const struct trn_param *wte = &m->params[0];
		int same = head.ndim == 2 && head.shape[0] == wte->shape[0] &&
		           head.shape[1] == wte->shape[1] &&
		           (strcmp(head.dtype, "F32") == 0 || strcmp(head.dtype, "F16") == 0 ||
		            strcmp(head.dtype, "BF16") == 0);
		if (same) {
			float *h = malloc(sizeof(float) * (size_t)wte->numel);
			if (!h) {
				rc = trn_err_set(err, "init.hf: out of memory");
			} else {
				convert(h, &head, wte->numel);
				same = memcmp(h, m->w + wte->offset, sizeof(float) * (size_t)wte->numel) == 0;
				free(h);
			}
		}
		if (rc == 0 && !same)
			rc = trn_err_set(err, "init.hf: %s: lm_head.weight differs from "
			                 "transformer.wte.weight: larch's GPT ties its head to the token "
			                 "embedding", st_path);
	}
	free(scratch);
	trn_ckpt_close(&c);
	return rc;
}
