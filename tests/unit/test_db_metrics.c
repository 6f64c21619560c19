/* tests/unit/test_db_metrics.c - db/metrics.c: batched inserts that are
 * idempotent on (job, name, step), non-finite values, queries by name and
 * step range, and min/max downsampling of a 100k-point series (the count
 * bound, the global min and max kept, every point a real one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static const char *tmp;

static struct db *open_db(const char *file)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", tmp, file);
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	if (!db)
		exit(1);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	return db;
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

int main(void)
{
	tmp = check_tmpdir("db_metrics");
	CHECK_RUN(test_insert_idempotent);
	CHECK_RUN(test_downsample);
	return check_finish();
}
