/* db/db.h - larchd's SQLite store: open, close, errors, maintenance.
 *
 * One struct db per process, shared by every thread. Writes go through one
 * write connection, one transaction at a time (db_txn in db/internal.h);
 * reads take a connection from a small pool, so they never wait for a write.
 * Every commit is durable before the call returns (WAL, synchronous=FULL).
 * The table families have their own headers: db/jobs.h (jobs, job_events,
 * idempotency), db/metrics.h, db/checkpoints.h, db/tokens.h (users, tokens).
 *
 * Every call returns 0 on success or a negative enum db_code, and fills the
 * struct db_err it is given (which may be NULL) with the first error.
 * Times are milliseconds since the Unix epoch; 0 in an input means "now".
 */
#ifndef LARCH_DB_DB_H
#define LARCH_DB_DB_H

#include <stddef.h>
#include <stdint.h>

struct db;    /* opaque */

/* What a failure means to the caller (the API maps these to statuses). */
enum db_code {
	DB_OK = 0,
	DB_ERROR = -1,       /* SQLite, I/O, out of memory, disk full: a server error */
	DB_NOT_FOUND = -2,   /* no such job or token, or another user's job */
	DB_CONFLICT = -3,    /* idempotency key reused with another request body */
	DB_ILLEGAL = -4,     /* the state machine forbids this transition */
	DB_STALE = -5,       /* the job is not in the state the caller expected */
	DB_INVALID = -6,     /* bad argument: garbage cursor, bad name, bad token format */
	DB_BUSY = -7,        /* the database stayed locked past the retry deadline */
	DB_CORRUPT = -8,     /* db_check found problems */
};

#define DB_ERR_TEXT 512

/* The first error and its context, like jansson's json_error_t. Zero it
 * (or db_err_clear) before use; later errors do not overwrite the first. */
struct db_err {
	int code;                 /* enum db_code; 0 until an error is recorded */
	int sqlite_rc;            /* SQLite's extended result code, 0 if not SQLite's */
	const char *file;         /* where the error was detected (static string) */
	int line;
	char text[DB_ERR_TEXT];   /* "db: insert job: database is locked" */
};

void db_err_clear(struct db_err *err);

/* Prefixed ids (db/cursor.c), "j-000123" for prefix 'j' (jobs), 's' for
 * sweeps: format writes at most len bytes (DB_ID_MAX is room for any);
 * parse accepts the prefix, '-' and 1 to 18 digits with a value > 0,
 * nothing else (0 or DB_INVALID). The _s forms take a longer prefix
 * ("wh" for webhooks: "wh-000004"). */
#define DB_ID_MAX 24
void db_id_format(char prefix, int64_t id, char *out, size_t len);
int db_id_parse(char prefix, const char *s, int64_t *id);
void db_id_format_s(const char *prefix, int64_t id, char *out, size_t len);
int db_id_parse_s(const char *prefix, const char *s, int64_t *id);
/* Short name of a code: "not_found", "conflict", ... (static string). */
const char *db_code_name(int code);

struct db_options {
	int readonly;             /* open read-only (writes fail with DB_ERROR) */
	int no_migrate;           /* do not apply missing migrations (db check) */
	int no_group_commit;      /* one transaction per submit (benchmarks) */
	int busy_deadline_ms;     /* how long db_txn retries SQLITE_BUSY; 0 = 5000 */
	int max_readers;          /* read connections in the pool; 0 = 8 */
};

/* Opens (creating if missing) the database at path: WAL, foreign keys,
 * synchronous=FULL, then applies the missing migrations unless
 * opts->no_migrate. Unless read-only, the file and its -wal and -shm are
 * made mode 0600 (created so, and group and other bits taken off old
 * ones). opts may be NULL for the defaults. Refuses a database
 * whose schema is newer than this code. Returns a new db (free with
 * db_close) or NULL with err filled. */
struct db *db_open(const char *path, const struct db_options *opts, struct db_err *err);
/* Finishes pending submits, stops the writer thread, closes every
 * connection and frees db. Accepts NULL. Returns 0 or DB_ERROR (the db is
 * freed either way). */
int db_close(struct db *db);

/* A number that changes after every write transaction of this process
 * (grows by one each, committed or not). Read it before reading rows: if it
 * is the same later, no write of this process has ended in between, so what
 * was read is still what the database holds (writers outside this process,
 * such as `larchd token`, are not counted: do not cache their tables). */
uint64_t db_generation(struct db *db);

/* A job event as committed: the job, its state after the event (the same
 * state for an admin's update of a waiting job), when, and whose job it is.
 * Handed to the change hook (db_set_change_hook). */
struct db_change {
	int64_t job;
	int64_t time_ms;
	char state[16];           /* "RUNNING" */
	char owner[72];           /* the job's owner (user names are at most 64 bytes) */
};

/* Called after each write transaction that recorded job events, with the
 * events of that transaction in order; on the committing thread, with the
 * write lock held, so calls come one at a time and in commit order. It must
 * be short and must not call into the db. arg is the hook's own. */
typedef void (*db_change_fn)(void *arg, const struct db_change *changes, size_t n);
/* Sets (fn NULL: removes) the change hook. Set it before the writes it must
 * see begin: it is read without a lock by the writer. */
void db_set_change_hook(struct db *db, db_change_fn fn, void *arg);

/* The schema version this code writes, and the version of the open file. */
int db_schema_latest(void);
int db_schema_version(struct db *db, int *version, struct db_err *err);
/* Applies the missing migrations, each in its own transaction. *applied (may
 * be NULL) gets how many ran. */
int db_migrate(struct db *db, int *applied, struct db_err *err);
/* The SQL text of migration step version (1-based), or NULL past the last;
 * for tools and tests that build an old database. Static string. */
const char *db_migration_sql(int version);

/* PRAGMA integrity_check and foreign_key_check. Returns 0 when both are
 * clean, DB_CORRUPT when not (err names the first problem), DB_ERROR when
 * they could not run. *report (may be NULL) gets a new string, owned by the
 * caller (free()), with one line per problem ("" when clean). */
int db_check(struct db *db, char **report, struct db_err *err);
/* Copies the database to dst with the online backup API while larchd keeps
 * serving: written to dst.tmp (mode 0600), synced, then renamed over dst. */
int db_backup(struct db *db, const char *dst, struct db_err *err);

/* Milliseconds since the epoch (CLOCK_REALTIME). */
int64_t db_now_ms(void);

#endif
