/* trainer/spec/spec.c - see spec.h. The sections of a spec, each read as a table
 * of fields through spec_fields.h; data and resources are in spec_data.c. */
#include "spec.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "input.h"
#include "spec_fields.h"

#define BATCH_MAX (1LL << 24)
#define DIM_MAX 65536
#define VOCAB_MAX (1LL << 20)
#define SPEC_FILE_MAX (1L << 20)

static const struct trn_range LR = { 0, 100, 1, 0 };
static const struct trn_range NONNEG = { 0, INFINITY, 0, 0 };
static const struct trn_range UNIT_OPEN = { 0, 1, 0, 1 };      /* [0, 1) */
static const struct trn_range UNIT_POS = { 0, 1, 1, 0 };       /* (0, 1] */
static const struct trn_range SCALE = { 0, 4294967296.0, 1, 0 };
static const struct trn_range ANY = { -INFINITY, INFINITY, 0, 0 };   /* finite */

/* ---- model ----------------------------------------------------------------- */

static const char *const model_types[] = { "mlp", "gpt", NULL };
static const char *const activations[] = { "relu", "gelu", NULL };
static const char *const mlp_keys[] = { "type", "hidden", "activation", NULL };
/* the gpt is GPT-2's block: GELU, no choice */
static const char *const gpt_keys[] = { "type", "layers", "heads", "dim", "seq", "vocab", NULL };

static int parse_hidden(struct trn_fields *f, struct trn_spec_model *m)
{
	json_t *v = json_object_get(f->in, "hidden"), *e, *out = json_array();
	char path[256];
	size_t i;
	if (trn_fields_put(f, "hidden", out) < 0)
		return -1;
	if (!v)
		return trn_fields_fail(f, "hidden", "is required");
	if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > TRN_MAX_HIDDEN)
		return json_is_array(v) ?
		       trn_fields_fail(f, "hidden", "must be an array of 1 to %d integers (got %zu "
		                       "elements)", TRN_MAX_HIDDEN, json_array_size(v)) :
		       trn_fields_fail(f, "hidden", "must be an array of 1 to %d integers (got %s)",
		                       TRN_MAX_HIDDEN, trn_json_type_name(v));
	trn_fields_path(f, "hidden", -1, path, sizeof path);
	json_array_foreach(v, i, e) {
		if (!json_is_integer(e))
			return trn_err_set(f->err, "%s[%zu]: must be an integer (got %s)", path, i,
			                   trn_json_type_name(e));
		json_int_t x = json_integer_value(e);
		if (x < 1 || x > DIM_MAX)
			return trn_err_set(f->err, "%s[%zu]: must be an integer in [1, %d] (got %lld)",
			                   path, i, DIM_MAX, (long long)x);
		m->hidden[i] = (int)x;
		if (json_array_append_new(out, json_integer(x)) != 0)
			return trn_err_set(f->err, "spec: out of memory");
	}
	m->n_hidden = (int)json_array_size(v);
	return 0;
}

static int parse_model(struct trn_fields *root, struct trn_spec_model *m)
{
	struct trn_fields f;
	int type, act = TRN_ACT_GELU;
	long long layers, heads, dim, seq, vocab;
	if (trn_fields_object(&f, root, "model", TRN_REQUIRED) < 0 ||
	    trn_fields_enum(&f, "type", model_types, TRN_REQUIRED, 0, &type) < 0)
		return -1;
	m->type = (enum trn_model_type)type;
	if (type == TRN_MODEL_MLP) {
		if (trn_fields_known(&f, mlp_keys, gpt_keys, "type \"mlp\"") < 0 ||
		    parse_hidden(&f, m) < 0 ||
		    trn_fields_enum(&f, "activation", activations, 0, TRN_ACT_RELU, &act) < 0)
			return -1;
		m->activation = (enum trn_act)act;
		return 0;
	}
	if (trn_fields_known(&f, gpt_keys, mlp_keys, "type \"gpt\"") < 0 ||
	    trn_fields_int(&f, "layers", 1, 256, TRN_REQUIRED, 0, &layers) < 0 ||
	    trn_fields_int(&f, "heads", 1, 1024, TRN_REQUIRED, 0, &heads) < 0 ||
	    trn_fields_int(&f, "dim", 1, DIM_MAX, TRN_REQUIRED, 0, &dim) < 0 ||
	    trn_fields_int(&f, "seq", 1, 65536, TRN_REQUIRED, 0, &seq) < 0 ||
	    trn_fields_int(&f, "vocab", LLONG_MIN, LLONG_MAX, 0, 0, &vocab) < 0)
		return -1;
	if (dim % heads)
		return trn_fields_fail(&f, "heads", "must divide model.dim (got %lld, %lld)", heads, dim);
	if (vocab && (vocab < 2 || vocab > VOCAB_MAX))
		return trn_fields_fail(&f, "vocab", "must be 0 (from the data) or an integer in "
		                       "[2, %lld] (got %lld)", VOCAB_MAX, vocab);
	m->layers = (int)layers;
	m->heads = (int)heads;
	m->dim = (int)dim;
	m->seq = (int)seq;
	m->vocab = (int)vocab;
	m->activation = (enum trn_act)act;
	return 0;
}

