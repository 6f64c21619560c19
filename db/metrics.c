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
static const char sql_widths[] = "SELECT width FROM metric_rollup_widths ORDER BY width";
/* merges one chunk's min/max into its rollup row; ties keep the lower step */
static const char sql_rollup[] =
	"INSERT INTO metric_rollups (job, name, width, bucket, first_step,\n"
	"                            min_step, min_value, max_step, max_value)\n"
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)\n"
	"ON CONFLICT (job, name, width, bucket) DO UPDATE SET\n"
	"first_step = min(first_step, excluded.first_step),\n"
	"min_step = iif(excluded.min_value IS NOT NULL AND (min_value IS NULL OR\n"
	"	excluded.min_value < min_value OR (excluded.min_value = min_value AND\n"
	"	excluded.min_step < min_step)), excluded.min_step, min_step),\n"
	"min_value = iif(excluded.min_value IS NOT NULL AND (min_value IS NULL OR\n"
	"	excluded.min_value < min_value), excluded.min_value, min_value),\n"
	"max_step = iif(excluded.max_value IS NOT NULL AND (max_value IS NULL OR\n"
	"	excluded.max_value > max_value OR (excluded.max_value = max_value AND\n"
	"	excluded.max_step < max_step)), excluded.max_step, max_step),\n"
	"max_value = iif(excluded.max_value IS NOT NULL AND (max_value IS NULL OR\n"
	"	excluded.max_value > max_value), excluded.max_value, max_value)";

enum { MAX_WIDTHS = 16 };

struct insert_arg {
	int64_t job;
	const struct db_metric *p;
	size_t n, inserted;
	const struct db_metric **fresh;    /* the points that were new, then sorted */
};

static int64_t floor_div(int64_t x, int64_t w)
{
	return x >= 0 ? x / w : (x + 1) / w - 1;
}

/* one chunk's points of this batch */
struct chunk {
	const char *name;
	int64_t bucket, first, min_step, max_step;
	double min, max;
	int has;
};

static int flush_chunk(struct db_conn *c, sqlite3_stmt *st, int64_t w, const struct chunk *k,
                       struct db_err *err)
{
	sqlite3_reset(st);
	db_bind_text(st, 2, k->name);
	sqlite3_bind_int64(st, 3, w);
	sqlite3_bind_int64(st, 4, k->bucket);
	sqlite3_bind_int64(st, 5, k->first);
	if (k->has) {
		sqlite3_bind_int64(st, 6, k->min_step);
		sqlite3_bind_double(st, 7, k->min);
		sqlite3_bind_int64(st, 8, k->max_step);
		sqlite3_bind_double(st, 9, k->max);
	} else {
		for (int i = 6; i <= 9; i++)
			sqlite3_bind_null(st, i);
	}
	return DB_STEP_DONE(c, st, "update metric rollups", err);
}

static int by_name_step(const void *x, const void *y)
{
	const struct db_metric *a = *(const struct db_metric *const *)x;
	const struct db_metric *b = *(const struct db_metric *const *)y;
	int r = strcmp(a->name, b->name);
	return r ? r : (a->step > b->step) - (a->step < b->step);
}

/* Folds the new points into the rollups: per width, one upsert per chunk
 * the batch touched (a batch of consecutive steps touches few). */
