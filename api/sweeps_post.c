/* api/sweeps_post.c - POST /v1/sweeps: a sweep of child jobs over axes of a
 * base spec.
 *
 * Body (docs/api.md, "Sweeps"): name, base (a job spec), axes (dotted paths
 * into the spec, each a non-empty list of values), method "grid" (every
 * combination, the first axis varying slowest) or "random" (samples
 * children, each value drawn uniformly from its axis by a generator seeded
 * with seed: the same body gives the same children), max_parallel, target,
 * early_stop, labels. Unknown fields are 400.
 *
 * "kind": "batch_scaling" (a critical-batch study) takes batch_sizes in
 * place of axes and method: one child per size with batch.global set, the
 * target as each child's spec.stop, and eval_every scaled so that every
 * child evaluates after the same number of examples as the base does at
 * its batch.reference (at least every step). GET reads the study from the
 * definition (api/sweeps_study.c).
 *
 * parse -> build every child (the base with the child's axis values and the
 * name "<sweep name>-<index>") and validate it with the trainer's own
 * validator, as POST /v1/jobs does: one invalid child fails the request
 * with 400 naming its axis values and the field -> the partition, an init
 * naming a job, the plan's hard limits -> the preflight (service/
 * preflight.h) once per distinct data and init of the children, parked as
 * in api/jobs_post.c -> the Slurm account and the memory plan of every
 * child -> one db transaction for the sweep and all its children -> the
 * `submitted` hooks -> 201 + Location + the sweep. Nothing is stored
 * unless every child passed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct_check.h"
#include "db/sweeps.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "jobs_submit.h"
#include "labels.h"
#include "metric_name.h"
#include "reply.h"
#include "sweeps_common.h"
#include "sweeps_hooks.h"
#include "study_fit.h"
#include "trainer/spec/plan.h"
#include "trainer/spec/spec.h"

#define DEFAULT_MAX_CHILDREN 1000
#define AXES_MAX 16
#define PATH_DEPTH_MAX 8
#define PATH_LEN_MAX 128

struct child {
	json_t *params;                   /* {"path": value, ...} (owned) */
	struct trn_spec tspec;            /* validated (tspec.json set once parsed) */
	char *spec;                       /* canonical JSON text */
	char name[TRN_NAME_MAX + 1];
	size_t group;                     /* the preflight group: the index of its first child */
};

struct sweep_submit {
	json_t *body;                     /* owned */
	char *definition, *labels;        /* JSON texts */
	const char *name, *method;        /* borrowed from body */
	int max_parallel;
	const char *target_metric, *target_mode;
	double target_value;
	int64_t early_stop_after;
	json_t *study_axes;               /* batch_scaling: {"batch.global": batch_sizes} (owned) */
	long study_reference;             /* batch_scaling: the base's batch.reference */
	long study_eval_every;            /* batch_scaling: the base's eval_every */
	struct child *ch;
	size_t n;
	size_t *leaders;                  /* the first child of each preflight group */
	char **shapes;                    /* per group: the data's shape, or NULL */
	size_t n_groups, next_group;
	char unix_user[33];
	struct api_preflight_result pre;  /* the last preflight's answer (pre.shape: a copy) */
};

static void submit_free(void *p)
{
	struct sweep_submit *s = p;
	if (!s)
		return;
	for (size_t i = 0; s->ch && i < s->n; i++) {
		json_decref(s->ch[i].params);
		if (s->ch[i].tspec.json)
			trn_spec_release(&s->ch[i].tspec);
		free(s->ch[i].spec);
	}
	free(s->ch);
	for (size_t g = 0; s->shapes && g < s->n_groups; g++)
		free(s->shapes[g]);
	free(s->shapes);
	free(s->leaders);
	free(s->pre.shape);
	free(s->definition);
	free(s->labels);
	json_decref(s->study_axes);
	json_decref(s->body);
	free(s);
}

/* the submit checks' 400 naming the field (api/jobs_submit.h) */
#define bad_field(req, field, ...) api_reply_invalid_field((req), (field), __VA_ARGS__)

