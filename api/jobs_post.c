/* api/jobs_post.c - POST /v1/jobs: submit a training job.
 *
 * parse (the body, with the trainer's own validator: one source of truth)
 * -> the Idempotency-Key, the partition and an init that names another
 * job's checkpoint (which the submitter must be able to read) -> the
 * preflight -> the Slurm account (api/acct_check.h) -> the memory plan ->
 * one db submit (with the run's length in steps when it is known: the
 * job's progress.total_steps from the start) -> the `submitted` hook ->
 * 201 + Location + the job (200 and the job it made before for a retry with
 * the same key and spec; 409 for the same key with another spec).
 *
 * The preflight (the `preflight` hook; service/preflight.h) decides who the
 * job runs as and looks at the spec's input files, as that user, on a
 * thread of its own: no HTTP thread opens a path a user named. The handler
 * parks the request (api_defer) until it answers: refused (400 naming the
 * field, 403 for a user who may not run jobs here, 503 while larchd stops),
 * or go on, with the data's shape when the probe learned it in time. The
 * memory plan is made from that shape; without one there is none (the
 * trainer checks at its start).
 *
 * A submit is durable before it is answered, and the database commits
 * submits in groups (db/submit.c): one fsync for everything queued while
 * the last group committed. Waiting for that on the MHD thread would let
 * only as many submits share a commit as there are MHD threads, so the
 * request is parked again and the writer thread's callback wakes it
 * (api_resume); the reply is the continuation's, submitted().
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct_check.h"
#include "db/checkpoints.h"
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "jobs_submit.h"
#include "labels.h"
#include "reply.h"
#include "trainer/data.h"
#include "trainer/spec/plan.h"
#include "trainer/spec/spec.h"

#define IDEM_KEY_MAX 128

/* What the request carries from the handler to the continuations. */
struct submit {
	struct db_job_new in;             /* borrows the strings below */
	struct trn_spec *tspec;           /* the validated spec, for the memory plan */
	char *spec;                       /* canonical JSON of the validated spec */
	char *labels;                     /* the body's labels (api/labels.h), JSON, or NULL */
	char name[TRN_NAME_MAX + 1];
	char partition[TRN_NAME_MAX + 1];
	/* the preflight's answer, written by its thread before it resumes */
	struct api_preflight_result pre;  /* pre.shape: a copy owned here */
	/* the db's answer, written by the db writer before it resumes */
	int rc;
	struct db_submit out;
	struct db_err err;
};

static void submit_free(void *p)
{
	struct submit *s = p;
	if (s->tspec && s->tspec->json)
		trn_spec_release(s->tspec);
	free(s->tspec);
	free(s->pre.shape);
	free(s->spec);
	free(s->labels);
	free(s);
}

/* Idempotency-Key: 1 to 128 printable ASCII characters. NULL when fine. */
static const char *bad_key(const char *key)
{
	size_t len = strlen(key);
	if (len == 0 || len > IDEM_KEY_MAX)
		return "must be 1 to 128 characters";
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] < 0x20 || (unsigned char)key[i] > 0x7e)
			return "must be printable ASCII";
	return NULL;
}

/* 400 invalid_spec; detail.field is the path the validator's message starts
 * with ("batch.global: must be ..." -> "batch.global"). */
#define GIB (1024.0 * 1024.0 * 1024.0)

/* The memory preflight (trainer/spec/plan.h): a spec whose plan needs more than a
 * node of its partition has (or its resources.mem), or more than a GPU has,
 * is answered 422 with the plan, the limits and the largest micro-batch that
 * fits. The plan needs the data's shape, which the preflight's probe learned
 * (shape_json); without it (the files are not readable from larchd's host,
 * or the probe took too long) there is no plan and the submit goes on.
 * Returns 0 to go on, or 1 with the reply in *ret. */
