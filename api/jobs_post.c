/* api/jobs_post.c - POST /v1/jobs: submit a training job.
 *
 * parse (the body, with the trainer's own validator: one source of truth)
 * -> the Idempotency-Key -> one db submit -> the `submitted` hook -> 201 +
 * Location + the job (200 and the job it made before for a retry with the
 * same key and spec; 409 for the same key with another spec).
 *
 * A submit is durable before it is answered, and the database commits
 * submits in groups (db/submit.c): one fsync for everything queued while
 * the last group committed. Waiting for that on the MHD thread would let
 * only as many submits share a commit as there are MHD threads, so the
 * handler parks the request (api_defer) and the writer thread's callback
 * wakes it (api_resume); the reply is the continuation's, submitted().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct_check.h"
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "reply.h"
#include "trainer/plan.h"
#include "trainer/spec.h"

#define IDEM_KEY_MAX 128

/* What the request carries from the handler to the continuation. */
struct submit {
	struct db_job_new in;             /* borrows the strings below */
	char *spec;                       /* canonical JSON of the validated spec */
	char name[TRN_NAME_MAX + 1];
	char partition[TRN_NAME_MAX + 1];
	/* the answer, written by the db writer before it resumes the request */
	int rc;
	struct db_submit out;
	struct db_err err;
};

static void submit_free(void *p)
{
	struct submit *s = p;
	free(s->spec);
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

/* The memory preflight (trainer/plan.h): a spec whose plan needs more than a
 * node of its partition has (or its resources.mem), or more than a GPU has,
 * is answered 422 with the plan, the limits and the largest micro-batch that
 * fits. A plan that cannot be made here (the data files are not readable
 * from larchd's host) does not stop the submit. Returns 0 to go on, or 1
 * with the reply in *ret. */
static int check_memory(struct api_request *req, const struct api_jobs_hooks *hooks,
                        const struct trn_spec *spec, enum MHD_Result *ret)
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
	struct trn_plan p;
	struct trn_err err = { 0 };
	int rc = trn_plan_make(&p, spec, 0, &err);
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
	long best = trn_plan_max_micro(spec, host, gpu, &err);
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

static enum MHD_Result reply_invalid(struct api_request *req, const char *message)
{
	const char *colon = strstr(message, ": ");
	char field[128] = "spec";
	if (colon && (size_t)(colon - message) < sizeof field) {
		memcpy(field, message, (size_t)(colon - message));
		field[colon - message] = '\0';
	}
	return api_reply_error_detail(req, 400, API_ERR_INVALID_SPEC,
	                              json_pack("{s:s}", "field", field), "%s", message);
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

/* The continuation, back on an MHD thread. */
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

enum MHD_Result api_jobs_post(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret))
		return ret;
	const char *key = req->idempotency_key;
	const char *why = key ? bad_key(key) : NULL;
	if (why)
		return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                              json_pack("{s:s}", "header", "Idempotency-Key"),
		                              "Idempotency-Key: %s", why);

	json_error_t jerr;
	json_t *root = api_body_json(req, &jerr);
	if (!root)
		return api_reply_bad_json(req, &jerr);
	struct trn_spec *spec = calloc(1, sizeof *spec);
	struct submit *s = calloc(1, sizeof *s);
	struct trn_err terr = { 0 };
	if (!spec || !s) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	if (trn_spec_from_json(spec, root, &terr) != 0) {
		ret = reply_invalid(req, terr.text);
		goto out;
	}
	/* compact with sorted keys: the text trn_spec_hash hashes, so the
	 * database's SHA-256 of it (the idempotency request hash) is that hash */
	s->spec = trn_json_dumps(spec->json, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s->spec) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	snprintf(s->name, sizeof s->name, "%s", spec->name);
	snprintf(s->partition, sizeof s->partition, "%s", spec->resources.partition);
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char perr[512];
	if (s->partition[0] && hooks && hooks->partition_ok &&
	    hooks->partition_ok(hooks->arg, s->partition, perr, sizeof perr) != 0) {
		ret = reply_invalid(req, perr);
		goto out;
	}
	if (api_account_or_reply(req, spec->resources.account, &ret))
		goto out;
	if (hooks && hooks->memory_limits && check_memory(req, hooks, spec, &ret))
		goto out;
	s->in = (struct db_job_new){
		.owner = req->principal.user,
		.name = s->name,
		.spec = s->spec,
		.executor = hooks ? hooks->executor : NULL,
		.partition = s->partition[0] ? s->partition : NULL,
		.idem_key = key,
	};
	req->state = s;
	req->state_free = submit_free;
	s = NULL;

	struct submit *st = req->state;
	ret = api_defer(req, submitted);
	int rc = db_jobs_submit_async(db, &st->in, committed, req, &st->err);
	if (rc) {
		st->rc = rc;            /* not queued: the continuation answers at once */
		api_resume(req);
	}
out:
	if (spec && spec->json)
		trn_spec_release(spec);
	free(spec);
	if (s)
		submit_free(s);
	json_decref(root);
	return ret;
}