static int update_rollups(struct db_conn *c, struct insert_arg *a, size_t n_fresh,
                          struct db_err *err)
{
	int64_t widths[MAX_WIDTHS];
	int n_widths = 0, rc;
	sqlite3_stmt *st = DB_STMT(c, sql_widths, "update metric rollups", err);
	if (!st)
		return DB_ERROR;
	while ((rc = DB_SQL(c, sqlite3_step(st), "update metric rollups", err)) == SQLITE_ROW)
		if (n_widths < MAX_WIDTHS)
			widths[n_widths++] = sqlite3_column_int64(st, 0);
	if (rc != SQLITE_DONE)
		return DB_RC(err);
	st = DB_STMT(c, sql_rollup, "update metric rollups", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	for (int wi = 0; wi < n_widths; wi++) {
		int64_t w = widths[wi];
		struct chunk k = { 0 };
		for (size_t i = 0; i < n_fresh; i++) {
			const struct db_metric *m = a->fresh[i];
			int64_t bucket = floor_div(m->step, w);
			if (k.name && (bucket != k.bucket || strcmp(m->name, k.name) != 0)) {
				if (flush_chunk(c, st, w, &k, err))
					return DB_RC(err);
				k.name = NULL;
			}
			if (!k.name)
				k = (struct chunk){ .name = m->name, .bucket = bucket, .first = m->step };
			if (!isfinite(m->value))
				continue;  /* stored as NULL */
			/* steps ascend within a chunk: strict comparisons keep the lower step */
			if (!k.has || m->value < k.min) {
				k.min = m->value;
				k.min_step = m->step;
			}
			if (!k.has || m->value > k.max) {
				k.max = m->value;
				k.max_step = m->step;
			}
			k.has = 1;
		}
		if (k.name && flush_chunk(c, st, w, &k, err))
			return DB_RC(err);
	}
	return 0;
}

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
		if (sqlite3_changes(c->h) > 0)
			a->fresh[a->inserted++] = m;
	}
	if (!a->inserted)
		return 0;
	qsort(a->fresh, a->inserted, sizeof *a->fresh, by_name_step);
	return update_rollups(c, a, a->inserted, err);
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
	struct insert_arg a = { job, points, n, 0, malloc((n ? n : 1) * sizeof(const struct db_metric *)) };
	if (!a.fresh)
		return DB_FAIL(err, DB_ERROR, "insert metrics: out of memory");
	int rc = db_txn(db, insert_fn, &a, err);
	free(a.fresh);
	if (!rc && inserted)
		*inserted = a.inserted;
	return rc;
}

/* ---- query ------------------------------------------------------------------ */

/* A downsampled read visits about max_points rows whatever the series'
 * length: the step range is cut into max_points / 2 buckets of whole chunks
 * of the widest rollup width that still gives that many chunks
 * (metric_rollups, kept by a trigger, migration 5), and each bucket folds its
 * chunks' min and max. A chunk the range's ends cut through, and a range too
 * short for the narrowest width, are read point by point. */

static const char sql_names[] =
	"SELECT DISTINCT name FROM metric_rollups WHERE job = ?1 AND width =\n"
	"	(SELECT max(width) FROM metric_rollup_widths) ORDER BY name";
static const char sql_first[] =
	"SELECT min(step) FROM metrics WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3";
static const char sql_last[] =
	"SELECT max(step) FROM metrics WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3";
static const char sql_count_upto[] =
	"SELECT count(*) FROM (SELECT 1 FROM metrics\n"
	"	WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3 LIMIT ?5)";
static const char sql_points[] =
	"SELECT step, value FROM metrics WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3\n"
	"ORDER BY step";
static const char sql_last_point[] =
	"SELECT step, value FROM metrics WHERE job = ?1 AND name = ?4 AND step BETWEEN ?2 AND ?3\n"
	"ORDER BY step DESC LIMIT 1";
static const char sql_point_time[] =
	"SELECT time FROM metrics WHERE job = ?1 AND name = ?2 AND step = ?3";
static const char sql_width[] =
	"SELECT max(width) FROM metric_rollup_widths WHERE width <= ?1";
static const char sql_chunks[] =
	"SELECT bucket, first_step, min_step, min_value, max_step, max_value FROM metric_rollups\n"
	"WHERE job = ?1 AND name = ?2 AND width = ?3 AND bucket BETWEEN ?4 AND ?5 ORDER BY bucket";

/* the min and max point of one bucket; ties keep the lower step */
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
	char **names;                      /* the series to read */
	size_t n_names, cap_names;
	struct bucket *buckets;
};

static void names_free(struct query_arg *a)
{
	for (size_t i = 0; i < a->n_names; i++)
		free(a->names[i]);
	free(a->names);
	a->names = NULL;
	a->n_names = a->cap_names = 0;
}