/* "batch.global=256, optimizer.lr=0.05" */
static void params_text(const json_t *params, char *out, size_t len)
{
	size_t o = 0;
	const char *key;
	json_t *v;
	out[0] = '\0';
	json_object_foreach((json_t *)params, key, v) {
		char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		if (o < len)
			o += (size_t)snprintf(out + o, len - o, "%s%s=%.60s", o ? ", " : "", key,
			                      text ? text : "?");
		free(text);
	}
}

/* A child that failed a check: 400 naming its index, its axis values and
 * the field (the start of message up to ": "). */
static enum MHD_Result bad_child(struct api_request *req, size_t i, const json_t *params,
                                 int status, const char *message)
{
	char field[128] = "spec", values[512];
	const char *colon = strstr(message, ": ");
	if (colon && (size_t)(colon - message) < sizeof field) {
		memcpy(field, message, (size_t)(colon - message));
		field[colon - message] = '\0';
	}
	params_text(params, values, sizeof values);
	return api_reply_error_detail(req, (unsigned)status,
	                              status == 422 ? API_ERR_INFEASIBLE : API_ERR_INVALID_SPEC,
	                              json_pack("{s:s,s:I,s:O}", "field", field, "child",
	                                        (json_int_t)i, "params", params),
	                              "child %zu (%s): %s", i, values, message);
}

/* ---- axes --------------------------------------------------------------------- */

/* A dotted path: 1..8 segments of [A-Za-z0-9_], not over the name. NULL
 * when fine, else why. */
static const char *bad_path(const char *path)
{
	size_t len = strlen(path), seg = 0, depth = 1;
	if (len == 0 || len > PATH_LEN_MAX)
		return "a path must be 1 to 128 characters";
	for (size_t i = 0; i < len; i++) {
		char c = path[i];
		if (c == '.') {
			if (seg == 0 || ++depth > PATH_DEPTH_MAX)
				return "not a dotted path into the spec (segments of A-Z a-z 0-9 _, at most 8)";
			seg = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return "not a dotted path into the spec (segments of A-Z a-z 0-9 _, at most 8)";
		seg++;
	}
	if (seg == 0)
		return "not a dotted path into the spec (segments of A-Z a-z 0-9 _, at most 8)";
	if (strcmp(path, "name") == 0 || strncmp(path, "name.", 5) == 0)
		return "the children's names come from the sweep's name: name cannot be an axis";
	return NULL;
}

/* Sets path in spec to a copy of v, making missing objects on the way.
 * 0, or -1 with why: a segment before the last is not an object. */
static int set_path(json_t *spec, const char *path, json_t *v, char *why, size_t len)
{
	char buf[PATH_LEN_MAX + 1];
	snprintf(buf, sizeof buf, "%s", path);
	json_t *at = spec;
	char *seg = buf;
	for (char *dot; (dot = strchr(seg, '.')); seg = dot + 1) {
		*dot = '\0';
		json_t *next = json_object_get(at, seg);
		if (!next) {
			next = json_object();
			if (!next || json_object_set_new(at, seg, next) != 0) {
				snprintf(why, len, "out of memory");
				return -1;
			}
		} else if (!json_is_object(next)) {
			snprintf(why, len, "%.*s is not an object in the spec", (int)(dot - buf), path);
			return -1;
		}
		at = next;
	}
	if (json_object_set_new(at, seg, json_deep_copy(v)) != 0) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	return 0;
}

/* splitmix64: the random method's generator (seeded, the same everywhere). */
static uint64_t next_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* ---- the continuations ---------------------------------------------------------- */

static enum MHD_Result store(struct api_request *req);
static enum MHD_Result preflighted(struct api_request *req);

static void preflight_done(void *arg, const struct api_preflight_result *res)
{
	struct api_request *req = arg;
	struct sweep_submit *s = req->state;
	char *shape = res->shape ? strdup(res->shape) : NULL;
	free(s->pre.shape);
	s->pre = *res;
	s->pre.shape = shape;
	api_resume(req);
}

/* Starts the preflight of the next group (parks the request). */
static enum MHD_Result next_preflight(struct api_request *req)
{
	struct sweep_submit *s = req->state;
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	struct child *c = &s->ch[s->leaders[s->next_group]];
	struct api_preflight in = { .user = req->principal.user,
	                            .admin = req->principal.role == API_ROLE_ADMIN,
	                            .spec = c->spec };
	enum MHD_Result ret = api_defer(req, preflighted);
	int rc = hooks->preflight(hooks->preflight_arg, &in, preflight_done, req);
	if (rc != 0) {
		s->pre.status = rc == -2 ? 429 : 503;
		snprintf(s->pre.message, sizeof s->pre.message, "too many submits are waiting for "
		         "their files to be checked, or larchd is stopping: try again");
		api_resume(req);
	}
	return ret;
}

static enum MHD_Result preflighted(struct api_request *req)
{
	struct sweep_submit *s = req->state;
	size_t leader = s->leaders[s->next_group];
	switch (s->pre.status) {
	case 0:
		break;
	case 400:
		return bad_child(req, leader, s->ch[leader].params, 400, s->pre.message);
	case 403:
		return api_reply_error(req, 403, API_ERR_FORBIDDEN, "%s", s->pre.message);
	case 429:
		return api_reply_error(req, 429, API_ERR_OVERLOADED, "%s", s->pre.message);
	default:
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "%s", s->pre.message);
	}
	s->shapes[s->next_group] = s->pre.shape;
	s->pre.shape = NULL;
	if (s->next_group == 0)
		snprintf(s->unix_user, sizeof s->unix_user, "%s", s->pre.unix_user);
	if (++s->next_group < s->n_groups)
		return next_preflight(req);
	return store(req);
}

