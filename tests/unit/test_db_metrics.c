/* tests/unit/test_db_metrics.c - db/metrics.c: batched inserts that are
 * idempotent on (job, name, step), non-finite values, queries by name and
 * step range, and min/max downsampling of a 100k-point series (the count
 * bound, the global min and max kept, every point a real one). Downsampled
 * reads come from the rollups: they must equal a brute-force fold of the raw
 * points over the same chunks, whatever order and batches the points came
 * in, and after migration 5 built the rollups of points stored before it. */
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db_fixture.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static const char *tmp;

static struct db *open_db(const char *file)
{
	static const char *const users[] = { "alice", NULL };
	return db_test_open(tmp, file, users);
}

static int64_t new_job(struct db *db)
{
	struct db_job_new in = { .owner = "alice", .name = "m", .spec = "{}" };
	struct db_submit out = { 0 };
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	return out.id;
}

static const struct db_series *find(const struct db_series_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->series[i].name, name) == 0)
			return &l->series[i];
	return NULL;
}

static void test_insert_idempotent(void)
{
	struct db *db = open_db("insert.db");
	int64_t job = new_job(db);
	struct db_metric p[300];
	for (int i = 0; i < 100; i++) {
		p[3 * i] = (struct db_metric){ "train/loss", i, 1.0 / (i + 1), 1000 + i };
		p[3 * i + 1] = (struct db_metric){ "train/lr", i, 0.1, 1000 + i };
		p[3 * i + 2] = (struct db_metric){ "grad_norm", i, i == 50 ? NAN : i == 51 ? INFINITY : i,
		                                   1000 + i };
	}
	size_t inserted = 0;
	struct db_err err = { 0 };
	CHECK_MSG(db_metrics_insert(db, job, p, 300, &inserted, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(inserted, 300);
	/* the same post again, and one with other values: nothing changes */
	CHECK_INT_EQ(db_metrics_insert(db, job, p, 300, &inserted, NULL), 0);
	CHECK_INT_EQ(inserted, 0);
	struct db_metric changed[2] = { { "train/loss", 5, 99.0, 1 }, { "train/loss", 100, 0.5, 2 } };
	CHECK_INT_EQ(db_metrics_insert(db, job, changed, 2, &inserted, NULL), 0);
	CHECK_INT_EQ(inserted, 1);        /* only step 100 is new */

	struct db_metric_query q = { 0 };
	struct db_series_list l;
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 3);
	if (l.n == 3) {
		CHECK_STR_EQ(l.series[0].name, "grad_norm");     /* by name */
		CHECK_STR_EQ(l.series[1].name, "train/loss");
		CHECK_STR_EQ(l.series[2].name, "train/lr");
		const struct db_series *loss = &l.series[1];
		CHECK_INT_EQ(loss->n, 101);
		CHECK(loss->value[5] == 1.0 / 6);                 /* not 99 */
		CHECK(loss->step[100] == 100 && loss->value[100] == 0.5);
		const struct db_series *g = &l.series[0];
		CHECK_INT_EQ(g->n, 100);
		CHECK(isnan(g->value[50]) && isnan(g->value[51]) && g->value[52] == 52);
		for (size_t i = 1; i < loss->n; i++)
			CHECK(loss->step[i] > loss->step[i - 1]);
	}
	db_series_list_release(&l);

	/* names and a step range */
	const char *names[] = { "train/lr", "nope", "train/lr" };
	q = (struct db_metric_query){ .names = names, .n_names = 3, .has_from = 1, .from_step = 10,
	                              .has_to = 1, .to_step = 19 };
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		CHECK_STR_EQ(l.series[0].name, "train/lr");
		CHECK_INT_EQ(l.series[0].n, 10);
		CHECK_INT_EQ(l.series[0].step[0], 10);
		CHECK_INT_EQ(l.series[0].step[9], 19);
	}
	db_series_list_release(&l);

	/* one end open */
	q = (struct db_metric_query){ .names = names, .n_names = 1, .has_from = 1, .from_step = 95 };
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK(l.n == 1 && l.series[0].n == 5 && l.series[0].step[0] == 95);
	db_series_list_release(&l);
	q = (struct db_metric_query){ .has_to = 1, .to_step = 2 };
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 3);
	for (size_t i = 0; i < l.n; i++)
		CHECK(l.series[i].n == 3 && l.series[i].step[2] == 2);
	db_series_list_release(&l);

	/* missing job, another owner, bad names: errors, nothing stored */
	CHECK_INT_EQ(db_metrics_insert(db, job + 1000, p, 3, &inserted, &err), DB_NOT_FOUND);
	q = (struct db_metric_query){ .owner = "bob" };
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), DB_NOT_FOUND);
	q.owner = "alice";
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	db_series_list_release(&l);
	struct db_metric bad[2] = { { "ok", 1000, 1, 1 }, { "", 1001, 1, 1 } };
	CHECK_INT_EQ(db_metrics_insert(db, job, bad, 2, &inserted, NULL), DB_INVALID);
	bad[1].name = NULL;
	CHECK_INT_EQ(db_metrics_insert(db, job, bad, 2, &inserted, NULL), DB_INVALID);
	const char *one[] = { "ok" };
	q = (struct db_metric_query){ .names = one, .n_names = 1 };
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 0);
	db_series_list_release(&l);
	db_close(db);
}

