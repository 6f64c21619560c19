/* api/jobs_get.c - GET /v1/jobs/{id}: one job. Another user's job is 404,
 * as a missing one, so ids do not leak. The reply carries an ETag (a hash
 * of the body); pollers that send it back in If-None-Match get a 304 while
 * the job is unchanged. */
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

enum MHD_Result api_jobs_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_db_or_reply(req, &db, &ret) || api_job_id_or_reply(req, &id, &ret) ||
	    api_query_known_or_reply(req, params, &ret))
		return ret;

	struct db_job job;
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &job, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);

	struct api_buf b;
	api_buf_init(&b, 2048);
	api_job_write(&b, &job);
	db_job_release(&job);
	return api_reply_buf(req, 200, NULL, &b);
}