/* The accounts and memory plans, then the sweep and its children into the
 * database, then the answer. */
static enum MHD_Result store(struct api_request *req)
{
	struct sweep_submit *s = req->state;
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	enum MHD_Result ret;
	const char *user = s->unix_user[0] ? s->unix_user : NULL;
	for (size_t i = 0; i < s->n; i++) {
		const char *account = s->ch[i].tspec.resources.account;
		int seen = 0;   /* each account once */
		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(s->ch[k].tspec.resources.account, account) == 0;
		if (!seen && api_account_or_reply(req, user, account, &ret))
			return ret;
	}
	if (hooks && hooks->memory_limits) {
		for (size_t i = 0; i < s->n; i++) {
			size_t g = 0;
			while (g + 1 < s->n_groups && s->leaders[g] != s->ch[i].group)
				g++;
			const char *shape = s->shapes ? s->shapes[g] : NULL;
			if (api_jobs_check_memory(req, hooks, &s->ch[i].tspec, shape, &ret))
				return ret;
		}
	}
	struct db_sweep_child_new *kids = calloc(s->n, sizeof *kids);
	if (!kids)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	char **params = calloc(s->n, sizeof *params);
	int oom = !params;
	for (size_t i = 0; i < s->n && !oom; i++) {
		params[i] = json_dumps(s->ch[i].params, JSON_COMPACT);
		oom = !params[i];
		kids[i] = (struct db_sweep_child_new){
			.name = s->ch[i].name, .spec = s->ch[i].spec, .params = params[i],
			.partition = s->ch[i].tspec.resources.partition[0]
			             ? s->ch[i].tspec.resources.partition : NULL };
	}
	int64_t id = 0;
	int rc = DB_ERROR;
	struct db_err err = { 0 };
	if (!oom) {
		struct db_sweep_new in = {
			.owner = req->principal.user, .name = s->name, .definition = s->definition,
			.method = s->method, .max_parallel = s->max_parallel,
			.target_metric = s->target_metric, .target_value = s->target_value,
			.target_mode = s->target_mode, .early_stop_after = s->early_stop_after,
			.labels = s->labels, .executor = hooks ? hooks->executor : NULL,
			.unix_user = user, .children = kids, .n = s->n,
		};
		rc = db_sweeps_submit(req->ctx->db, &in, &id, &err);
	}
	for (size_t i = 0; params && i < s->n; i++)
		free(params[i]);
	free(params);
	free(kids);
	if (oom)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	if (rc)
		return api_reply_db_error(req, rc, &err);
	const struct api_sweeps_hooks *sh = req->ctx->sweeps;
	if (sh && sh->sweep_submitted)
		sh->sweep_submitted(sh->arg, id);
	else if (hooks && hooks->submitted)
		hooks->submitted(hooks->arg, id);    /* wakes the runner: it finds them PENDING */
	char sid[DB_SWEEP_ID_MAX], location[64];
	db_sweep_id_format(id, sid);
	snprintf(location, sizeof location, "/v1/sweeps/%s", sid);
	if (api_reply_header(req, MHD_HTTP_HEADER_LOCATION, location))
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	return api_reply_sweep(req, 201, id);
}

