/* db/jobs_internal.h - for the db sources only: job rows and events shared by
 * db/jobs.c and db/submit.c. */
#ifndef LARCH_DB_JOBS_INTERNAL_H
#define LARCH_DB_JOBS_INTERNAL_H

#include "db/internal.h"
#include "db/jobs.h"

/* Fills j (zeroed first, owning its strings) from a row of JOB_COLUMNS. */
int db_job_read_row(sqlite3_stmt *st, struct db_job *j, struct db_err *err);
/* Reads job id (owner NULL = any) on connection c; DB_NOT_FOUND if none. */
int db_job_fetch(struct db_conn *c, int64_t id, const char *owner, struct db_job *out,
                 struct db_err *err);
/* 0 if job id exists and is owner's (owner NULL = any), else DB_NOT_FOUND. */
int db_job_visible(struct db_conn *c, int64_t id, const char *owner, const char *what,
                   struct db_err *err);
/* Appends the next event of job (from may be NULL: the submit event). */
int db_job_event_insert(struct db_conn *c, int64_t job, int64_t time_ms, const char *from,
                        const char *to, const char *by, const char *reason, struct db_err *err);

#endif
