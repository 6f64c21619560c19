/* trainer/state.c - see state.h. */
#include "state.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "kernels/quant8.h"

#define STATE_FORMAT "larch-ckpt-1"

static void set_meta_long(json_t *meta, const char *key, long long v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", v);
	json_object_set_new(meta, key, json_string(buf));
}

static int get_meta_long(const struct trn_ckpt *c, const char *path, const char *key,
                         long long *out, struct trn_err *err)
{
	const char *v = trn_ckpt_meta(c, key);
	char *end;
	if (!v || !*v)
		return trn_err_set(err, "%s: metadata \"%s\" is missing", path, key);
	errno = 0;
	*out = strtoll(v, &end, 10);
	if (errno || *end)
		return trn_err_set(err, "%s: metadata \"%s\" is not an integer", path, key);
	return 0;
}

/* prefix<name>: data in p's shape, or with nblk > 0 p's block scales. */
static void fill_entry(struct trn_ckpt_entry *e, char *name, size_t len, const char *prefix,
                       const struct trn_param *p, enum trn_ckpt_dtype dtype, const void *data,
                       long nblk)
{
	snprintf(name, len, "%s%s", prefix, p->name);
	e->name = name;
	e->dtype = dtype;
	e->data = data;
	e->ndim = nblk ? 1 : p->ndim;
	e->shape[0] = nblk;
	for (int d = 0; !nblk && d < p->ndim; d++)
		e->shape[d] = p->shape[d];
}

/* "int8-dynamic-2048" for int8 state (code map and block), else "". */
static void state_code(const struct trn_optim *o, char *buf, size_t len)
{
	buf[0] = '\0';
	if (o->q8)
		snprintf(buf, len, "int8-%s-%ld", KERN_Q8_MAP_NAME, KERN_Q8_BLOCK);
}

int trn_state_save(const char *job_dir, const struct trn_state *s, int keep, struct trn_err *err)
{
	const struct trn_model *m = s->model;
	const struct trn_optim *o = s->opt;
	const struct trn_optim_state *os = s->os;
	const long *first = o->q8 ? o->q8->first : NULL;
	int n = m->n_params * 5;
	struct trn_ckpt_entry *entries = calloc((size_t)n, sizeof *entries);
	char (*names)[TRN_PARAM_NAME + 16] = calloc((size_t)n, sizeof *names);
	json_t *meta = json_object();
	int rc = -1;
	if (!entries || !names || !meta) {
		trn_err_set(err, "checkpoint: out of memory");
		goto out;
	}
	int k = 0;
#define ENTRY(prefix, dtype, data, nblk) \
	(fill_entry(&entries[k], names[k], sizeof names[k], prefix, p, dtype, data, nblk), k++)
	for (int i = 0; i < m->n_params; i++) {
		const struct trn_param *p = &m->params[i];
		long b0 = first ? first[i] : 0, nb = first ? first[i + 1] - b0 : 0;
		ENTRY("param.", TRN_CKPT_F32, s->w + p->offset, 0);
		if (os && os->m)
			ENTRY("optim.m.", TRN_CKPT_F32, os->m + p->offset, 0);
		if (os && os->mq) {
			ENTRY("optim.m.", TRN_CKPT_I8, os->mq + p->offset, 0);
			ENTRY("optim.m_scale.", TRN_CKPT_F32, os->ms + b0, nb);
		}
		if (os && os->v)
			ENTRY("optim.v.", TRN_CKPT_F32, os->v + p->offset, 0);
		if (os && os->vq) {
			ENTRY("optim.v.", TRN_CKPT_U8, os->vq + p->offset, 0);
			ENTRY("optim.v_scale.", TRN_CKPT_F32, os->vs + b0, nb);
		}
	}
#undef ENTRY
	n = k;
	json_object_set_new(meta, "format", json_string(STATE_FORMAT));
	set_meta_long(meta, "step", s->step);
	set_meta_long(meta, "epoch", s->loader->epoch);
	set_meta_long(meta, "pos", s->loader->pos);
	set_meta_long(meta, "t", o->t);
	char seed[32];
	snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
	json_object_set_new(meta, "seed", json_string(seed));
	json_object_set_new(meta, "optimizer", json_string(trn_opt_name(o->cfg.type)));
	json_object_set_new(meta, "spec_hash", json_string(s->spec_hash));
	set_meta_long(meta, "ranks", s->ranks);
	char code[64];
	state_code(o, code, sizeof code);
	if (code[0])
		json_object_set_new(meta, "optim_state", json_string(code));
	if (s->ls && s->ls->mode != TRN_LOSS_SCALE_NONE) {
		char scale[40];
		snprintf(scale, sizeof scale, "%.17g", s->ls->scale);
		json_object_set_new(meta, "loss_scale", json_string(scale));
		set_meta_long(meta, "loss_scale_clean_steps", s->ls->clean_steps);
		set_meta_long(meta, "skipped_steps", s->ls->skipped);
	}

	char dir[4200], path[4200];
	snprintf(dir, sizeof dir, "%s/checkpoints", job_dir);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		trn_err_set(err, "%s: %s", dir, strerror(errno));
		goto out;
	}
	trn_ckpt_path(path, sizeof path, job_dir, s->step);
	if (trn_ckpt_write(path, entries, n, meta, NULL, err) != 0)
		goto out;
	rc = trn_ckpt_prune(job_dir, keep, err);
