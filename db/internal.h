/* db/internal.h - for the db sources only: connections, the statement cache, the
 * SQLite check macro and the two transaction runners.
 *
 * Every write is a function run by db_txn on the one write connection (under
 * db->wlock); every read is a function run by db_read on a pooled read
 * connection. Both retry SQLITE_BUSY/SQLITE_LOCKED with jittered backoff up
 * to the deadline, so no call site handles busy itself. A run function may be
 * run more than once: it must set its outputs from scratch each time.
 */
#ifndef LARCH_DB_INTERNAL_H
#define LARCH_DB_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

struct db_stmt_slot {
	const char *sql;          /* the static SQL text (the key, compared by pointer) */
	sqlite3_stmt *st;
};

/* One SQLite connection and its prepared statements. */
struct db_conn {
	sqlite3 *h;
	struct db_stmt_slot *slots;   /* owned; grows, never evicts (the SQL set is static) */
	int n_slots, cap_slots;
	sqlite3_stmt *begin, *begin_immediate, *commit, *rollback;   /* prepared at open */
	struct db_change *chg;        /* job events of the open write transaction (owned) */
	size_t n_chg, cap_chg;
	struct db_conn *next;         /* free list of the read pool */
};

struct db_group;                      /* db/submit.c: the group-commit writer */

struct db {
	char *path;                   /* owned */
	struct db_options opts;

	pthread_mutex_t wlock;        /* held for every write transaction */
	struct db_conn *wconn;        /* owned; used only under wlock */

	pthread_mutex_t plock;        /* the read pool */
	pthread_cond_t pcond;
	struct db_conn *readers;      /* free read connections (owned) */
	int n_readers;                /* open read connections, free or lent */

	struct db_group *group;       /* owned; NULL without group commit */
	_Atomic uint64_t generation;  /* write transactions ended (db_generation) */
	db_change_fn change_fn;       /* db_set_change_hook; NULL: none */
	void *change_arg;
};

/* A write (db_txn) or read (db_read) transaction body. Returns 0 or a
 * negative enum db_code with err filled. */
typedef int (*db_run_fn)(struct db_conn *c, void *arg, struct db_err *err);

/* BEGIN IMMEDIATE, fn, COMMIT on the write connection; ROLLBACK when fn or
 * COMMIT fails; the whole thing again on SQLITE_BUSY/LOCKED until the
 * deadline (then DB_BUSY). fn must not call db_txn or db_read. */
int db_txn(struct db *db, db_run_fn fn, void *arg, struct db_err *err);
/* BEGIN (a consistent snapshot), fn, COMMIT on a pooled read connection. */
int db_read(struct db *db, db_run_fn fn, void *arg, struct db_err *err);

