/* api/admin_audit.c - GET /v1/audit: the audit log of admin actions,
 * newest first (admins).
 *
 * {"entries": [{"id", "time", "actor", "action", "target", "args",
 * "status", "outcome", "message"}, ...], "next_cursor": "..."}; filters
 * actor, action, target (exact); limit 1..500 (50) and cursor as GET
 * /v1/jobs has them. Reading the log is not itself logged.
 */
#include <string.h>

#include "admin_common.h"
#include "buf.h"
#include "handlers.h"
#include "jobs_common.h"

static void entry_write(struct api_buf *b, const struct db_audit_entry *e)
{
	api_buf_adds(b, "{\"id\":");
	api_buf_json_int(b, e->id);
	api_buf_adds(b, ",\"time\":");
	api_buf_json_time(b, e->time_ms);
	api_buf_adds(b, ",\"actor\":");
	api_buf_json_str(b, e->actor);
	api_buf_adds(b, ",\"action\":");
	api_buf_json_str(b, e->action);
	api_buf_adds(b, ",\"target\":");
	api_buf_json_str(b, e->target);
	api_buf_adds(b, ",\"args\":");
	if (e->args)
		api_buf_adds(b, e->args);        /* JSON text already (db_audit_insert checked it) */
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"status\":");
	api_buf_json_int(b, e->status);
	api_buf_adds(b, e->status < 400 ? ",\"outcome\":\"ok\"" : ",\"outcome\":\"error\"");
	api_buf_adds(b, ",\"message\":");
	api_buf_json_str(b, e->message);
	api_buf_adds(b, ",\"client\":");
	api_buf_json_str(b, e->client);
	api_buf_addc(b, '}');
}

/* A filter value: absent (NULL) or 1..max bytes. */
static int filter_or_reply(struct api_request *req, const char *name, size_t max,
                           const char **out, enum MHD_Result *ret)
{
	*out = api_query(req, name);
	if (*out && (!**out || strlen(*out) > max)) {
		*ret = api_reply_bad_param(req, name, "%s: must be 1 to %zu characters", name, max);
		return -1;
	}
	return 0;
}

enum MHD_Result api_admin_audit_get(struct api_request *req)
{
	static const char *const params[] = { "actor", "action", "target", "limit", "cursor",
	                                      NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t limit;
	struct db_audit_filter f = { 0 };
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret) ||
	    api_query_int_or_reply(req, "limit", 1, DB_LIST_MAX, 50, &limit, &ret) ||
	    filter_or_reply(req, "actor", DB_AUDIT_NAME_MAX, &f.actor, &ret) ||
	    filter_or_reply(req, "action", DB_AUDIT_NAME_MAX, &f.action, &ret) ||
	    filter_or_reply(req, "target", DB_AUDIT_TARGET_MAX, &f.target, &ret) ||
	    filter_or_reply(req, "cursor", DB_CURSOR_MAX, &f.cursor, &ret))
		return ret;
	f.limit = (int)limit;

	struct db_audit_list list;
	struct db_err err = { 0 };
	int rc = db_audit_list(db, &f, &list, &err);
	if (rc == DB_INVALID)
		return api_reply_bad_param(req, "cursor", "cursor: not a cursor from this server");
	if (rc)
		return api_reply_db_error(req, rc, &err);

	struct api_buf b;
	api_buf_init(&b, 256 + list.n * 384);
	api_buf_adds(&b, "{\"entries\":[");
	for (size_t i = 0; i < list.n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		entry_write(&b, &list.entries[i]);
	}
	api_buf_addc(&b, ']');
	if (list.next_cursor[0]) {
		api_buf_adds(&b, ",\"next_cursor\":");
		api_buf_json_str(&b, list.next_cursor);
	}
	api_buf_addc(&b, '}');
	db_audit_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
