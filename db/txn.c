/* db/txn.c - the transaction runners: the one place that retries
 * SQLITE_BUSY/SQLITE_LOCKED (another process holding the write lock, a WAL
 * recovery in progress), with jittered exponential backoff up to a deadline. */
#include "db/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int retryable(const struct db_err *e)
{
	int prim = e->sqlite_rc & 0xff;
	return prim == SQLITE_BUSY || prim == SQLITE_LOCKED;
}

/* Sleeps between delay/2 and delay ms; returns the next delay (doubling, max 64). */
static int backoff(int delay_ms)
{
	static _Thread_local unsigned seed;
	if (!seed)
		seed = (unsigned)mono_ms() ^ (unsigned)(uintptr_t)&seed;
	int ms = delay_ms / 2 + rand_r(&seed) % (delay_ms / 2 + 1);
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
	return delay_ms < 64 ? 2 * delay_ms : 64;
}

/* Statements left mid-step hold the read snapshot open: reset them. */
static void reset_busy(struct db_conn *c)
{
	for (sqlite3_stmt *st = sqlite3_next_stmt(c->h, NULL); st; st = sqlite3_next_stmt(c->h, st))
		if (sqlite3_stmt_busy(st))
			sqlite3_reset(st);
}

static int run_stmt(struct db_conn *c, sqlite3_stmt *st, const char *what, struct db_err *err)
{
	sqlite3_reset(st);
	int rc = DB_SQL(c, sqlite3_step(st), what, err);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

/* One attempt: begin, fn, commit; rollback on any failure. */
static int attempt(struct db_conn *c, sqlite3_stmt *begin, db_run_fn fn, void *arg,
                   struct db_err *e)
{
	/* a transaction left open by an earlier failed rollback */
	if (!sqlite3_get_autocommit(c->h)) {
		struct db_err ignored = { 0 };
		run_stmt(c, c->rollback, "rollback", &ignored);
	}
	c->n_chg = 0;
	int rc = run_stmt(c, begin, "begin", e);
	if (rc)
		return rc;
	rc = fn(c, arg, e);
	if (rc && !e->code)
		DB_FAIL(e, rc, "transaction failed (%s)", db_code_name(rc));
	reset_busy(c);
	if (!rc)
		rc = run_stmt(c, c->commit, "commit", e);
	if (rc && !sqlite3_get_autocommit(c->h)) {
		struct db_err ignored = { 0 };
		run_stmt(c, c->rollback, "rollback", &ignored);
	}
	return rc;
}

static int run(struct db *db, struct db_conn *c, sqlite3_stmt *begin, db_run_fn fn, void *arg,
               struct db_err *err)
{
	int64_t deadline = mono_ms() + db->opts.busy_deadline_ms;
	int delay = 1;
	for (;;) {
		struct db_err e = { 0 };
		int rc = attempt(c, begin, fn, arg, &e);
		if (rc == 0)
			return 0;
		if (!retryable(&e) || mono_ms() >= deadline) {
			if (retryable(&e))
				e.code = rc = DB_BUSY;
			if (err && !err->code)
				*err = e;
			return rc;
		}
		delay = backoff(delay);
	}
}

int db_txn(struct db *db, db_run_fn fn, void *arg, struct db_err *err)
{
	pthread_mutex_lock(&db->wlock);
	struct db_conn *c = db->wconn;
	int rc = run(db, c, c->begin_immediate, fn, arg, err);
	/* after the commit: a reader that saw the old generation may have read
	 * the old rows, never one that saw the new (db_generation) */
	atomic_fetch_add_explicit(&db->generation, 1, memory_order_release);
	if (rc == 0 && c->n_chg && db->change_fn)
		db->change_fn(db->change_arg, c->chg, c->n_chg);
	c->n_chg = 0;
	pthread_mutex_unlock(&db->wlock);
	return rc;
}

void db_set_change_hook(struct db *db, db_change_fn fn, void *arg)
{
	pthread_mutex_lock(&db->wlock);
	db->change_fn = fn;
	db->change_arg = arg;
	pthread_mutex_unlock(&db->wlock);
}

uint64_t db_generation(struct db *db)
{
	return atomic_load_explicit(&db->generation, memory_order_acquire);
}

/* ---- the read pool ---------------------------------------------------------- */

static struct db_conn *reader_get(struct db *db, struct db_err *err)
{
	pthread_mutex_lock(&db->plock);
	while (!db->readers && db->n_readers >= db->opts.max_readers)
		pthread_cond_wait(&db->pcond, &db->plock);
	struct db_conn *c = db->readers;
	if (c) {
		db->readers = c->next;
		pthread_mutex_unlock(&db->plock);
		return c;
	}
	db->n_readers++;
	pthread_mutex_unlock(&db->plock);
	c = db_conn_open(db, 1, err);
	if (!c) {
		pthread_mutex_lock(&db->plock);
		db->n_readers--;
		pthread_cond_signal(&db->pcond);
		pthread_mutex_unlock(&db->plock);
	}
	return c;
}

static void reader_put(struct db *db, struct db_conn *c)
{
	pthread_mutex_lock(&db->plock);
	c->next = db->readers;
	db->readers = c;
	pthread_cond_signal(&db->pcond);
	pthread_mutex_unlock(&db->plock);
}

int db_read(struct db *db, db_run_fn fn, void *arg, struct db_err *err)
{
	struct db_conn *c = reader_get(db, err);
	if (!c)
		return DB_RC(err);
	int rc = run(db, c, c->begin, fn, arg, err);
	reader_put(db, c);
	return rc;
}
