/* api/jobs_metrics_get.c - GET /v1/jobs/{id}/metrics: the job's series.
 *
 * name (repeatable; absent: every series), from_step and to_step
 * (inclusive), max_points (per series; absent: every point). With more
 * points than max_points the database keeps each step bucket's lowest and
 * highest point, so spikes survive. {"series": {"train/loss": [[step,
 * value], ...], ...}, "reported": true, "state": "RUNNING"}; a value
 * reported non-finite is null. "reported" says whether the job has stored
 * any point at all (of any name, at any step), so that an empty "series"
 * right after a submit reads "not yet" rather than "none asked for".
 */
#include <string.h>

#include "db/jobs.h"

#include "db/metrics.h"
#include "handlers.h"
#include "jobs_common.h"
#include "metric_name.h"
#include "reply.h"

#define MAX_POINTS 100000
#define STEP_MAX ((int64_t)1 << 53)

enum MHD_Result api_jobs_metrics_get(struct api_request *req)
{
	static const char *const params[] = { "name*", "from_step", "to_step", "max_points", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id, from, to, max_points;
	if (api_job_request_or_reply(req, params, &db, &id, &ret) ||
	    api_query_int_or_reply(req, "from_step", 0, STEP_MAX, -1, &from, &ret) ||
	    api_query_int_or_reply(req, "to_step", 0, STEP_MAX, -1, &to, &ret) ||
	    api_query_int_or_reply(req, "max_points", 1, MAX_POINTS, 0, &max_points, &ret))
		return ret;
	if (from >= 0 && to >= 0 && from > to)
		return api_reply_bad_param(req, "to_step", "to_step: must be >= from_step (got %lld < "
		                           "%lld)", (long long)to, (long long)from);

	const char *names[API_QUERY_MAX];
	size_t n_names = 0;
	for (size_t i = 0; i < req->n_query; i++) {
		if (strcmp(req->query[i].name, "name") != 0)
			continue;
		if (!api_metric_name_ok(req->query[i].value))
			return api_reply_bad_param(req, "name", "name: must be 1 to %d characters of "
			                           "A-Z a-z 0-9 _ / . -, no empty, . or .. segment "
			                           "(got \"%s\")", API_METRIC_NAME_MAX,
			                           req->query[i].value);
		names[n_names++] = req->query[i].value;
	}

	struct db_metric_query q = {
		.owner = api_owner_scope(req),
		.names = n_names ? names : NULL,
		.n_names = n_names,
		.has_from = from >= 0, .from_step = from,
		.has_to = to >= 0, .to_step = to,
		.max_points = (int)max_points,
	};
	struct db_series_list list;
	struct db_err err = { 0 };
	int rc = db_metrics_query(db, id, &q, &list, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);

	/* whether it reported at all: the series asked for have points, or, when
	 * a filter left none, any series has a last point */
	int reported = list.n > 0;
	if (!reported && (n_names || from >= 0 || to >= 0)) {
		struct db_metric_query any = { .owner = q.owner, .max_points = 1 };
		struct db_series_list last;
		if ((rc = db_metrics_query(db, id, &any, &last, &err)) != 0) {
			db_series_list_release(&list);
			return api_reply_db_error(req, rc, &err);
		}
		reported = last.n > 0;
		db_series_list_release(&last);
	}
	struct db_job job;
	if ((rc = db_jobs_get(db, id, q.owner, &job, &err)) != 0) {
		db_series_list_release(&list);
		return api_reply_db_error(req, rc, &err);
	}
	const char *state = db_state_name(job.state);
	db_job_release(&job);

	size_t points = 0;
	for (size_t i = 0; i < list.n; i++)
		points += list.series[i].n;
	struct api_buf b;
	api_buf_init(&b, 64 + list.n * 64 + points * 28);
	api_buf_adds(&b, "{\"series\":{");
	for (size_t i = 0; i < list.n; i++) {
		const struct db_series *s = &list.series[i];
		if (i)
			api_buf_addc(&b, ',');
		api_buf_json_str(&b, s->name);
		api_buf_adds(&b, ":[");
		for (size_t k = 0; k < s->n; k++) {
			api_buf_adds(&b, k ? ",[" : "[");
			api_buf_json_int(&b, s->step[k]);
			api_buf_addc(&b, ',');
			api_buf_json_num(&b, s->value[k]);
			api_buf_addc(&b, ']');
		}
		api_buf_addc(&b, ']');
	}
	api_buf_adds(&b, "},\"reported\":");
	api_buf_adds(&b, reported ? "true" : "false");
	api_buf_adds(&b, ",\"state\":");
	api_buf_json_str(&b, state);
	api_buf_addc(&b, '}');
	db_series_list_release(&list);
	return api_reply_buf(req, 200, NULL, &b);
}
