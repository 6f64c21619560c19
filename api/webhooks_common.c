/* api/webhooks_common.c - see webhooks_common.h. */
#include "webhooks_common.h"

#include "jobs_common.h"
#include "reply.h"

const char *const api_webhook_events[] = {
	"job.queued", "job.running", "job.completed", "job.failed", "job.cancelled",
	"job.timeout", "job.held", "job.requeued", "job.preempted", "sweep.completed", NULL,
};

static int webhook_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret)
{
	const char *s = api_param(req, "id");
	if (db_webhook_id_parse(s, id) == 0)
		return 0;
	*ret = api_reply_error(req, 404, API_ERR_NOT_FOUND, "no webhook %s", s ? s : "");
	return -1;
}

int api_webhook_request_or_reply(struct api_request *req, const char *const *allowed,
                                 struct db **db, int64_t *id, enum MHD_Result *ret)
{
	return api_db_or_reply(req, db, ret) || webhook_id_or_reply(req, id, ret) ||
	       api_query_known_or_reply(req, allowed, ret) ? -1 : 0;
}

void api_webhook_write(struct api_buf *b, const struct db_webhook *w)
{
	char id[DB_WEBHOOK_ID_MAX];
	db_webhook_id_format(w->id, id);
	api_buf_adds(b, "{\"id\":");
	api_buf_json_str(b, id);
	api_buf_adds(b, ",\"owner\":");
	api_buf_json_str(b, w->owner);
	api_buf_adds(b, ",\"url\":");
	api_buf_json_str(b, w->url);
	api_buf_adds(b, ",\"events\":");
	api_buf_adds(b, w->events);   /* a JSON array, checked when stored */
	api_buf_adds(b, ",\"created\":");
	api_buf_json_time(b, w->created_ms);
	api_buf_printf(b, ",\"deliveries\":{\"pending\":%lld,\"delivered\":%lld,\"failed\":%lld}}",
	               (long long)w->pending, (long long)w->delivered, (long long)w->failed);
}
