/* trainer/export_hf.c - see export_hf.h.
 *
 * Both directions go through one name map: a larch parameter name (the
 * model's table, model_gpt.c / model_mlp.c) to its Hugging Face name and
 * whether its 2-D layout is transposed there (GPT-2's Conv1D keeps
 * [in, out]; larch and nn.Linear keep [out, in]). Export walks the
 * checkpoint's param.* tensors in table order; import walks the model's
 * table. Tensors that need no transpose are written straight from the
 * checkpoint's mapping.
 */
#include "export_hf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "kernels/layernorm.h"
#include "kernels/precision.h"

#define CONFIG_MAX (1 << 20)            /* a config.json larger than this is not one */
/* KERN_LAYERNORM_EPS (a float) as config.json writes it: transformers' 1e-05 */
#define LN_EPS 1e-5
_Static_assert(KERN_LAYERNORM_EPS == 1e-5f, "LayerNorm's epsilon");

/* GPT-2's block parameters: larch's name, transformers' name, transposed */
static const struct {
	const char *larch, *hf;
	int transpose;
} gpt_block_map[] = {
	{ "norm1.weight", "ln_1.weight", 0 },           { "norm1.bias", "ln_1.bias", 0 },
	{ "attn.qkv.weight", "attn.c_attn.weight", 1 }, { "attn.qkv.bias", "attn.c_attn.bias", 0 },
	{ "attn.proj.weight", "attn.c_proj.weight", 1 }, { "attn.proj.bias", "attn.c_proj.bias", 0 },
	{ "norm2.weight", "ln_2.weight", 0 },           { "norm2.bias", "ln_2.bias", 0 },
	{ "mlp.fc.weight", "mlp.c_fc.weight", 1 },      { "mlp.fc.bias", "mlp.c_fc.bias", 0 },
	{ "mlp.proj.weight", "mlp.c_proj.weight", 1 },  { "mlp.proj.bias", "mlp.c_proj.bias", 0 },
};

/* The Hugging Face name of larch parameter name (without GPT-2's
 * "transformer." prefix) and whether it is transposed there; -1 when the
 * name is not one of the model's. */
static int hf_name(enum trn_model_type type, const char *name, char *out, size_t len,
                   int *transpose)
{
	int i, n = 0;
	*transpose = 0;
	if (type == TRN_MODEL_MLP) {
		char kind[8];
		if (sscanf(name, "fc%d.%7s%n", &i, kind, &n) != 2 || name[n] || i < 1 ||
		    (strcmp(kind, "weight") != 0 && strcmp(kind, "bias") != 0))
			return -1;
		snprintf(out, len, "layers.%d.%s", i - 1, kind);
		return 0;
	}
	if (strcmp(name, "wte.weight") == 0 || strcmp(name, "wpe.weight") == 0) {
		snprintf(out, len, "%s", name);
		return 0;
	}
	if (strncmp(name, "norm_f.", 7) == 0) {
		snprintf(out, len, "ln_f.%s", name + 7);
		return 0;
	}
	if (sscanf(name, "blocks.%d.%n", &i, &n) != 1 || n == 0)
		return -1;
	for (size_t k = 0; k < sizeof gpt_block_map / sizeof gpt_block_map[0]; k++)
		if (strcmp(name + n, gpt_block_map[k].larch) == 0) {
			snprintf(out, len, "h.%d.%s", i, gpt_block_map[k].hf);
			*transpose = gpt_block_map[k].transpose;
			return 0;
		}
	return -1;
}

/* A tensor of an open safetensors file, as its (checked) header says. */
struct tview {
	const char *dtype;
	int ndim;
	long shape[4];
	long numel;
	const uint8_t *data;
};

/* 0 and v filled, or -1 when c has no tensor name or it has over 4 dims. */
static int tensor_view(const struct trn_ckpt *c, const char *name, struct tview *v)
{
	if (!trn_ckpt_has(c, name))
		return -1;
	json_t *t = json_object_get(c->header, name), *shape = json_object_get(t, "shape");
	if (json_array_size(shape) > 4)
		return -1;
	v->dtype = json_string_value(json_object_get(t, "dtype"));
	v->ndim = (int)json_array_size(shape);
	v->numel = 1;
	for (int d = 0; d < v->ndim; d++) {
		v->shape[d] = (long)json_integer_value(json_array_get(shape, (size_t)d));
		v->numel *= v->shape[d];
	}
	v->data = c->data + json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
	return 0;
}

