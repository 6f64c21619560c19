/* api/jobs_get.c - GET /v1/jobs/{id}: one job. Another user's job is 404,
 * as a missing one, so ids do not leak. The reply carries an ETag (a hash
 * of the body); pollers that send it back in If-None-Match get a 304 while
 * the job is unchanged. Bodies come from the job cache (api/job_cache.h)
 * while no write has ended since they were read. */
#include <stdlib.h>
#include <string.h>

#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "handlers.h"
#include "job_cache.h"
#include "jobs_common.h"
#include "reply.h"

/* The cached body, when there is one and the principal may see it. */
static int from_cache(struct api_request *req, int64_t id, uint64_t generation,
                      struct api_buf *b)
{
	struct api_job_cache *cache = req->ctx->job_cache;
	char owner[DB_NAME_MAX + 1], *body;
	size_t len;
	if (!cache || !api_job_cache_get(cache, id, generation, &body, &len, owner, sizeof owner))
		return 0;
	const char *scope = api_owner_scope(req);
	if (scope && strcmp(scope, owner) != 0) {
		free(body);            /* the database's own 404, below */
		return 0;
	}
	*b = (struct api_buf){ .data = body, .len = len, .cap = len + 1 };
	return 1;
}

enum MHD_Result api_jobs_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;

	uint64_t generation = db_generation(db);     /* before the read: see db.h */
	struct api_buf b;
	if (from_cache(req, id, generation, &b))
		return api_reply_buf(req, 200, NULL, &b);

	struct db_job job;
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &job, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	api_buf_init(&b, 2048);
	api_job_write(&b, &job);
	if (req->ctx->job_cache && !b.oom)
		api_job_cache_put(req->ctx->job_cache, id, generation, b.data, b.len, job.owner);
	db_job_release(&job);
	return api_reply_buf(req, 200, NULL, &b);
}
