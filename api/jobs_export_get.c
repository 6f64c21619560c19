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
	enum MHD_Result ret;
	int64_t id;
	char job[DB_JOB_ID_MAX];
	if (api_export_job_or_reply(req, &id, job, &ret))
		return ret;
	struct api_export x;
	if (api_export_find_or_reply(req, id, job, &x, &ret))
		return ret;
	struct api_buf b;
	api_buf_init(&b, 1024);
	api_export_write(&b, job, &x);
	return api_reply_buf(req, 200, NULL, &b);
}
