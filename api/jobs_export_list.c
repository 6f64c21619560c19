/* api/jobs_export_list.c - GET /v1/jobs/{id}/exports: a job's exports
 * ({"exports": [...]}, by step then format), each with its state and, once
 * done, its files' names, sizes and sha256s; owner or admin. */
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_export.h"
#include "reply.h"

#include <stdlib.h>

enum MHD_Result api_jobs_export_list(struct api_request *req)
{
	enum MHD_Result ret;
	int64_t id;
	char job[DB_JOB_ID_MAX];
	if (api_export_job_or_reply(req, &id, job, &ret))
		return ret;
	const struct api_exports_hooks *hooks = api_exports_hooks_or_reply(req, &ret);
	if (!hooks)
		return ret;
	struct api_export *all = NULL;
	int n = hooks->list(hooks->arg, id, &all);
	if (n < 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	struct api_buf b;
	api_buf_init(&b, 256 + 1024 * (size_t)n);
	api_buf_adds(&b, "{\"exports\":[");
	for (int i = 0; i < n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		api_export_write(&b, job, &all[i]);
	}
	api_buf_adds(&b, "]}");
	free(all);
	return api_reply_buf(req, 200, NULL, &b);
}
