/* api/jobs_export_get.c - GET /v1/jobs/{id}/exports/{export}: one export
 * ("10-hf-gpt2"), to poll until its state is done or failed; owner or
 * admin. */
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_export.h"
#include "reply.h"

enum MHD_Result api_jobs_export_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	struct db_job j = { 0 };
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &j, &err);
	db_job_release(&j);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	char job[DB_JOB_ID_MAX];
	db_job_id_format(id, job);
	struct api_export x;
	if (api_export_find_or_reply(req, id, job, &x, &ret))
		return ret;
	struct api_buf b;
	api_buf_init(&b, 1024);
	api_export_write(&b, job, &x);
	return api_reply_buf(req, 200, NULL, &b);
}