/* ---- parsing -------------------------------------------------------------------- */

/* The body's fields other than base and axes into s; 0, or -1 replied. */
static int parse_fields(struct api_request *req, struct sweep_submit *s, size_t cap,
                        size_t *samples, uint64_t *seed, enum MHD_Result *ret)
{
	static const char *const known[] = { "name", "base", "axes", "method", "samples", "seed",
	                                     "max_parallel", "target", "early_stop", "labels",
	                                     "kind", "batch_sizes", NULL };
	json_t *body = s->body, *v;
	const char *key;
	json_object_foreach(body, key, v) {
		size_t k = 0;
		while (known[k] && strcmp(known[k], key) != 0)
			k++;
		if (!known[k]) {
			*ret = bad_field(req, key, "%.64s: unknown field (the fields are kind, name, base, "
			                 "axes, method, samples, seed, max_parallel, target, early_stop, "
			                 "labels, batch_sizes)", key);
			return -1;
		}
	}
	v = json_object_get(body, "name");
	if (!json_is_string(v) || !json_string_length(v)) {
		*ret = bad_field(req, "name", "name: required, a string");
		return -1;
	}
	s->name = json_string_value(v);
	if (!json_is_object(json_object_get(body, "base"))) {
		*ret = bad_field(req, "base", "base: required, a job spec (an object)");
		return -1;
	}
	v = json_object_get(body, "method");
	s->method = v ? json_string_value(v) : "grid";
	if (!s->method || (strcmp(s->method, "grid") != 0 && strcmp(s->method, "random") != 0)) {
		*ret = bad_field(req, "method", "method: must be \"grid\" or \"random\"");
		return -1;
	}
	int random = strcmp(s->method, "random") == 0;
	v = json_object_get(body, "samples");
	if (random != (v != NULL)) {
		*ret = bad_field(req, "samples", random ? "samples: required with method random"
		                                        : "samples: only with method random");
		return -1;
	}
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 ||
	          json_integer_value(v) > (json_int_t)cap)) {
		*ret = bad_field(req, "samples", "samples: must be an integer from 1 to %zu (the "
		                 "children a sweep may have)", cap);
		return -1;
	}
	*samples = v ? (size_t)json_integer_value(v) : 0;
	v = json_object_get(body, "seed");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
		*ret = bad_field(req, "seed", "seed: must be a non-negative integer");
		return -1;
	}
	if (v && !random) {
		*ret = bad_field(req, "seed", "seed: only with method random");
		return -1;
	}
	*seed = v ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(body, "max_parallel");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
	          json_integer_value(v) > 100000)) {
		*ret = bad_field(req, "max_parallel", "max_parallel: must be an integer from 0 (no "
		                 "limit) to 100000");
		return -1;
	}
	s->max_parallel = v ? (int)json_integer_value(v) : 0;
	v = json_object_get(body, "target");
	if (v) {
		static const char *const tknown[] = { "metric", "value", "mode", NULL };
		const char *tk;
		json_t *tv;
		if (!json_is_object(v)) {
			*ret = bad_field(req, "target", "target: must be an object {metric, value, mode}");
			return -1;
		}
		json_object_foreach(v, tk, tv) {
			size_t k = 0;
			while (tknown[k] && strcmp(tknown[k], tk) != 0)
				k++;
			if (!tknown[k]) {
				*ret = bad_field(req, "target", "target.%.64s: unknown field (metric, value, "
				                 "mode)", tk);
				return -1;
			}
		}
		json_t *m = json_object_get(v, "metric"), *val = json_object_get(v, "value"),
		       *mode = json_object_get(v, "mode");
		if (!json_is_string(m) || !api_metric_name_ok(json_string_value(m))) {
			*ret = bad_field(req, "target.metric", "target.metric: required, a metric name "
			                 "(\"val/accuracy\")");
			return -1;
		}
		if (!json_is_number(val) || !isfinite(json_number_value(val))) {
			*ret = bad_field(req, "target.value", "target.value: required, a number");
			return -1;
		}
		s->target_mode = mode ? json_string_value(mode) : "max";
		if (!s->target_mode || (strcmp(s->target_mode, "max") && strcmp(s->target_mode, "min"))) {
			*ret = bad_field(req, "target.mode", "target.mode: must be \"max\" or \"min\"");
			return -1;
		}
		s->target_metric = json_string_value(m);
		s->target_value = json_number_value(val);
	}
	v = json_object_get(body, "early_stop");
	if (v) {
		json_t *rule = json_object_get(v, "rule"), *after = json_object_get(v, "after_steps");
		if (!json_is_object(v) || json_object_size(v) != 2 || !json_is_string(rule) ||
		    strcmp(json_string_value(rule), "median") != 0 || !json_is_integer(after) ||
		    json_integer_value(after) < 1) {
			*ret = bad_field(req, "early_stop", "early_stop: must be {\"rule\": \"median\", "
			                 "\"after_steps\": N} with N >= 1");
			return -1;
		}
		if (!s->target_metric) {
			*ret = bad_field(req, "early_stop", "early_stop: needs a target (its metric is "
			                 "what the children are compared on)");
			return -1;
		}
		s->early_stop_after = json_integer_value(after);
	}
	v = json_object_get(body, "labels");
	if (v) {
		char bad[160], why[512];
		if (!(s->labels = api_labels_json(v, "labels", bad, sizeof bad, why, sizeof why))) {
			*ret = bad_field(req, bad, "%s", why);
			return -1;
		}
	}
	return 0;
}