/* Records the first error: "db: " + the formatted text. Returns code. */
int db_err_set_(struct db_err *err, int code, int sqlite_rc, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
#define DB_FAIL(err, code, ...) db_err_set_((err), (code), 0, __FILE__, __LINE__, __VA_ARGS__)

/* Checks the result of an sqlite3_* call on connection c: SQLITE_OK, ROW and
 * DONE pass through; anything else records "db: WHAT: <SQLite's message>"
 * with file:line. Yields the call's result either way. */
int db_sql_check_(struct db_conn *c, int rc, const char *what, struct db_err *err,
                  const char *file, int line);
#define DB_SQL(c, call, what, err) db_sql_check_((c), (call), (what), (err), __FILE__, __LINE__)
/* The code of the error recorded in err, DB_ERROR if none is. */
#define DB_RC(err) ((err) && (err)->code ? (err)->code : DB_ERROR)
/* 1 if rc is a success code (SQLITE_OK, ROW, DONE). */
#define DB_SQL_OK(rc) ((rc) == SQLITE_OK || (rc) == SQLITE_ROW || (rc) == SQLITE_DONE)

/* The cached statement for sql (a static string: the pointer is the key),
 * reset and with its bindings cleared; prepared on first use. NULL with err
 * filled on failure. The runners reset statements left mid-step. */
sqlite3_stmt *db_stmt_(struct db_conn *c, const char *sql, const char *what, struct db_err *err,
                       const char *file, int line);
#define DB_STMT(c, sql, what, err) db_stmt_((c), (sql), (what), (err), __FILE__, __LINE__)

/* Binds text (NULL binds NULL); the string must outlive the statement's use. */
int db_bind_text(sqlite3_stmt *st, int i, const char *s);
/* A new copy of a text column (NULL for NULL). Sets *oom on allocation failure. */
char *db_column_strdup(sqlite3_stmt *st, int i, int *oom);

/* Runs a statement that returns no row to SQLITE_DONE; 0 or the error code
 * (recorded with the caller's file:line). */
int db_step_done_(struct db_conn *c, sqlite3_stmt *st, const char *what, struct db_err *err,
                  const char *file, int line);
#define DB_STEP_DONE(c, st, what, err) db_step_done_((c), (st), (what), (err), __FILE__, __LINE__)

/* Makes the file at path private to larchd's user, mode 0600 (the
 * database holds specs, token hashes and the audit log): creates it empty
 * when create is set and it is missing (SQLite then gives its -wal, -shm and
 * journal files the same mode), else leaves a missing file alone; takes
 * group and other bits off an existing one. 0, or DB_ERROR with err
 * filled (chmod failed: another user's file). */
int db_file_private(const char *path, int create, struct db_err *err);

/* Opens one connection to db->path (read-only or the writer). */
struct db_conn *db_conn_open(struct db *db, int reader, struct db_err *err);
void db_conn_close(struct db_conn *c);

/* Lower-case hex SHA-256 of data into out[65]. Returns 0 or DB_ERROR. */
int db_sha256_hex(const void *data, size_t len, char out[65], struct db_err *err);

/* db/migrate.c: brings the schema to the latest version (db_open). */
int db_migrate_open(struct db *db, struct db_err *err);

/* db/submit.c: the group-commit writer thread. */
int db_group_start(struct db *db, struct db_err *err);
void db_group_stop(struct db *db);

/* List cursors (db/cursor.c): 12 characters (and the NUL) naming the last row of a page;
 * the tag keeps one list's cursors out of another. decode fails with
 * DB_INVALID, the message starting with what ("list jobs"). */
enum { DB_CURSOR_JOBS = 1, DB_CURSOR_AUDIT = 2, DB_CURSOR_SWEEPS = 3 };
void db_cursor_encode(unsigned char tag, int64_t id, char out[13]);
int db_cursor_decode(unsigned char tag, const char *what, const char *s, int64_t *id,
                     struct db_err *err);

/* A keyset-paged list's SQL for one combination of its filters: select_from
 * ("SELECT ... FROM t"), then " WHERE " the conds[b] whose bit b is set in
 * mask, joined by " AND ", then " ORDER BY id DESC LIMIT ?5". The four
 * conds bind ?1 to ?4, the last being the cursor ("id < ?4"); one text per
 * mask lets each use its index. Writes at most len bytes into out. */
void db_list_sql(char *out, size_t len, const char *select_from, const char *const conds[4],
                 int mask);
/* A list call's page: *limit_out is limit (0 = 50), which must be
 * 1..DB_LIST_MAX, and *before the id the cursor names (cursor NULL or "":
 * 0, the first page). DB_INVALID with a message starting with what. */
int db_list_page(const char *what, unsigned char tag, int limit, const char *cursor,
                 int *limit_out, int64_t *before, struct db_err *err);

/* Steps st, a query of the one row of id (owner-scoped in its SQL): 0 on a
 * row, DB_NOT_FOUND "no <noun> <prefix>-000123" when there is none, the
 * SQLite error (what) otherwise. */
int db_step_row(struct db_conn *c, sqlite3_stmt *st, const char *what, const char *noun,
                char prefix, int64_t id, struct db_err *err);

#endif
