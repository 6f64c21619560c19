/* api/admin_jobs_patch.c - PATCH /v1/jobs/{id}: change a job's priority,
 * nice value, time limit or partition (admins).
 *
 * Body: an object with at least one of
 *   "priority": integer 1..4294967294
 *   "nice": integer -2147483645..2147483645 (not with priority: Slurm drops the
 *           nice adjustment of a job given a priority)
 *   "time_limit": "HH:MM:SS" | "D-HH:MM:SS" | integer minutes (up to 366 days)
 *   "partition": a partition name (1..64 of A-Z a-z 0-9 _ . -)
 * Unknown fields and wrong types are 400. A job that has ended is 409; a
 * RUNNING one may change priority and nice only (409 otherwise).
 *
 * A job Slurm has (it has a Slurm id) is changed with one `scontrol update
 * JobId=...` first (Slurm's refusal is 409, or 400 for an unknown
 * partition; Slurm unreachable 503), then priority and partition are
 * stored (db_jobs_update, with an event). A job not handed over yet (or on
 * the local executor) has only what the database keeps, priority and
 * partition: nice and time_limit are 409 for it. Slurm silently keeps the
 * nice value of a job that was given a priority: that is a 409 too (the
 * rest of the update stands). The answer is the job; every call leaves an
 * audit entry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_common.h"
#include "handlers.h"
#include "jobs_common.h"

#define PRIORITY_MAX 4294967294LL
#define NICE_MAX 2147483645LL
#define TIME_LIMIT_MAX_S (366L * 24 * 3600)

/* Reads the body into s->call.update; 0, or -1 with the 400 replied. */
static int update_or_reply(struct api_request *req, json_t *body, enum MHD_Result *ret)
{
	static const char *const fields[] = { "priority", "nice", "time_limit", "partition", NULL };
	struct admin_req *s = req->state;
	struct api_admin_update *u = &s->call.update;
	if (!body || json_object_size(body) == 0) {
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "body: give at least one of "
		                  "priority, nice, time_limit, partition");
		return -1;
	}
	if (admin_known_fields_or_reply(req, body, fields, ret))
		return -1;
	const char *bad = NULL, *why = NULL;
	json_t *v;
	if ((v = json_object_get(body, "priority"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > PRIORITY_MAX)
			bad = "priority", why = "must be an integer from 1 to 4294967294";
		u->has_priority = 1;
		u->priority = json_integer_value(v);
	}
	if (!bad && (v = json_object_get(body, "nice"))) {
		if (!json_is_integer(v) || json_integer_value(v) < -NICE_MAX ||
		    json_integer_value(v) > NICE_MAX)
			bad = "nice", why = "must be an integer from -2147483645 to 2147483645";
		u->has_nice = 1;
		u->nice = json_integer_value(v);
	}
	if (!bad && (v = json_object_get(body, "time_limit"))) {
		long secs = admin_duration_s(v, TIME_LIMIT_MAX_S);
		if (secs <= 0)
			bad = "time_limit", why = "must be \"HH:MM:SS\", \"D-HH:MM:SS\" or an integer of "
			                           "minutes, more than 0 and at most 366 days";
		u->time_limit_s = secs;
	}
	if (!bad && (v = json_object_get(body, "partition"))) {
		if (!json_is_string(v) || !admin_partition_ok(json_string_value(v)))
			bad = "partition", why = "must be 1 to 64 characters of A-Z a-z 0-9 _ . - not "
			                         "starting with . or -";
		else
			snprintf(s->partition, sizeof s->partition, "%s", json_string_value(v));
		u->partition = s->partition;
	}
	if (!bad && u->has_priority && u->has_nice)
		bad = "nice", why = "give priority or nice, not both (Slurm drops the nice adjustment "
		                    "of a job given a priority)";
	if (bad) {
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "field", bad),
		                  "%s: %s", bad, why);
		return -1;
	}
	return 0;
}

