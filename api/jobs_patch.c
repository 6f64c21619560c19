/* api/jobs_patch.c - PATCH /v1/jobs/{id}.
 *
 * {"labels": {...}} alone replaces the job's labels (api/labels.h): its
 * owner or an admin, in any state (another user's job is 404). Any other
 * change (priority, nice, time_limit, partition) is an admin's
 * (api/admin_jobs_patch.c; 403 for a user); labels are changed in a PATCH
 * of their own.
 */
#include "db/sweeps.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

#include <stdlib.h>

enum MHD_Result api_jobs_patch(struct api_request *req)
{
	json_error_t jerr;
	json_t *body = api_body_json(req, &jerr);
	json_t *labels = json_is_object(body) ? json_object_get(body, "labels") : NULL;
	if (!labels || json_object_size(body) != 1) {
		int mixed = labels != NULL;
		json_decref(body);
		if (mixed)
			return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
			                              json_pack("{s:s}", "field", "labels"),
			                              "labels: change them in a PATCH of their own");
		if (req->principal.role != API_ROLE_ADMIN)
			return api_reply_error(req, 403, API_ERR_FORBIDDEN, "only admins may change a "
			                       "job's priority, nice, time_limit or partition (owners may "
			                       "change its labels)");
		return api_admin_jobs_patch(req);
	}
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret)) {
		json_decref(body);
		return ret;
	}
	char *text = api_labels_or_reply(req, labels, &ret);
	json_decref(body);
	if (!text)
		return ret;
	struct db_err err = { 0 };
	int rc = db_jobs_set_labels(db, id, api_owner_scope(req), req->principal.user, text, &err);
	free(text);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	return api_reply_job(req, 200, id);
}
