/* db/usage.h - usage accounting: the CPU and GPU time of finished jobs, by
 * user, account, partition and hour.
 *
 * Two sources feed it. A job of the local executor is added by the
 * database itself (a trigger of schema version 6) when it ends after having
 * run: its owner, resources.account, partition, start and end times,
 * cpus_per_task x ranks CPUs and gpus_per_node x nodes GPUs. Slurm's jobs
 * come from Slurm's accounting (sacct), which larchd reads now and then and
 * adds here with db_usage_add. Every job is kept once (by source and key:
 * adding it again changes nothing) and spread over the UTC hours it ran,
 * kept per hour and per day, so that a query reads the days of its range
 * and the hours at its ends, however many jobs there were.
 *
 * Times are ms since the epoch; a query's range is whole hours. A job is
 * counted in the hours it ran (its CPU and GPU time in each) and, as one
 * job, in the hour it ended. Running jobs count once they end.
 *
 * Ownership: inputs are borrowed for the call; a result owns its strings,
 * released with db_usage_list_release (which accepts a zeroed list).
 */
#ifndef LARCH_DB_USAGE_H
#define LARCH_DB_USAGE_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

#define DB_USAGE_HOUR_MS 3600000LL
#define DB_USAGE_NAME_MAX 128     /* user, account, partition: at most this many bytes */
#define DB_USAGE_KEY_MAX 128

enum db_usage_source { DB_USAGE_LOCAL, DB_USAGE_SLURM };

/* "local", "slurm" (static). */
const char *db_usage_source_name(enum db_usage_source s);

/* One finished job's usage. */
struct db_usage_job {
	const char *key;          /* 1..DB_USAGE_KEY_MAX bytes, unique within the source */
	const char *user;         /* 1..DB_USAGE_NAME_MAX bytes */
	const char *account;      /* NULL or "" for none */
	const char *partition;    /* NULL or "" for none */
	int64_t start_ms, end_ms; /* 0 <= start <= end */
	int64_t cpus, gpus;       /* >= 0 */
};

/* Adds n jobs of source (those it has already are left as they are) and
 * records that the source has been read up to polled_to_ms (0: leaves the
 * mark as it is), in one transaction. *added (may be NULL) gets how many
 * were new. DB_INVALID for a job with a missing or over-long field or
 * times out of order (nothing is added then). */
int db_usage_add(struct db *db, enum db_usage_source source, const struct db_usage_job *jobs,
                 size_t n, int64_t polled_to_ms, size_t *added, struct db_err *err);

/* How far source has been read (db_usage_add's polled_to_ms); 0 if never. */
int db_usage_polled(struct db *db, enum db_usage_source source, int64_t *ms,
                    struct db_err *err);

struct db_usage_filter {
	int64_t from_hour, to_hour;   /* hours since the epoch: from <= hour < to */
	/* Whose rows: NULL and NULL for everyone's; else the local rows of
	 * local_user and the Slurm rows of slurm_user (either may be NULL:
	 * none of that source). */
	const char *local_user, *slurm_user;
	int by_day;                   /* 1: a row per UTC day too */
	/* 1: add up the rows of every user (account, partition), whose field
	 * is then "" (fewer rows for a query that does not group by it) */
	int merge_users, merge_accounts, merge_partitions;
};

/* A total of the hours of one (source, user, account, partition[, day]). */
struct db_usage_row {
	enum db_usage_source source;
	char *user, *account, *partition;   /* account, partition "" for none */
	int64_t day;                  /* by_day: days since the epoch; else 0 */
	int64_t cpu_ms, gpu_ms;       /* CPU and GPU milliseconds */
	int64_t jobs;                 /* jobs that ended in the range */
};

struct db_usage_list {
	struct db_usage_row *rows;    /* owned, n of them, ordered by source, user,
	                                 account, partition, day */
	size_t n;
};

/* The totals of the hours in f's range. */
int db_usage_query(struct db *db, const struct db_usage_filter *f, struct db_usage_list *out,
                   struct db_err *err);
void db_usage_list_release(struct db_usage_list *list);

#endif