int api_jobs_check_memory(struct api_request *req, const struct api_jobs_hooks *hooks,
                          const struct trn_spec *spec, const char *shape_json,
                          enum MHD_Result *ret)
{
	const int go_on = 0;
	double host = 0, gpu = 0;
	hooks->memory_limits(hooks->arg, spec->resources.partition, &host, &gpu);
	double mem = (double)spec->resources.mem_bytes;
	const char *host_what = "a node of the partition has";
	if (mem > 0 && (host <= 0 || mem < host)) {
		host = mem;
		host_what = "resources.mem gives";
	}
	if (spec->resources.gpus_per_node <= 0)
		gpu = 0;
	if (host <= 0 && gpu <= 0)
		return go_on;
	struct trn_dataset shape;
	struct trn_err err = { 0 };
	json_t *sj = shape_json ? json_loads(shape_json, 0, NULL) : NULL;
	int have = sj && trn_dataset_shape_from_json(&shape, sj, &err) == 0;
	json_decref(sj);
	if (!have)
		return go_on;
	struct trn_plan p;
	int rc = trn_plan_make_shape(&p, spec, &shape, 0, &err);
	if (rc == TRN_PLAN_TOO_LARGE) {
		*ret = api_reply_error(req, 422, API_ERR_INFEASIBLE, "%s", err.text);
		return 1;
	}
	if (rc != 0)
		return go_on;
	double node = p.host_bytes * p.ranks_per_node;
	int host_ok = host <= 0 || node <= host, gpu_ok = gpu <= 0 || p.device_bytes <= gpu;
	if (host_ok && gpu_ok)
		return go_on;
	long best = trn_plan_max_micro_shape(spec, &shape, host, gpu, &err);
	char micro[96];
	if (best > 0)
		snprintf(micro, sizeof micro, "the largest micro-batch that fits is %ld", best);
	else
		snprintf(micro, sizeof micro, "it does not fit even at micro-batch 1");
	json_t *detail = json_pack("{s:o, s:f, s:f, s:I}", "plan", trn_plan_json(&p),
	                           "host_limit_bytes", host, "gpu_limit_bytes", gpu,
	                           "largest_micro", (json_int_t)(best > 0 ? best : 0));
	if (!host_ok)
		*ret = api_reply_error_detail(req, 422, API_ERR_INFEASIBLE, detail,
		                              "memory: the job needs %.2f GiB of host memory per node "
		                              "(%d rank%s x %.2f GiB at micro-batch %ld), %s %.2f GiB; %s",
		                              node / GIB, p.ranks_per_node,
		                              p.ranks_per_node > 1 ? "s" : "", p.host_bytes / GIB,
		                              p.micro, host_what, host / GIB, micro);
	else
		*ret = api_reply_error_detail(req, 422, API_ERR_INFEASIBLE, detail,
		                              "memory: the job needs %.2f GiB per GPU at micro-batch "
		                              "%ld, a GPU has %.2f GiB (gpu_memory); %s",
		                              p.device_bytes / GIB, p.micro, gpu / GIB, micro);
	return 1;
}