/* ---- batch and parallel ------------------------------------------------------ */

/* "elastic": {"min_ranks": M}, M in [1, ranks]. Absent, it stays out of
 * the canonical spec (no default: a spec without it is not elastic). */
static int parse_elastic(struct trn_fields *parallel, struct trn_spec_parallel *p)
{
	static const char *const keys[] = { "min_ranks", NULL };
	struct trn_fields f;
	long long min;
	p->min_ranks = 0;
	if (!parallel->in || !json_object_get(parallel->in, "elastic"))
		return 0;
	if (trn_fields_object(&f, parallel, "elastic", TRN_REQUIRED) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "min_ranks", 1, 4096, TRN_REQUIRED, 0, &min) < 0)
		return -1;
	if (min > p->ranks)
		return trn_fields_fail(&f, "min_ranks", "must not exceed parallel.ranks (got %lld, %d)",
		                       min, p->ranks);
	p->min_ranks = (int)min;
	return 0;
}

static int parse_parallel(struct trn_fields *root, struct trn_spec_parallel *p)
{
	static const char *const keys[] = { "ranks", "zero_stage", "bucket_mb", "elastic", NULL };
	struct trn_fields f;
	long long ranks, zero;
	double bucket_mb;
	if (trn_fields_object(&f, root, "parallel", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "ranks", 1, 4096, 0, 1, &ranks) < 0 ||
	    trn_fields_int(&f, "zero_stage", 0, 2, 0, 0, &zero) < 0 ||
	    trn_fields_num(&f, "bucket_mb", (struct trn_range){ 0, 1024, 1, 0 }, 0, 25,
	                   &bucket_mb) < 0)
		return -1;
	p->ranks = (int)ranks;
	p->zero_stage = (int)zero;
	p->bucket_bytes = (long)(bucket_mb * 1024 * 1024);
	if (p->bucket_bytes < (long)sizeof(float))
		p->bucket_bytes = sizeof(float);
	return parse_elastic(&f, p);
}

/* Sets *has_reference: lr scaling needs the batch the base lr was tuned for. */
static int parse_batch(struct trn_fields *root, struct trn_spec *s, int *has_reference)
{
	static const char *const keys[] = { "global", "micro", "reference", NULL };
	struct trn_fields f;
	long long global, micro, ref, ranks = s->parallel.ranks;
	int has_micro;
	if (trn_fields_object(&f, root, "batch", TRN_REQUIRED) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "global", 1, BATCH_MAX, TRN_REQUIRED, 0, &global) < 0 ||
	    (has_micro = trn_fields_int(&f, "micro", 1, BATCH_MAX, 0, 0, &micro)) < 0 ||
	    (*has_reference = trn_fields_int(&f, "reference", 1, BATCH_MAX, 0, global, &ref)) < 0)
		return -1;
	if (!has_micro) {
		if (global % ranks)
			return trn_fields_fail(&f, "global", "must be a multiple of parallel.ranks "
			                       "(got %lld, %lld)", global, ranks);
		micro = global / ranks;
		if (trn_fields_put(&f, "micro", json_integer(micro)) < 0)
			return -1;
	} else if (global % (micro * ranks)) {
		return trn_fields_fail(&f, "global", "must be a multiple of batch.micro x "
		                       "parallel.ranks (got %lld, %lld x %lld)", global, micro, ranks);
	}
	s->batch.global = (long)global;
	s->batch.micro = (long)micro;
	s->batch.reference = (long)ref;
	s->batch.accum = (long)(global / (micro * ranks));
	return 0;
}

/* ---- optimizer ----------------------------------------------------------------- */

static const char *const opt_types[] = { "sgd", "adamw", "lars", "lamb", NULL };
static const char *const opt_keys[][12] = {
	[TRN_OPT_SGD] = { "type", "lr", "weight_decay", "clip_grad_norm", "exclude_from_weight_decay",
	                  "state_dtype", "momentum", "nesterov", NULL },
	[TRN_OPT_ADAMW] = { "type", "lr", "weight_decay", "clip_grad_norm",
	                    "exclude_from_weight_decay", "state_dtype", "betas", "eps", NULL },
	[TRN_OPT_LARS] = { "type", "lr", "weight_decay", "clip_grad_norm", "exclude_from_weight_decay",
	                   "state_dtype", "momentum", "trust_coef", "exclude_from_adaptation", NULL },
	[TRN_OPT_LAMB] = { "type", "lr", "weight_decay", "clip_grad_norm", "exclude_from_weight_decay",
	                   "state_dtype", "betas", "eps", "exclude_from_adaptation", NULL },
};
static const char *const opt_all_keys[] = { "momentum", "nesterov", "betas", "eps", "trust_coef",
                                            "exclude_from_adaptation", NULL };
static const char *const state_dtypes[] = { "fp32", "int8", NULL };

