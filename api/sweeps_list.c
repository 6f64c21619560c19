/* api/sweeps_list.c - GET /v1/sweeps: a page of sweeps, newest first, each
 * with its state and counts (not its children: GET /v1/sweeps/{id}).
 * Owner-scoped as jobs are: a user lists their own; an admin everyone's.
 * limit 1..500 (50), cursor: the next_cursor of the page before. */
#include "db/sweeps.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "sweeps_common.h"

enum MHD_Result api_sweeps_list(struct api_request *req)
{
	static const char *const params[] = { "limit", "cursor", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t limit;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret) ||
	    api_query_int_or_reply(req, "limit", 1, DB_LIST_MAX, 50, &limit, &ret))
		return ret;
	const char *cursor = api_query(req, "cursor");
	if (cursor && !*cursor)
		return api_reply_bad_param(req, "cursor", "cursor: must not be empty");
	struct db_sweep_list list;
	struct db_err err = { 0 };
	int rc = db_sweeps_list(db, api_owner_scope(req), (int)limit, cursor, &list, &err);
	if (rc)
		return api_reply_list_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 256 + list.n * 1024);
	api_buf_adds(&b, "{\"sweeps\":[");
	for (size_t i = 0; i < list.n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		api_sweep_write(&b, &list.sweeps[i], NULL, 0);
	}
	api_buf_list_end(&b, list.next_cursor);
	db_sweep_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
