/* tests/unit/test_db_fault.c - the db layer when SQLite runs out of memory.
 *
 * SQLite's allocator (SQLITE_CONFIG_MALLOC, installed before SQLite starts)
 * fails its Nth allocation, or every allocation from the Nth on, for N = 1,
 * 2, ... until the operation runs clean: opening a database (existing and
 * new), submitting, moving a job to a final state (job row, event, token
 * revocation), inserting a metrics batch, creating a token. Every failure
 * must come back as an error (no crash; ASan finds no leak), the database
 * must then pass integrity_check and foreign_key_check and hold all of the
 * operation's rows when it succeeded and none when it failed, and the
 * connection must work again once memory is back. Some loops take every
 * k-th N to keep the test short; LARCH_TEST_EXHAUSTIVE=1 takes every N.
 *
 * The loops open, write and check some 3500 databases: their files go to
 * memory (tmpfs, /dev/shm, when writable), where the commits' fsyncs
 * (synchronous=FULL) cost nothing; on a disk shared with other work the
 * fsyncs were four fifths of the test's time. What the test checks is the
 * same on either.
 */
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/db.h"
#include "db/internal.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static const char *tmp;

/* ---- the fault-injecting allocator ---------------------------------------------- */

static sqlite3_mem_methods base_mem;
static atomic_int fault_armed;
static atomic_long fault_count, fault_target;
static atomic_int fault_hit;
static atomic_int fault_persistent;     /* 1: every allocation from the Nth on fails */

static int should_fail(void)
{
	if (!atomic_load(&fault_armed))
		return 0;
	long k = atomic_fetch_add(&fault_count, 1) + 1, target = atomic_load(&fault_target);
	if (k == target || (k > target && atomic_load(&fault_persistent))) {
		atomic_store(&fault_hit, 1);
		return 1;
	}
	return 0;
}

static void *fault_malloc(int n)
{
	return should_fail() ? NULL : base_mem.xMalloc(n);
}

static void *fault_realloc(void *p, int n)
{
	return should_fail() ? NULL : base_mem.xRealloc(p, n);
}

static void install_allocator(void)
{
	sqlite3_mem_methods m;
	if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &base_mem) != SQLITE_OK) {
		fprintf(stderr, "cannot read SQLite's allocator\n");
		exit(1);
	}
	m = base_mem;
	m.xMalloc = fault_malloc;
	m.xRealloc = fault_realloc;
	if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK) {
		fprintf(stderr, "cannot install the fault-injecting allocator\n");
		exit(1);
	}
}

static void arm(long n)
{
	atomic_store(&fault_count, 0);
	atomic_store(&fault_target, n);
	atomic_store(&fault_hit, 0);
	atomic_store(&fault_armed, 1);
}

/* Returns 1 if the armed allocation failed. */
static int disarm(void)
{
	atomic_store(&fault_armed, 0);
	return atomic_load(&fault_hit);
}

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

/* A count(*) through the db's own read pool (no new connection per query). */
struct count_arg {
	const char *sql;    /* a string literal: the statement cache's key */
	long long n;
};

static int count_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct count_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, a->sql, "count", err);
	if (!st || DB_SQL(c, sqlite3_step(st), "count", err) != SQLITE_ROW)
		return DB_RC(err);
	a->n = sqlite3_column_int64(st, 0);
	return 0;
}

