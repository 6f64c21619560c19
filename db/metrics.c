/* db/metrics.c - batched idempotent inserts and min/max downsampling. */
#include "db/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

/* ---- insert ----------------------------------------------------------------- */

static const char sql_insert[] =
	"INSERT INTO metrics (job, name, step, value, time) VALUES (?1, ?2, ?3, ?4, ?5)\n"
	"ON CONFLICT (job, name, step) DO NOTHING";

struct insert_arg {
	int64_t job;
	const struct db_metric *p;
	size_t n, inserted;
};

static int insert_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct insert_arg *a = arg;
	a->inserted = 0;
	if (db_job_visible(c, a->job, NULL, "insert metrics", err))
		return DB_RC(err);
	sqlite3_stmt *st = DB_STMT(c, sql_insert, "insert metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	for (size_t i = 0; i < a->n; i++) {
		const struct db_metric *m = &a->p[i];
		sqlite3_reset(st);
		db_bind_text(st, 2, m->name);
		sqlite3_bind_int64(st, 3, m->step);
		if (isfinite(m->value))
			sqlite3_bind_double(st, 4, m->value);
		else
			sqlite3_bind_null(st, 4);
		sqlite3_bind_int64(st, 5, m->time_ms);
		if (DB_STEP_DONE(c, st, "insert metrics", err))
			return DB_RC(err);
		a->inserted += (size_t)sqlite3_changes(c->h);
	}
	return 0;
}

int db_metrics_insert(struct db *db, int64_t job, const struct db_metric *points, size_t n,
                      size_t *inserted, struct db_err *err)
{
	if (inserted)
		*inserted = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = points[i].name ? strlen(points[i].name) : 0;
		if (len == 0 || len > 128)
			return DB_FAIL(err, DB_INVALID, "insert metrics: point %zu: name must be 1 to 128 "
			               "characters", i);
	}
	struct insert_arg a = { job, points, n, 0 };
	int rc = db_txn(db, insert_fn, &a, err);
	if (!rc && inserted)
		*inserted = a.inserted;
	return rc;
}

/* ---- query ------------------------------------------------------------------ */

static const char sql_all_names[] =
	"SELECT name, count(*), min(step), max(step) FROM metrics\n"
	"WHERE job = ?1 AND step BETWEEN ?2 AND ?3 GROUP BY name ORDER BY name";
static const char sql_one_name[] =
	"SELECT name, count(*), min(step), max(step) FROM metrics\n"
	"WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3 GROUP BY name";
static const char sql_points[] =
	"SELECT step, value FROM metrics WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3\n"
	"ORDER BY step";

struct plan {          /* one series to read */
	char *name;
	int64_t count, lo, hi;
};

/* the min and max point of one bucket */
struct bucket {
	int has, has_first;
	int64_t min_step, max_step, first_step;
	double min, max;
};

struct query_arg {
	int64_t job;
	const struct db_metric_query *q;
	int64_t from, to;                  /* the step range, ends resolved */
	struct db_series_list *out;
	struct plan *plans;
	size_t n_plans, cap_plans;
	struct bucket *buckets;
};

static void plans_free(struct query_arg *a)
{
	for (size_t i = 0; i < a->n_plans; i++)
		free(a->plans[i].name);
	free(a->plans);
	a->plans = NULL;
	a->n_plans = a->cap_plans = 0;
}