static int parse_betas(struct trn_fields *f, struct trn_spec_optimizer *o)
{
	json_t *v = json_object_get(f->in, "betas");
	char path[256], got[48];
	if (v && !json_is_array(v))
		return trn_fields_fail_type(f, "betas", "an array of 2 numbers", v);
	if (v && json_array_size(v) != 2)
		return trn_fields_fail(f, "betas", "must be an array of 2 numbers (got %zu elements)",
		                       json_array_size(v));
	trn_fields_path(f, "betas", -1, path, sizeof path);
	for (size_t i = 0; v && i < 2; i++) {
		json_t *e = json_array_get(v, i);
		double x = json_number_value(e);
		if (!json_is_number(e))
			return trn_err_set(f->err, "%s[%zu]: must be a number (got %s)", path, i,
			                   trn_json_type_name(e));
		if (!(x >= 0 && x < 1))
			return trn_err_set(f->err, "%s[%zu]: must be a number in [0, 1) (got %s)", path,
			                   i, trn_fmt_num(x, got, sizeof got));
		*(i ? &o->beta2 : &o->beta1) = x;
	}
	return trn_fields_put(f, "betas", json_pack("[ff]", o->beta1, o->beta2));
}

static json_t *patterns_json(char (*p)[TRN_PATTERN_MAX + 1], int n)
{
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_string(p[i])) != 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static int parse_optimizer(struct trn_fields *root, struct trn_spec_optimizer *o)
{
	struct trn_fields f;
	int type, t, has;
	char what[32];
	if (trn_fields_object(&f, root, "optimizer", TRN_REQUIRED) < 0 ||
	    trn_fields_enum(&f, "type", opt_types, TRN_REQUIRED, 0, &type) < 0)
		return -1;
	int lars_lamb = type == TRN_OPT_LARS || type == TRN_OPT_LAMB;
	int sgd_lars = type == TRN_OPT_SGD || type == TRN_OPT_LARS;
	int adam = type == TRN_OPT_ADAMW || type == TRN_OPT_LAMB;
	o->type = (enum trn_opt_type)type;
	o->beta1 = 0.9;
	o->beta2 = 0.999;
	o->momentum = 0.9;
	o->eps = type == TRN_OPT_LAMB ? 1e-6 : 1e-8;
	o->trust_coef = 0.001;
	snprintf(what, sizeof what, "type \"%s\"", opt_types[type]);
	if (trn_fields_known(&f, opt_keys[type], opt_all_keys, what) < 0 ||
	    trn_fields_num(&f, "lr", LR, TRN_REQUIRED, 0, &o->lr) < 0 ||
	    trn_fields_num(&f, "weight_decay", (struct trn_range){ 0, 1, 0, 0 }, 0, 0,
	                   &o->weight_decay) < 0 ||
	    trn_fields_num(&f, "clip_grad_norm", NONNEG, 0, 0, &o->clip_grad_norm) < 0 ||
	    trn_fields_enum(&f, "state_dtype", state_dtypes, 0, 0, &t) < 0 ||
	    (sgd_lars && trn_fields_num(&f, "momentum", UNIT_OPEN, 0, 0.9, &o->momentum) < 0) ||
	    (type == TRN_OPT_SGD && trn_fields_bool(&f, "nesterov", 0, &o->nesterov) < 0) ||
	    (adam && parse_betas(&f, o) < 0) ||
	    (adam && trn_fields_num(&f, "eps", UNIT_POS, 0, o->eps, &o->eps) < 0) ||
	    (type == TRN_OPT_LARS && trn_fields_num(&f, "trust_coef", UNIT_POS, 0, 0.001,
	                                            &o->trust_coef) < 0))
		return -1;
	o->state_dtype = t ? TRN_DTYPE_INT8 : TRN_DTYPE_FP32;
	if (o->nesterov && o->momentum == 0)
		return trn_fields_fail(&f, "nesterov", "needs optimizer.momentum > 0");

	has = trn_fields_patterns(&f, "exclude_from_weight_decay", TRN_MAX_PATTERNS,
	                          o->exclude_from_weight_decay, &o->n_exclude_from_weight_decay);
	if (has < 0)
		return -1;
	if (!has && lars_lamb) {
		strcpy(o->exclude_from_weight_decay[0], "bias");
		strcpy(o->exclude_from_weight_decay[1], "norm");
		o->n_exclude_from_weight_decay = 2;
	}
	if (!has && trn_fields_put(&f, "exclude_from_weight_decay",
	                           patterns_json(o->exclude_from_weight_decay,
	                                         o->n_exclude_from_weight_decay)) < 0)
		return -1;
	if (!lars_lamb)
		return 0;
	has = trn_fields_patterns(&f, "exclude_from_adaptation", TRN_MAX_PATTERNS,
	                          o->exclude_from_adaptation, &o->n_exclude_from_adaptation);
	if (has < 0)
		return -1;
	if (!has) {
		memcpy(o->exclude_from_adaptation, o->exclude_from_weight_decay,
		       sizeof o->exclude_from_adaptation);
		o->n_exclude_from_adaptation = o->n_exclude_from_weight_decay;
		return trn_fields_put(&f, "exclude_from_adaptation",
		                      patterns_json(o->exclude_from_adaptation,
		                                    o->n_exclude_from_adaptation));
	}
	return 0;
}

/* ---- schedule ------------------------------------------------------------------ */

