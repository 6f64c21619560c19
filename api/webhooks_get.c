/* api/webhooks_get.c - GET /v1/webhooks/{id}: one webhook with its
 * deliveries counted by state. The owner or an admin; another user's is 404. */
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "webhooks_common.h"

enum MHD_Result api_webhooks_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_webhook_request_or_reply(req, params, &db, &id, &ret))
		return ret;
	struct db_webhook w;
	struct db_err err = { 0 };
	int rc = db_webhooks_get(db, id, api_owner_scope(req), &w, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 512);
	api_webhook_write(&b, &w);
	db_webhook_release(&w);
	return api_reply_buf(req, 200, NULL, &b);
}
