/* tests/bench/bench_db_metrics.c - what a dashboard's metrics read costs
 * larchd's database: a downsampled read (max_points) of long series through
 * the rollups, beside reading every point of the same series (the work the
 * downsampler did before the rollups: it folded every row), in one run.
 *
 *   bench_db_metrics [--points 100000] [--series 3] [--max-points 1000]
 *                    [--rounds 7] [--dir DIR]
 *
 * Fills a new database in DIR (default $TMPDIR or /tmp) with --series series
 * of --points points each, posted in batches of 100 per series as a trainer
 * does (the insert rate is printed: every new point also updates its
 * rollups), then runs --rounds rounds of: the dashboard's read (every series,
 * --max-points), a zoomed read (a tenth of the steps, in the middle), and a
 * read of every point. Prints per round the milliseconds of each, then the
 * medians and the ratio full / downsampled.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, const struct db_err *err)
{
	fprintf(stderr, "bench_db_metrics: %s: %s\n", what, err->text);
	exit(1);
}

/* ms of one query; *points gets the points returned */
static double timed_query(struct db *db, int64_t job, const struct db_metric_query *q,
                          size_t *points)
{
	struct db_series_list l;
	struct db_err err = { 0 };
	double t0 = now_s();
	if (db_metrics_query(db, job, q, &l, &err) != 0)
		die("query", &err);
	double ms = (now_s() - t0) * 1e3;
	*points = 0;
	for (size_t i = 0; i < l.n; i++)
		*points += l.series[i].n;
	db_series_list_release(&l);
	return ms;
}

int main(int argc, char **argv)
{
	long points = 100000;
	int series = 3, maxp = 1000, rounds = 7;
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--points") && i + 1 < argc)
			points = atol(argv[++i]);
		else if (!strcmp(argv[i], "--series") && i + 1 < argc)
			series = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-points") && i + 1 < argc)
			maxp = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else {
			fprintf(stderr, "usage: bench_db_metrics [--points N] [--series S] "
			        "[--max-points M] [--rounds R] [--dir DIR]\n");
			return 2;
		}
	}
	if (points < 10 || series < 1 || series > 26 || maxp < 2 || rounds < 1) {
		fprintf(stderr, "bench_db_metrics: bad arguments\n");
		return 2;
	}

	char path[4096];
	snprintf(path, sizeof path, "%s/bench-db-metrics-%d.db", dir, (int)getpid());
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	if (!db || db_users_ensure(db, "alice", DB_ROLE_USER, &err) != 0)
		die("open", &err);
	struct db_job_new in = { .owner = "alice", .name = "bench", .spec = "{}" };
	struct db_submit out = { 0 };
	if (db_jobs_submit(db, &in, &out, &err) != 0)
		die("submit", &err);

	enum { BATCH = 100 };
	char names[26][16];
	for (int s = 0; s < series; s++)
		snprintf(names[s], sizeof names[s], "train/m%c", 'a' + s);
	struct db_metric *batch = malloc(sizeof *batch * BATCH * (size_t)series);
	double t0 = now_s();
	for (long at = 0; at < points; at += BATCH) {
		size_t n = 0;
		for (long i = at; i < at + BATCH && i < points; i++)
			for (int s = 0; s < series; s++)
				batch[n++] = (struct db_metric){ names[s], i,
				        sin((double)i * 1e-3 + s) + 1e-3 * (double)(i % 7), i };
		if (db_metrics_insert(db, out.id, batch, n, NULL, &err) != 0)
			die("insert", &err);
	}
	double ins = now_s() - t0;
	free(batch);
	printf("bench_db_metrics: %d series x %ld points, inserted in %.2f s (%.1f us a point, "
	       "batches of %d per series), max_points %d, %d rounds\n", series, points, ins,
	       ins * 1e6 / (double)(points * series), BATCH, maxp, rounds);
	printf("%-6s %12s %12s %12s %10s\n", "round", "dashboard ms", "zoomed ms", "full ms",
	       "full/dash");

	double *d = calloc((size_t)rounds, sizeof *d), *z = calloc((size_t)rounds, sizeof *z);
	double *f = calloc((size_t)rounds, sizeof *f), *r = calloc((size_t)rounds, sizeof *r);
	size_t pd = 0, pz = 0, pf = 0;
	for (int k = 0; k < rounds; k++) {
		struct db_metric_query dash = { .max_points = maxp };
		struct db_metric_query zoom = { .max_points = maxp, .has_from = 1,
		                                .from_step = points * 9 / 20 + 3, .has_to = 1,
		                                .to_step = points * 11 / 20 - 5 };
		struct db_metric_query full = { 0 };
		d[k] = timed_query(db, out.id, &dash, &pd);
		z[k] = timed_query(db, out.id, &zoom, &pz);
		f[k] = timed_query(db, out.id, &full, &pf);
		r[k] = f[k] / d[k];
		printf("%-6d %12.2f %12.2f %12.2f %10.1f\n", k + 1, d[k], z[k], f[k], r[k]);
		fflush(stdout);
	}
	printf("points returned: dashboard %zu, zoomed %zu, full %zu\n", pd, pz, pf);
	printf("median: dashboard %.2f ms, zoomed %.2f ms, full %.2f ms, full/dashboard %.1fx\n",
	       median(d, rounds), median(z, rounds), median(f, rounds), median(r, rounds));
	free(d);
	free(z);
	free(f);
	free(r);
	db_close(db);
	char side[4200];
	unlink(path);
	snprintf(side, sizeof side, "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", path);
	unlink(side);
	return 0;
}