static void shape_text(char *buf, size_t len, int ndim, const long *shape)
{
	size_t at = (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < ndim && at < len; d++)
		at += (size_t)snprintf(buf + at, len - at, "%s%ld", d ? ", " : "", shape[d]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
}

/* dst[c][r] = src[r][c] for src [rows, cols] */
static void transpose(float *dst, const float *src, long rows, long cols)
{
	for (long r = 0; r < rows; r++)
		for (long c = 0; c < cols; c++)
			dst[c * rows + r] = src[r * cols + c];
}

/* Writes json to path through a temporary, fsync'd and renamed into place. */
static int write_json(const char *path, const json_t *json, struct trn_err *err)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
		return trn_err_set(err, "%s: path too long", path);
	char *text = json_dumps(json, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
	if (!text)
		return trn_err_set(err, "%s: out of memory", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(text);
		return trn_err_set(err, "%s: open: %s", tmp, strerror(errno));
	}
	size_t len = strlen(text), done = 0;
	int rc = 0;
	while (done < len && rc == 0) {
		ssize_t k = write(fd, text + done, len - done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			rc = trn_err_set(err, "%s: write: %s", tmp, strerror(errno));
		else
			done += (size_t)k;
	}
	if (rc == 0 && (write(fd, "\n", 1) != 1 || fsync(fd) != 0))
		rc = trn_err_set(err, "%s: write: %s", tmp, strerror(errno));
	if (close(fd) != 0 && rc == 0)
		rc = trn_err_set(err, "%s: close: %s", tmp, strerror(errno));
	if (rc == 0 && rename(tmp, path) != 0)
		rc = trn_err_set(err, "%s: rename to %s: %s", tmp, path, strerror(errno));
	if (rc != 0)
		unlink(tmp);
	free(text);
	return rc;
}

/* ---- export ----------------------------------------------------------------- */

/* What the export writes: config.json's numbers, gathered from the tensors. */
struct dims {
	long V, T, C, L;                /* gpt */
	long in, out;                   /* mlp: the first layer's inputs, the last's outputs */
	int layers;                     /* mlp: fc layers seen */
};

static json_t *gpt_config(const struct trn_spec *s, const struct dims *d)
{
	json_t *j = json_pack("{s:s, s:[s], s:I, s:I, s:I, s:I, s:I, s:I, s:n, s:s, s:f, s:f, s:f, "
	                      "s:f, s:f, s:b, s:b, s:b, s:b, s:s}",
	                      "model_type", "gpt2", "architectures", "GPT2LMHeadModel",
	                      "vocab_size", (json_int_t)d->V, "n_positions", (json_int_t)d->T,
	                      "n_ctx", (json_int_t)d->T, "n_embd", (json_int_t)d->C,
	                      "n_layer", (json_int_t)d->L, "n_head", (json_int_t)s->model.heads,
	                      "n_inner", "activation_function", "gelu_new",
	                      "layer_norm_epsilon", LN_EPS,
	                      "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
	                      "initializer_range", 0.02, "scale_attn_weights", 1,
	                      "scale_attn_by_inverse_layer_idx", 0, "reorder_and_upcast_attn", 0,
	                      "tie_word_embeddings", 1, "torch_dtype", "float32");
	if (j && d->V == 50257) {       /* GPT-2's tokenizer: <|endoftext|> */
		json_object_set_new(j, "bos_token_id", json_integer(50256));
		json_object_set_new(j, "eos_token_id", json_integer(50256));
	}
	return j;
}

static json_t *mlp_config(const struct trn_spec *s, const struct dims *d)
{
	json_t *hidden = json_array();
	for (int i = 0; hidden && i < s->model.n_hidden; i++)
		json_array_append_new(hidden, json_integer(s->model.hidden[i]));
	return json_pack("{s:s, s:I, s:o, s:I, s:s, s:s}", "model_type", "larch-mlp",
	                 "in_features", (json_int_t)d->in, "hidden", hidden,
	                 "out_features", (json_int_t)d->out, "activation",
	                 s->model.activation == TRN_ACT_GELU ? "gelu_new" : "relu",
	                 "torch_dtype", "float32");
}

/* The entries of the export: names and shapes in out's own storage. */
struct export {
	struct trn_ckpt_entry *e;
	char (*names)[TRN_PARAM_NAME + 32];
	float **bufs;                   /* transposed copies, owned */
	int n, cap;
};

static void export_release(struct export *x)
{
	for (int i = 0; i < x->n; i++)
		free(x->bufs[i]);
	free(x->e);
	free(x->names);
	free(x->bufs);
}

/* Adds checkpoint tensor "param.<name>" (v) under its HF name. */
static int export_add(struct export *x, const struct trn_spec *s, const char *ckpt,
                      const char *name, const struct tview *v, struct dims *d,
                      struct trn_err *err)
{
	char hf[TRN_PARAM_NAME + 16];
	int tr;
	if (hf_name(s->model.type, name, hf, sizeof hf, &tr) != 0)
		return trn_err_set(err, "%s: tensor param.%s is not a parameter of a %s model", ckpt,
		                   name, s->model.type == TRN_MODEL_GPT ? "gpt" : "mlp");
	if (strcmp(v->dtype, "F32") != 0)
		return trn_err_set(err, "%s: tensor param.%s: dtype %s, expected F32", ckpt, name,
		                   v->dtype);
	if (tr && v->ndim != 2)
		return trn_err_set(err, "%s: tensor param.%s: expected 2 dimensions", ckpt, name);
	if (x->n == x->cap) {
		int cap = x->cap ? 2 * x->cap : 64;
		void *e = realloc(x->e, sizeof *x->e * (size_t)cap);
		if (e)
			x->e = e;
		void *nm = realloc(x->names, sizeof *x->names * (size_t)cap);
		if (nm)
			x->names = nm;
		void *b = realloc(x->bufs, sizeof *x->bufs * (size_t)cap);
		if (b)
			x->bufs = b;
		if (!e || !nm || !b)
			return trn_err_set(err, "export: out of memory");
		x->cap = cap;
	}
	struct trn_ckpt_entry *e = &x->e[x->n];
	snprintf(x->names[x->n], sizeof x->names[0], "%s%s",
	         s->model.type == TRN_MODEL_GPT ? "transformer." : "", hf);
	memset(e, 0, sizeof *e);
	e->name = x->names[x->n];
	e->dtype = TRN_CKPT_F32;
	e->ndim = v->ndim;
	memcpy(e->shape, v->shape, sizeof e->shape);
	e->data = v->data;
	x->bufs[x->n] = NULL;
	if (tr) {
		float *t = malloc(sizeof(float) * (size_t)(v->numel ? v->numel : 1));
		if (!t)
			return trn_err_set(err, "export: out of memory for %s", name);
		/* the mapping may not be float-aligned past its 8-aligned data start */
		float *src = malloc(sizeof(float) * (size_t)(v->numel ? v->numel : 1));
		if (!src) {
			free(t);
			return trn_err_set(err, "export: out of memory for %s", name);
		}
		memcpy(src, v->data, sizeof(float) * (size_t)v->numel);
		transpose(t, src, v->shape[0], v->shape[1]);
		free(src);
		x->bufs[x->n] = t;
		e->data = t;
		e->shape[0] = v->shape[1];
		e->shape[1] = v->shape[0];
	}
	x->n++;

	if (s->model.type == TRN_MODEL_GPT) {
		int l;
		if (strcmp(name, "wte.weight") == 0 && v->ndim == 2)
			d->V = v->shape[0], d->C = v->shape[1];
		else if (strcmp(name, "wpe.weight") == 0 && v->ndim == 2)
			d->T = v->shape[0];
		else if (sscanf(name, "blocks.%d.", &l) == 1 && l + 1 > d->L)
			d->L = l + 1;
	} else {
		int l;
		if (sscanf(name, "fc%d.weight", &l) == 1 && v->ndim == 2) {
			if (l == 1)
				d->in = v->shape[1];
			d->out = v->shape[0];
			d->layers++;
		}
	}
	return 0;
}

/* "<dir of path>/../spec.json" into buf */
static void default_spec_path(char *buf, size_t len, const char *ckpt)
{
	const char *slash = strrchr(ckpt, '/');
	if (!slash)
		snprintf(buf, len, "../spec.json");
	else
		snprintf(buf, len, "%.*s/../spec.json", (int)(slash - ckpt), ckpt);
}

int trn_export_hf(const char *ckpt_path, const char *spec_path, const char *format,
                  const char *out_dir, struct trn_err *err)
{
	enum trn_model_type want;
	if (strcmp(format, "hf-gpt2") == 0)
		want = TRN_MODEL_GPT;
	else if (strcmp(format, "hf-mlp") == 0)
		want = TRN_MODEL_MLP;
	else
		return trn_err_set(err, "--format: must be hf-gpt2 or hf-mlp (got \"%.64s\")", format);

	char spec_buf[PATH_MAX];
	if (!spec_path) {
		default_spec_path(spec_buf, sizeof spec_buf, ckpt_path);
		spec_path = spec_buf;
	}
	struct trn_spec spec;
	if (trn_spec_from_file(&spec, spec_path, err) != 0)
		return -1;
	int rc = -1;
	struct trn_ckpt c = { 0 };
	struct export x = { 0 };
	struct dims d = { 0 };
	json_t *config = NULL;
	if (spec.model.type != want) {
		trn_err_set(err, "--format %s: %s holds a%s model (use --format %s)", format, spec_path,
		            spec.model.type == TRN_MODEL_GPT ? " gpt" : "n mlp",
		            spec.model.type == TRN_MODEL_GPT ? "hf-gpt2" : "hf-mlp");
		goto out;
	}
	if (trn_ckpt_open(&c, ckpt_path, err) != 0)
		goto out;
	const char *fmt = trn_ckpt_meta(&c, "format"), *hash = trn_ckpt_meta(&c, "spec_hash");
	char want_hash[65];
	trn_spec_hash(&spec, want_hash);
	if (!fmt || strcmp(fmt, "larch-ckpt-1") != 0) {
		trn_err_set(err, "%s: not a larch checkpoint (metadata format is not larch-ckpt-1)",
		            ckpt_path);
		goto out;
	}
	if (!hash || strcmp(hash, want_hash) != 0) {
		trn_err_set(err, "%s: was not written by a run of %s (the spec's hash differs); name "
		            "the job's spec.json with --spec", ckpt_path, spec_path);
		goto out;
	}

	const char *key;
	json_t *v;
	json_object_foreach(c.header, key, v) {
		struct tview tv;
		if (strncmp(key, "param.", 6) != 0)
			continue;
		if (tensor_view(&c, key, &tv) != 0) {
			trn_err_set(err, "%s: tensor %s: more than 4 dimensions", ckpt_path, key);
			goto out;
		}
		if (export_add(&x, &spec, ckpt_path, key + 6, &tv, &d, err) != 0)
			goto out;
	}
	if (want == TRN_MODEL_GPT) {
		long need = 4 + d.L * (long)TRN_GPT_BLOCK_PARAMS;
		if (d.C != spec.model.dim || d.L != spec.model.layers || x.n != need || !d.V || !d.T) {
			trn_err_set(err, "%s: its parameters are not those of %s's model (%d layers, dim "
			            "%d)", ckpt_path, spec_path, spec.model.layers, spec.model.dim);
			goto out;
		}
		config = gpt_config(&spec, &d);
	} else {
		if (d.layers != spec.model.n_hidden + 1 || x.n != 2 * d.layers) {
			trn_err_set(err, "%s: its parameters are not those of %s's model (%d hidden "
			            "layers)", ckpt_path, spec_path, spec.model.n_hidden);
			goto out;
		}
		config = mlp_config(&spec, &d);
	}
	if (!config) {
		trn_err_set(err, "export: out of memory");
		goto out;
	}

	if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
		trn_err_set(err, "%s: mkdir: %s", out_dir, strerror(errno));
		goto out;
	}
	struct stat st;
	if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		trn_err_set(err, "%s: not a directory", out_dir);
		goto out;
	}
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/model.safetensors", out_dir) >= (int)sizeof path) {
		trn_err_set(err, "%s: path too long", out_dir);
		goto out;
	}
	json_t *meta = json_pack("{s:s}", "format", "pt");
	int w = meta ? trn_ckpt_write(path, x.e, x.n, meta, NULL, err) : -1;
	json_decref(meta);
	if (!meta)
		trn_err_set(err, "export: out of memory");
	if (w != 0)
		goto out;
	snprintf(path, sizeof path, "%s/config.json", out_dir);
	if (write_json(path, config, err) != 0)
		goto out;
	rc = 0;
