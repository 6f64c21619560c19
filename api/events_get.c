/* api/events_get.c - GET /v1/events: a long poll on job changes for the
 * dashboard (api/changes.h).
 *
 *   GET /v1/events                      -> {"stream", "last", "changes": []} at once
 *   GET /v1/events?after=N&stream=S     -> the changes after N the caller may see,
 *                                          as soon as there is one, or [] after timeout
 *
 * Users see changes of their own jobs, admins every change. "reset": true
 * says the cursor means nothing here (another stream: larchd restarted; or
 * further behind than the feed keeps): the client reloads what it shows
 * and goes on from "last". No database work: the feed is in memory. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "changes.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

#define EVENTS_MAX 500                 /* changes in one reply; the client asks again */
#define TIMEOUT_MAX_S 60
#define TIMEOUT_DEFAULT_S 25

struct poll_state {
	uint64_t after;
	int64_t deadline_ms;
	int stream_ok;
};

static enum MHD_Result reply_changes(struct api_request *req, struct api_changes *f,
                                     const struct api_change *ch, long n, uint64_t last,
                                     int reset)
{
	char stream[API_STREAM_MAX];
	api_changes_stream(f, stream);
	struct api_buf b;
	api_buf_init(&b, 96 + (n > 0 ? (size_t)n : 0) * 96);
	api_buf_adds(&b, "{\"stream\":");
	api_buf_json_str(&b, stream);
	api_buf_adds(&b, ",\"last\":");
	api_buf_json_int(&b, (int64_t)last);
	api_buf_adds(&b, ",\"reset\":");
	api_buf_adds(&b, reset ? "true" : "false");
	api_buf_adds(&b, ",\"changes\":[");
	for (long i = 0; i < n; i++) {
		char id[API_JOB_ID_MAX];
		snprintf(id, sizeof id, "j-%06lld", (long long)ch[i].c.job);
		api_buf_adds(&b, i ? ",{\"seq\":" : "{\"seq\":");
		api_buf_json_int(&b, (int64_t)ch[i].seq);
		api_buf_adds(&b, ",\"job\":");
		api_buf_json_str(&b, id);
		api_buf_adds(&b, ",\"state\":");
		api_buf_json_str(&b, ch[i].c.state);
		api_buf_adds(&b, ",\"time\":");
		api_buf_json_time(&b, ch[i].c.time_ms);
		api_buf_addc(&b, '}');
	}
	api_buf_adds(&b, "]}");
	api_changes_count_served(f);
	req->no_store = 1;               /* a long poll's answer is never a cache's */
	return api_reply_buf(req, 200, NULL, &b);
}

/* Reads the feed; answers, or parks the request until there is something
 * for it or its deadline. Both the handler and, once woken, the
 * continuation run it. */
static enum MHD_Result poll_feed(struct api_request *req)
{
	struct api_changes *f = req->ctx->changes;
	struct poll_state *ps = req->state;
	const char *owner = api_owner_scope(req);
	uint64_t last;
	if (!ps->stream_ok)              /* another larchd's cursor */
		return reply_changes(req, f, NULL, 0, api_changes_last(f), 1);
	struct api_change *ch = malloc(EVENTS_MAX * sizeof *ch);
	if (!ch)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	long n = api_changes_read(f, ps->after, owner, ch, EVENTS_MAX, &last);
	if (n != 0 || api_changes_now_ms() >= ps->deadline_ms || api_changes_closed(f)) {
		enum MHD_Result ret = reply_changes(req, f, ch, n < 0 ? 0 : n, last, n < 0);
		free(ch);
		return ret;
	}
	free(ch);
	/* nothing new for this caller up to last: wait for what comes after */
	ps->after = last;
	enum MHD_Result ret = api_defer(req, poll_feed);
	if (api_changes_wait(f, req, last, owner, ps->deadline_ms) != 0)
		api_resume(req);             /* out of memory: it answers (empty) at once */
	return ret;
}

enum MHD_Result api_events_get(struct api_request *req)
{
	static const char *const params[] = { "after", "stream", "timeout", NULL };
	enum MHD_Result ret;
	int64_t after, timeout;
	if (api_query_known_or_reply(req, params, &ret) ||
	    api_query_int_or_reply(req, "after", 0, INT64_MAX, -1, &after, &ret) ||
	    api_query_int_or_reply(req, "timeout", 0, TIMEOUT_MAX_S, TIMEOUT_DEFAULT_S, &timeout,
	                           &ret))
		return ret;
	struct api_changes *f = req->ctx->changes;
	if (!f)
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "the change feed is not running");
	const char *stream = api_query(req, "stream");
	if (stream && after < 0)
		return api_reply_bad_param(req, "stream", "stream: only with after");
	if (after < 0)                   /* where to start from */
		return reply_changes(req, f, NULL, 0, api_changes_last(f), 0);
	char mine[API_STREAM_MAX];
	api_changes_stream(f, mine);
	struct poll_state *ps = calloc(1, sizeof *ps);
	if (!ps)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	*ps = (struct poll_state){ .after = (uint64_t)after,
	                           .deadline_ms = api_changes_now_ms() + timeout * 1000,
	                           .stream_ok = !stream || strcmp(stream, mine) == 0 };
	req->state = ps;
	req->state_free = free;
	return poll_feed(req);
}
