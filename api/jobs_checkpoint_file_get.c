/* api/jobs_checkpoint_file_get.c - GET (and HEAD) /v1/jobs/{id}/checkpoints/{step}:
 * the checkpoint file itself (safetensors, application/octet-stream), for
 * its owner or an admin (another user's job is a 404, as everywhere).
 *
 * The file is the one the database's row names, with the size and sha256
 * the row recorded; api/job_file.h opens it (no link followed, a regular
 * file of one link owned by the job's user), checks it and sends it: ETag
 * its sha256, If-None-Match, Range, If-Range, HEAD.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "db/checkpoints.h"
#include "db/jobs.h"
#include "handlers.h"
#include "job_file.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "reply.h"

#define JOB_DIR_MAX 4096

/* ---- the endpoint ----------------------------------------------------------- */

/* The {step} segment: digits, at most 2^53. -1 for anything else. */
static int64_t parse_step(const char *s)
{
	int64_t v = 0;
	if (!s || !*s || strlen(s) > 16)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v <= (INT64_C(1) << 53) ? v : -1;
}

enum MHD_Result api_jobs_checkpoint_file_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	char job[DB_JOB_ID_MAX];
	db_job_id_format(id, job);
	int64_t step = parse_step(api_param(req, "step"));
	if (step < 0)
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s has no checkpoint \"%s\" (a "
		                       "step is a number)", job, api_param(req, "step"));

	struct db_checkpoint_list list;
	struct db_err err = { 0 };
	int rc = db_checkpoints_list(db, id, api_owner_scope(req), &list, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	const struct db_checkpoint *ck = NULL;
	for (size_t i = 0; i < list.n; i++)
		if (list.items[i].step == step)
			ck = &list.items[i];
	if (!ck) {
		db_checkpoint_list_release(&list);
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s has no checkpoint of step %"
		                       PRId64, job, step);
	}

	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char dir[JOB_DIR_MAX];
	if (!hooks || !hooks->job_dir || hooks->job_dir(hooks->arg, id, dir, sizeof dir) != 0) {
		db_checkpoint_list_release(&list);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "the job's directory is unknown");
	}
	char what[96], filename[96];
	snprintf(what, sizeof what, "checkpoint %" PRId64 " of %s", step, job);
	snprintf(filename, sizeof filename, "%s-step-%08" PRId64 ".safetensors", job, step);
	struct api_job_file f = { .dir = dir, .path = ck->path, .bytes = ck->bytes,
	                          .sha256 = ck->sha256, .what = what, .filename = filename,
	                          .content_type = "application/octet-stream" };
	ret = api_job_file_reply(req, &f);
	db_checkpoint_list_release(&list);
	return ret;
}
