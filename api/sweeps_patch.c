/* api/sweeps_patch.c - PATCH /v1/sweeps/{id} {"labels": {...}}: replaces
 * the labels of the sweep and of every child (api/labels.h). The owner or
 * an admin; another user's sweep is 404. The answer is the sweep. */
#include <stdlib.h>
#include <string.h>

#include "db/sweeps.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "sweeps_common.h"

enum MHD_Result api_sweeps_patch(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_sweep_request_or_reply(req, &db, &id, &ret))
		return ret;
	json_error_t jerr;
	json_t *body = api_body_json(req, &jerr);
	if (!body)
		return api_reply_bad_json(req, &jerr);
	json_t *labels = json_is_object(body) ? json_object_get(body, "labels") : NULL;
	if (!labels || json_object_size(body) != 1) {
		json_decref(body);
		return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                              json_pack("{s:s}", "field", "labels"),
		                              "body: must be {\"labels\": {...}} (labels are what a "
		                              "sweep's PATCH changes)");
	}
	char *text = api_labels_or_reply(req, labels, &ret);
	json_decref(body);
	if (!text)
		return ret;
	struct db_err err = { 0 };
	int rc = db_sweeps_set_labels(db, id, api_owner_scope(req), req->principal.user, text,
	                              &err);
	free(text);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	return api_reply_sweep(req, 200, id);
}