out:
	json_decref(meta);
	free(entries);
	free(names);
	return rc;
}

/* prefix<name> of every parameter into base, elements of size bytes, at
 * the parameter's offset; or with first, its block scales at first[i]. */
static int read_tensors(const struct trn_ckpt *c, const char *path, const struct trn_model *m,
                        const char *prefix, enum trn_ckpt_dtype dtype, void *base, size_t size,
                        const long *first, struct trn_err *err)
{
	for (int i = 0; i < m->n_params; i++) {
		const struct trn_param *p = &m->params[i];
		char name[TRN_PARAM_NAME + 16];
		long at = first ? first[i] : p->offset, n = first ? first[i + 1] - first[i] : p->numel;
		snprintf(name, sizeof name, "%s%s", prefix, p->name);
		if (!trn_ckpt_has(c, name))
			return trn_err_set(err, "%s: tensor %s is missing", path, name);
		if (trn_ckpt_read(c, name, dtype, (char *)base + (size_t)at * size, n, err) != 0)
			return -1;
	}
	return 0;
}

static int read_state(const struct trn_ckpt *c, const char *path, const struct trn_state *s,
                      struct trn_err *err)
{
	const struct trn_model *m = s->model;
	struct trn_optim_state *os = s->os;
	const long *first = s->opt->q8 ? s->opt->q8->first : NULL;
	char want[64];
	const char *have = trn_ckpt_meta(c, "optim_state");
	state_code(s->opt, want, sizeof want);
	/* (the file is a larch checkpoint of this spec: its format and hash matched) */
	if (strcmp(have ? have : "", want) != 0)
		return trn_err_set(err, "%s: optimizer state written as \"%.32s\", this run keeps "
		                   "\"%s\"", path, have ? have : "fp32", want[0] ? want : "fp32");
	if (!os)
		return 0;
	if ((os->m && read_tensors(c, path, m, "optim.m.", TRN_CKPT_F32, os->m, 4, NULL, err)) ||
	    (os->v && read_tensors(c, path, m, "optim.v.", TRN_CKPT_F32, os->v, 4, NULL, err)) ||
	    (os->mq && read_tensors(c, path, m, "optim.m.", TRN_CKPT_I8, os->mq, 1, NULL, err)) ||
	    (os->mq && read_tensors(c, path, m, "optim.m_scale.", TRN_CKPT_F32, os->ms, 4, first,
	                            err)) ||
	    (os->vq && read_tensors(c, path, m, "optim.v.", TRN_CKPT_U8, os->vq, 1, NULL, err)) ||
	    (os->vq && read_tensors(c, path, m, "optim.v_scale.", TRN_CKPT_F32, os->vs, 4, first,
	                            err)))
		return -1;
	return 0;
}

