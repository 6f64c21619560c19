/* tests/unit/test_db_txn.c - db/txn.c: the transaction runners, and writes
 * that fail under them.
 *
 *  - a failing body rolls back, its error names the operation and file:line;
 *  - SQLITE_BUSY from another process is retried until the lock goes (reads
 *    never wait), and reported as DB_BUSY past the deadline;
 *  - failing writes: a file size limit (RLIMIT_FSIZE) makes the WAL append
 *    fail, and a read-only reopen refuses writes; both return an error and
 *    lose nothing committed before, and the connection writes again after.
 * The allocator faults are in test_db_fault.c.
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db/db.h"
#include "db/internal.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static const char *tmp;

/* ---- helpers -------------------------------------------------------------------- */

static void path_of(char *out, size_t len, const char *file)
{
	snprintf(out, len, "%s/%s", tmp, file);
}

static struct db *open_db(const char *file, const struct db_options *o)
{
	char path[4200];
	path_of(path, sizeof path, file);
	struct db_err err = { 0 };
	struct db *db = db_open(path, o, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	if (!db)
		exit(1);
	return db;
}

static long long raw_int(const char *file, const char *sql)
{
	char path[4200];
	path_of(path, sizeof path, file);
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	long long v = -1;
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return v;
}

static int64_t submit(struct db *db, const char *name, const char *key, struct db_err *err)
{
	struct db_job_new in = { .owner = "alice", .name = name, .spec = "{\"steps\": 3}",
	                         .idem_key = key };
	struct db_submit out = { 0 };
	int rc = db_jobs_submit(db, &in, &out, err);
	return rc ? rc : out.id;
}

/* The database passes integrity_check and foreign_key_check. */
static int check_ok(struct db *db, int n)
{
	char *report = NULL;
	struct db_err err = { 0 };
	int rc = db_check(db, &report, &err);
	CHECK_MSG(rc == 0, "n=%d: check after a fault: %s\n%s", n, err.text, report ? report : "");
	free(report);
	return rc == 0;
}

static int check_file_ok(const char *file, int n)
{
	struct db *db = open_db(file, NULL);
	int ok = check_ok(db, n);
	db_close(db);
	return ok;
}

/* ---- the runners ---------------------------------------------------------------- */

struct body {
	int calls;
	int fail;           /* return this after writing */
};

static const char sql_put_user[] = "INSERT INTO users (name, role, created) VALUES ('carol', 'user', 1)";

static int body_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct body *b = arg;
	b->calls++;
	sqlite3_stmt *st = DB_STMT(c, sql_put_user, "put user", err);
	if (!st || DB_STEP_DONE(c, st, "put user", err))
		return DB_RC(err);
	return b->fail ? DB_FAIL(err, b->fail, "body: told to fail") : 0;
}

static void test_rollback(void)
{
	struct db *db = open_db("rollback.db", NULL);
	struct body b = { .fail = DB_INVALID };
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_txn(db, body_fn, &b, &err), DB_INVALID);
	CHECK_STR_EQ(err.text, "db: body: told to fail");
	CHECK_INT_EQ(b.calls, 1);
	CHECK_INT_EQ(raw_int("rollback.db", "SELECT count(*) FROM users"), 0);
	b = (struct body){ 0 };
	CHECK_INT_EQ(db_txn(db, body_fn, &b, NULL), 0);
	CHECK_INT_EQ(raw_int("rollback.db", "SELECT count(*) FROM users"), 1);
	/* a constraint failure inside: the error names the operation, and file:line */
	db_err_clear(&err);
	CHECK_INT_EQ(db_txn(db, body_fn, &b, &err), DB_INVALID);
	CHECK_MSG(strstr(err.text, "db: put user: UNIQUE constraint failed") == err.text, "%s", err.text);
	CHECK(err.file && strstr(err.file, "test_db_txn.c") && err.line > 0);
	CHECK_INT_EQ(err.sqlite_rc, SQLITE_CONSTRAINT_PRIMARYKEY);
	db_close(db);
}

struct locker {
	const char *file;
	int hold_ms;
	int ready;
	pthread_mutex_t m;
	pthread_cond_t cv;
};

/* Another process, as far as SQLite can tell: its own connection holding the
 * write lock for hold_ms. */
static void *locker_main(void *arg)
{
	struct locker *l = arg;
	char path[4200];
	path_of(path, sizeof path, l->file);
	sqlite3 *h = NULL;
	sqlite3_open(path, &h);
	int rc = sqlite3_exec(h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	pthread_mutex_lock(&l->m);
	l->ready = rc == SQLITE_OK ? 1 : -1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->m);
	usleep((useconds_t)l->hold_ms * 1000);
	sqlite3_exec(h, "COMMIT", NULL, NULL, NULL);
	sqlite3_close(h);
	return NULL;
}

static void hold_lock(struct locker *l, pthread_t *th)
{
	pthread_mutex_init(&l->m, NULL);
	pthread_cond_init(&l->cv, NULL);
	pthread_create(th, NULL, locker_main, l);
	pthread_mutex_lock(&l->m);
	while (!l->ready)
		pthread_cond_wait(&l->cv, &l->m);
	pthread_mutex_unlock(&l->m);
	CHECK_INT_EQ(l->ready, 1);
}

