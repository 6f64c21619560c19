/* api/jobs_export_post.c - POST /v1/jobs/{id}/exports: export one of a job's
 * checkpoints to Hugging Face's layout on the server.
 *
 * Body {"step": N, "format": "hf-gpt2" | "hf-mlp"}, both optional: the
 * newest checkpoint, the format of the job's model (gpt: hf-gpt2, mlp:
 * hf-mlp). Nothing in it names a path: the checkpoint is the database's row
 * of that step, the export's directory exports/<step>-<format>/ of the job.
 * Owner or admin (another user's job is a 404).
 *
 * 202 Accepted with the export (state queued, or running) and Location; the
 * service runs it off the HTTP threads as the job's user (service/export.h).
 * The same step and format are the same export: a POST while it is queued
 * or running answers it again (202), one whose files are done for this
 * checkpoint answers them (200, also when the checkpoint was pruned since);
 * a failed one, or one of a checkpoint rewritten since, is made again.
 *
 * Refused: 400 a body that is not an object, an unknown field, a step that
 * is not a non-negative integer, a format not in the table; 422 a format
 * the job's model does not fit, a step with no checkpoint; 409 a job with
 * no checkpoint yet, or a checkpoint whose file is gone (pruned) or is not
 * one larchd would serve (api/job_file.h); 429 too many of the owner's
 * exports queued or running; 503 the queue full, or larchd stopping.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/checkpoints.h"
#include "db/jobs.h"
#include "handlers.h"
#include "job_file.h"
#include "jobs_common.h"
#include "jobs_export.h"
#include "jobs_hooks.h"
#include "reply.h"

#define JOB_DIR_MAX 4096

static enum MHD_Result bad_field(struct api_request *req, const char *field, const char *msg)
{
	return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
	                              json_pack("{s:s}", "field", field), "%s", msg);
}

/* The model type of a stored spec ("gpt", "mlp"), into buf; "" if none. */
static void model_type(const char *spec, char *buf, size_t len)
{
	json_t *root = json_loads(spec ? spec : "", 0, NULL);
	const char *t = json_string_value(json_object_get(json_object_get(root, "model"), "type"));
	snprintf(buf, len, "%s", t ? t : "");
	json_decref(root);
}

/* Parses the body: 0 with *step (-1: newest) and *format (NULL: the
 * model's), or -1 with the 400 replied. */
static int parse_body(struct api_request *req, int64_t *step, const char **format,
                      enum MHD_Result *ret)
{
	json_t *body = api_body_or_reply(req, ret);
	if (!body)
		return -1;
	int rc = -1;
	const char *key;
	json_t *v;
	char msg[200];
	if (!json_is_object(body)) {
		*ret = bad_field(req, "", "body: must be an object: {\"step\": N, \"format\": "
		                 "\"hf-gpt2\" | \"hf-mlp\"}, both optional");
		goto done;
	}
	json_object_foreach(body, key, v) {
		if (strcmp(key, "step") != 0 && strcmp(key, "format") != 0) {
			snprintf(msg, sizeof msg, "%.64s: unknown field (known: step, format)", key);
			*ret = bad_field(req, key, msg);
			goto done;
		}
	}
	json_t *s = json_object_get(body, "step"), *f = json_object_get(body, "format");
	*step = -1;
	*format = NULL;
	if (s && (!json_is_integer(s) || json_integer_value(s) < 0 ||
	          json_integer_value(s) > (INT64_C(1) << 53))) {
		*ret = bad_field(req, "step", "step: must be a checkpoint's step, an integer >= 0 "
		                 "(omitted: the newest)");
		goto done;
	}
	if (s)
		*step = json_integer_value(s);
	if (f) {
		for (int i = 0; json_is_string(f) && api_export_formats[i]; i++)
			if (strcmp(json_string_value(f), api_export_formats[i]) == 0 &&
			    strlen(api_export_formats[i]) == json_string_length(f))
				*format = api_export_formats[i];
		if (!*format) {
			char *got = json_dumps(f, JSON_ENCODE_ANY | JSON_COMPACT);
			snprintf(msg, sizeof msg, "format: unknown format %.64s (known: hf-gpt2, hf-mlp)",
			         got ? got : "?");
			free(got);
			*ret = bad_field(req, "format", msg);
			goto done;
		}
	}
	rc = 0;
done:
	json_decref(body);
	return rc;
}

static enum MHD_Result infeasible(struct api_request *req, const char *field, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));

static enum MHD_Result infeasible(struct api_request *req, const char *field, const char *fmt,
                                  ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return api_reply_error_detail(req, 422, API_ERR_INFEASIBLE,
	                              json_pack("{s:s}", "field", field), "%s", msg);
}

/* 202 with a queued or running export, 200 with a done one; Location. */
static enum MHD_Result reply_export(struct api_request *req, const char *job,
                                    const struct api_export *x)
{
	struct api_buf b;
	api_buf_init(&b, 1024);
	api_export_write(&b, job, x);
	char loc[128];
	snprintf(loc, sizeof loc, "/v1/jobs/%s/exports/%s", job, x->id);
	api_reply_header(req, MHD_HTTP_HEADER_LOCATION, loc);
	return api_reply_buf(req, x->state == API_EXPORT_DONE ? 200 : 202, NULL, &b);
}

