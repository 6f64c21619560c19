/* trainer/state.c - see state.h. */
#include "state.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"

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
		return trn_err_set(err, "%s: metadata \"%s\" is not an integer (\"%s\")", path, key, v);
	return 0;
}

static void fill_entry(struct trn_ckpt_entry *e, char *name, size_t len, const char *prefix,
                       const struct trn_param *p, const float *base)
{
	snprintf(name, len, "%s%s", prefix, p->name);
	e->name = name;
	e->dtype = TRN_CKPT_F32;
	e->data = base + p->offset;
	e->ndim = p->ndim;
	for (int d = 0; d < p->ndim; d++)
		e->shape[d] = p->shape[d];
}

int trn_state_save(const char *job_dir, const struct trn_state *s, int keep, struct trn_err *err)
{
	const struct trn_model *m = s->model;
	const struct trn_optim *o = s->opt;
	int per = 1 + (s->m != NULL) + (s->v != NULL);
	int n = m->n_params * per;
	struct trn_ckpt_entry *entries = calloc((size_t)n, sizeof *entries);
	char (*names)[TRN_PARAM_NAME + 16] = calloc((size_t)n, sizeof *names);
	json_t *meta = json_object();
	int rc = -1;
	if (!entries || !names || !meta) {
		trn_err_set(err, "checkpoint: out of memory");
		goto out;
	}
	int k = 0;
	for (int i = 0; i < m->n_params; i++) {
		fill_entry(&entries[k], names[k], sizeof names[k], "param.", &m->params[i], s->w);
		k++;
		if (s->m) {
			fill_entry(&entries[k], names[k], sizeof names[k], "optim.m.", &m->params[i], s->m);
			k++;
		}
		if (s->v) {
			fill_entry(&entries[k], names[k], sizeof names[k], "optim.v.", &m->params[i], s->v);
			k++;
		}
	}
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

static int read_tensors(const struct trn_ckpt *c, const char *path, const struct trn_model *m,
                        const char *prefix, float *base, struct trn_err *err)
{
	for (int i = 0; i < m->n_params; i++) {
		const struct trn_param *p = &m->params[i];
		char name[TRN_PARAM_NAME + 16];
		snprintf(name, sizeof name, "%s%s", prefix, p->name);
		if (!trn_ckpt_has(c, name))
			return trn_err_set(err, "%s: tensor %s is missing", path, name);
		if (trn_ckpt_read(c, name, TRN_CKPT_F32, base + p->offset, p->numel, err) != 0)
			return -1;
	}
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
		trn_err_set(err, "%s: not a larch training checkpoint (format \"%s\")", path,
		            format ? format : "");
		goto out;
	}
	if (!hash || strcmp(hash, s->spec_hash) != 0) {
		trn_err_set(err, "%s: written for a different spec (spec_hash %.12s..., this spec "
		            "%.12s...): use a new job dir for a changed spec", path, hash ? hash : "none",
		            s->spec_hash);
		goto out;
	}
	if (get_meta_long(&c, path, "step", &step, err) || get_meta_long(&c, path, "epoch", &epoch, err) ||
	    get_meta_long(&c, path, "pos", &pos, err) || get_meta_long(&c, path, "t", &t, err))
		goto out;
	if (read_tensors(&c, path, s->model, "param.", s->w, err) != 0)
		goto out;
	if (s->m && read_tensors(&c, path, s->model, "optim.m.", s->m, err) != 0)
		goto out;
	if (s->v && read_tensors(&c, path, s->model, "optim.v.", s->v, err) != 0)
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
	s->opt->t = t;
	s->step = step;
	trn_loader_seek(s->loader, epoch, pos);
	rc = 0;
out:
	trn_ckpt_close(&c);
	return rc;
}

int trn_params_load(struct trn_model *m, const char *path, struct trn_err *err)
{
	struct trn_ckpt c;
	if (trn_ckpt_open(&c, path, err) != 0)
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
