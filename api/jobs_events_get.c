/* api/jobs_events_get.c - GET /v1/jobs/{id}/events: the job's history,
 * oldest first: every state change (from null to PENDING at submit) and
 * every note (admin changes, the trainer's result: from = to). */
#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

enum MHD_Result api_jobs_events_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;

	struct db_event_list list;
	struct db_err err = { 0 };
	int rc = db_jobs_events(db, id, api_owner_scope(req), &list, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);

	struct api_buf b;
	api_buf_init(&b, 128 + list.n * 160);
	api_buf_adds(&b, "{\"events\":[");
	for (size_t i = 0; i < list.n; i++) {
		const struct db_event *e = &list.events[i];
		api_buf_adds(&b, i ? ",{\"seq\":" : "{\"seq\":");
		api_buf_json_int(&b, e->seq);
		api_buf_adds(&b, ",\"time\":");
		api_buf_json_time(&b, e->time_ms);
		api_buf_adds(&b, ",\"from\":");
		api_buf_json_str(&b, e->from >= 0 ? db_state_name(e->from) : NULL);
		api_buf_adds(&b, ",\"to\":");
		api_buf_json_str(&b, db_state_name(e->to));
		api_buf_adds(&b, ",\"by\":");
		api_buf_json_str(&b, e->by);
		api_buf_adds(&b, ",\"reason\":");
		api_buf_json_str(&b, e->reason);
		api_buf_addc(&b, '}');
	}
	api_buf_adds(&b, "]}");
	db_event_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