out:
	json_decref(config);
	export_release(&x);
	if (c.map)
		trn_ckpt_close(&c);
	trn_spec_release(&spec);
	return rc;
}

/* ---- import ----------------------------------------------------------------- */

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
	             fabs(json_number_value(eps) - LN_EPS) <= 1e-12))
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
static void convert(float *dst, const struct tview *v, long numel)
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
	struct tview v;
	snprintf(name, sizeof name, "%s%s", prefix ? "transformer." : "", hf);
	if (tensor_view(c, name, &v) != 0 && (!prefix || tensor_view(c, hf, &v) != 0))
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
		shape_text(have_s, sizeof have_s, v.ndim, v.shape);
		shape_text(want_s, sizeof want_s, ndim, want);
		return trn_err_set(err, "init.hf: %s: tensor %s has shape %s, the spec's model needs "
		                   "%s%s", path, name, have_s, want_s, wpe ? " (or more rows)" : "");
	}
	float *dst = m->w + p->offset;
	if (!tr) {
		convert(dst, &v, p->numel);
		return 0;
	}
	convert(scratch, &v, p->numel);
	transpose(dst, scratch, want[0], want[1]);
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
		if (hf_name(spec->model.type, p->name, hf, sizeof hf, &tr) != 0)
			rc = trn_err_set(err, "init.hf: parameter %s has no Hugging Face name", p->name);
		else
			rc = load_one(m, p, &c, st_path, hf, tr, gpt, scratch, err);
	}
	/* an lm_head.weight is only the tied wte stored twice */
	struct tview head;
	if (rc == 0 && gpt && tensor_view(&c, "lm_head.weight", &head) == 0) {
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