enum MHD_Result api_reply_invalid_field(struct api_request *req, const char *field,
                                        const char *fmt, ...)
{
	char message[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	return api_reply_error_detail(req, 400, API_ERR_INVALID_SPEC,
	                              json_pack("{s:s}", "field", field), "%s", message);
}

static enum MHD_Result reply_invalid(struct api_request *req, const char *message)
{
	const char *colon = strstr(message, ": ");
	char field[128] = "spec";
	if (colon && (size_t)(colon - message) < sizeof field) {
		memcpy(field, message, (size_t)(colon - message));
		field[colon - message] = '\0';
	}
	return api_reply_invalid_field(req, field, "%s", message);
}

/* The db writer thread, once the submit's group has committed: records the
 * answer and wakes the request. The request is not touched after that. */
static void committed(void *arg, int rc, const struct db_submit *out, const struct db_err *err)
{
	struct api_request *req = arg;
	struct submit *s = req->state;
	s->rc = rc;
	if (out)
		s->out = *out;
	if (err)
		s->err = *err;
	api_resume(req);
}

/* The run's length in steps, known at submit for a spec in steps, and for
 * one in epochs when the probe learned the data's shape: the trainer's own
 * count (full global batches of the train split an epoch, trn_period_steps,
 * at least 1). 0 when not known yet: the trainer's first report tells. */
static int64_t total_steps(const struct trn_spec *spec, const char *shape_json)
{
	if (!spec->length.in_epochs)
		return (int64_t)spec->length.value;
	struct trn_dataset shape;
	struct trn_err err = { 0 };
	json_t *sj = shape_json ? json_loads(shape_json, 0, NULL) : NULL;
	int have = sj && trn_dataset_shape_from_json(&shape, sj, &err) == 0;
	json_decref(sj);
	if (!have || spec->batch.global <= 0)
		return 0;
	long steps = trn_period_steps(&spec->length, shape.train.n / spec->batch.global);
	return steps < 1 ? 1 : steps;
}

/* The last continuation, back on an MHD thread. */
static enum MHD_Result submitted(struct api_request *req)
{
	struct submit *s = req->state;
	if (s->rc)
		return api_reply_db_error(req, s->rc, &s->err);
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	if (!s->out.existed && hooks && hooks->submitted)
		hooks->submitted(hooks->arg, s->out.id);
	char id[DB_JOB_ID_MAX], location[64];
	db_job_id_format(s->out.id, id);
	snprintf(location, sizeof location, "/v1/jobs/%s", id);
	if (api_reply_header(req, MHD_HTTP_HEADER_LOCATION, location))
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	return api_reply_job(req, s->out.existed ? 200 : 201, s->out.id);
}

/* The memory plan, then the job into the database (parked until the writer
 * has committed it). */
static enum MHD_Result store(struct api_request *req)
{
	struct submit *s = req->state;
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	enum MHD_Result ret;
	/* Slurm's associations are those of the Unix user it runs as */
	if (api_account_or_reply(req, s->pre.unix_user[0] ? s->pre.unix_user : NULL,
	                         s->tspec->resources.account, &ret))
		return ret;
	if (hooks && hooks->memory_limits &&
	    api_jobs_check_memory(req, hooks, s->tspec, s->pre.shape, &ret))
		return ret;
	s->in.unix_user = s->pre.unix_user[0] ? s->pre.unix_user : NULL;
	s->in.total_steps = total_steps(s->tspec, s->pre.shape);
	ret = api_defer(req, submitted);
	int rc = db_jobs_submit_async(req->ctx->db, &s->in, committed, req, &s->err);
	if (rc) {
		s->rc = rc;             /* not queued: the continuation answers at once */
		api_resume(req);
	}
	return ret;
}

/* The preflight's thread: records its answer and wakes the request. */
static void preflight_done(void *arg, const struct api_preflight_result *res)
{
	struct api_request *req = arg;
	struct submit *s = req->state;
	char *shape = res->shape ? strdup(res->shape) : NULL;
	s->pre = *res;
	s->pre.shape = shape;
	api_resume(req);
}

/* Back from the preflight, on an MHD thread. */
static enum MHD_Result preflighted(struct api_request *req)
{
	struct submit *s = req->state;
	switch (s->pre.status) {
	case 0:
		return store(req);
	case 400:
		return api_reply_invalid_field(req, s->pre.field, "%s", s->pre.message);
	case 403:
		return api_reply_error(req, 403, API_ERR_FORBIDDEN, "%s", s->pre.message);
	case 429:
		return api_reply_error(req, 429, API_ERR_OVERLOADED, "%s", s->pre.message);
	default:
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "%s", s->pre.message);
	}
}

/* An init that names a checkpoint by job ({"job": "j-000123", "step": N}):
 * the job must be one the submitter may read, and have that checkpoint
 * (any, without a step). Returns 0 to go on, or 1 with the reply in *ret. */
static int check_init_job(struct api_request *req, struct db *db, const struct trn_spec *spec,
                          enum MHD_Result *ret)
{
	if (!spec->init_job[0])
		return 0;
	int64_t from;
	struct db_checkpoint_list list = { 0 };
	struct db_err err = { 0 };
	int rc = db_job_id_parse(spec->init_job, &from);
	if (rc == 0)
		rc = db_checkpoints_list(db, from, api_owner_scope(req), &list, &err);
	if (rc == DB_NOT_FOUND || rc == DB_INVALID) {
		*ret = api_reply_invalid_field(req, "init.job", "init.job: no job %s that you may read",
		                           spec->init_job);
		return 1;
	}
	if (rc) {
		*ret = api_reply_db_error(req, rc, &err);
		return 1;
	}
	int found = spec->init_step < 0 ? list.n > 0 : 0;
	for (size_t i = 0; spec->init_step >= 0 && i < list.n; i++)
		found |= list.items[i].step == spec->init_step;
	char have[256] = "";
	size_t o = 0;
	for (size_t i = 0; i < list.n && o + 24 < sizeof have; i++)
		o += (size_t)snprintf(have + o, sizeof have - o, "%s%lld", i ? ", " : "",
		                      (long long)list.items[i].step);
	db_checkpoint_list_release(&list);
	if (found)
		return 0;
	if (spec->init_step >= 0)
		*ret = api_reply_invalid_field(req, "init.step", "init.step: %s has no checkpoint of step "
		                           "%ld (%s%s)", spec->init_job, spec->init_step,
		                           o ? "it has steps " : "it has none", have);
	else
		*ret = api_reply_invalid_field(req, "init.job", "init.job: %s has no checkpoint yet",
		                           spec->init_job);
	return 1;
}

