/* trainer/export_hf.c - see export_hf.h: the export, and the name map and
 * tensor helpers init_hf.c shares.
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
#include "kernels/precision.h"


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
int trn_hf_name(enum trn_model_type type, const char *name, char *out, size_t len,
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


/* 0 and v filled, or -1 when c has no tensor name or it has over 4 dims. */
int trn_hf_tensor(const struct trn_ckpt *c, const char *name, struct trn_hf_tensor *v)
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

void trn_hf_shape_text(char *buf, size_t len, int ndim, const long *shape)
{
	size_t at = (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < ndim && at < len; d++)
		at += (size_t)snprintf(buf + at, len - at, "%s%ld", d ? ", " : "", shape[d]);
	if (at < len)
		snprintf(buf + at, len - at, "]");
}

/* dst[c][r] = src[r][c] for src [rows, cols] */
void trn_hf_transpose(float *dst, const float *src, long rows, long cols)
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
	                      "layer_norm_epsilon", TRN_HF_LN_EPS,
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
                      const char *name, const struct trn_hf_tensor *v, struct dims *d,
                      struct trn_err *err)
{
	char hf[TRN_PARAM_NAME + 16];
	int tr;
	if (trn_hf_name(s->model.type, name, hf, sizeof hf, &tr) != 0)
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
		trn_hf_transpose(t, src, v->shape[0], v->shape[1]);
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

/* The checkpoint is a larch checkpoint written by a run of spec. */
static int check_origin(struct trn_ckpt *c, const char *ckpt_path, const struct trn_spec *spec,
                        const char *spec_path, struct trn_err *err)
{
	const char *fmt = trn_ckpt_meta(c, "format"), *hash = trn_ckpt_meta(c, "spec_hash");
	char want_hash[65];
	trn_spec_hash(spec, want_hash);
	if (!fmt || strcmp(fmt, "larch-ckpt-1") != 0)
		return trn_err_set(err, "%s: not a larch checkpoint (metadata format is not "
		                   "larch-ckpt-1)", ckpt_path);
	if (!hash || strcmp(hash, want_hash) != 0)
		return trn_err_set(err, "%s: was not written by a run of %s (the spec's hash differs); "
		                   "name the job's spec.json with --spec", ckpt_path, spec_path);
	return 0;
}

/* Every "param.*" tensor of the checkpoint into x under its HF name, checked
 * against the spec's model; *config: the HF config.json for it. */
static int collect_params(struct export *x, json_t **config, struct trn_ckpt *c,
                          const char *ckpt_path, const struct trn_spec *spec,
                          const char *spec_path, struct trn_err *err)
{
	struct dims d = { 0 };
	const char *key;
	json_t *v;
	json_object_foreach(c->header, key, v) {
		struct trn_hf_tensor tv;
		if (strncmp(key, "param.", 6) != 0)
			continue;
		if (trn_hf_tensor(c, key, &tv) != 0)
			return trn_err_set(err, "%s: tensor %s: more than 4 dimensions", ckpt_path, key);
		if (export_add(x, spec, ckpt_path, key + 6, &tv, &d, err) != 0)
			return -1;
	}
	if (spec->model.type == TRN_MODEL_GPT) {
		long need = 4 + d.L * (long)TRN_GPT_BLOCK_PARAMS;
		if (d.C != spec->model.dim || d.L != spec->model.layers || x->n != need || !d.V || !d.T)
			return trn_err_set(err, "%s: its parameters are not those of %s's model (%d "
			                   "layers, dim %d)", ckpt_path, spec_path, spec->model.layers,
			                   spec->model.dim);
		*config = gpt_config(spec, &d);
	} else {
		if (d.layers != spec->model.n_hidden + 1 || x->n != 2 * d.layers)
			return trn_err_set(err, "%s: its parameters are not those of %s's model (%d "
			                   "hidden layers)", ckpt_path, spec_path, spec->model.n_hidden);
		*config = mlp_config(spec, &d);
	}
	return *config ? 0 : trn_err_set(err, "export: out of memory");
}

/* out_dir (made if missing) gets model.safetensors and config.json. */
static int write_dir(const char *out_dir, const struct export *x, const json_t *config,
                     struct trn_err *err)
{
	if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
		return trn_err_set(err, "%s: mkdir: %s", out_dir, strerror(errno));
	struct stat st;
	if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return trn_err_set(err, "%s: not a directory", out_dir);
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/model.safetensors", out_dir) >= (int)sizeof path)
		return trn_err_set(err, "%s: path too long", out_dir);
	json_t *meta = json_pack("{s:s}", "format", "pt");
	if (!meta)
		return trn_err_set(err, "export: out of memory");
	int w = trn_ckpt_write(path, x->e, x->n, meta, NULL, err);
	json_decref(meta);
	if (w != 0)
		return -1;
	snprintf(path, sizeof path, "%s/config.json", out_dir);
	return write_json(path, config, err);
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
	json_t *config = NULL;
	if (spec.model.type != want)
		trn_err_set(err, "--format %s: %s holds a%s model (use --format %s)", format, spec_path,
		            spec.model.type == TRN_MODEL_GPT ? " gpt" : "n mlp",
		            spec.model.type == TRN_MODEL_GPT ? "hf-gpt2" : "hf-mlp");
	else if (trn_ckpt_open(&c, ckpt_path, err) == 0 &&
	         check_origin(&c, ckpt_path, &spec, spec_path, err) == 0 &&
	         collect_params(&x, &config, &c, ckpt_path, &spec, spec_path, err) == 0 &&
	         write_dir(out_dir, &x, config, err) == 0)
		rc = 0;
	json_decref(config);
	export_release(&x);
	if (c.map)
		trn_ckpt_close(&c);
	trn_spec_release(&spec);
	return rc;
}
