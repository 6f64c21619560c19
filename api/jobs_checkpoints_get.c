/* api/jobs_checkpoints_get.c - GET /v1/jobs/{id}/checkpoints: the
 * checkpoints the job has written, by step, each with the "init" that
 * starts another job from it ({"job": "j-000123", "step": 300}). The file's
 * path on the server is for admins only: a user cannot name it (the file is
 * the job owner's, and user-role paths may be confined) and has no use for
 * where larchd keeps it. */
#include "db/checkpoints.h"
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

enum MHD_Result api_jobs_checkpoints_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;

	struct db_checkpoint_list list;
	struct db_err err = { 0 };
	int rc = db_checkpoints_list(db, id, api_owner_scope(req), &list, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);

	int admin = req->principal.role == API_ROLE_ADMIN;
	char job[DB_JOB_ID_MAX];
	db_job_id_format(id, job);
	struct api_buf b;
	api_buf_init(&b, 128 + list.n * 256);
	api_buf_adds(&b, "{\"checkpoints\":[");
	for (size_t i = 0; i < list.n; i++) {
		const struct db_checkpoint *c = &list.items[i];
		api_buf_adds(&b, i ? ",{\"step\":" : "{\"step\":");
		api_buf_json_int(&b, c->step);
		if (admin) {
			api_buf_adds(&b, ",\"path\":");
			api_buf_json_str(&b, c->path);
		}
		api_buf_adds(&b, ",\"init\":{\"job\":");
		api_buf_json_str(&b, job);
		api_buf_adds(&b, ",\"step\":");
		api_buf_json_int(&b, c->step);
		api_buf_adds(&b, "},\"bytes\":");
		api_buf_json_int(&b, c->bytes);
		api_buf_adds(&b, ",\"sha256\":");
		api_buf_json_str(&b, c->sha256);
		api_buf_adds(&b, ",\"time\":");
		api_buf_json_time(&b, c->time_ms);
		api_buf_addc(&b, '}');
	}
	api_buf_adds(&b, "]}");
	db_checkpoint_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
