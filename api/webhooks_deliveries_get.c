/* api/webhooks_deliveries_get.c - GET /v1/webhooks/{id}/deliveries: the
 * hook's deliveries, newest first (limit 1..500, 50), each with its event
 * (id, type, job or sweep, time), state, next attempt when pending, and
 * every attempt: when, the HTTP status (null: no answer), the error (null:
 * delivered) and how long it took. The owner or an admin. */
#include <string.h>

#include "db/jobs.h"
#include "db/sweeps.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "webhooks_common.h"

static void write_delivery(struct api_buf *b, const struct db_webhook_delivery *d)
{
	char id[DB_JOB_ID_MAX];
	api_buf_printf(b, "{\"id\":\"d-%06lld\",\"event\":\"ev-%06lld\",\"type\":",
	               (long long)d->id, (long long)d->event);
	api_buf_json_str(b, d->type);
	if (d->sweep) {
		char sid[DB_SWEEP_ID_MAX];
		db_sweep_id_format(d->sweep, sid);
		api_buf_adds(b, ",\"sweep\":");
		api_buf_json_str(b, sid);
	} else {
		db_job_id_format(d->job, id);
		api_buf_adds(b, ",\"job\":");
		api_buf_json_str(b, id);
	}
	api_buf_adds(b, ",\"time\":");
	api_buf_json_time(b, d->event_ms);
	api_buf_adds(b, ",\"state\":");
	api_buf_json_str(b, d->state);
	api_buf_adds(b, ",\"next_attempt\":");
	api_buf_json_time(b, strcmp(d->state, "pending") == 0 ? d->next_ms : 0);
	api_buf_adds(b, ",\"attempts\":[");
	for (size_t i = 0; i < d->n_attempts; i++) {
		const struct db_webhook_attempt *a = &d->attempts[i];
		api_buf_printf(b, "%s{\"n\":%d,\"time\":", i ? "," : "", a->n);
		api_buf_json_time(b, a->time_ms);
		api_buf_adds(b, ",\"status\":");
		if (a->status)
			api_buf_json_int(b, a->status);
		else
			api_buf_adds(b, "null");
		api_buf_adds(b, ",\"error\":");
		if (a->error)
			api_buf_json_str(b, a->error);
		else
			api_buf_adds(b, "null");
		api_buf_printf(b, ",\"duration_ms\":%lld}", (long long)a->duration_ms);
	}
	api_buf_adds(b, "]}");
}

enum MHD_Result api_webhooks_deliveries_get(struct api_request *req)
{
	static const char *const params[] = { "limit", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id, limit;
	if (api_webhook_request_or_reply(req, params, &db, &id, &ret) ||
	    api_query_int_or_reply(req, "limit", 1, DB_LIST_MAX, 50, &limit, &ret))
		return ret;
	struct db_webhook_delivery *list;
	size_t n;
	struct db_err err = { 0 };
	int rc = db_webhooks_deliveries(db, id, api_owner_scope(req), (int)limit, &list, &n, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 64 + n * 512);
	api_buf_adds(&b, "{\"deliveries\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		write_delivery(&b, &list[i]);
	}
	api_buf_adds(&b, "]}");
	db_webhook_deliveries_free(list, n);
	return api_reply_buf(req, 200, NULL, &b);
}