/* The checks that need the job, and the hand-over. */
static enum MHD_Result export_job(struct api_request *req, int64_t id,
                                  const char *job, const struct db_job *j,
                                  const struct db_checkpoint_list *list, int64_t step,
                                  const char *format)
{
	char type[16];
	model_type(j->spec, type, sizeof type);
	const char *fits = strcmp(type, "gpt") == 0 ? "hf-gpt2" : strcmp(type, "mlp") == 0
	                   ? "hf-mlp" : NULL;
	if (!fits)
		return infeasible(req, "format", "%s: its model (%s) has no export format", job,
		                  type[0] ? type : "none");
	if (!format)
		format = fits;
	else if (strcmp(format, fits) != 0)
		return infeasible(req, "format", "format: %s does not fit %s, a%s %s model (its format "
		                  "is %s)", format, job, type[0] == 'm' ? "n" : "", type, fits);
	if (list->n == 0)
		return api_reply_error(req, 409, API_ERR_CONFLICT, "%s has no checkpoint yet (a job "
		                       "writes them every checkpoint_every steps and when it ends)",
		                       job);
	const struct db_checkpoint *ck = NULL;
	for (size_t i = 0; i < list->n; i++)
		if (step < 0 ? !ck || list->items[i].step > ck->step : list->items[i].step == step)
			ck = &list->items[i];
	if (!ck)
		return infeasible(req, "step", "step: %s has no checkpoint of step %" PRId64 " (GET "
		                  "/v1/jobs/%s/checkpoints lists them)", job, step, job);

	/* made, or being made, already: answered as it is (its checkpoint may
	 * have been pruned since) */
	const struct api_jobs_hooks *jh = req->ctx->jobs;
	const struct api_exports_hooks *hooks = jh->exports;
	char eid[API_EXPORT_ID_MAX];
	snprintf(eid, sizeof eid, "%" PRId64 "-%s", ck->step, format);
	struct api_export *all = NULL, x;
	int n = hooks->list(hooks->arg, id, &all), found = 0;
	for (int i = 0; i < n && !found; i++)
		if (strcmp(all[i].id, eid) == 0 && (all[i].state == API_EXPORT_QUEUED ||
		    all[i].state == API_EXPORT_RUNNING || (all[i].state == API_EXPORT_DONE &&
		    strcmp(all[i].checkpoint_sha256, ck->sha256) == 0))) {
			x = all[i];
			found = 1;
		}
	free(all);
	if (found)
		return reply_export(req, job, &x);

	/* its file must be there and be one larchd would serve */
	char dir[JOB_DIR_MAX], why[256];
	if (!jh->job_dir || jh->job_dir(jh->arg, id, dir, sizeof dir) != 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "the job's directory is unknown");
	struct stat st;
	int gone;
	int fd = api_job_file_open(dir, ck->path, &st, &gone, why, sizeof why);
	if (fd < 0)
		return api_reply_error(req, 409, API_ERR_CONFLICT, "checkpoint %" PRId64 " of %s: %s; "
		                       "it cannot be exported", ck->step, job, gone
		                       ? "its file is gone (pruned, or the job directory removed)"
		                       : why);
	close(fd);
	if ((int64_t)st.st_size != ck->bytes)
		return api_reply_error(req, 409, API_ERR_CONFLICT, "checkpoint %" PRId64 " of %s: its "
		                       "file has %lld bytes, %lld were recorded; it cannot be exported",
		                       ck->step, job, (long long)st.st_size, (long long)ck->bytes);

	struct api_export_request in = { .job = id, .owner = j->owner, .unix_user = j->unix_user,
	                                 .step = ck->step, .format = format,
	                                 .checkpoint = ck->path, .checkpoint_sha256 = ck->sha256 };
	int rc = hooks->start(hooks->arg, &in, &x);
	if (rc == -2)
		return api_reply_error(req, 429, API_ERR_OVERLOADED, "%s has too many exports queued "
		                       "or running; try again when one has finished", j->owner);
	if (rc < 0) {
		api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "5");
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "exports: the queue is full or "
		                       "larchd is stopping");
	}
	return reply_export(req, job, &x);
}

enum MHD_Result api_jobs_export_post(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	int64_t step;
	const char *format;
	if (parse_body(req, &step, &format, &ret))
		return ret;
	if (!api_exports_hooks_or_reply(req, &ret))
		return ret;
	char job[DB_JOB_ID_MAX];
	db_job_id_format(id, job);

	struct db_job j = { 0 };
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &j, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct db_checkpoint_list list = { 0 };
	rc = db_checkpoints_list(db, id, api_owner_scope(req), &list, &err);
	if (rc)
		ret = api_reply_db_error(req, rc, &err);
	else
		ret = export_job(req, id, job, &j, &list, step, format);
	db_checkpoint_list_release(&list);
	db_job_release(&j);
	return ret;
}