/* {"steps": N} | {"epochs": E}; f->in must be present. */
static int parse_period(struct trn_fields *f, struct trn_period *p)
{
	long long n;
	int has_steps = json_object_get(f->in, "steps") != NULL;
	if (has_steps == (json_object_get(f->in, "epochs") != NULL))
		return trn_err_set(f->err, "%s: exactly one of \"steps\" or \"epochs\" is required",
		                   f->path[0] ? f->path : "steps");
	p->in_epochs = !has_steps;
	if (has_steps) {
		if (trn_fields_int(f, "steps", 1, TRN_STEPS_MAX, 0, 0, &n) < 0)
			return -1;
		p->value = (double)n;
		return 0;
	}
	return trn_fields_num(f, "epochs", (struct trn_range){ 0, 1e6, 1, 0 }, 0, 0, &p->value);
}

static const char *const scalings[] = { "none", "linear", "sqrt", NULL };
static const char *const decays[] = { "none", "cosine", "step", "poly", NULL };
static const char *const decay_keys[][7] = {
	[TRN_DECAY_NONE] = { "lr_scaling", "warmup", "decay", NULL },
	[TRN_DECAY_COSINE] = { "lr_scaling", "warmup", "decay", "final_lr", NULL },
	[TRN_DECAY_STEP] = { "lr_scaling", "warmup", "decay", "step_size", "gamma", NULL },
	[TRN_DECAY_POLY] = { "lr_scaling", "warmup", "decay", "final_lr", "power", NULL },
};
static const char *const decay_all_keys[] = { "final_lr", "power", "step_size", "gamma", NULL };

static int parse_warmup(struct trn_fields *sched, struct trn_spec *s)
{
	static const char *const keys[] = { "steps", "epochs", "start_lr", NULL };
	struct trn_fields f;
	struct trn_spec_schedule *c = &s->schedule;
	/* Goyal et al.: from the base lr when scaling raises it; else from 0
	 * (schedule.c's rule for a start_lr < 0, resolved here for the hash) */
	int scaled = c->lr_scaling != TRN_SCALE_NONE && s->batch.global != s->batch.reference;
	double def = scaled ? s->optimizer.lr : 0;
	c->warmup_start_lr = def;
	if (!json_object_get(sched->in, "warmup"))
		return 0;
	if (trn_fields_object(&f, sched, "warmup", 0) < 0 || trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    parse_period(&f, &c->warmup) < 0 ||
	    trn_fields_num(&f, "start_lr", (struct trn_range){ 0, 100, 0, 0 }, 0, def,
	                   &c->warmup_start_lr) < 0)
		return -1;
	return 0;
}

static int parse_schedule(struct trn_fields *root, struct trn_spec *s)
{
	struct trn_fields f, step;
	struct trn_spec_schedule *c = &s->schedule;
	int scaling, decay;
	char what[32];
	if (trn_fields_object(&f, root, "schedule", TRN_OPTIONAL) < 0 ||
	    trn_fields_enum(&f, "lr_scaling", scalings, 0, TRN_SCALE_NONE, &scaling) < 0 ||
	    trn_fields_enum(&f, "decay", decays, 0, TRN_DECAY_NONE, &decay) < 0)
		return -1;
	c->lr_scaling = (enum trn_lr_scaling)scaling;
	c->decay = (enum trn_decay)decay;
	c->power = 2;
	c->gamma = 0.1;
	snprintf(what, sizeof what, "decay \"%s\"", decays[decay]);
	if (trn_fields_known(&f, decay_keys[decay], decay_all_keys, what) < 0 ||
	    parse_warmup(&f, s) < 0)
		return -1;
	if ((decay == TRN_DECAY_COSINE || decay == TRN_DECAY_POLY) &&
	    trn_fields_num(&f, "final_lr", (struct trn_range){ 0, 100, 0, 0 }, 0, 0,
	                   &c->final_lr) < 0)
		return -1;
	if (decay == TRN_DECAY_POLY &&
	    trn_fields_num(&f, "power", (struct trn_range){ 0, 100, 1, 0 }, 0, 2, &c->power) < 0)
		return -1;
	if (decay == TRN_DECAY_STEP) {
		static const char *const keys[] = { "steps", "epochs", NULL };
		if (trn_fields_object(&step, &f, "step_size", TRN_REQUIRED) < 0 ||
		    trn_fields_known(&step, keys, NULL, NULL) < 0 ||
		    parse_period(&step, &c->step_size) < 0 ||
		    trn_fields_num(&f, "gamma", UNIT_POS, 0, 0.1, &c->gamma) < 0)
			return -1;
	}
	return 0;
}

/* ---- precision, offload --------------------------------------------------------- */