/* "kind": "batch_scaling": batch_sizes (2 to API_STUDY_FIT_MAX distinct
 * integers >= 1) become the one axis batch.global; a target the trainer can
 * stop on is required; axes, method, samples, seed and early_stop are not
 * for a study. 0 (also for an ordinary sweep), or -1 replied. */
static int parse_study(struct api_request *req, struct sweep_submit *s, size_t cap,
                       enum MHD_Result *ret)
{
	json_t *body = s->body, *kind = json_object_get(body, "kind");
	int study = json_is_string(kind) && strcmp(json_string_value(kind), "batch_scaling") == 0;
	if (kind && !study && !(json_is_string(kind) && strcmp(json_string_value(kind), "sweep") == 0)) {
		*ret = bad_field(req, "kind", "kind: must be \"sweep\" (the default) or "
		                 "\"batch_scaling\"");
		return -1;
	}
	if (!study) {
		if (json_object_get(body, "batch_sizes")) {
			*ret = bad_field(req, "batch_sizes", "batch_sizes: only with kind batch_scaling");
			return -1;
		}
		return 0;
	}
	static const char *const not_here[] = { "axes", "method", "samples", "seed", "early_stop",
	                                        NULL };
	for (size_t k = 0; not_here[k]; k++)
		if (json_object_get(body, not_here[k])) {
			*ret = bad_field(req, not_here[k], "%s: not with kind batch_scaling (its children "
			                 "differ in batch.global only, from batch_sizes)", not_here[k]);
			return -1;
		}
	if (!s->target_metric) {
		*ret = bad_field(req, "target", "target: required with kind batch_scaling (each "
		                 "child runs until it reaches it)");
		return -1;
	}
	if (strcmp(s->target_metric, "val/accuracy") != 0 && strcmp(s->target_metric, "val/loss") != 0) {
		*ret = bad_field(req, "target.metric", "target.metric: a batch_scaling study needs a "
		                 "metric the trainer evaluates: \"val/accuracy\" or \"val/loss\" (got "
		                 "\"%.64s\")", s->target_metric);
		return -1;
	}
	json_t *sizes = json_object_get(body, "batch_sizes");
	size_t n = json_array_size(sizes), most = cap < API_STUDY_FIT_MAX ? cap : API_STUDY_FIT_MAX;
	if (!json_is_array(sizes) || n < 2 || n > most) {
		*ret = bad_field(req, "batch_sizes", "batch_sizes: required with kind batch_scaling, a "
		                 "list of 2 to %zu batch sizes", most);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(sizes, i);
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000000) {
			char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			*ret = bad_field(req, "batch_sizes", "batch_sizes[%zu]: must be an integer from 1 to "
			                 "10^9 (got %.32s)", i, text ? text : "?");
			free(text);
			return -1;
		}
		for (size_t k = 0; k < i; k++)
			if (json_integer_value(json_array_get(sizes, k)) == json_integer_value(v)) {
				*ret = bad_field(req, "batch_sizes", "batch_sizes[%zu]: %lld is there twice "
				                 "(also at %zu)", i, (long long)json_integer_value(v), k);
				return -1;
			}
	}
	json_t *base = json_object_get(body, "base");
	json_t *batch = json_object_get(base, "batch"), *ev = json_object_get(base, "eval_every");
	json_t *ref = json_object_get(batch, "reference");
	if (!json_is_integer(ref))
		ref = json_object_get(batch, "global");
	if (!json_is_integer(ev) || json_integer_value(ev) < 1) {
		*ret = bad_field(req, "base.eval_every", "base.eval_every: a batch_scaling study needs "
		                 "eval_every > 0 (the target is checked at each evaluation)");
		return -1;
	}
	if (!json_is_integer(ref) || json_integer_value(ref) < 1) {
		*ret = bad_field(req, "base.batch.reference", "base.batch.reference: a batch_scaling "
		                 "study needs the base's batch size (batch.reference, or batch.global)");
		return -1;
	}
	s->study_reference = (long)json_integer_value(ref);
	s->study_eval_every = (long)json_integer_value(ev);
	s->study_axes = json_pack("{s:O}", "batch.global", sizes);
	if (!s->study_axes) {
		*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		return -1;
	}
	return 0;
}

