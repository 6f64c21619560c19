/* api/webhooks_delete.c - DELETE /v1/webhooks/{id}: the webhook and its
 * deliveries, pending ones included (they are never sent). The owner or
 * an admin; another user's is 404. 204. */
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "webhooks_common.h"

enum MHD_Result api_webhooks_delete(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_webhook_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	struct db_err err = { 0 };
	int rc = db_webhooks_delete(db, id, api_owner_scope(req), &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 0);
	return api_reply_buf(req, 204, NULL, &b);
}