/* value of the test series at step s: a slow wave, with one deep dip and one
 * high spike planted at odd steps */
static double wave(int64_t s, int64_t lo_at, int64_t hi_at)
{
	if (s == lo_at)
		return -1000.0;
	if (s == hi_at)
		return 1000.0;
	return sin((double)s * 1e-3) + 1e-3 * (double)(s % 7);
}

static void test_downsample(void)
{
	struct db *db = open_db("down.db");
	int64_t job = new_job(db);
	enum { N = 100000 };
	int64_t lo_at = 31337, hi_at = 77777;
	struct db_metric *p = malloc(sizeof *p * N);
	for (int i = 0; i < N; i++)
		p[i] = (struct db_metric){ "train/loss", 2 * i + 1, wave(2 * i + 1, 2 * lo_at + 1,
		                           2 * hi_at + 1), i };
	p[500].value = NAN;
	size_t inserted = 0;
	CHECK_INT_EQ(db_metrics_insert(db, job, p, N, &inserted, NULL), 0);
	CHECK_INT_EQ(inserted, N);
	free(p);

	int sizes[] = { 500, 1000, 37, 2, 1, N, N + 5, 0 };
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		int maxp = sizes[k];
		struct db_metric_query q = { .max_points = maxp };
		struct db_series_list l;
		CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
		const struct db_series *s = find(&l, "train/loss");
		CHECK(s != NULL);
		if (!s) {
			db_series_list_release(&l);
			continue;
		}
		size_t bound = maxp > 0 && maxp < N ? (size_t)maxp : N;
		CHECK_MSG(s->n <= bound && s->n > 0, "max_points %d: %zu points", maxp, s->n);
		if (maxp == 0 || maxp >= N)
			CHECK_INT_EQ(s->n, N);
		if (maxp >= 2 && maxp < N)
			CHECK_MSG(s->n >= (size_t)maxp / 2, "max_points %d: only %zu points", maxp, s->n);
		int has_lo = 0, has_hi = 0, real = 1, ordered = 1;
		for (size_t i = 0; i < s->n; i++) {
			has_lo |= s->step[i] == 2 * lo_at + 1 && s->value[i] == -1000.0;
			has_hi |= s->step[i] == 2 * hi_at + 1 && s->value[i] == 1000.0;
			double want = s->step[i] == 1001 ? NAN : wave(s->step[i], 2 * lo_at + 1, 2 * hi_at + 1);
			if (s->step[i] % 2 != 1 || (isnan(want) ? !isnan(s->value[i]) : s->value[i] != want))
				real = 0;
			if (i && s->step[i] <= s->step[i - 1])
				ordered = 0;
		}
		CHECK_MSG(real, "max_points %d: a point that was never stored", maxp);
		CHECK_MSG(ordered, "max_points %d: steps not ascending", maxp);
		if (maxp != 1) {
			CHECK_MSG(has_lo, "max_points %d: the global min is lost", maxp);
			CHECK_MSG(has_hi, "max_points %d: the global max is lost", maxp);
		} else {
			CHECK_INT_EQ(s->step[0], 2 * (N - 1) + 1);       /* the last point */
		}
		db_series_list_release(&l);
	}

	/* a step range inside: bounds hold there too */
	struct db_metric_query q = { .has_from = 1, .from_step = 2 * lo_at - 999, .has_to = 1,
	                             .to_step = 2 * lo_at + 1001, .max_points = 100 };
	struct db_series_list l;
	CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		CHECK(l.series[0].n <= 100);
		int has_lo = 0;
		for (size_t i = 0; i < l.series[0].n; i++) {
			CHECK(l.series[0].step[i] >= q.from_step && l.series[0].step[i] <= q.to_step);
			has_lo |= l.series[0].value[i] == -1000.0;
		}
		CHECK(has_lo);
	}
	db_series_list_release(&l);
	db_close(db);
}


