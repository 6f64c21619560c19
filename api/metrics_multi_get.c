/* api/metrics_multi_get.c - GET /v1/metrics: one metric of many jobs, to
 * compare runs.
 *
 * jobs (required: comma-separated job ids, at most compare_max_jobs of
 * them, none twice), name (required, one metric), max_points (per job,
 * 1..10000, default 1000), from_step and to_step (inclusive), x (step,
 * examples or time; default step). Each job's series is read and
 * downsampled as GET /v1/jobs/{id}/metrics reads it (db_metrics_query: each
 * step bucket keeps its lowest and highest point), each job in its own read
 * snapshot.
 *
 *   {"name": "val/accuracy", "x": "step", "jobs": [
 *     {"id": "j-000001", "name": "bs256", "state": "COMPLETED",
 *      "points": [[x, value], ...]},
 *     {"id": "j-000002", "error": {"code": "not_found", "message": "no job j-000002"}}]}
 *
 * The entries keep the order of the jobs asked for. With x = examples, x is
 * step * the spec's batch.global; with x = time, seconds since the job first
 * entered RUNNING (its start time, else its first point), and then each
 * point is [x, value, step]. A value reported non-finite is null.
 *
 * A job the caller may not read answers exactly as a job that does not
 * exist (a not_found entry), so the answer tells nothing about other users'
 * jobs; a job without points of that name has "points": [].
 */
#include <jansson.h>
#include <string.h>

#include "db/jobs.h"
#include "db/metrics.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "metric_name.h"
#include "reply.h"

#define MULTI_MAX_POINTS 10000
#define MULTI_DEFAULT_POINTS 1000
#define MULTI_DEFAULT_JOBS 16     /* without hooks (tests); larchd: compare_max_jobs */
#define MULTI_JOBS_LIMIT 256      /* what compare_max_jobs may be at most */
#define STEP_MAX ((int64_t)1 << 53)

enum x_axis { X_STEP, X_EXAMPLES, X_TIME };
static const char *const x_names[] = { "step", "examples", "time", NULL };

struct want {
	int64_t id;
	char text[DB_JOB_ID_MAX];
};

/* Splits the jobs parameter into ids: 0, or -1 after replying 400. */
static int parse_jobs(struct api_request *req, const char *list, size_t cap, struct want *out,
                      size_t *n, enum MHD_Result *ret)
{
	*n = 0;
	if (!list || !*list) {
		*ret = api_reply_bad_param(req, "jobs", "jobs: required (comma-separated job ids, "
		                           "j-000123,j-000124)");
		return -1;
	}
	size_t count = 1;
	for (const char *p = list; *p; p++)
		count += *p == ',';
	if (count > cap) {
		*ret = api_reply_bad_param(req, "jobs", "jobs: at most %zu jobs in one request (got %zu)",
		                           cap, count);
		return -1;
	}
	for (const char *p = list;; p++) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		struct want *w = &out[*n];
		char canonical[DB_JOB_ID_MAX];
		int ok = len < sizeof w->text;
		if (ok) {
			memcpy(w->text, p, len);
			w->text[len] = '\0';
			ok = db_job_id_parse(w->text, &w->id) == 0;
		}
		if (ok) {
			db_job_id_format(w->id, canonical);
			ok = strcmp(canonical, w->text) == 0;
		}
		if (!ok) {
			*ret = api_reply_bad_param(req, "jobs", "jobs: \"%.*s\" is not a job id (j- and "
			                           "6 or more digits)", (int)(len > 32 ? 32 : len), p);
			return -1;
		}
		for (size_t i = 0; i < *n; i++)
			if (out[i].id == w->id) {
				*ret = api_reply_bad_param(req, "jobs", "jobs: %s is named twice", w->text);
				return -1;
			}
		(*n)++;
		if (!end)
			return 0;
		p = end;
	}
}

/* The spec's batch.global, or 0. */
static int64_t spec_global_batch(const char *spec)
{
	json_t *root = json_loads(spec ? spec : "", 0, NULL);
	json_t *g = json_object_get(json_object_get(root, "batch"), "global");
	int64_t v = json_is_integer(g) ? (int64_t)json_integer_value(g) : 0;
	json_decref(root);
	return v > 0 ? v : 0;
}

/* When the job first entered RUNNING (ms), else its start time, else 0. */
static int first_running(struct db *db, const struct db_job *job, const char *owner, int64_t *t0,
                         struct db_err *err)
{
	struct db_event_list ev;
	int rc = db_jobs_events(db, job->id, owner, &ev, err);
	if (rc)
		return rc;
	*t0 = job->start_ms;
	for (size_t i = 0; i < ev.n; i++)
		if (ev.events[i].to == DB_STATE_RUNNING) {
			*t0 = ev.events[i].time_ms;
			break;
		}
	db_event_list_release(&ev);
	return 0;
}

static void entry_error(struct api_buf *b, const char *code, const char *message)
{
	api_buf_adds(b, ",\"error\":{\"code\":");
	api_buf_json_str(b, code);
	api_buf_adds(b, ",\"message\":");
	api_buf_json_str(b, message);
	api_buf_adds(b, "}}");
}

/* Appends one job's entry; 0, or a db error code (err filled) for the
 * request to answer instead. */