/* What the update changed, for the audit entry: "priority 0 -> 5, ...". */
static void describe(const struct admin_req *s, char *out, size_t len)
{
	const struct api_admin_update *u = &s->call.update;
	size_t n = 0;
	out[0] = '\0';
#define ADD(...) n += (size_t)snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__)
	if (u->has_priority)
		ADD("%spriority %lld -> %lld", n ? ", " : "", (long long)s->old_priority, u->priority);
	if (u->has_nice)
		ADD("%snice %lld", n ? ", " : "", u->nice);
	if (u->time_limit_s)
		ADD("%stime_limit %ld s", n ? ", " : "", u->time_limit_s);
	if (u->partition)
		ADD("%spartition %s", n ? ", " : "", u->partition);
#undef ADD
}

/* The db's part (priority, partition), then the answer. */
static enum MHD_Result store(struct api_request *req)
{
	struct admin_req *s = req->state;
	const struct api_admin_update *u = &s->call.update;
	char what[512];
	describe(s, what, sizeof what);
	if (u->has_priority || u->partition) {
		struct db_job_update du = { .job = s->job, .by = req->principal.user,
		                            .has_priority = u->has_priority, .priority = u->priority,
		                            .partition = u->partition };
		struct db_err err = { 0 };
		int rc = db_jobs_update(req->ctx->db, &du, NULL, &err);
		if (rc)
			return admin_fail_db(req, rc, &err);
	}
	return admin_ok_job(req, s->job, "%s%s%s", what, s->call.message[0] ? "; " : "",
	                    s->call.message);
}

static enum MHD_Result updated(struct api_request *req)
{
	struct admin_req *s = req->state;
	if (s->call.status == 200)
		return store(req);
	if (s->call.partial && s->call.update.partition) {
		/* Slurm moved it all the same (only nice did not take): keep the
		 * database in step; the answer is the failure */
		struct db_job_update du = { .job = s->job, .by = req->principal.user,
		                            .partition = s->call.update.partition };
		db_jobs_update(req->ctx->db, &du, NULL, NULL);
	}
	return admin_fail_call(req);
}

enum MHD_Result api_admin_jobs_patch(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	const char *text = api_param(req, "id");
	struct admin_req *s = admin_begin(req, "job.update", "jobs", text);
	if (!s)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	json_t *body = NULL;
	if (api_query_known_or_reply(req, params, &ret) || admin_body_or_reply(req, &body, &ret))
		return ret;
	int bad = update_or_reply(req, body, &ret);
	json_decref(body);
	if (bad)
		return ret;
	int64_t id;
	struct db_job job;
	if (admin_job_or_reply(req, &id, &job, &ret))
		return ret;
	enum db_state st = job.state;
	int in_slurm = job.slurm_job_id && job.slurm_job_id[0];
	s->job = id;
	s->from = st;
	s->old_priority = job.priority;
	if (in_slurm)
		admin_call_job(s, &job);
	db_job_release(&job);

	const struct api_admin_update *u = &s->call.update;
	json_t *state = json_pack("{s:s}", "state", db_state_name(st));
	if (db_state_final(st))
		return admin_fail(req, 409, API_ERR_CONFLICT, state, "%s has already ended (%s)", text,
		                  db_state_name(st));
	if (st == DB_STATE_RUNNING && (u->time_limit_s || u->partition))
		return admin_fail(req, 409, API_ERR_CONFLICT, state, "%s is RUNNING: time_limit and "
		                  "partition change only before it starts", text);
	if (!in_slurm && (u->has_nice || u->time_limit_s))
		return admin_fail(req, 409, API_ERR_CONFLICT, state, "%s is %s and not in Slurm: only "
		                  "priority and partition can change (nice and time_limit apply to a "
		                  "job Slurm has)", text, db_state_name(st));
	json_decref(state);
	if (!in_slurm)
		return store(req);

	const struct api_admin_hooks *hooks;
	if (admin_hooks_or_reply(req, &hooks, &ret))
		return ret;
	if (!hooks->job)
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL, "the %s executor cannot update a "
		                  "Slurm job", hooks->executor);
	s->call.op = API_ADMIN_UPDATE;
	return admin_call(req, hooks->job, updated);
}