/* ---- rollups against the raw points ------------------------------------------ */

/* the widths of migration 5 (metric_rollup_widths), narrowest first */
static const int64_t widths[] = { 16, 128, 1024, 8192, 65536, 524288 };

struct pt {
	int64_t step;
	double v;                  /* NaN = null */
};

struct fold {
	int has, has_first;
	int64_t first, min_step, max_step;
	double min, max;
};

static int64_t floor_div_(int64_t x, int64_t w)
{
	return x >= 0 ? x / w : (x + 1) / w - 1;
}

/* The downsampled series db_metrics_query must return for the raw points
 * pts[0..n) (ascending) over [from, to], computed point by point. */
static size_t reference(const struct pt *pts, size_t n, int64_t from, int64_t to, int maxp,
                        struct pt *out)
{
	size_t i0 = 0, i1 = 0, m = 0;
	while (i0 < n && pts[i0].step < from)
		i0++;
	for (i1 = i0; i1 < n && pts[i1].step <= to; i1++)
		;
	size_t count = i1 - i0;
	if (!count)
		return 0;
	if (maxp <= 0 || count <= (size_t)maxp) {
		memcpy(out, pts + i0, count * sizeof *out);
		return count;
	}
	if (maxp == 1) {
		out[0] = pts[i1 - 1];
		return 1;
	}
	size_t nb = (size_t)maxp / 2;
	int64_t lo = pts[i0].step, hi = pts[i1 - 1].step;
	double span = (double)(hi - lo) + 1.0;
	int64_t limit = (int64_t)(span / (double)nb), w = 0;
	for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++)
		if (widths[k] <= limit)
			w = widths[k];
	struct fold *b = calloc(nb, sizeof *b);
	for (size_t i = i0; i < i1; i++) {
		size_t bi;
		if (w) {
			int64_t c_lo = floor_div_(lo, w), k = floor_div_(hi, w) - c_lo + 1;
			bi = (size_t)((floor_div_(pts[i].step, w) - c_lo) * (int64_t)nb / k);
		} else {
			bi = (size_t)((double)(pts[i].step - lo) / span * (double)nb);
			if (bi >= nb)
				bi = nb - 1;
		}
		struct fold *f = &b[bi];
		if (!f->has_first) {
			f->has_first = 1;
			f->first = pts[i].step;
		}
		double v = pts[i].v;
		if (isnan(v))
			continue;
		if (!f->has || v < f->min) {
			f->min = v;
			f->min_step = pts[i].step;
		}
		if (!f->has || v > f->max) {
			f->max = v;
			f->max_step = pts[i].step;
		}
		f->has = 1;
	}
	for (size_t i = 0; i < nb; i++) {
		const struct fold *f = &b[i];
		if (!f->has) {
			if (f->has_first)
				out[m++] = (struct pt){ f->first, NAN };
		} else if (f->min_step == f->max_step) {
			out[m++] = (struct pt){ f->min_step, f->min };
		} else if (f->min_step < f->max_step) {
			out[m++] = (struct pt){ f->min_step, f->min };
			out[m++] = (struct pt){ f->max_step, f->max };
		} else {
			out[m++] = (struct pt){ f->max_step, f->max };
			out[m++] = (struct pt){ f->min_step, f->min };
		}
	}
	free(b);
	return m;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* The test series: steps from -700 with gaps, values with many ties (a
 * coarse staircase), a planted spike and dip, and a run of nulls that fills
 * whole chunks of the narrow widths. */