/* A study's child: the target as its stop, and eval_every at the same
 * examples as the base's at batch.reference (at least 1). 0 or -1. */
static int study_child(const struct sweep_submit *s, json_t *spec, long batch)
{
	double every = (double)s->study_eval_every * (double)s->study_reference / (double)batch;
	long ev = every < 1 ? 1 : (long)llround(every);
	json_t *stop = json_pack("{s:s,s:f,s:s}", "metric", s->target_metric, "value",
	                         s->target_value, "mode", s->target_mode);
	return !stop || json_object_set_new(spec, "stop", stop) != 0 ||
	       json_object_set_new(spec, "eval_every", json_integer(ev)) != 0 ? -1 : 0;
}

/* The axes: paths, lists, and how many children they make. 0, or -1 replied. */
static int parse_axes(struct api_request *req, json_t *axes, size_t cap, size_t samples,
                      size_t *n, enum MHD_Result *ret)
{
	if (!json_is_object(axes) || json_object_size(axes) == 0) {
		*ret = bad_field(req, "axes", "axes: required, an object of at least one dotted path "
		                 "to a list of values");
		return -1;
	}
	if (json_object_size(axes) > AXES_MAX) {
		*ret = bad_field(req, "axes", "axes: at most %d axes", AXES_MAX);
		return -1;
	}
	size_t product = 1;
	int over = 0;
	const char *path, *other;
	json_t *values, *v2;
	json_object_foreach(axes, path, values) {
		char field[PATH_LEN_MAX + 8];
		snprintf(field, sizeof field, "axes.%.*s", PATH_LEN_MAX, path);
		const char *why = bad_path(path);
		if (why) {
			*ret = bad_field(req, field, "%s: %s", field, why);
			return -1;
		}
		json_object_foreach(axes, other, v2) {
			size_t len = strlen(other);
			if (other != path && strncmp(path, other, len) == 0 && path[len] == '.') {
				*ret = bad_field(req, field, "%s: inside axis %s: give one or the other", field,
				                 other);
				return -1;
			}
		}
		if (!json_is_array(values)) {
			*ret = bad_field(req, field, "%s: must be a list of values", field);
			return -1;
		}
		size_t len = json_array_size(values);
		if (len == 0) {
			*ret = bad_field(req, field, "%s: must not be empty", field);
			return -1;
		}
		if (product > cap / len)
			over = 1;
		else
			product *= len;
	}
	*n = samples ? samples : product;
	if (!samples && (over || product > cap)) {
		*ret = bad_field(req, "axes", "axes: the grid has %s%zu children, more than the %zu a "
		                 "sweep may have (sweep_max_children)", over ? "over " : "",
		                 over ? cap : product, cap);
		return -1;
	}
	return 0;
}

