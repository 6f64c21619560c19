/* api/jobs_list.c - GET /v1/jobs: a page of jobs, newest first.
 *
 * Filters: state (a state name), name (exact), owner (admins; a user sees
 * only their own jobs, and may name only themselves). limit 1..500 (50);
 * cursor: the next_cursor of the page before (opaque; anything else is a
 * 400). sweep=s-000001: only that sweep's children; label=key:value: only
 * jobs with that label (api/labels.h). {"jobs": [...], "next_cursor": "..."}, next_cursor absent on the
 * last page; with an ETag, so an unchanged page is a 304.
 */
#include <string.h>

#include "db/jobs.h"
#include "db/sweeps.h"
#include "handlers.h"
#include "labels.h"
#include "jobs_common.h"
#include "reply.h"

#define NAME_FILTER_MAX 128

/* The state names, for the message that refuses another. */
static void state_names(char *out, size_t size)
{
	size_t used = 0;
	out[0] = '\0';
	for (int s = 0; s < DB_STATE_COUNT && used + 16 < size; s++) {
		size_t n = strlen(db_state_name(s));
		if (used) {
			memcpy(out + used, ", ", 2);
			used += 2;
		}
		memcpy(out + used, db_state_name(s), n + 1);
		used += n;
	}
}

enum MHD_Result api_jobs_list(struct api_request *req)
{
	static const char *const params[] = { "state", "owner", "name", "limit", "cursor", "sweep",
	                                     "label", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t limit;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret) ||
	    api_query_int_or_reply(req, "limit", 1, DB_LIST_MAX, 50, &limit, &ret))
		return ret;

	struct db_job_filter f = { .limit = (int)limit, .owner = api_owner_scope(req),
	                           .name = api_query(req, "name"),
	                           .cursor = api_query(req, "cursor") };
	const char *state = api_query(req, "state");
	if (state) {
		int s = db_state_parse(state);
		if (s < 0) {
			char names[160];
			state_names(names, sizeof names);
			return api_reply_bad_param(req, "state", "state: no state \"%s\" (one of %s)",
			                           state, names);
		}
		f.has_state = 1;
		f.state = (enum db_state)s;
	}
	const char *owner = api_query(req, "owner");
	if (owner) {
		if (f.owner && strcmp(owner, f.owner) != 0)
			return api_reply_error(req, 403, API_ERR_FORBIDDEN,
			                       "owner: only admins may list other users' jobs");
		f.owner = owner;
	}
	if (f.name && (!*f.name || strlen(f.name) > NAME_FILTER_MAX))
		return api_reply_bad_param(req, "name", "name: must be 1 to %d characters",
		                           NAME_FILTER_MAX);
	const char *sweep = api_query(req, "sweep");
	if (sweep && db_sweep_id_parse(sweep, &f.sweep) != 0)
		return api_reply_bad_param(req, "sweep", "sweep: not a sweep id (s-000001)");
	const char *label = api_query(req, "label");
	char key[API_LABEL_KEY_MAX + 1];
	if (label) {
		const char *colon = strchr(label, ':');
		size_t klen = colon ? (size_t)(colon - label) : 0;
		if (colon && klen < sizeof key) {
			memcpy(key, label, klen);
			key[klen] = '\0';
		}
		if (!colon || klen >= sizeof key || !api_label_key_ok(key) ||
		    !api_label_value_ok(colon + 1))
			return api_reply_bad_param(req, "label", "label: must be key:value, a label key "
			                           "and value (a-z 0-9 _ . - keys; A-Z a-z 0-9 _ . - "
			                           "values)");
		f.label_key = key;
		f.label_value = colon + 1;
	}
	if (f.cursor && !*f.cursor)
		return api_reply_bad_param(req, "cursor", "cursor: must not be empty");

	struct db_job_list list;
	struct db_err err = { 0 };
	int rc = db_jobs_list(db, &f, &list, &err);
	if (rc)
		return api_reply_list_error(req, rc, &err);

	struct api_buf b;
	api_buf_init(&b, 256 + list.n * 1536);
	api_buf_adds(&b, "{\"jobs\":[");
	for (size_t i = 0; i < list.n; i++) {
		if (i)
			api_buf_addc(&b, ',');
		api_job_write(&b, &list.jobs[i]);
	}
	api_buf_list_end(&b, list.next_cursor);
	db_job_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