static size_t make_points(struct pt *pts, size_t cap)
{
	size_t n = 0;
	for (int64_t s = -700; n < cap; s += 1 + (int64_t)(rnd() % 3 == 0)) {
		double v = floor(8.0 * sin((double)s * 3e-3)) + (double)(rnd() % 3);
		if (s >= 3000 && s < 3300)
			v = NAN;
		if (s == 4441)
			v = -500.0;
		if (s == 9001)
			v = 500.0;
		pts[n++] = (struct pt){ s, v };
	}
	return n;
}

/* Runs every query of the list against db and the reference. */
static void check_queries(struct db *db, int64_t job, const char *name, const struct pt *pts,
                          size_t n, const char *what)
{
	int64_t lo = pts[0].step, hi = pts[n - 1].step;
	struct { int has_from, has_to; int64_t from, to; } ranges[] = {
		{ 0, 0, 0, 0 },
		{ 1, 0, lo + 37, 0 },
		{ 0, 1, 0, hi - 53 },
		{ 1, 1, 1000 + 5, 9000 + 11 },          /* cuts chunks at both ends */
		{ 1, 1, 2990, 3310 },                   /* mostly nulls */
		{ 1, 1, -1000, 12 },                    /* negative steps */
		{ 1, 1, 4000, 4200 },                   /* short: no width fits */
		{ 1, 1, hi + 1, hi + 100 },             /* nothing */
	};
	int sizes[] = { 2, 4, 10, 37, 100, 1000, 0, 1 };
	struct pt *want = malloc((n + 1) * sizeof *want);
	for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
		for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
			const char *one[] = { name };
			struct db_metric_query q = { .names = one, .n_names = 1,
			                             .has_from = ranges[r].has_from,
			                             .from_step = ranges[r].from,
			                             .has_to = ranges[r].has_to, .to_step = ranges[r].to,
			                             .max_points = sizes[k] };
			size_t nw = reference(pts, n, q.has_from ? q.from_step : INT64_MIN,
			                      q.has_to ? q.to_step : INT64_MAX, sizes[k], want);
			struct db_series_list l;
			CHECK_INT_EQ(db_metrics_query(db, job, &q, &l, NULL), 0);
			const struct db_series *s = l.n ? &l.series[0] : NULL;
			size_t ng = s ? s->n : 0;
			int same = ng == nw;
			for (size_t i = 0; same && i < nw; i++)
				same = s->step[i] == want[i].step &&
				       (isnan(want[i].v) ? isnan(s->value[i]) : s->value[i] == want[i].v);
			CHECK_MSG(same, "%s: range %zu, max_points %d: %zu points, want %zu", what, r,
			          sizes[k], ng, nw);
			db_series_list_release(&l);
		}
	}
	free(want);
}

static void test_rollups_match_points(void)
{
	enum { N = 20000 };
	struct pt *pts = malloc(N * sizeof *pts);
	size_t n = make_points(pts, N);
	struct db *db = open_db("rollups.db");
	int64_t job = new_job(db);

	/* posted in a shuffled order, in batches of random sizes, twice, the
	 * second time with other values (which change nothing) */
	size_t *order = malloc(n * sizeof *order);
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	struct db_metric *batch = malloc(n * sizeof *batch);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t at = 0; at < n;) {
			size_t len = 1 + rnd() % 700;
			if (len > n - at)
				len = n - at;
			for (size_t i = 0; i < len; i++) {
				const struct pt *p = &pts[order[at + i]];
				batch[i] = (struct db_metric){ "s", p->step,
				                               pass ? 1e6 : (isnan(p->v) ? INFINITY : p->v),
				                               0 };
			}
			size_t inserted = 0;
			CHECK_INT_EQ(db_metrics_insert(db, job, batch, len, &inserted, NULL), 0);
			CHECK_INT_EQ(inserted, pass ? 0 : len);
			at += len;
		}
	}
	check_queries(db, job, "s", pts, n, "shuffled posts");

	/* every series of the job in one query: the same as one by one */
	struct db_metric other = { "another", 5, 1.0, 0 };
	CHECK_INT_EQ(db_metrics_insert(db, job, &other, 1, NULL, NULL), 0);
	struct db_metric_query all = { .max_points = 100 };
	struct db_series_list l;
	CHECK_INT_EQ(db_metrics_query(db, job, &all, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 2);
	if (l.n == 2) {
		CHECK(strcmp(l.series[0].name, "another") == 0 && l.series[0].n == 1);
		CHECK(strcmp(l.series[1].name, "s") == 0 && l.series[1].n <= 100 &&
		      l.series[1].n >= 50);
	}
	db_series_list_release(&l);
	db_close(db);
	free(batch);
	free(order);
	free(pts);
}