static int parse_precision(struct trn_fields *root, struct trn_spec_precision *p)
{
	static const char *const keys[] = { "compute", "master", "loss_scale", "init_scale",
	                                    "growth_interval", "deterministic", NULL };
	static const char *const computes[] = { "fp32", "fp16", "bf16", NULL };
	static const char *const masters[] = { "fp32", NULL };
	struct trn_fields f;
	int compute, master, deterministic;
	long long growth;
	char q[512];
	if (trn_fields_object(&f, root, "precision", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_enum(&f, "compute", computes, 0, 0, &compute) < 0 ||
	    trn_fields_enum(&f, "master", masters, 0, 0, &master) < 0 ||
	    trn_fields_num(&f, "init_scale", SCALE, 0, 65536, &p->init_scale) < 0 ||
	    trn_fields_int(&f, "growth_interval", 1, TRN_STEPS_MAX, 0, 2000, &growth) < 0 ||
	    trn_fields_bool(&f, "deterministic", 1, &deterministic) < 0)
		return -1;
	p->nondeterministic = !deterministic;
	p->compute = (enum trn_dtype)compute;
	p->master = TRN_DTYPE_FP32;
	p->growth_interval = (long)growth;
	json_t *v = f.in ? json_object_get(f.in, "loss_scale") : NULL;
	p->dynamic_loss_scale = !v || (json_is_string(v) &&
	                               strcmp(json_string_value(v), "dynamic") == 0);
	if (p->dynamic_loss_scale)
		return trn_fields_put(&f, "loss_scale", json_string("dynamic"));
	if (json_is_string(v))
		return trn_fields_fail(&f, "loss_scale", "must be \"dynamic\" or a number > 0 (got %s)",
		                       trn_quote(json_string_value(v), q, sizeof q));
	if (!json_is_number(v))
		return trn_fields_fail_type(&f, "loss_scale", "\"dynamic\" or a number > 0", v);
	if (trn_fields_num(&f, "loss_scale", SCALE, 0, 0, &p->loss_scale) < 0)
		return -1;
	return 0;
}

static int parse_offload(struct trn_fields *root, struct trn_spec_offload *o)
{
	static const char *const keys[] = { "optimizer", "params", "activations", NULL };
	static const char *const where[] = { "none", "cpu", NULL };
	static const char *const acts[] = { "none", "cpu", "recompute", NULL };
	struct trn_fields f;
	int opt, params, act;
	if (trn_fields_object(&f, root, "offload", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_enum(&f, "optimizer", where, 0, 0, &opt) < 0 ||
	    trn_fields_enum(&f, "params", where, 0, 0, &params) < 0 ||
	    trn_fields_enum(&f, "activations", acts, 0, 0, &act) < 0)
		return -1;
	o->optimizer = (enum trn_offload)opt;
	o->params = (enum trn_offload)params;
	o->activations = (enum trn_offload)act;
	return 0;
}

/* ---- watchdog ------------------------------------------------------------------- */

static int parse_watchdog(struct trn_fields *root, struct trn_spec_watchdog *w)
{
	static const char *const keys[] = { "max_rollbacks", "spike_factor", "window", NULL };
	struct trn_fields f;
	long long rollbacks, window;
	char got[48];
	if (trn_fields_object(&f, root, "watchdog", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "max_rollbacks", 0, TRN_WATCHDOG_ROLLBACKS_MAX, 0, 0, &rollbacks) < 0 ||
	    trn_fields_num(&f, "spike_factor", ANY, 0, 0, &w->spike_factor) < 0 ||
	    trn_fields_int(&f, "window", 1, TRN_WATCHDOG_WINDOW_MAX, 0, 100, &window) < 0)
		return -1;
	if (!(w->spike_factor == 0 || w->spike_factor > 1))
		return trn_fields_fail(&f, "spike_factor", "must be 0 (no spike detection) or a "
		                       "number > 1 (got %s)", trn_fmt_num(w->spike_factor, got, sizeof got));
	w->max_rollbacks = (int)rollbacks;
	w->window = (long)window;
	return 0;
}

/* ---- metrics -------------------------------------------------------------------- */

static int parse_metrics(struct trn_fields *root, struct trn_spec_metrics *m)
{
	static const char *const keys[] = { "gns_every", "gns_ema", NULL };
	struct trn_fields f;
	long long every;
	if (trn_fields_object(&f, root, "metrics", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "gns_every", 0, TRN_STEPS_MAX, 0, TRN_GNS_EVERY_DEFAULT, &every) < 0 ||
	    trn_fields_num(&f, "gns_ema", UNIT_OPEN, 0, TRN_GNS_EMA_DEFAULT, &m->gns_ema) < 0)
		return -1;
	m->gns_every = (long)every;
	return 0;
}

/* ---- the root ------------------------------------------------------------------- */

/* "j-" and 1 to 18 digits: larchd's job ids (j-000123) */
static int job_id_valid(const char *id)
{
	size_t n = strlen(id);
	if (n < 3 || n > 20 || strncmp(id, "j-", 2) != 0)
		return 0;
	return strspn(id + 2, "0123456789") == n - 2;
}

/* "init": {"from": path}, {"hf": dir} or {"job": id, "step": n} */
static int parse_init(struct trn_fields *root, struct trn_spec *s)
{
	static const char *const keys[] = { "from", "hf", "job", "step", NULL };
	struct trn_fields init;
	char q[512];
	s->init_step = -1;
	if (!json_object_get(root->in, "init"))
		return 0;
	if (trn_fields_object(&init, root, "init", 0) < 0 ||
	    trn_fields_known(&init, keys, NULL, NULL) < 0)
		return -1;
	int has_from = json_object_get(init.in, "from") != NULL;
	int has_hf = json_object_get(init.in, "hf") != NULL;
	if (has_from + has_hf + (json_object_get(init.in, "job") != NULL) != 1)
		return trn_fields_fail(&init, NULL, "exactly one of \"from\", \"hf\" or \"job\"");
	if (has_from || has_hf) {
		const char *key = has_from ? "from" : "hf";
		if (json_object_get(init.in, "step"))
			return trn_fields_fail(&init, "step", "goes with \"job\", not \"%s\"", key);
		return trn_fields_filepath(&init, key, TRN_REQUIRED,
		                           has_from ? s->init_from : s->init_hf) < 0 ? -1 : 0;
	}
	json_t *job = json_object_get(init.in, "job");
	if (!json_is_string(job))
		return trn_fields_fail_type(&init, "job", "a string", job);
	if (!job_id_valid(json_string_value(job)))
		return trn_fields_fail(&init, "job", "must be a larch job id such as \"j-000123\" "
		                       "(got %s)", trn_quote(json_string_value(job), q, sizeof q));
	snprintf(s->init_job, sizeof s->init_job, "%s", json_string_value(job));
	if (trn_fields_put(&init, "job", json_string(s->init_job)) < 0)
		return -1;
	if (json_object_get(init.in, "step")) {
		long long step;
		if (trn_fields_int(&init, "step", 0, TRN_STEPS_MAX, TRN_REQUIRED, 0, &step) < 0)
			return -1;
		s->init_step = (long)step;
	}
	return 0;
}

/* ---- stop ----------------------------------------------------------------------- */

static const char *const stop_metrics[] = { "val/accuracy", "val/loss", NULL };

const char *trn_stop_metric_name(enum trn_stop_metric m)
{
	return m == TRN_STOP_NONE ? "none" : stop_metrics[m - 1];
}

int trn_stop_reached(const struct trn_spec_stop *stop, double value)
{
	if (stop->metric == TRN_STOP_NONE || !isfinite(value))
		return 0;
	return stop->min ? value <= stop->value : value >= stop->value;
}

/* "stop": {"metric": "val/accuracy", "value": 0.88, "mode": "max"}: the
 * metrics the trainer produces at each evaluation; needs eval_every */
static int parse_stop(struct trn_fields *root, struct trn_spec *s)
{
	static const char *const keys[] = { "metric", "value", "mode", NULL };
	static const char *const modes[] = { "max", "min", NULL };
	struct trn_fields f;
	int metric, mode;
	if (!json_object_get(root->in, "stop"))
		return 0;
	if (trn_fields_object(&f, root, "stop", 0) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_enum(&f, "metric", stop_metrics, TRN_REQUIRED, 0, &metric) < 0 ||
	    trn_fields_num(&f, "value", ANY, TRN_REQUIRED, 0, &s->stop.value) < 0 ||
	    trn_fields_enum(&f, "mode", modes, 0, 0, &mode) < 0)
		return -1;
	s->stop.metric = (enum trn_stop_metric)(metric + 1);
	s->stop.min = mode == 1;
	if (!s->eval_every)
		return trn_err_set(root->err, "stop: needs eval_every > 0 (the target is checked at "
		                   "each evaluation)");
	return 0;
}

static int parse_run(struct trn_fields *root, struct trn_spec *s)
{
	long long eval, ckpt, keep, log, seed;
	if (parse_period(root, &s->length) < 0 ||
	    trn_fields_int(root, "eval_every", 0, TRN_STEPS_MAX, 0, 0, &eval) < 0 ||
	    trn_fields_int(root, "checkpoint_every", 0, TRN_STEPS_MAX, 0, 0, &ckpt) < 0 ||
	    trn_fields_int(root, "keep_checkpoints", 1, 1000, 0, 3, &keep) < 0 ||
	    trn_fields_bool(root, "checkpoint_at_end", 1, &s->checkpoint_at_end) < 0 ||
	    trn_fields_int(root, "log_every", 1, TRN_STEPS_MAX, 0, 10, &log) < 0 ||
	    trn_fields_int(root, "seed", 0, LLONG_MAX, 0, 0, &seed) < 0)
		return -1;
	s->eval_every = (long)eval;
	s->checkpoint_every = (long)ckpt;
	s->keep_checkpoints = (int)keep;
	s->log_every = (long)log;
	s->seed = (uint64_t)seed;
	return parse_stop(root, s) < 0 ? -1 : parse_init(root, s);
}

/* What no single section can see. */
static int check_across(struct trn_fields *root, struct trn_spec *s, int has_reference)
{
	static const char *const formats[] = { "idx", "tokens_u16", "text" };
	const struct trn_spec_schedule *c = &s->schedule;
	int fmt = s->data.format;
	char a[48], b[48];
	if (s->model.type == TRN_MODEL_MLP && fmt != TRN_DATA_IDX)
		return trn_err_set(root->err, "model.type: \"mlp\" needs idx data (got %s)", formats[fmt]);
	if (s->model.type == TRN_MODEL_GPT && fmt == TRN_DATA_IDX)
		return trn_err_set(root->err, "model.type: \"gpt\" needs tokens_u16 or text data "
		                   "(got idx)");
	if (s->model.type == TRN_MODEL_GPT && fmt == TRN_DATA_TEXT) {
		if (s->model.vocab && s->model.vocab < 256)
			return trn_err_set(root->err, "model.vocab: must be 0 or at least 256 for text "
			                   "data (got %d)", s->model.vocab);
		if (!s->model.vocab) {
			s->model.vocab = 256;
			if (json_object_set_new(json_object_get(root->out, "model"), "vocab",
			                        json_integer(256)) != 0)
				return trn_err_set(root->err, "spec: out of memory");
		}
	}
	if (s->resources.nodes > s->parallel.ranks)
		return trn_err_set(root->err, "resources.nodes: must be at most parallel.ranks, a rank "
		                   "or more on each node (got %d, %d)", s->resources.nodes,
		                   s->parallel.ranks);
	if (c->lr_scaling != TRN_SCALE_NONE && !has_reference)
		return trn_err_set(root->err, "schedule.lr_scaling: \"%s\" needs batch.reference "
		                   "(the batch size optimizer.lr was tuned for)", scalings[c->lr_scaling]);
	if (c->warmup.value > 0 && c->warmup.in_epochs == s->length.in_epochs &&
	    c->warmup.value > s->length.value) {
		const char *unit = s->length.in_epochs ? "epochs" : "steps";
		return trn_err_set(root->err, "schedule.warmup.%s: must not exceed %s (got %s, %s)",
		                   unit, unit, trn_fmt_num(c->warmup.value, a, sizeof a),
		                   trn_fmt_num(s->length.value, b, sizeof b));
	}
	return 0;
}

static int parse_spec(struct trn_fields *root, struct trn_spec *s)
{
	static const char *const keys[] = { "name", "model", "data", "batch", "optimizer", "schedule",
	                                    "precision", "offload", "parallel", "resources", "steps",
	                                    "epochs", "eval_every", "checkpoint_every",
	                                    "keep_checkpoints", "checkpoint_at_end", "log_every",
	                                    "seed", "init", "watchdog", "stop", "metrics", NULL };
	int has_reference = 0, has_name;
	if (trn_fields_known(root, keys, NULL, NULL) < 0 ||
	    (has_name = trn_fields_name(root, "name", 0, 0, s->name)) < 0)
		return -1;
	if (!has_name) {
		strcpy(s->name, "job");
		if (trn_fields_put(root, "name", json_string(s->name)) < 0)
			return -1;
	}
	if (parse_model(root, &s->model) < 0 || trn_spec_parse_data(root, &s->data) < 0 ||
	    parse_parallel(root, &s->parallel) < 0 || parse_batch(root, s, &has_reference) < 0 ||
	    parse_optimizer(root, &s->optimizer) < 0 || parse_schedule(root, s) < 0 ||
	    parse_precision(root, &s->precision) < 0 || parse_offload(root, &s->offload) < 0 ||
	    trn_spec_parse_resources(root, &s->resources) < 0 || parse_run(root, s) < 0 ||
	    parse_watchdog(root, &s->watchdog) < 0 || parse_metrics(root, &s->metrics) < 0)
		return -1;
	return check_across(root, s, has_reference);
}

/* ---- API -------------------------------------------------------------------------- */

int trn_spec_from_json(struct trn_spec *spec, json_t *root, struct trn_err *err)
{
	struct trn_fields f;
	memset(spec, 0, sizeof *spec);
	if (trn_fields_root(&f, root, err) < 0 || parse_spec(&f, spec) < 0) {
		json_decref(f.out);
		memset(spec, 0, sizeof *spec);
		return -1;
	}
	spec->json = f.out;
	return 0;
}

static int from_buffer(struct trn_spec *spec, const char *text, size_t len, struct trn_err *err)
{
	json_error_t jerr;
	char why[JSON_ERROR_TEXT_LENGTH];
	memset(spec, 0, sizeof *spec);
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!root)
		return trn_err_set(err, "spec: invalid JSON at line %d column %d: %s", jerr.line,
		                   jerr.column, trn_json_error_text(&jerr, why, sizeof why));
	int rc = trn_spec_from_json(spec, root, err);
	json_decref(root);
	return rc;
}

int trn_spec_from_string(struct trn_spec *spec, const char *text, struct trn_err *err)
{
	if (!text) {
		memset(spec, 0, sizeof *spec);
		return trn_err_set(err, "spec: no text");
	}
	return from_buffer(spec, text, strlen(text), err);
}

int trn_spec_from_fd(struct trn_spec *spec, int fd, const char *name, struct trn_err *err)
{
	memset(spec, 0, sizeof *spec);
	char *buf = malloc(SPEC_FILE_MAX + 1);
	if (!buf)
		return trn_err_set(err, "spec: out of memory");
	size_t n = 0;
	while (n <= SPEC_FILE_MAX) {
		ssize_t k = read(fd, buf + n, SPEC_FILE_MAX + 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int saved = errno;
			free(buf);
			return trn_err_set(err, "spec: %s: %s", name, strerror(saved));
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	int rc;
	if (n > SPEC_FILE_MAX)
		rc = trn_err_set(err, "spec: %s is larger than %ld bytes", name, SPEC_FILE_MAX);
	else
		rc = from_buffer(spec, buf, n, err);
	free(buf);
	return rc;
}

int trn_spec_from_file(struct trn_spec *spec, const char *path, struct trn_err *err)
{
	memset(spec, 0, sizeof *spec);
	int fd = trn_input_open(path, NULL, "spec", err);
	if (fd < 0)
		return -1;
	int rc = trn_spec_from_fd(spec, fd, path, err);
	close(fd);
	return rc;
}

void trn_spec_release(struct trn_spec *spec)
{
	json_decref(spec->json);
	spec->json = NULL;
}

/* The real number text at t (len bytes, as jansson wrote it: %.17g) in its
 * shortest round-trip form, written over t; returns the new length. */
static size_t shorten_real(char *t, size_t len)
{
	char in[64], out[64];
	if (len >= sizeof in)
		return len;
	memcpy(in, t, len);
	in[len] = '\0';
	double v = strtod(in, NULL);
	for (int p = 1; p <= 17; p++) {
		int n = snprintf(out, sizeof out, "%.*g", p, v);
		if (n <= 0 || (size_t)n >= sizeof out - 2 || strtod(out, NULL) != v)
			continue;
		if (!strpbrk(out, ".eEn"))       /* an integral value: keep it a real */
			n += snprintf(out + n, sizeof out - (size_t)n, ".0");
		if ((size_t)n >= len)
			return len;
		memcpy(t, out, (size_t)n);
		return (size_t)n;
	}
	return len;
}

char *trn_json_dumps(const json_t *json, size_t flags)
{
	char *text = json_dumps(json, flags);
	if (!text)
		return NULL;
	/* outside strings, a number with '.' or an exponent is a real */
	size_t r = 0, w = 0, n = strlen(text);
	int in_string = 0;
	while (r < n) {
		char c = text[r];
		if (in_string) {
			text[w++] = text[r++];
			if (c == '\\' && r < n)
				text[w++] = text[r++];
			else if (c == '"')
				in_string = 0;
			continue;
		}
		if (c == '"') {
			in_string = 1;
			text[w++] = text[r++];
			continue;
		}
		if (c != '-' && (c < '0' || c > '9')) {
			text[w++] = text[r++];
			continue;
		}
		size_t end = r, real = 0;
		while (end < n && strchr("+-0123456789.eE", text[end])) {
			real |= text[end] == '.' || text[end] == 'e' || text[end] == 'E';
			end++;
		}
		size_t len = end - r;
		memmove(text + w, text + r, len);
		w += real ? shorten_real(text + w, len) : len;
		r = end;
	}
	text[w] = '\0';
	return text;
}

void trn_spec_hash(const struct trn_spec *spec, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	json_t *hashed = spec->json, *copy = NULL;
	json_t *parallel = hashed ? json_object_get(hashed, "parallel") : NULL;
	if (parallel && json_object_get(parallel, "elastic")) {
		/* where the run may start is not what it trains */
		if ((copy = json_deep_copy(hashed)) != NULL) {
			json_object_del(json_object_get(copy, "parallel"), "elastic");
			hashed = copy;
		}
	}
	char *text = hashed ? trn_json_dumps(hashed, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
	json_decref(copy);
	out[0] = '\0';
	if (EVP_Digest(text ? text : "", text ? strlen(text) : 0, md, &len, EVP_sha256(), NULL) == 1)
		for (unsigned int i = 0; i < len && i < 32; i++)
			snprintf(out + 2 * i, 3, "%02x", md[i]);
	free(text);
}

int trn_spec_elastic(const struct trn_spec *spec, int started, struct trn_spec *out,
                     struct trn_err *err)
{
	const struct trn_spec_parallel *p = &spec->parallel;
	const struct trn_spec_batch *b = &spec->batch;
	*out = *spec;
	if (started == p->ranks)
		return 0;
	if (!p->min_ranks)
		return trn_err_set(err, "parallel.ranks: the spec asks for %d ranks but the launcher "
		                   "started %d (parallel.elastic allows fewer)", p->ranks, started);
	if (started < p->min_ranks || started > p->ranks)
		return trn_err_set(err, "parallel.elastic.min_ranks: %d ranks started, outside %d..%d "
		                   "(the spec's min_ranks..ranks)", started, p->min_ranks, p->ranks);
	if (b->global % (b->micro * started) != 0)
		return trn_err_set(err, "parallel.elastic: %d ranks started, and batch.global is not a "
		                   "multiple of batch.micro x %d (got %ld, %ld x %d): the global batch "
		                   "cannot be kept", started, started, b->global, b->micro, started);
	out->parallel.ranks = started;
	out->batch.accum = b->global / (b->micro * started);
	return 0;
}

long trn_period_steps(const struct trn_period *p, long steps_per_epoch)
{
	double v = p->in_epochs ? p->value * (double)steps_per_epoch : p->value;
	if (!(v > 0))
		return 0;
	if (v >= (double)LONG_MAX)
		return LONG_MAX;
	return lround(v);
}

const char *trn_opt_name(enum trn_opt_type t)
{
	return (unsigned)t < 4 ? opt_types[t] : "unknown";
}

int trn_spec_streams_update(const struct trn_spec *spec)
{
	return spec->offload.optimizer == TRN_OFFLOAD_CPU && spec->parallel.ranks == 1 &&
	       spec->batch.accum == 1 &&
	       spec->optimizer.clip_grad_norm <= 0 && spec->precision.compute != TRN_DTYPE_FP16;
}

const char *trn_dtype_name(enum trn_dtype t)
{
	static const char *const names[] = { "fp32", "fp16", "bf16", "int8" };
	return (unsigned)t < 4 ? names[t] : "unknown";
}