enum MHD_Result api_jobs_post(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	if (api_post_request_or_reply(req, &db, &ret))
		return ret;
	const char *key = req->idempotency_key;
	const char *why = key ? bad_key(key) : NULL;
	if (why)
		return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                              json_pack("{s:s}", "header", "Idempotency-Key"),
		                              "Idempotency-Key: %s", why);

	json_t *root = api_body_or_reply(req, &ret);
	if (!root)
		return ret;
	struct submit *s = calloc(1, sizeof *s);
	struct trn_err terr = { 0 };
	if (!s || !(s->tspec = calloc(1, sizeof *s->tspec))) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	/* labels are the job's, not the trainer's: taken out before the spec is
	 * validated */
	json_t *labels = json_is_object(root) ? json_object_get(root, "labels") : NULL;
	if (labels) {
		char bad[160], lwhy[512];
		if (!(s->labels = api_labels_json(labels, "labels", bad, sizeof bad, lwhy,
		                                  sizeof lwhy))) {
			ret = api_reply_invalid_field(req, bad, "%s", lwhy);
			goto out;
		}
		json_object_del(root, "labels");
	}
	if (trn_spec_from_json(s->tspec, root, &terr) != 0) {
		ret = reply_invalid(req, terr.text);
		goto out;
	}
	/* compact with sorted keys: the text trn_spec_hash hashes, so the
	 * database's SHA-256 of it (the idempotency request hash) is that hash */
	s->spec = trn_json_dumps(s->tspec->json, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s->spec) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	snprintf(s->name, sizeof s->name, "%s", s->tspec->name);
	snprintf(s->partition, sizeof s->partition, "%s", s->tspec->resources.partition);
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char perr[512];
	if (s->partition[0] && hooks && hooks->partition_ok &&
	    hooks->partition_ok(hooks->arg, s->partition, perr, sizeof perr) != 0) {
		ret = reply_invalid(req, perr);
		goto out;
	}
	if (check_init_job(req, db, s->tspec, &ret))
		goto out;
	if (trn_plan_too_large(s->tspec, &terr) == TRN_PLAN_TOO_LARGE) {
		ret = api_reply_error(req, 422, API_ERR_INFEASIBLE, "%s", terr.text);
		goto out;
	}
	s->in = (struct db_job_new){
		.owner = req->principal.user,
		.name = s->name,
		.spec = s->spec,
		.executor = hooks ? hooks->executor : NULL,
		.partition = s->partition[0] ? s->partition : NULL,
		.idem_key = key,
		.labels = s->labels,
	};
	req->state = s;
	req->state_free = submit_free;
	s = NULL;
	if (!hooks || !hooks->preflight) {
		ret = store(req);          /* no service behind the API (tests): no preflight */
		goto out;
	}
	struct submit *st = req->state;
	struct api_preflight in = { .user = req->principal.user,
	                            .admin = req->principal.role == API_ROLE_ADMIN,
	                            .spec = st->spec };
	ret = api_defer(req, preflighted);
	int rc = hooks->preflight(hooks->preflight_arg, &in, preflight_done, req);
	if (rc == -2) {
		st->pre.status = 429;
		snprintf(st->pre.message, sizeof st->pre.message, "too many of your submits are "
		         "waiting for their files to be checked: try again later");
		api_resume(req);
	} else if (rc != 0) {
		st->pre.status = 503;
		snprintf(st->pre.message, sizeof st->pre.message, "too many submits are waiting for "
		         "their files to be checked, or larchd is stopping: try again");
		api_resume(req);
	}
out:
	if (s)
		submit_free(s);
	json_decref(root);
	return ret;
}
