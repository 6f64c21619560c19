/* api/jobs_result_post.c - POST /v1/jobs/{id}/result: larch-train's
 * result.json, posted once at the end of its run with the job token.
 *
 * {"status": "completed", "steps": 30, "final": {"val/loss": 1.2, ...},
 * "wall_s": 2.5, "exit_code": 0, "reason": "..."}: status and steps are
 * required, the rest optional, nothing else allowed. It is recorded as a
 * note in the job's history ("result: completed, 30 steps, ...") and as
 * the job's progress (the last step, the final train/loss). The job's
 * state is not changed here: that comes from the executor, which sees the
 * process end. 200 {"recorded": true}.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "metric_name.h"
#include "reply.h"

#define STATUS_MAX 32
#define REASON_MAX 256
#define NOTE_MAX 480

static enum MHD_Result reply_field(struct api_request *req, const char *field, const char *what)
{
	return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
	                              json_pack("{s:s}", "field", field), "%s: %s", field, what);
}

static int status_ok(const char *s)
{
	size_t len = strlen(s);
	if (len == 0 || len > STATUS_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
			return 0;
	return 1;
}

/* Checks the result; NULL when it is fine, else the field at fault with
 * *what saying why. */
static const char *check(json_t *root, const char **what)
{
	const char *key;
	json_t *v;
	if (!json_is_object(root))
		return *what = "must be an object", "result";
	json_object_foreach(root, key, v) {
		if (strcmp(key, "status") && strcmp(key, "steps") && strcmp(key, "final") &&
		    strcmp(key, "wall_s") && strcmp(key, "exit_code") && strcmp(key, "reason"))
			return *what = "unknown field", key;
	}
	json_t *status = json_object_get(root, "status"), *steps = json_object_get(root, "steps");
	json_t *final = json_object_get(root, "final"), *wall = json_object_get(root, "wall_s");
	json_t *code = json_object_get(root, "exit_code"), *reason = json_object_get(root, "reason");
	if (!json_is_string(status) || !status_ok(json_string_value(status)))
		return *what = "must be 1 to 32 characters of a-z _", "status";
	if (!json_is_integer(steps) || json_integer_value(steps) < 0)
		return *what = "must be an integer >= 0", "steps";
	if (final && !json_is_null(final)) {
		if (!json_is_object(final) || json_object_size(final) > 64)
			return *what = "must be an object of at most 64 metrics", "final";
		json_object_foreach(final, key, v)
			if (!api_metric_name_ok(key) || !(json_is_number(v) || json_is_null(v)))
				return *what = "must map metric names to numbers or null", "final";
	}
	if (wall && !(json_is_number(wall) && json_number_value(wall) >= 0))
		return *what = "must be a number >= 0", "wall_s";
	if (code && !json_is_integer(code))
		return *what = "must be an integer", "exit_code";
	if (reason && !json_is_null(reason) &&
	    !(json_is_string(reason) && strlen(json_string_value(reason)) <= REASON_MAX))
		return *what = "must be a string of at most 256 bytes", "reason";
	return NULL;
}

/* "result: completed, 30 steps, exit 0, 2.5 s, train/loss 1.234, ..." */
static void note_text(json_t *root, char *out, size_t size)
{
	size_t n = (size_t)snprintf(out, size, "result: %s, %lld steps",
	                            json_string_value(json_object_get(root, "status")),
	                            (long long)json_integer_value(json_object_get(root, "steps")));
	json_t *code = json_object_get(root, "exit_code"), *wall = json_object_get(root, "wall_s");
	json_t *reason = json_object_get(root, "reason"), *final = json_object_get(root, "final");
	if (code && n < size)
		n += (size_t)snprintf(out + n, size - n, ", exit %lld",
		                      (long long)json_integer_value(code));
	if (wall && n < size)
		n += (size_t)snprintf(out + n, size - n, ", %.3g s", json_number_value(wall));
	const char *key;
	json_t *v;
	json_object_foreach(final, key, v) {
		if (n >= size)
			break;
		if (json_is_number(v))
			n += (size_t)snprintf(out + n, size - n, ", %s %.6g", key, json_number_value(v));
	}
	if (json_is_string(reason) && n < size)
		snprintf(out + n, size - n, " (%s)", json_string_value(reason));
}

enum MHD_Result api_jobs_result_post(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_job_request_or_reply(req, params, &db, &id, &ret))
		return ret;

	json_error_t jerr;
	json_t *root = api_body_json(req, &jerr);
	if (!root)
		return api_reply_bad_json(req, &jerr);
	const char *what = NULL, *field = check(root, &what);
	if (field) {
		char name[80];
		snprintf(name, sizeof name, "%.64s", field);
		ret = reply_field(req, name, what);
		json_decref(root);
		return ret;
	}

	char note[NOTE_MAX];
	note_text(root, note, sizeof note);
	struct db_err err = { 0 };
	int rc = db_jobs_note(db, id, "trainer", note, &err);
	if (!rc) {
		json_t *loss = json_object_get(json_object_get(root, "final"), "train/loss");
		int64_t steps = json_integer_value(json_object_get(root, "steps"));
		struct db_job job;
		if (steps > 0 && db_jobs_get(db, id, NULL, &job, &err) == 0) {
			/* a run that stopped early (cancelled, failed) did not run its
			 * length: its steps are not the total */
			const char *status = json_string_value(json_object_get(root, "status"));
			int64_t total = job.progress_total;
			if (total <= 0 && status && strcmp(status, "completed") == 0)
				total = steps;
			if (steps >= job.progress_step)
				db_jobs_progress(db, id, steps, total,
				                 json_is_number(loss) ? json_number_value(loss) : job.last_loss,
				                 &err);
			db_job_release(&job);
		}
	}
	json_decref(root);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	return api_reply_json(req, 200, json_pack("{s:b}", "recorded", 1));
}