static int plan_rows(struct db_conn *c, struct query_arg *a, sqlite3_stmt *st, struct db_err *err)
{
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW) {
		if (a->n_plans == a->cap_plans) {
			size_t cap = a->cap_plans ? 2 * a->cap_plans : 8;
			struct plan *p = realloc(a->plans, cap * sizeof *p);
			if (!p)
				return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
			a->plans = p;
			a->cap_plans = cap;
		}
		int oom = 0;
		struct plan *p = &a->plans[a->n_plans];
		p->name = db_column_strdup(st, 0, &oom);
		if (oom || !p->name)
			return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
		p->count = sqlite3_column_int64(st, 1);
		p->lo = sqlite3_column_int64(st, 2);
		p->hi = sqlite3_column_int64(st, 3);
		a->n_plans++;
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

static void push(struct db_series *s, int64_t step, double value)
{
	s->step[s->n] = step;
	s->value[s->n] = value;
	s->n++;
}

static size_t bucket_of(int64_t step, int64_t lo, int64_t hi, size_t nb)
{
	double span = (double)((uint64_t)hi - (uint64_t)lo) + 1.0;
	size_t b = (size_t)((double)((uint64_t)step - (uint64_t)lo) / span * (double)nb);
	return b < nb ? b : nb - 1;
}

static int read_series(struct db_conn *c, struct query_arg *a, const struct plan *p,
                       struct db_series *s, struct db_err *err)
{
	int maxp = a->q->max_points;
	int all = maxp <= 0 || p->count <= maxp;
	size_t cap = all ? (size_t)p->count : (size_t)maxp;
	size_t nb = all || maxp < 2 ? 0 : (size_t)maxp / 2;
	s->step = malloc((cap ? cap : 1) * sizeof *s->step);
	s->value = malloc((cap ? cap : 1) * sizeof *s->value);
	if (!s->step || !s->value)
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	if (nb) {
		free(a->buckets);
		a->buckets = calloc(nb, sizeof *a->buckets);
		if (!a->buckets)
			return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	}
	sqlite3_stmt *st = DB_STMT(c, sql_points, "query metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	sqlite3_bind_int64(st, 2, a->from);
	sqlite3_bind_int64(st, 3, a->to);
	db_bind_text(st, 4, s->name);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(st, 0);
		int null = sqlite3_column_type(st, 1) == SQLITE_NULL;
		double v = null ? NAN : sqlite3_column_double(st, 1);
		if (all) {
			if (s->n < cap)     /* always: the read snapshot keeps the count exact */
				push(s, step, v);
		} else if (!nb) {           /* max_points 1: the last point */
			s->n = 0;
			push(s, step, v);
		} else {
			struct bucket *b = &a->buckets[bucket_of(step, p->lo, p->hi, nb)];
			if (!b->has_first) {
				b->has_first = 1;
				b->first_step = step;
			}
			if (null)
				continue;
			if (!b->has || v < b->min) {
				b->min = v;
				b->min_step = step;
			}
			if (!b->has || v > b->max) {
				b->max = v;
				b->max_step = step;
			}
			b->has = 1;
		}
	}
	if (rc != SQLITE_DONE)
		return DB_RC(err);
	for (size_t i = 0; i < nb; i++) {
		const struct bucket *b = &a->buckets[i];
		if (!b->has) {
			if (b->has_first)
				push(s, b->first_step, NAN);
		} else if (b->min_step == b->max_step) {
			push(s, b->min_step, b->min);
		} else if (b->min_step < b->max_step) {
			push(s, b->min_step, b->min);
			push(s, b->max_step, b->max);
		} else {
			push(s, b->max_step, b->max);
			push(s, b->min_step, b->min);
		}
	}
	return 0;
}

static int query_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct query_arg *a = arg;
	const struct db_metric_query *q = a->q;
	db_series_list_release(a->out);
	plans_free(a);
	if (db_job_visible(c, a->job, q->owner, "query metrics", err))
		return DB_RC(err);
	for (size_t i = 0; i < (q->names ? q->n_names : 1); i++) {
		int dup = 0;
		for (size_t k = 0; q->names && k < i; k++)
			dup |= strcmp(q->names[k], q->names[i]) == 0;
		if (dup)
			continue;
		sqlite3_stmt *st = DB_STMT(c, q->names ? sql_one_name : sql_all_names, "query metrics", err);
		if (!st)
			return DB_ERROR;
		sqlite3_bind_int64(st, 1, a->job);
		sqlite3_bind_int64(st, 2, a->from);
		sqlite3_bind_int64(st, 3, a->to);
		if (q->names)
			db_bind_text(st, 4, q->names[i]);
		if (plan_rows(c, a, st, err))
			return DB_RC(err);
	}
	a->out->series = calloc(a->n_plans ? a->n_plans : 1, sizeof *a->out->series);
	if (!a->out->series)
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	for (size_t i = 0; i < a->n_plans; i++) {
		struct db_series *s = &a->out->series[a->out->n++];
		s->name = a->plans[i].name;     /* moves the name into the result */
		a->plans[i].name = NULL;
		if (read_series(c, a, &a->plans[i], s, err))
			return DB_RC(err);
	}
	return 0;
}

static int by_name(const void *x, const void *y)
{
	return strcmp(((const struct db_series *)x)->name, ((const struct db_series *)y)->name);
}

int db_metrics_query(struct db *db, int64_t job, const struct db_metric_query *q,
                     struct db_series_list *out, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	for (size_t i = 0; q->names && i < q->n_names; i++)
		if (!q->names[i])
			return DB_FAIL(err, DB_INVALID, "query metrics: name %zu is missing", i);
	struct query_arg a = { .job = job, .q = q, .out = out,
	                       .from = q->has_from ? q->from_step : INT64_MIN,
	                       .to = q->has_to ? q->to_step : INT64_MAX };
	int rc = db_read(db, query_fn, &a, err);
	plans_free(&a);
	free(a.buckets);
	if (rc)
		db_series_list_release(out);
	else if (out->n > 1)
		qsort(out->series, out->n, sizeof *out->series, by_name);
	return rc;
}

void db_series_list_release(struct db_series_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++) {
		free(list->series[i].name);
		free(list->series[i].step);
		free(list->series[i].value);
	}
	free(list->series);
	memset(list, 0, sizeof *list);
}