static int add_name(struct query_arg *a, const char *name, struct db_err *err)
{
	for (size_t i = 0; i < a->n_names; i++)
		if (strcmp(a->names[i], name) == 0)
			return 0;
	if (a->n_names == a->cap_names) {
		size_t cap = a->cap_names ? 2 * a->cap_names : 8;
		char **p = realloc(a->names, cap * sizeof *p);
		if (!p)
			return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
		a->names = p;
		a->cap_names = cap;
	}
	if (!(a->names[a->n_names] = strdup(name)))
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	a->n_names++;
	return 0;
}

static int list_names(struct db_conn *c, struct query_arg *a, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_names, "query metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW)
		if (add_name(a, (const char *)sqlite3_column_text(st, 0), err))
			return DB_ERROR;
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

/* Binds the series and a step range to st: ?1 job, ?2 from, ?3 to, ?4 name. */
static sqlite3_stmt *series_stmt(struct db_conn *c, const char *sql, const struct query_arg *a,
                                 const char *name, int64_t from, int64_t to, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql, "query metrics", err);
	if (!st)
		return NULL;
	sqlite3_bind_int64(st, 1, a->job);
	sqlite3_bind_int64(st, 2, from);
	sqlite3_bind_int64(st, 3, to);
	db_bind_text(st, 4, name);
	return st;
}

/* One integer from a one-row statement; *null is set when it is NULL. */
static int one_int(struct db_conn *c, sqlite3_stmt *st, int64_t *v, int *null, struct db_err *err)
{
	if (DB_SQL(c, sqlite3_step(st), "query metrics", err) != SQLITE_ROW)
		return DB_RC(err);
	*null = sqlite3_column_type(st, 0) == SQLITE_NULL;
	*v = sqlite3_column_int64(st, 0);
	return 0;
}

static void push(struct db_series *s, int64_t step, double value)
{
	s->step[s->n] = step;
	s->value[s->n] = value;
	s->n++;
}

static void fold_min(struct bucket *b, int64_t step, double v)
{
	if (!b->has || v < b->min || (v == b->min && step < b->min_step)) {
		b->min = v;
		b->min_step = step;
	}
}

static void fold_max(struct bucket *b, int64_t step, double v)
{
	if (!b->has || v > b->max || (v == b->max && step < b->max_step)) {
		b->max = v;
		b->max_step = step;
	}
}

static void fold_first(struct bucket *b, int64_t step)
{
	if (!b->has_first || step < b->first_step) {
		b->has_first = 1;
		b->first_step = step;
	}
}

/* Reads the points of [from, to] in step order: into s (all), keeping the
 * last one (last), or folded into bucket b. */
enum read_mode { READ_ALL, READ_FOLD };

