/* db/metrics.h - training metrics: (job, name, step) -> value.
 *
 * Inserts are idempotent: a point whose (job, name, step) is stored already
 * is left as it is, so a retried POST changes nothing. Non-finite values are
 * stored as NULL and read back as NaN. Every new point also updates the
 * min/max rollups of its series (table metric_rollups, migration 5). Queries downsample long series on the
 * server, keeping each step bucket's lowest and highest point so that spikes
 * and the overall min and max survive.
 *
 * Ownership: inputs are borrowed; db_series_list owns its arrays (release
 * with db_series_list_release, which accepts a zeroed list).
 */
#ifndef LARCH_DB_METRICS_H
#define LARCH_DB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

struct db_metric {
	const char *name;        /* "train/loss"; 1..128 chars */
	int64_t step;
	double value;            /* NaN/inf -> NULL */
	int64_t time_ms;
};

/* Stores a batch in one transaction. *inserted (may be NULL) gets how many
 * points were new. DB_NOT_FOUND if the job does not exist, DB_INVALID for a
 * point without a name (nothing is stored then). */
int db_metrics_insert(struct db *db, int64_t job, const struct db_metric *points, size_t n,
                      size_t *inserted, struct db_err *err);

struct db_metric_query {
	const char *owner;                 /* NULL = any (admin); else another's job is not found */
	const char *const *names;          /* the series wanted; NULL = every series of the job */
	size_t n_names;
	int has_from, has_to;              /* 0: that end is open (a zeroed query reads everything) */
	int64_t from_step, to_step;        /* inclusive */
	int max_points;                    /* per series; 0 = every point */
	int with_time;                     /* 1: fill db_series.time_ms too */
};

struct db_series {
	char *name;
	size_t n;
	int64_t *step;                     /* ascending */
	double *value;                     /* NaN = null (non-finite when reported) */
	int64_t *time_ms;                  /* with_time: when each point was taken; else NULL */
};

struct db_series_list {
	struct db_series *series;          /* sorted by name; series without points left out */
	size_t n;
};

/* Each series in step order; with max_points > 0 and more points than that,
 * the step range is cut into max_points / 2 buckets and each bucket keeps
 * its min and max point (one point when they are the same; its first point
 * when it holds only nulls; ties keep the lower step). Buckets are runs of
 * whole aligned chunks of the widest rollup width (16, 128, ... steps) that
 * still gives max_points / 2 chunks, so a read costs about max_points rows
 * however long the series; a range shorter than that is cut into equal step
 * spans. max_points = 1 keeps the last point. */
int db_metrics_query(struct db *db, int64_t job, const struct db_metric_query *q,
                     struct db_series_list *out, struct db_err *err);
void db_series_list_release(struct db_series_list *list);

#endif