static int write_entry(struct api_buf *b, struct db *db, const struct want *w,
                       const struct db_metric_query *q, enum x_axis x, struct db_err *err)
{
	api_buf_adds(b, "{\"id\":");
	api_buf_json_str(b, w->text);
	struct db_job job;
	int rc = db_jobs_get(db, w->id, q->owner, &job, err);
	if (rc == DB_NOT_FOUND) {        /* another's job reads as one that does not exist */
		char msg[64];
		snprintf(msg, sizeof msg, "no job %s", w->text);
		entry_error(b, api_error_info(API_ERR_NOT_FOUND)->code, msg);
		memset(err, 0, sizeof *err);
		return 0;
	}
	if (rc)
		return rc;
	int64_t scale = 0, t0 = 0;
	if (x == X_EXAMPLES)
		scale = spec_global_batch(job.spec);
	if (x == X_TIME && (rc = first_running(db, &job, q->owner, &t0, err)) != 0) {
		db_job_release(&job);
		return rc;
	}
	api_buf_adds(b, ",\"name\":");
	api_buf_json_str(b, job.name);
	api_buf_adds(b, ",\"state\":");
	api_buf_json_str(b, db_state_name(job.state));
	db_job_release(&job);
	if (x == X_EXAMPLES && !scale) {  /* every stored spec has one: validated at submit */
		entry_error(b, api_error_info(API_ERR_INTERNAL)->code, "its spec has no batch.global");
		return 0;
	}

	struct db_series_list list;
	if ((rc = db_metrics_query(db, w->id, q, &list, err)) != 0)
		return rc;
	const struct db_series *s = list.n ? &list.series[0] : NULL;
	if (s && x == X_TIME && !t0)
		t0 = s->time_ms[0];
	api_buf_adds(b, ",\"points\":[");
	for (size_t k = 0; s && k < s->n; k++) {
		api_buf_adds(b, k ? ",[" : "[");
		if (x == X_STEP)
			api_buf_json_int(b, s->step[k]);
		else if (x == X_EXAMPLES)
			api_buf_json_int(b, s->step[k] * scale);
		else
			api_buf_json_num(b, (double)(s->time_ms[k] - t0) / 1000.0);
		api_buf_addc(b, ',');
		api_buf_json_num(b, s->value[k]);
		if (x != X_STEP) {
			api_buf_addc(b, ',');
			api_buf_json_int(b, s->step[k]);
		}
		api_buf_addc(b, ']');
	}
	api_buf_adds(b, "]}");
	db_series_list_release(&list);
	return 0;
}

enum MHD_Result api_metrics_multi_get(struct api_request *req)
{
	static const char *const params[] = { "jobs", "name", "x", "from_step", "to_step",
	                                      "max_points", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t from, to, max_points;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret) ||
	    api_query_int_or_reply(req, "from_step", 0, STEP_MAX, -1, &from, &ret) ||
	    api_query_int_or_reply(req, "to_step", 0, STEP_MAX, -1, &to, &ret) ||
	    api_query_int_or_reply(req, "max_points", 1, MULTI_MAX_POINTS, MULTI_DEFAULT_POINTS,
	                           &max_points, &ret))
		return ret;
	if (from >= 0 && to >= 0 && from > to)
		return api_reply_bad_param(req, "to_step", "to_step: must be >= from_step (got %lld < "
		                           "%lld)", (long long)to, (long long)from);
	const char *name = api_query(req, "name");
	if (!name)
		return api_reply_bad_param(req, "name", "name: required (the metric to compare, "
		                           "val/accuracy)");
	if (!api_metric_name_ok(name))
		return api_reply_bad_param(req, "name", "name: must be 1 to %d characters of "
		                           "A-Z a-z 0-9 _ / . -, no empty, . or .. segment "
		                           "(got \"%.80s\")", API_METRIC_NAME_MAX, name);
	const char *xs = api_query(req, "x");
	enum x_axis x = X_STEP;
	if (xs) {
		int i = 0;
		while (x_names[i] && strcmp(x_names[i], xs) != 0)
			i++;
		if (!x_names[i])
			return api_reply_bad_param(req, "x", "x: must be step, examples or time (got "
			                           "\"%.32s\")", xs);
		x = (enum x_axis)i;
	}
	const struct api_jobs_hooks *hooks = req->ctx ? req->ctx->jobs : NULL;
	size_t cap = hooks && hooks->compare_max_jobs ? hooks->compare_max_jobs : MULTI_DEFAULT_JOBS;
	if (cap > MULTI_JOBS_LIMIT)
		cap = MULTI_JOBS_LIMIT;
	struct want want[MULTI_JOBS_LIMIT];
	size_t n;
	if (parse_jobs(req, api_query(req, "jobs"), cap, want, &n, &ret))
		return ret;

	const char *names[1] = { name };
	struct db_metric_query q = {
		.owner = api_owner_scope(req),
		.names = names, .n_names = 1,
		.has_from = from >= 0, .from_step = from,
		.has_to = to >= 0, .to_step = to,
		.max_points = (int)max_points,
		.with_time = x == X_TIME,
	};
	struct api_buf b;
	api_buf_init(&b, 4096);
	api_buf_adds(&b, "{\"name\":");
	api_buf_json_str(&b, name);
	api_buf_adds(&b, ",\"x\":");
	api_buf_json_str(&b, x_names[x]);
	api_buf_adds(&b, ",\"jobs\":[");
	for (size_t i = 0; i < n; i++) {
		struct db_err err = { 0 };
		if (i)
			api_buf_addc(&b, ',');
		int rc = write_entry(&b, db, &want[i], &q, x, &err);
		if (rc) {
			api_buf_release(&b);
			return api_reply_db_error(req, rc, &err);
		}
	}
	api_buf_adds(&b, "]}");
	return api_reply_buf(req, 200, NULL, &b);
}