static long long count_in(struct db *db, const char *sql)
{
	struct count_arg a = { sql, -1 };
	return db_read(db, count_fn, &a, NULL) ? -1 : a.n;
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

/* ---- fault injection -------------------------------------------------------------- */

enum { MAX_FAULTS = 5000 };

static int exhaustive(void)
{
	const char *e = getenv("LARCH_TEST_EXHAUSTIVE");
	return e && atoi(e);
}

static void test_fault_open(void)
{
	/* an existing database: every 7th allocation; a new one (which migrates,
	 * some 6000 allocations): every 61st, to keep the test short */
	for (int fresh = 0; fresh < 2; fresh++) {
		int n, failures = 0, runs = 0;
		int stride = exhaustive() ? 1 : fresh ? 61 : 7;
		const char *file = fresh ? "fault-open-new.db" : "fault-open.db";
		char path[4200];
		path_of(path, sizeof path, file);
		if (!fresh)
			db_close(open_db(file, NULL));
		for (n = 1; n < 10 * MAX_FAULTS; n += stride) {
			if (fresh)
				unlink(path);
			struct db_err err = { 0 };
			arm(n);
			struct db *db = db_open(path, NULL, &err);
			int hit = disarm();
			runs++;
			if (!db) {
				failures++;
				CHECK_MSG(hit, "n=%d: open failed without a fault: %s", n, err.text);
				CHECK_MSG(err.code != 0 && strncmp(err.text, "db: ", 4) == 0, "n=%d: %s", n,
				          err.text);
				check_file_ok(file, n);
			} else {
				check_ok(db, n);
				db_close(db);
			}
			if (!hit && db)
				break;
		}
		CHECK_MSG(n < 10 * MAX_FAULTS, "db_open never ran clean");
		CHECK(failures > 0);
		fprintf(stderr, "  db_open (%s file): %d allocations, %d runs, %d failed cleanly\n",
		        fresh ? "new" : "existing", n - 1, runs, failures);
	}
}

/* One operation run with the Nth allocation failing (or every one from the
 * Nth on: persistent; every 4th N), for N = 1, 2, ... until it runs clean. Each run starts from a copy of the case's template (the
 * database after setup), on a new connection, so statements are prepared
 * under the fault too. */
struct fault_case {
	const char *name;
	void (*setup)(struct db *db);
	/* 0 on success, else an error code with err filled */
	int (*op)(struct db *db, struct db_err *err);
	/* after the run, with the db open: 1 if its rows are all there (ok) or
	 * none (failed); may also check that a retry works */
	int (*rows)(struct db *db, const char *file, int ok, int n);
};

static char *image;           /* the current case's template */
static size_t image_len;

static void make_template(const struct fault_case *fc)
{
	char path[4200];
	path_of(path, sizeof path, "template.db");
	unlink(path);
	struct db *db = open_db("template.db", NULL);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	if (fc->setup)
		fc->setup(db);
	db_close(db);     /* checkpoints: the one file holds everything */
	free(image);
	FILE *f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	image_len = (size_t)ftell(f);
	rewind(f);
	image = malloc(image_len);
	if (fread(image, 1, image_len, f) != image_len)
		exit(1);
	fclose(f);
}

static void copy_template(const char *file)
{
	char path[4200], side[4300];
	path_of(path, sizeof path, file);
	snprintf(side, sizeof side, "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", path);
	unlink(side);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(image, 1, image_len, f) != image_len || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

static void run_fault_case(const struct fault_case *fc, int persistent)
{
	char file[64];
	snprintf(file, sizeof file, "fault-%s.db", fc->name);
	make_template(fc);
	atomic_store(&fault_persistent, persistent);
	int n, failures = 0, runs = 0;
	int stride = persistent && !exhaustive() ? 4 : 1;
	for (n = 1; n < MAX_FAULTS; n += stride, runs++) {
		copy_template(file);
		struct db *db = open_db(file, NULL);
		struct db_err err = { 0 };
		arm(n);
		int rc = fc->op(db, &err);
		int hit = disarm();
		if (rc) {
			failures++;
			CHECK_MSG(hit, "%s n=%d: failed without a fault: %s", fc->name, n, err.text);
			CHECK_MSG(err.code == rc && strncmp(err.text, "db: ", 4) == 0,
			          "%s n=%d: rc %d, error %d \"%s\"", fc->name, n, rc, err.code, err.text);
		}
		check_ok(db, n);
		CHECK_MSG(fc->rows(db, file, rc == 0, n), "%s n=%d rc=%d: rows are not all or none",
		          fc->name, n, rc);
		CHECK_INT_EQ(db_close(db), 0);
		if (!hit)
			break;
	}
	atomic_store(&fault_persistent, 0);
	CHECK_MSG(n < MAX_FAULTS, "%s never ran clean", fc->name);
	CHECK(failures > 0);
	fprintf(stderr, "  %s (%s): %d allocations, %d runs, %d failed cleanly\n", fc->name,
	        persistent ? "every allocation from the Nth" : "the Nth allocation", n - 1,
	        runs + 1, failures);
}

/* submit: a job, its event and its idempotency key */
static int64_t faulty_id;

static int submit_op(struct db *db, struct db_err *err)
{
	int64_t id = submit(db, "faulty", "key-1", err);
	faulty_id = id > 0 ? id : 0;
	return id > 0 ? 0 : (int)id;
}

static int submit_rows(struct db *db, const char *file, int ok, int n)
{
	long long jobs = count_in(db, "SELECT count(*) FROM jobs");
	long long events = count_in(db, "SELECT count(*) FROM job_events");
	long long keys = count_in(db, "SELECT count(*) FROM idempotency");
	int right = jobs == ok && events == ok && keys == ok;
	/* the client's retry works and creates the job exactly once */
	int64_t again = submit(db, "faulty", "key-1", NULL);
	CHECK_MSG(again > 0 && (!ok || again == faulty_id), "n=%d: retry gave %lld", n,
	          (long long)again);
	right &= count_in(db, "SELECT count(*) FROM jobs") == 1 &&
	         count_in(db, "SELECT count(*) FROM idempotency") == 1;
	return right;
}

/* a final transition: job row, event, and the job's token revoked */
static int64_t moved_id;

static void move_setup(struct db *db)
{
	moved_id = submit(db, "job", NULL, NULL);
	char tok[DB_TOKEN_LEN + 1];
	CHECK_INT_EQ(db_tokens_create(db, NULL, DB_ROLE_JOB, moved_id, tok, NULL, NULL), 0);
	struct db_transition t = { .job = moved_id, .from = DB_STATE_ANY, .by = "executor" };
	t.to = DB_STATE_QUEUED;
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
	t.to = DB_STATE_RUNNING;
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
}

static int move_op(struct db *db, struct db_err *err)
{
	struct db_transition t = { .job = moved_id, .from = DB_STATE_RUNNING, .to = DB_STATE_FAILED,
	                           .by = "executor", .reason = "exit 3", .has_exit_code = 1,
	                           .exit_code = 3 };
	struct db_job after;
	int rc = db_jobs_transition(db, &t, &after, err);
	CHECK(rc ? after.owner == NULL && after.spec == NULL : after.state == DB_STATE_FAILED);
	db_job_release(&after);
	return rc;
}

static int move_rows(struct db *db, const char *file, int ok, int n)
{
	long long failed = count_in(db, "SELECT count(*) FROM jobs WHERE state = 'FAILED' "
	                           "AND exit_code = 3 AND end_time IS NOT NULL");
	long long running = count_in(db, "SELECT count(*) FROM jobs WHERE state = 'RUNNING' "
	                            "AND exit_code IS NULL AND end_time IS NULL");
	long long events = count_in(db, "SELECT count(*) FROM job_events");
	long long revoked = count_in(db, "SELECT count(*) FROM tokens WHERE revoked_at IS NOT NULL");
	return failed == ok && running == !ok && events == 3 + ok && revoked == ok;
}

/* a metrics batch */
enum { BATCH = 40 };
static struct db_metric batch[BATCH];

static void metrics_setup(struct db *db)
{
	moved_id = submit(db, "job", NULL, NULL);
	for (int i = 0; i < BATCH; i++)
		batch[i] = (struct db_metric){ i % 2 ? "train/loss" : "train/lr", i, 1.0 / (i + 1), i };
}

static int metrics_op(struct db *db, struct db_err *err)
{
	size_t inserted = 99;
	int rc = db_metrics_insert(db, moved_id, batch, BATCH, &inserted, err);
	CHECK_INT_EQ(inserted, rc ? 0 : BATCH);
	return rc;
}

static int metrics_rows(struct db *db, const char *file, int ok, int n)
{
	return count_in(db, "SELECT count(*) FROM metrics") == (ok ? BATCH : 0);
}

/* a token: the user row (new) and the token row */
static int token_op(struct db *db, struct db_err *err)
{
	char tok[DB_TOKEN_LEN + 1];
	return db_tokens_create(db, "newcomer", DB_ROLE_USER, 0, tok, NULL, err);
}

static int token_rows(struct db *db, const char *file, int ok, int n)
{
	return count_in(db, "SELECT count(*) FROM users WHERE name = 'newcomer'") == ok &&
	       count_in(db, "SELECT count(*) FROM tokens") == ok;
}

static void test_fault_submit(void)
{
	struct fault_case fc = { "submit", NULL, submit_op, submit_rows };
	run_fault_case(&fc, 0);
	run_fault_case(&fc, 1);
}

static void test_fault_transition(void)
{
	struct fault_case fc = { "transition", move_setup, move_op, move_rows };
	run_fault_case(&fc, 0);
	run_fault_case(&fc, 1);
}

static void test_fault_metrics(void)
{
	struct fault_case fc = { "metrics", metrics_setup, metrics_op, metrics_rows };
	run_fault_case(&fc, 0);
	run_fault_case(&fc, 1);
}

static void test_fault_token(void)
{
	run_fault_case(&(struct fault_case){ "token", NULL, token_op, token_rows }, 0);
	free(image);
	image = NULL;
}

int main(void)
{
	install_allocator();    /* before SQLite initialises */
	const char *shm = "/dev/shm";
	int in_memory = access(shm, W_OK) == 0;
	if (in_memory)
		setenv("LARCH_TEST_TMP", shm, 1);
	tmp = check_tmpdir("db_fault");
	CHECK_RUN(test_fault_open);
	CHECK_RUN(test_fault_submit);
	CHECK_RUN(test_fault_transition);
	CHECK_RUN(test_fault_metrics);
	CHECK_RUN(test_fault_token);
	if (in_memory) {
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", tmp);
	}
	return check_finish();
}
