/* service/sweep.c - early stopping of sweeps' children; see sweep.h. */
#include "sweep.h"

#include <stdlib.h>
#include <string.h>

#include "db/sweeps.h"
#include "log.h"
#include "runner_internal.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place); n > 0. */
static double median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Child job at its step: 1 when it is worse than its peers' median, 0 when
 * not (or no peer reached step yet), -1 on a db error. */
static int worse_than_peers(struct svc_runner *r, const struct db_sweep *s, int64_t job,
                            int64_t step)
{
	int64_t *jobs, *steps;
	double *values;
	size_t n;
	struct db_err err = { 0 };
	if (db_sweeps_values_at(r->db, s->id, s->target_metric, step, &jobs, &steps, &values, &n,
	                        &err) != 0) {
		svc_log(SVC_LOG_WARN, "sweep s-%06lld: early stop: %s", (long long)s->id, err.text);
		return -1;
	}
	double mine = 0;
	int have = 0;
	size_t peers = 0;
	for (size_t i = 0; i < n; i++) {
		if (jobs[i] == job) {
			mine = values[i];
			have = steps[i] == step;
		} else {
			values[peers++] = values[i];
		}
	}
	int worse = 0;
	if (have && peers > 0) {
		double med = median(values, peers);
		int min = s->target_mode && strcmp(s->target_mode, "min") == 0;
		worse = min ? mine > med : mine < med;
		if (worse)
			svc_log(SVC_LOG_INFO, "sweep s-%06lld: job j-%06lld: %s %g at step %lld is worse "
			        "than the median %g of %zu peers: early-stopped", (long long)s->id,
			        (long long)job, s->target_metric, mine, (long long)step, med, peers);
	}
	free(jobs);
	free(steps);
	free(values);
	return worse;
}

static void pass_sweep(struct svc_runner *r, int64_t id)
{
	struct db_sweep s;
	struct db_err err = { 0 };
	if (db_sweeps_get(r->db, id, NULL, &s, NULL, NULL, &err) != 0) {
		svc_log(SVC_LOG_WARN, "sweep s-%06lld: early stop: %s", (long long)id, err.text);
		return;
	}
	int64_t *jobs = NULL, *steps = NULL;
	size_t n = 0;
	if (s.target_metric && s.early_stop_after > 0 &&
	    db_sweeps_running_last(r->db, id, s.target_metric, &jobs, &steps, &n, &err) != 0)
		svc_log(SVC_LOG_WARN, "sweep s-%06lld: early stop: %s", (long long)id, err.text);
	for (size_t i = 0; i < n; i++) {
		char by[DB_NAME_MAX + 1];
		if (steps[i] < s.early_stop_after || svc_runner_cancel_by(r, jobs[i], by, NULL, 0))
			continue;                  /* too early, or being cancelled already */
		if (worse_than_peers(r, &s, jobs[i], steps[i]) != 1)
			continue;
		char e[256];
		if (svc_runner_cancel_why(r, jobs[i], "larchd", SVC_EARLY_STOPPED, e, sizeof e) < 0)
			svc_log(SVC_LOG_WARN, "sweep s-%06lld: cannot early-stop job j-%06lld: %s",
			        (long long)id, (long long)jobs[i], e);
	}
	free(jobs);
	free(steps);
	db_sweep_release(&s);
}

void svc_sweep_pass(struct svc_runner *r)
{
	int64_t *ids;
	size_t n;
	struct db_err err = { 0 };
	if (db_sweeps_early_stop_candidates(r->db, &ids, &n, &err) != 0) {
		svc_log(SVC_LOG_WARN, "sweeps: early stop: %s", err.text);
		return;
	}
	for (size_t i = 0; i < n; i++)
		pass_sweep(r, ids[i]);
	free(ids);
}
