/* api/webhooks_list.c - GET /v1/webhooks: the user's webhooks, newest
 * first (an admin's: everyone's, at most 500). Never their secrets. */
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "webhooks_common.h"

enum MHD_Result api_webhooks_list(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret))
		return ret;
	struct db_webhook *list;
	size_t n;
	struct db_err err = { 0 };
	int rc = db_webhooks_list(db, api_owner_scope(req), DB_LIST_MAX, &list, &n, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 64 + n * 512);
	api_buf_adds(&b, "{\"webhooks\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		api_webhook_write(&b, &list[i]);
	}
	api_buf_adds(&b, "]}");
	db_webhooks_free(list, n);
	return api_reply_buf(req, 200, NULL, &b);
}
