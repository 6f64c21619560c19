/* db/sweeps.h - sweeps: a parent row over ordinary child jobs, and labels.
 *
 * A sweep id is the row id, shown as "s-%06lld" (s-000001). A sweep and
 * all its children (PENDING jobs, each with its "submitted" event) are
 * stored in one transaction: either all of them exist or none. A child is a
 * job like any other (db/jobs.h) with sweep, sweep_index and params set; it
 * moves through the same state machine. The sweep has no state of its own:
 * its summary (db_sweeps_get) counts its children by state, and reads each
 * child's best value of the sweep's target metric and the first point that
 * reached the target, in one read transaction.
 *
 * Labels (jobs and sweeps) are a JSON object of strings, validated by the
 * caller (api/labels.h); the database only checks that they are JSON.
 *
 * Ownership: inputs are borrowed for the call. Outputs own their strings:
 * release them with db_sweep_release / db_sweep_list_release /
 * db_sweep_children_free (which accept zeroed or NULL values).
 */
#ifndef LARCH_DB_SWEEPS_H
#define LARCH_DB_SWEEPS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "db/jobs.h"

#define DB_SWEEP_ID_MAX DB_ID_MAX
void db_sweep_id_format(int64_t id, char out[DB_SWEEP_ID_MAX]);
/* "s-" and 1 to 18 digits with a value > 0; 0 or DB_INVALID. */
int db_sweep_id_parse(const char *s, int64_t *id);

struct db_sweep_child_new {
	const char *name;            /* required */
	const char *spec;            /* required: the validated spec, JSON text */
	const char *params;          /* required: the child's axis values, JSON object text */
	const char *partition;       /* may be NULL */
};

struct db_sweep_new {
	const char *owner;           /* required; must exist in users */
	const char *name;            /* required */
	const char *definition;      /* required: the sweep as submitted (JSON text) */
	const char *method;          /* "grid" or "random" */
	int max_parallel;            /* 0 = no limit */
	const char *target_metric;   /* NULL = no target */
	double target_value;
	const char *target_mode;     /* "max" or "min" (with a target) */
	int64_t early_stop_after;    /* the median rule from this step; 0 = no early stop */
	const char *labels;          /* JSON object text, the sweep's and its children's;
	                                NULL = "{}" */
	const char *executor;        /* the children's; NULL = "local" */
	const char *unix_user;       /* who the children run as; NULL: larchd's own */
	const struct db_sweep_child_new *children;
	size_t n;                    /* at least 1 */
	int64_t time_ms;             /* 0 = now */
};

/* Stores the sweep and its n children (PENDING, one "submitted" event each)
 * in one transaction. *id gets the sweep's id. DB_INVALID for a missing
 * field or an unknown owner (nothing stored). */
int db_sweeps_submit(struct db *db, const struct db_sweep_new *in, int64_t *id,
                     struct db_err *err);

struct db_sweep {
	int64_t id;
	char *owner, *name, *definition, *method, *labels;
	int max_parallel;
	char *target_metric;         /* NULL = none */
	double target_value;
	char *target_mode;           /* "max" | "min" | NULL */
	int64_t early_stop_after;    /* 0 = none */
	int64_t submit_ms;
	int64_t n_children;
	int64_t counts[DB_STATE_COUNT];   /* children by state */
	int64_t early_stopped;       /* CANCELLED children whose reason is "early-stopped" */
};

void db_sweep_release(struct db_sweep *s);

struct db_sweep_child {
	int64_t job, index;
	char *params;                /* JSON object text */
	enum db_state state;
	char *reason;                /* NULL if none */
	int64_t start_ms, end_ms;    /* 0 = not yet */
	int64_t progress_step;
	int has_batch;               /* the child's batch.global was readable */
	int64_t batch_global;
	int has_best;                /* a value of the target metric was reported */
	double best;                 /* the best of them (max or min, as the target says) */
	int has_target;              /* a point reached the target value */
	int64_t target_step, target_time_ms;   /* the first such point */
	char *slurm_job_id;          /* NULL if none ("<array>_<task>" for a job array's task) */
	int64_t attempt;
};

/* The sweep (owner NULL = any; another's is DB_NOT_FOUND) with its counts;
 * with children non-NULL, also every child in index order into a new array
 * (*n of them; free with db_sweep_children_free). */
int db_sweeps_get(struct db *db, int64_t id, const char *owner, struct db_sweep *out,
                  struct db_sweep_child **children, size_t *n, struct db_err *err);
void db_sweep_children_free(struct db_sweep_child *children, size_t n);

struct db_sweep_list {
	struct db_sweep *sweeps;     /* owned, newest first, with their counts */
	size_t n;
	char next_cursor[DB_CURSOR_MAX];   /* "" on the last page */
};

/* One page of sweeps (owner NULL = everyone's), newest first; limit 1..
 * DB_LIST_MAX (0 = 50); cursor as for jobs (DB_INVALID when not ours). */
int db_sweeps_list(struct db *db, const char *owner, int limit, const char *cursor,
                   struct db_sweep_list *out, struct db_err *err);
void db_sweep_list_release(struct db_sweep_list *list);

/* Replaces the sweep's labels and those of every child (each child gets a
 * note event). owner as in db_sweeps_get. */
int db_sweeps_set_labels(struct db *db, int64_t id, const char *owner, const char *by,
                         const char *labels, struct db_err *err);
/* Replaces a job's labels, with a note event; in any state. owner as in
 * db_jobs_get. */
int db_jobs_set_labels(struct db *db, int64_t id, const char *owner, const char *by,
                       const char *labels, struct db_err *err);

/* Cancels, in one transaction, every child of the sweep that waits outside
 * an executor (PENDING or HELD): CANCELLED with reason, its end time and an
 * event by `by` each. *n (may be NULL) gets how many. owner as in
 * db_sweeps_get. */
int db_sweeps_cancel_waiting(struct db *db, int64_t id, const char *owner, const char *by,
                             const char *reason, size_t *n, struct db_err *err);

/* The sweeps with early stopping that have a RUNNING child: their ids into
 * a new array (*n of them; free()). */
int db_sweeps_early_stop_candidates(struct db *db, int64_t **ids, size_t *n,
                                    struct db_err *err);

/* The RUNNING children of sweep with the highest step at which each
 * reported metric: jobs[i], steps[i] for i < *n, new arrays (free() each);
 * children without a point are left out. */
int db_sweeps_running_last(struct db *db, int64_t sweep, const char *metric, int64_t **jobs,
                           int64_t **steps, size_t *n, struct db_err *err);

/* The last reported value (at the highest step <= at_step) of metric for
 * each child of sweep that has one: jobs[i], steps[i], values[i] for i < *n,
 * new arrays (free() each). Non-finite values are left out. */
int db_sweeps_values_at(struct db *db, int64_t sweep, const char *metric, int64_t at_step,
                        int64_t **jobs, int64_t **steps, double **values, size_t *n,
                        struct db_err *err);

#endif