static int read_points(struct db_conn *c, const struct query_arg *a, const char *name,
                       int64_t from, int64_t to, enum read_mode mode, struct db_series *s,
                       size_t cap, struct bucket *b, struct db_err *err)
{
	sqlite3_stmt *st = series_stmt(c, sql_points, a, name, from, to, err);
	if (!st)
		return DB_ERROR;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(st, 0);
		int null = sqlite3_column_type(st, 1) == SQLITE_NULL;
		double v = null ? NAN : sqlite3_column_double(st, 1);
		if (mode == READ_ALL) {
			if (s->n < cap)     /* always: the read snapshot keeps the count exact */
				push(s, step, v);
			continue;
		}
		fold_first(b, step);
		if (!null) {
			fold_min(b, step, v);
			fold_max(b, step, v);
			b->has = 1;
		}
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

/* Folds chunks [c_lo, c_hi] of width w into the buckets: rollup rows for
 * whole chunks, points for the first and last chunk where the range [lo, hi]
 * (lo and hi: the first and last point in the query's range) cuts them. */
static int fold_chunks(struct db_conn *c, const struct query_arg *a, const char *name, int64_t w,
                       int64_t lo, int64_t hi, size_t nb, struct db_err *err)
{
	int64_t c_lo = floor_div(lo, w), c_hi = floor_div(hi, w), k = c_hi - c_lo + 1;
	/* a chunk holds points outside [lo, hi] only if the query's range cut it */
	int cut_lo = a->from > c_lo * w, cut_hi = a->to < c_hi * w + (w - 1);
	if (cut_lo) {
		struct bucket *b = &a->buckets[0];
		if (read_points(c, a, name, lo, c_lo == c_hi ? hi : c_lo * w + (w - 1), READ_FOLD,
		                NULL, 0, b, err))
			return DB_ERROR;
	}
	if (cut_hi && (c_hi != c_lo || !cut_lo)) {
		struct bucket *b = &a->buckets[nb - 1];
		if (read_points(c, a, name, c_hi == c_lo ? lo : c_hi * w, hi, READ_FOLD, NULL, 0, b,
		                err))
			return DB_ERROR;
	}
	int64_t first = c_lo + cut_lo, last = c_hi - cut_hi;
	if (first > last)
		return 0;
	sqlite3_stmt *st = DB_STMT(c, sql_chunks, "query metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	db_bind_text(st, 2, name);
	sqlite3_bind_int64(st, 3, w);
	sqlite3_bind_int64(st, 4, first);
	sqlite3_bind_int64(st, 5, last);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW) {
		int64_t chunk = sqlite3_column_int64(st, 0);
		struct bucket *b = &a->buckets[(size_t)(((__int128)(chunk - c_lo) * (__int128)nb) / k)];
		fold_first(b, sqlite3_column_int64(st, 1));
		if (sqlite3_column_type(st, 2) == SQLITE_NULL)
			continue;          /* only nulls in this chunk */
		fold_min(b, sqlite3_column_int64(st, 2), sqlite3_column_double(st, 3));
		fold_max(b, sqlite3_column_int64(st, 4), sqlite3_column_double(st, 5));
		b->has = 1;
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

/* Folds the points of [lo, hi] one by one into nb buckets of equal step spans
 * (a range too short for the rollups). */
static int fold_points(struct db_conn *c, const struct query_arg *a, const char *name,
                       int64_t lo, int64_t hi, size_t nb, struct db_err *err)
{
	double span = (double)((uint64_t)hi - (uint64_t)lo) + 1.0;
	sqlite3_stmt *st = series_stmt(c, sql_points, a, name, lo, hi, err);
	if (!st)
		return DB_ERROR;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "query metrics", err)) == SQLITE_ROW) {
		int64_t step = sqlite3_column_int64(st, 0);
		size_t i = (size_t)((double)((uint64_t)step - (uint64_t)lo) / span * (double)nb);
		struct bucket *b = &a->buckets[i < nb ? i : nb - 1];
		fold_first(b, step);
		if (sqlite3_column_type(st, 1) == SQLITE_NULL)
			continue;
		double v = sqlite3_column_double(st, 1);
		fold_min(b, step, v);
		fold_max(b, step, v);
		b->has = 1;
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

static int read_series(struct db_conn *c, struct query_arg *a, struct db_series *s,
                       struct db_err *err)
{
	int maxp = a->q->max_points;
	int64_t lo, hi, count = 0;
	int null;
	sqlite3_stmt *st = series_stmt(c, sql_first, a, s->name, a->from, a->to, err);
	if (!st || one_int(c, st, &lo, &null, err))
		return DB_ERROR;
	if (null)
		return 0;                  /* no points in the range: left out */
	st = series_stmt(c, sql_last, a, s->name, a->from, a->to, err);
	if (!st || one_int(c, st, &hi, &null, err))
		return DB_ERROR;
	if (maxp > 0) {            /* are there more than max_points? (reads max_points + 1) */
		st = series_stmt(c, sql_count_upto, a, s->name, lo, hi, err);
		if (!st)
			return DB_ERROR;
		sqlite3_bind_int64(st, 5, (int64_t)maxp + 1);
		if (one_int(c, st, &count, &null, err))
			return DB_ERROR;
	}
	int all = maxp <= 0 || count <= maxp;
	size_t cap = all ? (maxp > 0 ? (size_t)count : 0) : (size_t)maxp;
	if (all && maxp <= 0) {        /* every point: count them only now */
		st = series_stmt(c, sql_count_upto, a, s->name, lo, hi, err);
		if (!st)
			return DB_ERROR;
		sqlite3_bind_int64(st, 5, -1);
		if (one_int(c, st, &count, &null, err))
			return DB_ERROR;
		cap = (size_t)count;
	}
	s->step = malloc((cap ? cap : 1) * sizeof *s->step);
	s->value = malloc((cap ? cap : 1) * sizeof *s->value);
	if (!s->step || !s->value)
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	if (all)
		return read_points(c, a, s->name, lo, hi, READ_ALL, s, cap, NULL, err);
	if (maxp < 2) {                /* max_points 1: the last point */
		st = series_stmt(c, sql_last_point, a, s->name, lo, hi, err);
		if (!st || DB_SQL(c, sqlite3_step(st), "query metrics", err) != SQLITE_ROW)
			return DB_RC(err);
		push(s, sqlite3_column_int64(st, 0),
		     sqlite3_column_type(st, 1) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 1));
		return 0;
	}

	size_t nb = (size_t)maxp / 2;
	free(a->buckets);
	if (!(a->buckets = calloc(nb, sizeof *a->buckets)))
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	/* the widest width with at least nb chunks in [lo, hi] */
	double span = (double)((uint64_t)hi - (uint64_t)lo) + 1.0;
	int64_t w = 0;
	st = DB_STMT(c, sql_width, "query metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, (int64_t)fmin(span / (double)nb, 9.0e18));
	if (one_int(c, st, &w, &null, err))
		return DB_ERROR;
	int rc = null || w <= 0 ? fold_points(c, a, s->name, lo, hi, nb, err)
	                        : fold_chunks(c, a, s->name, w, lo, hi, nb, err);
	if (rc)
		return rc;
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

/* The time of each point of s (a primary key lookup each: about max_points
 * per series). */
static int read_times(struct db_conn *c, const struct query_arg *a, struct db_series *s,
                      struct db_err *err)
{
	if (!(s->time_ms = malloc((s->n ? s->n : 1) * sizeof *s->time_ms)))
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	sqlite3_stmt *st = DB_STMT(c, sql_point_time, "query metrics", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	db_bind_text(st, 2, s->name);
	for (size_t k = 0; k < s->n; k++) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 3, s->step[k]);
		if (DB_SQL(c, sqlite3_step(st), "query metrics", err) != SQLITE_ROW)
			return DB_RC(err);   /* the read snapshot holds every point it returned */
		s->time_ms[k] = sqlite3_column_int64(st, 0);
	}
	return 0;
}

static int query_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct query_arg *a = arg;
	const struct db_metric_query *q = a->q;
	db_series_list_release(a->out);
	names_free(a);
	if (db_job_visible(c, a->job, q->owner, "query metrics", err))
		return DB_RC(err);
	if (!q->names) {
		if (list_names(c, a, err))
			return DB_RC(err);
	} else {
		for (size_t i = 0; i < q->n_names; i++)
			if (add_name(a, q->names[i], err))
				return DB_RC(err);
	}
	a->out->series = calloc(a->n_names ? a->n_names : 1, sizeof *a->out->series);
	if (!a->out->series)
		return DB_FAIL(err, DB_ERROR, "query metrics: out of memory");
	for (size_t i = 0; i < a->n_names; i++) {
		struct db_series *s = &a->out->series[a->out->n++];
		s->name = a->names[i];     /* moves the name into the result */
		a->names[i] = NULL;
		if (read_series(c, a, s, err) || (q->with_time && s->n && read_times(c, a, s, err)))
			return DB_RC(err);
		if (!s->n) {               /* no points in the range: left out */
			free(s->name);
			free(s->step);
			free(s->value);
			memset(s, 0, sizeof *s);
			a->out->n--;
		}
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
	names_free(&a);
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
		free(list->series[i].time_ms);
	}
	free(list->series);
	memset(list, 0, sizeof *list);
}