int trn_state_load(const char *path, struct trn_state *s, struct trn_err *err)
{
	struct trn_ckpt c;
	if (trn_ckpt_open(&c, path, err) != 0)
		return -1;
	int rc = -1;
	const char *format = trn_ckpt_meta(&c, "format");
	const char *hash = trn_ckpt_meta(&c, "spec_hash");
	long long step, epoch, pos, t;
	if (!format || strcmp(format, STATE_FORMAT) != 0) {
		trn_err_set(err, "%s: not a larch training checkpoint (its metadata has no format "
		            "\"" STATE_FORMAT "\")", path);
		goto out;
	}
	if (!hash || strcmp(hash, s->spec_hash) != 0) {
		trn_err_set(err, "%s: written for a different spec (this spec's hash is %.12s...): "
		            "use a new job dir for a changed spec", path, s->spec_hash);
		goto out;
	}
	if (get_meta_long(&c, path, "step", &step, err) || get_meta_long(&c, path, "epoch", &epoch, err) ||
	    get_meta_long(&c, path, "pos", &pos, err) || get_meta_long(&c, path, "t", &t, err))
		goto out;
	if (read_tensors(&c, path, s->model, "param.", TRN_CKPT_F32, s->w, 4, NULL, err) != 0 ||
	    read_state(&c, path, s, err) != 0)
		goto out;
	if (s->ls && s->ls->mode != TRN_LOSS_SCALE_NONE && trn_ckpt_meta(&c, "loss_scale")) {
		long long clean, skipped;
		char *end;
		double scale = strtod(trn_ckpt_meta(&c, "loss_scale"), &end);
		if (*end || !(scale > 0)) {
			trn_err_set(err, "%s: metadata \"loss_scale\" is not a positive number", path);
			goto out;
		}
		if (get_meta_long(&c, path, "loss_scale_clean_steps", &clean, err) ||
		    get_meta_long(&c, path, "skipped_steps", &skipped, err))
			goto out;
		s->ls->scale = scale;
		s->ls->clean_steps = clean;
		s->ls->skipped = skipped;
	}
	s->ranks = 0;
	if (trn_ckpt_meta(&c, "ranks")) {
		long long ranks;
		if (get_meta_long(&c, path, "ranks", &ranks, err))
			goto out;
		s->ranks = (int)ranks;
	}
	s->opt->t = t;
	s->step = step;
	trn_loader_seek(s->loader, epoch, pos);
	rc = 0;
out:
	trn_ckpt_close(&c);
	return rc;
}

int trn_params_load(struct trn_model *m, const char *path, const struct trn_input_policy *inputs,
                    struct trn_err *err)
{
	struct trn_ckpt c;
	if (trn_ckpt_open_input(&c, path, inputs, "init.from", err) != 0)
		return -1;
	int rc = 0;
	for (int i = 0; i < m->n_params && rc == 0; i++) {
		const struct trn_param *p = &m->params[i];
		char name[TRN_PARAM_NAME + 16];
		snprintf(name, sizeof name, "param.%s", p->name);
		const char *use = trn_ckpt_has(&c, name) ? name : p->name;
		if (!trn_ckpt_has(&c, use))
			rc = trn_err_set(err, "init.from: %s: tensor %s (or param.%s) is missing", path,
			                 p->name, p->name);
		else
			rc = trn_ckpt_read(&c, use, TRN_CKPT_F32, m->w + p->offset, p->numel, err);
	}
	trn_ckpt_close(&c);
	return rc;
}
