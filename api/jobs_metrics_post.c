/* api/jobs_metrics_post.c - POST /v1/jobs/{id}/metrics: larch-train
 * reports a batch of points with its job token (docs/api.md, "What
 * larch-train sends").
 *
 * {"metrics": [{"step": 120, "time": 1763851234.512, "name": "train/loss",
 * "value": 0.4312}, ...]}: at most 10,000 points, each with exactly those
 * fields (value null for a non-finite one). The batch is stored in one
 * transaction and is idempotent on (name, step): a retried post changes
 * nothing. 200 {"accepted": N}. The newest train/loss also becomes the
 * job's progress (step, total steps, loss), so lists show it without
 * reading the metrics.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/jobs.h"
#include "db/metrics.h"
#include "handlers.h"
#include "jobs_common.h"
#include "metric_name.h"
#include "reply.h"

#define POINTS_MAX 10000
#define STEP_MAX ((json_int_t)1 << 53)
#define LOSS "train/loss"
#define EPOCH "train/epoch"

static enum MHD_Result reply_field(struct api_request *req, size_t i, const char *field,
                                   const char *what)
{
	char path[64];
	snprintf(path, sizeof path, "metrics[%zu].%s", i, field);
	return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
	                              json_pack("{s:s}", "field", path), "%s: %s", path, what);
}

/* Checks point i and fills *m (name borrowed from the JSON). 0, or -1 with
 * the reply made. */
static int point_or_reply(struct api_request *req, size_t i, json_t *p, struct db_metric *m,
                          enum MHD_Result *ret)
{
	if (!json_is_object(p)) {
		char path[32];
		snprintf(path, sizeof path, "metrics[%zu]", i);
		*ret = api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                              json_pack("{s:s}", "field", path),
		                              "%s: must be an object", path);
		return -1;
	}
	const char *key;
	json_t *v;
	json_object_foreach(p, key, v) {
		if (strcmp(key, "step") && strcmp(key, "time") && strcmp(key, "name") &&
		    strcmp(key, "value")) {
			char what[96];
			snprintf(what, sizeof what, "unknown field \"%.64s\"", key);
			*ret = reply_field(req, i, key, what);
			return -1;
		}
	}
	json_t *step = json_object_get(p, "step"), *time = json_object_get(p, "time");
	json_t *name = json_object_get(p, "name"), *value = json_object_get(p, "value");
	const char *bad = NULL, *field = NULL;
	if (!json_is_integer(step) || json_integer_value(step) < 0 ||
	    json_integer_value(step) > STEP_MAX)
		field = "step", bad = "must be an integer >= 0";
	else if (!json_is_number(time) || !(json_number_value(time) >= 0) ||
	         json_number_value(time) > 1e11)
		field = "time", bad = "must be a number >= 0 (seconds since the epoch)";
	else if (!json_is_string(name) || !api_metric_name_ok(json_string_value(name)))
		field = "name", bad = "must be 1 to 64 characters of A-Z a-z 0-9 _ / . - "
		                      "with no empty, . or .. segment";
	else if (!value || !(json_is_number(value) || json_is_null(value)))
		field = "value", bad = "must be a number or null";
	if (bad) {
		*ret = reply_field(req, i, field, bad);
		return -1;
	}
	*m = (struct db_metric){
		.name = json_string_value(name),
		.step = json_integer_value(step),
		.value = json_is_null(value) ? NAN : json_number_value(value),
		.time_ms = (int64_t)llround(json_number_value(time) * 1000.0),
	};
	return 0;
}

/* The total steps of a job: its spec's "steps", or, for a spec in
 * epochs, what one reported epoch at step tells (epoch = step / steps a
 * epoch). 0 when neither says. */
static int64_t total_steps(const char *spec, int64_t step, double epoch)
{
	json_t *root = spec ? json_loads(spec, 0, NULL) : NULL;
	int64_t total = 0;
	json_t *steps = json_object_get(root, "steps"), *epochs = json_object_get(root, "epochs");
	if (json_is_integer(steps))
		total = json_integer_value(steps);
	else if (json_is_number(epochs) && epoch > 0 && step > 0)
		total = llround(json_number_value(epochs) * (double)step / epoch);
	json_decref(root);
	return total;
}

/* The job's progress from the batch's newest train/loss, if it is newer
 * than what the job shows. Best effort: the points are stored already. */
static void update_progress(struct db *db, int64_t id, const struct db_metric *m, size_t n)
{
	const struct db_metric *loss = NULL;
	for (size_t i = 0; i < n; i++)
		if (strcmp(m[i].name, LOSS) == 0 && (!loss || m[i].step > loss->step))
			loss = &m[i];
	if (!loss || loss->step <= 0)
		return;
	double epoch = 0;
	for (size_t i = 0; i < n; i++)
		if (m[i].step == loss->step && strcmp(m[i].name, EPOCH) == 0)
			epoch = m[i].value;
	struct db_job job;
	struct db_err err = { 0 };
	if (db_jobs_get(db, id, NULL, &job, &err))
		return;
	if (loss->step > job.progress_step) {
		int64_t total = job.progress_total;
		if (total <= 0)
			total = total_steps(job.spec, loss->step, epoch);
		db_jobs_progress(db, id, loss->step, total, loss->value, &err);
	}
	db_job_release(&job);
}

enum MHD_Result api_jobs_metrics_post(struct api_request *req)
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
	json_t *list = json_object_get(root, "metrics");
	struct db_metric *points = NULL;
	if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(list)) {
		ret = api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                             json_pack("{s:s}", "field", "metrics"),
		                             "body: must be {\"metrics\": [...]}");
		goto out;
	}
	size_t n = json_array_size(list);
	if (n > POINTS_MAX) {
		ret = api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                             json_pack("{s:s}", "field", "metrics"),
		                             "metrics: at most %d points a post (got %zu)", POINTS_MAX,
		                             n);
		goto out;
	}
	points = malloc((n ? n : 1) * sizeof *points);
	if (!points) {
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (point_or_reply(req, i, json_array_get(list, i), &points[i], &ret))
			goto out;

	struct db_err err = { 0 };
	int rc = db_metrics_insert(db, id, points, n, NULL, &err);
	if (rc) {
		ret = api_reply_db_error(req, rc, &err);
		goto out;
	}
	update_progress(db, id, points, n);
	ret = api_reply_json(req, 200, json_pack("{s:I}", "accepted", (json_int_t)n));
out:
	free(points);
	json_decref(root);
	return ret;
}