static void test_busy(void)
{
	struct db_options o = { .busy_deadline_ms = 3000 };
	struct db *db = open_db("busy.db", &o);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	int64_t id = submit(db, "x", NULL, NULL);

	/* the lock goes after 150 ms: the write waits for it and succeeds */
	struct locker l = { .file = "busy.db", .hold_ms = 150 };
	pthread_t th;
	hold_lock(&l, &th);
	struct body b = { 0 };
	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(db, id, NULL, &j, NULL), 0);      /* reads do not wait */
	db_job_release(&j);
	struct db_err err = { 0 };
	CHECK_MSG(db_txn(db, body_fn, &b, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(b.calls, 1);     /* BEGIN IMMEDIATE was what waited */
	struct db_submit out;
	struct db_job_new in = { .owner = "alice", .name = "y", .spec = "{}" };
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	pthread_join(th, NULL);
	db_close(db);

	/* held past the deadline: DB_BUSY, and nothing written */
	o.busy_deadline_ms = 100;
	db = open_db("busy.db", &o);
	l = (struct locker){ .file = "busy.db", .hold_ms = 600 };
	hold_lock(&l, &th);
	db_err_clear(&err);
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, &err), DB_BUSY);
	CHECK_MSG(strstr(err.text, "locked") != NULL, "%s", err.text);
	db_err_clear(&err);
	CHECK_INT_EQ(db_jobs_progress(db, id, 1, 2, 0.5, &err), DB_BUSY);
	pthread_join(th, NULL);
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	db_close(db);
	CHECK_INT_EQ(raw_int("busy.db", "SELECT count(*) FROM jobs"), 3);
}

/* ---- failing writes ---------------------------------------------------------------- */

static off_t size_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : 0;
}

static void test_file_size_limit(void)
{
	struct db *db = open_db("fsize.db", NULL);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	int64_t ids[20];
	for (int i = 0; i < 20; i++)
		ids[i] = submit(db, "committed", NULL, NULL);
	char path[4200], wal[4300];
	path_of(path, sizeof path, "fsize.db");
	snprintf(wal, sizeof wal, "%s-wal", path);

	/* no file of this process may grow past what is there now */
	struct rlimit old, lim;
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	off_t biggest = size_of(path) > size_of(wal) ? size_of(path) : size_of(wal);
	lim.rlim_cur = (rlim_t)biggest;
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);

	size_t big = 256 * 1024;
	char *spec = malloc(big + 32);
	int k = snprintf(spec, big + 32, "{\"pad\": \"");
	memset(spec + k, 'x', big);
	strcpy(spec + k + big, "\"}");
	struct db_job_new in = { .owner = "alice", .name = "too big", .spec = spec };
	struct db_submit out;
	struct db_err err = { 0 };
	int rc = db_jobs_submit(db, &in, &out, &err);
	CHECK_INT_EQ(rc, DB_ERROR);
	CHECK_MSG(strstr(err.text, "full") || strstr(err.text, "I/O"), "%s", err.text);
	struct db_metric m[200];
	for (int i = 0; i < 200; i++)
		m[i] = (struct db_metric){ "a/rather/long/metric/name/to/fill/pages", i, i, i };
	db_err_clear(&err);
	CHECK(db_metrics_insert(db, ids[0], m, 200, NULL, &err) != 0);

	CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
	signal(SIGXFSZ, prev);

	/* nothing lost, nothing half-written, and the connection writes again */
	CHECK_INT_EQ(db_check(db, NULL, NULL), 0);
	for (int i = 0; i < 20; i++) {
		struct db_job j;
		CHECK_INT_EQ(db_jobs_get(db, ids[i], NULL, &j, NULL), 0);
		db_job_release(&j);
	}
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, &err), 0);
	CHECK_INT_EQ(db_metrics_insert(db, ids[0], m, 200, NULL, NULL), 0);
	db_close(db);
	free(spec);
	CHECK(check_file_ok("fsize.db", 0));
	CHECK_INT_EQ(raw_int("fsize.db", "SELECT count(*) FROM jobs"), 21);
	CHECK_INT_EQ(raw_int("fsize.db", "SELECT count(*) FROM job_events"), 21);
	CHECK_INT_EQ(raw_int("fsize.db", "SELECT count(*) FROM metrics"), 200);
}

static void test_readonly_reopen(void)
{
	struct db *db = open_db("ro.db", NULL);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	int64_t id = submit(db, "committed", NULL, NULL);
	CHECK(id > 0);
	/* keep a writer open, as larchd would be, while a read-only handle tries */
	struct db_options ro = { .readonly = 1 };
	struct db *rdb = open_db("ro.db", &ro);
	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(rdb, id, NULL, &j, NULL), 0);
	CHECK_STR_EQ(j.name, "committed");
	db_job_release(&j);
	struct db_err err = { 0 };
	CHECK_INT_EQ(submit(rdb, "refused", NULL, &err), DB_ERROR);
	CHECK_MSG(strstr(err.text, "readonly") != NULL, "%s", err.text);
	struct db_transition t = { .job = id, .from = DB_STATE_ANY, .to = DB_STATE_QUEUED, .by = "x" };
	CHECK_INT_EQ(db_jobs_transition(rdb, &t, NULL, NULL), DB_ERROR);
	CHECK_INT_EQ(db_migrate(rdb, NULL, NULL), DB_ERROR);
	db_close(rdb);
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
	db_close(db);
	CHECK_INT_EQ(raw_int("ro.db", "SELECT count(*) FROM jobs"), 1);
	CHECK_INT_EQ(raw_int("ro.db", "SELECT count(*) FROM job_events"), 2);
}

int main(void)
{
	tmp = check_tmpdir("db_txn");
	CHECK_RUN(test_rollback);
	CHECK_RUN(test_busy);
	CHECK_RUN(test_file_size_limit);
	CHECK_RUN(test_readonly_reopen);
	return check_finish();
}