/* Child i's axis values: grid (mixed radix, the first axis slowest) or
 * random (the generator's next draws). A new object. */
static json_t *child_params(json_t *axes, size_t i, int random, uint64_t *rng)
{
	json_t *params = json_object();
	size_t n_axes = json_object_size(axes), k = 0;
	size_t *len = calloc(n_axes, sizeof *len);
	const char *path;
	json_t *values;
	if (!params || !len) {
		free(len);
		json_decref(params);
		return NULL;
	}
	json_object_foreach(axes, path, values)
		len[k++] = json_array_size(values);
	size_t rest = i, below = 1;
	for (size_t a = 0; a < n_axes; a++)
		below *= len[a];
	k = 0;
	json_object_foreach(axes, path, values) {
		size_t pick;
		if (random) {
			pick = (size_t)(next_rand(rng) % len[k]);
		} else {
			below /= len[k];
			pick = rest / below;
			rest %= below;
		}
		json_object_set(params, path, json_array_get(values, pick));
		k++;
	}
	free(len);
	return params;
}

/* Builds and validates every child; groups them for the preflight. 0, or
 * -1 replied. */
static int build_children(struct api_request *req, struct sweep_submit *s, json_t *axes,
                          size_t samples, uint64_t seed, enum MHD_Result *ret)
{
	json_t *base = json_object_get(s->body, "base");
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	int random = samples > 0;
	uint64_t rng = seed;
	int width = 1;
	for (size_t m = s->n - 1; m >= 10; m /= 10)
		width++;
	if (strlen(s->name) + 1 + (size_t)width > TRN_NAME_MAX) {
		*ret = bad_field(req, "name", "name: at most %d characters here (the children are "
		                 "named %s-%0*d ...)", TRN_NAME_MAX - 1 - width, "NAME", width, 0);
		return -1;
	}
	char **keys = calloc(s->n, sizeof *keys);
	if (!keys || !(s->leaders = calloc(s->n, sizeof *s->leaders))) {
		free(keys);
		*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		return -1;
	}
	int rc = -1;
	for (size_t i = 0; i < s->n; i++) {
		struct child *c = &s->ch[i];
		char name[2 * TRN_NAME_MAX];   /* fits: the name's length was checked above */
		int len = snprintf(name, sizeof name, "%s-%0*zu", s->name, width, i);
		if (len < 0 || (size_t)len >= sizeof c->name) {
			*ret = bad_field(req, "name", "name: too long");
			goto out;
		}
		memcpy(c->name, name, (size_t)len + 1);
		if (!(c->params = child_params(axes, i, random, &rng))) {
			*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
			goto out;
		}
		json_t *spec = json_deep_copy(base);
		char why[256];
		const char *path;
		json_t *v;
		int bad = !spec;
		json_object_foreach(c->params, path, v) {
			if (bad || set_path(spec, path, v, why, sizeof why) != 0) {
				json_decref(spec);
				char field[PATH_LEN_MAX + 8];
				snprintf(field, sizeof field, "axes.%s", path);
				*ret = bad_field(req, field, "%s: %s", field, bad ? "out of memory" : why);
				goto out;
			}
		}
		json_object_set_new(spec, "name", json_string(c->name));
		if (s->study_axes &&
		    study_child(s, spec, (long)json_integer_value(json_object_get(c->params,
		                                                                  "batch.global")))) {
			json_decref(spec);
			*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
			goto out;
		}
		struct trn_err terr = { 0 };
		int valid = trn_spec_from_json(&c->tspec, spec, &terr) == 0;
		json_decref(spec);
		if (!valid) {
			c->tspec.json = NULL;
			*ret = bad_child(req, i, c->params, 400, terr.text);
			goto out;
		}
		if (!(c->spec = trn_json_dumps(c->tspec.json, JSON_COMPACT | JSON_SORT_KEYS))) {
			*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
			goto out;
		}
		if (trn_plan_too_large(&c->tspec, &terr) == TRN_PLAN_TOO_LARGE) {
			*ret = bad_child(req, i, c->params, 422, terr.text);
			goto out;
		}
		const char *part = c->tspec.resources.partition;
		char perr[512];
		if (part[0] && hooks && hooks->partition_ok &&
		    (i == 0 || strcmp(part, s->ch[i - 1].tspec.resources.partition) != 0) &&
		    hooks->partition_ok(hooks->arg, part, perr, sizeof perr) != 0) {
			*ret = bad_child(req, i, c->params, 400, perr);
			goto out;
		}
		if (c->tspec.init_job[0]) {
			*ret = bad_child(req, i, c->params, 400, "init.job: a sweep's children cannot "
			                 "start from another job's checkpoint (give init.from a path)");
			goto out;
		}
		/* the preflight looks at the data (and init) files: once per distinct set */
		json_t *key = json_pack("{s:O?,s:O?}", "data", json_object_get(c->tspec.json, "data"),
		                        "init", json_object_get(c->tspec.json, "init"));
		keys[i] = key ? json_dumps(key, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		json_decref(key);
		if (!keys[i]) {
			*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
			goto out;
		}
		c->group = i;
		for (size_t g = 0; g < s->n_groups; g++)
			if (strcmp(keys[s->leaders[g]], keys[i]) == 0) {
				c->group = s->leaders[g];
				break;
			}
		if (c->group == i)
			s->leaders[s->n_groups++] = i;
	}
	if (!(s->shapes = calloc(s->n_groups, sizeof *s->shapes))) {
		*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	rc = 0;
out:
	for (size_t i = 0; i < s->n; i++)
		free(keys[i]);
	free(keys);
	return rc;
}

enum MHD_Result api_sweeps_post(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	if (api_post_request_or_reply(req, &db, &ret))
		return ret;
	json_t *body = api_body_or_reply(req, &ret);
	if (!body)
		return ret;
	if (!json_is_object(body)) {
		json_decref(body);
		return bad_field(req, "body", "body: must be an object (the sweep)");
	}
	struct sweep_submit *s = calloc(1, sizeof *s);
	if (!s) {
		json_decref(body);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	}
	s->body = body;
	const struct api_sweeps_hooks *sh = req->ctx->sweeps;
	size_t cap = sh && sh->max_children ? sh->max_children : DEFAULT_MAX_CHILDREN, samples;
	uint64_t seed;
	if (parse_fields(req, s, cap, &samples, &seed, &ret) || parse_study(req, s, cap, &ret))
		goto fail;
	json_t *axes = s->study_axes ? s->study_axes : json_object_get(body, "axes");
	if (parse_axes(req, axes, cap, samples, &s->n, &ret))
		goto fail;
	if (!(s->ch = calloc(s->n, sizeof *s->ch)) ||
	    !(s->definition = json_dumps(body, JSON_COMPACT))) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto fail;
	}
	if (build_children(req, s, axes, samples, seed, &ret))
		goto fail;
	req->state = s;
	req->state_free = submit_free;
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	if (!hooks || !hooks->preflight)
		return store(req);         /* no service behind the API (tests): no preflight */
	return next_preflight(req);
fail:
	submit_free(s);
	return ret;
}