/* Points stored at schema version 4 (before the rollups): migration 5
 * builds their rollups, and reads then match the points. */
static void test_rollups_built_by_migration(void)
{
	enum { N = 6000 };
	struct pt *pts = malloc((N + 3) * sizeof *pts);
	size_t n = make_points(pts, N);
	char path[4200];
	snprintf(path, sizeof path, "%s/v4.db", tmp);
	sqlite3 *h = NULL;
	CHECK_INT_EQ(sqlite3_open(path, &h), SQLITE_OK);
	char *e = NULL;
	int rc = sqlite3_exec(h, "PRAGMA journal_mode = WAL; BEGIN;\n"
	                      "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
	                      "applied INTEGER NOT NULL) STRICT;", NULL, NULL, &e);
	for (int v = 1; v <= 4 && rc == SQLITE_OK; v++) {
		rc = sqlite3_exec(h, db_migration_sql(v), NULL, NULL, &e);
		char ins[80];
		snprintf(ins, sizeof ins, "INSERT INTO schema_version VALUES (%d, 1)", v);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(h, ins, NULL, NULL, &e);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(h, "INSERT INTO users VALUES ('alice', 'user', 1);\n"
		                  "INSERT INTO jobs (id, owner, name, spec, state, submit_time)\n"
		                  "VALUES (3, 'alice', 'old', '{}', 'RUNNING', 1);", NULL, NULL, &e);
	sqlite3_stmt *st = NULL;
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(h, "INSERT INTO metrics VALUES (3, 's', ?1, ?2, 0)", -1, &st,
		                        NULL);
	for (size_t i = 0; i < n && rc == SQLITE_OK; i++) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, pts[i].step);
		if (isnan(pts[i].v))
			sqlite3_bind_null(st, 2);
		else
			sqlite3_bind_double(st, 2, pts[i].v);
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(h, "COMMIT", NULL, NULL, &e);
	CHECK_MSG(rc == SQLITE_OK, "building a version 4 database: %s", e ? e : sqlite3_errmsg(h));
	sqlite3_free(e);
	sqlite3_close(h);

	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "db_open: %s", err.text);
	if (db) {
		check_queries(db, 3, "s", pts, n, "after migration 5");
		/* and points posted after it join the rollups the migration made */
		struct db_metric more[3] = { { "s", pts[n - 1].step + 1, -900.0, 0 },
		                             { "s", pts[n - 1].step + 2, NAN, 0 },
		                             { "s", pts[n - 1].step + 30, 900.0, 0 } };
		CHECK_INT_EQ(db_metrics_insert(db, 3, more, 3, NULL, NULL), 0);
		pts[n++] = (struct pt){ more[0].step, -900.0 };
		pts[n++] = (struct pt){ more[1].step, NAN };
		pts[n++] = (struct pt){ more[2].step, 900.0 };
		check_queries(db, 3, "s", pts, n, "posted after migration 5");
		db_close(db);
	}
	free(pts);
}

int main(void)
{
	tmp = check_tmpdir("db_metrics");
	CHECK_RUN(test_insert_idempotent);
	CHECK_RUN(test_downsample);
	CHECK_RUN(test_rollups_match_points);
	CHECK_RUN(test_rollups_built_by_migration);
	return check_finish();
}
