/* api/jobs_cancel.c - POST /v1/jobs/{id}/cancel: stop a job.
 *
 * The service's cancel hook does it (api/jobs_hooks.h): a job not yet
 * running is CANCELLED at once; a running one is sent SIGTERM (it
 * checkpoints) and becomes CANCELLED when its process ends, so the job in
 * the 200 may still say RUNNING. A job that has ended is a 409; another
 * user's job a 404. No body is needed (an empty JSON object is accepted).
 */
#include <stdio.h>

#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "reply.h"

static enum MHD_Result reply_ended(struct api_request *req, const struct db_job *job)
{
	char id[DB_JOB_ID_MAX];
	db_job_id_format(job->id, id);
	return api_reply_error_detail(req, 409, API_ERR_CONFLICT,
	                              json_pack("{s:s}", "state", db_state_name(job->state)),
	                              "%s has already ended (%s)", id, db_state_name(job->state));
}

enum MHD_Result api_jobs_cancel(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	if (req->body_len) {
		json_error_t jerr;
		json_t *body = api_body_json(req, &jerr);
		int empty = json_is_object(body) && json_object_size(body) == 0;
		json_decref(body);
		if (!empty)
			return api_reply_error(req, 400, API_ERR_BAD_REQUEST,
			                       "body: must be empty or {}");
	}

	struct db_job job;
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &job, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	if (db_state_final(job.state)) {
		ret = reply_ended(req, &job);
		db_job_release(&job);
		return ret;
	}
	db_job_release(&job);

	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	if (!hooks || !hooks->cancel) {
		api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "1");
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "no executor to cancel with");
	}
	char why[256] = "";
	rc = hooks->cancel(hooks->arg, id, req->principal.user, why, sizeof why);
	if (rc < 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "cancel: %s",
		                       why[0] ? why : "failed");
	if (rc > 0) {
		/* it ended meanwhile: answer with the state it ended in */
		if (db_jobs_get(db, id, NULL, &job, &err))
			return api_reply_error(req, 409, API_ERR_CONFLICT, "the job has already ended");
		ret = reply_ended(req, &job);
		db_job_release(&job);
		return ret;
	}
	return api_reply_job(req, 200, id);
}
