/* tests/unit/test_db_submit.c - db/submit.c: idempotency keys, many threads
 * submitting at once through the group-commit writer (distinct ids, all
 * durable after close and reopen), one bad submit in a group failing alone,
 * and the same without group commit. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/db.h"
#include "db/internal.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char *tmp;

static void db_path(char *out, size_t len, const char *file)
{
	snprintf(out, len, "%s/%s", tmp, file);
}

static struct db *open_db(const char *file, int no_group)
{
	char path[4200];
	db_path(path, sizeof path, file);
	struct db_err err = { 0 };
	struct db_options o = { .no_group_commit = no_group };
	struct db *db = db_open(path, &o, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	if (!db)
		exit(1);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	CHECK_INT_EQ(db_users_ensure(db, "bob", DB_ROLE_USER, NULL), 0);
	return db;
}

/* rows of table in file, counted with a connection of our own */
static long long count_rows(const char *file, const char *sql)
{
	char path[4200];
	db_path(path, sizeof path, file);
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	long long n = -1;
	if (sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return n;
}

static void idempotency(int no_group)
{
	const char *file = no_group ? "idem-single.db" : "idem-group.db";
	struct db *db = open_db(file, no_group);
	struct db_job_new in = { .owner = "alice", .name = "a", .spec = "{\"steps\": 1}",
	                         .idem_key = "key-1", .total_steps = 1 };
	struct db_submit first, again, other;
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_submit(db, &in, &first, &err), 0);
	CHECK(first.id > 0 && !first.existed);
	/* the total known at the submit is the job's from the start */
	struct db_job job;
	CHECK_INT_EQ(db_jobs_get(db, first.id, NULL, &job, &err), 0);
	CHECK_INT_EQ(job.progress_total, 1);
	CHECK_INT_EQ(job.progress_step, 0);
	db_job_release(&job);
	CHECK_INT_EQ(db_jobs_submit(db, &in, &again, NULL), 0);
	CHECK_INT_EQ(again.id, first.id);
	CHECK_INT_EQ(again.existed, 1);

	/* same key, another body */
	struct db_job_new changed = in;
	changed.spec = "{\"steps\": 2}";
	CHECK_INT_EQ(db_jobs_submit(db, &changed, &other, &err), DB_CONFLICT);
	CHECK_MSG(strstr(err.text, "key-1") != NULL, "%s", err.text);
	CHECK_INT_EQ(other.id, 0);
	/* same key and spec, but the caller names the body by another hash */
	changed = in;
	changed.request_hash = "0000";
	CHECK_INT_EQ(db_jobs_submit(db, &changed, &other, NULL), DB_CONFLICT);

	/* another owner's key space is separate */
	struct db_job_new bobs = in;
	bobs.owner = "bob";
	CHECK_INT_EQ(db_jobs_submit(db, &bobs, &other, NULL), 0);
	CHECK(other.id != first.id && !other.existed);
	/* no key: a new job each time */
	struct db_job_new nokey = in;
	nokey.idem_key = NULL;
	struct db_submit n1, n2;
	CHECK_INT_EQ(db_jobs_submit(db, &nokey, &n1, NULL), 0);
	CHECK_INT_EQ(db_jobs_submit(db, &nokey, &n2, NULL), 0);
	CHECK(n1.id != n2.id && n1.id != first.id);

	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(db, first.id, NULL, &j, NULL), 0);
	CHECK_STR_EQ(j.idem_key, "key-1");
	db_job_release(&j);

	/* bad input: nothing stored */
	struct db_job_new bad = in;
	bad.idem_key = NULL;
	bad.owner = "mallory";
	db_err_clear(&err);
	CHECK_INT_EQ(db_jobs_submit(db, &bad, &other, &err), DB_INVALID);
	CHECK_MSG(strstr(err.text, "mallory") != NULL, "%s", err.text);
	bad = in;
	bad.idem_key = NULL;
	bad.spec = "{not json";
	db_err_clear(&err);
	CHECK_INT_EQ(db_jobs_submit(db, &bad, &other, &err), DB_INVALID);
	CHECK_MSG(strstr(err.text, "json_valid") != NULL, "%s", err.text);
	bad = in;
	bad.name = NULL;
	CHECK_INT_EQ(db_jobs_submit(db, &bad, &other, NULL), DB_INVALID);
	bad = in;
	char long_key[200];
	memset(long_key, 'k', sizeof long_key - 1);
	long_key[sizeof long_key - 1] = '\0';
	bad.idem_key = long_key;
	CHECK_INT_EQ(db_jobs_submit(db, &bad, &other, NULL), DB_INVALID);
	bad.idem_key = "";
	CHECK_INT_EQ(db_jobs_submit(db, &bad, &other, NULL), DB_INVALID);
	db_close(db);

	CHECK_INT_EQ(count_rows(file, "SELECT count(*) FROM jobs"), 4);
	CHECK_INT_EQ(count_rows(file, "SELECT count(*) FROM job_events"), 4);
	CHECK_INT_EQ(count_rows(file, "SELECT count(*) FROM idempotency"), 2);
}

static void test_idempotency_grouped(void)
{
	idempotency(0);
}

static void test_idempotency_single(void)
{
	idempotency(1);
}

enum { THREADS = 8, PER_THREAD = 200 };

struct worker {
	struct db *db;
	int t;
	const char *key;        /* all threads: the same key (else none) */
	int64_t ids[PER_THREAD];
	int existed, failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[32], spec[64];
	for (int i = 0; i < (w->key ? 1 : PER_THREAD); i++) {
		snprintf(name, sizeof name, "t%d-%d", w->t, i);
		snprintf(spec, sizeof spec, "{\"steps\": %d}", w->key ? 7 : i);
		struct db_job_new in = { .owner = w->t % 2 ? "alice" : "bob", .name = name,
		                         .spec = spec, .idem_key = w->key };
		if (w->key)
			in.owner = "alice";
		struct db_submit out;
		struct db_err err = { 0 };
		if (db_jobs_submit(w->db, &in, &out, &err) != 0) {
			fprintf(stderr, "submit: %s\n", err.text);
			w->failures++;
		}
		w->ids[i] = out.id;
		w->existed += out.existed;
	}
	return NULL;
}

static int cmp_id(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void test_concurrent_grouped(void)
{
	struct db *db = open_db("concurrent.db", 0);
	static struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .db = db, .t = t };
		pthread_create(&th[t], NULL, worker_main, &w[t]);
	}
	int failures = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		failures += w[t].failures;
	}
	CHECK_INT_EQ(failures, 0);
	uint64_t groups, submits;
	db_jobs_submit_stats(db, &groups, &submits);
	CHECK(submits >= THREADS * PER_THREAD && groups >= 1 && groups <= submits);
	fprintf(stderr, "  %llu submits in %llu groups (%.1f a group)\n",
	        (unsigned long long)submits, (unsigned long long)groups,
	        groups ? (double)submits / (double)groups : 0.0);
	CHECK_INT_EQ(db_close(db), 0);

	/* distinct ids, and every one of them there after a reopen */
	int64_t *all = malloc(sizeof *all * THREADS * PER_THREAD);
	for (int t = 0; t < THREADS; t++)
		memcpy(all + t * PER_THREAD, w[t].ids, sizeof w[t].ids);
	qsort(all, THREADS * PER_THREAD, sizeof *all, cmp_id);
	int dups = 0;
	for (int i = 1; i < THREADS * PER_THREAD; i++)
		dups += all[i] == all[i - 1];
	CHECK_INT_EQ(dups, 0);
	CHECK(all[0] > 0);

	db = open_db("concurrent.db", 0);
	int missing = 0;
	for (int t = 0; t < THREADS; t++) {
		for (int i = 0; i < PER_THREAD; i++) {
			struct db_job j;
			char name[32];
			snprintf(name, sizeof name, "t%d-%d", t, i);
			if (db_jobs_get(db, w[t].ids[i], NULL, &j, NULL) != 0 || strcmp(j.name, name) != 0)
				missing++;
			db_job_release(&j);
		}
	}
	CHECK_INT_EQ(missing, 0);
	int64_t counts[DB_STATE_COUNT];
	CHECK_INT_EQ(db_jobs_count_by_state(db, counts, NULL), 0);
	CHECK_INT_EQ(counts[DB_STATE_PENDING], THREADS * PER_THREAD);
	db_close(db);
	CHECK_INT_EQ(count_rows("concurrent.db", "SELECT count(*) FROM job_events"),
	             THREADS * PER_THREAD);
	free(all);
}

static void test_concurrent_same_key(void)
{
	struct db *db = open_db("samekey.db", 0);
	static struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .db = db, .t = t, .key = "retry-me" };
		pthread_create(&th[t], NULL, worker_main, &w[t]);
	}
	int existed = 0, failures = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		existed += w[t].existed;
		failures += w[t].failures;
		CHECK_INT_EQ(w[t].ids[0], w[0].ids[0]);
	}
	CHECK_INT_EQ(failures, 0);
	CHECK_INT_EQ(existed, THREADS - 1);
	db_close(db);
	CHECK_INT_EQ(count_rows("samekey.db", "SELECT count(*) FROM jobs"), 1);
}

/* Submits queued behind a held write lock run as one group: the bad ones
 * fail alone, the good ones commit. */
struct one {
	struct db *db;
	struct db_job_new in;
	int rc;
	struct db_submit out;
};

static void *one_main(void *arg)
{
	struct one *o = arg;
	o->rc = db_jobs_submit(o->db, &o->in, &o->out, NULL);
	return NULL;
}

static void test_group_partial_failure(void)
{
	struct db *db = open_db("partial.db", 0);
	struct db_submit first;
	struct db_job_new keyed = { .owner = "alice", .name = "k", .spec = "{}", .idem_key = "K" };
	CHECK_INT_EQ(db_jobs_submit(db, &keyed, &first, NULL), 0);

	enum { N = 6 };
	struct one o[N];
	pthread_t th[N];
	for (int i = 0; i < N; i++)
		o[i] = (struct one){ .db = db, .in = { .owner = "alice", .name = "g", .spec = "{}" } };
	o[1].in.spec = "[broken";              /* constraint failure */
	o[3].in.owner = "nobody";              /* unknown owner */
	o[4].in.idem_key = "K";                /* conflicting body */
	o[4].in.spec = "{\"other\": 1}";
	o[5].in.idem_key = "K";                /* a retry of the first */
	pthread_mutex_lock(&db->wlock);        /* the writer waits: the rest queue up */
	for (int i = 0; i < N; i++)
		pthread_create(&th[i], NULL, one_main, &o[i]);
	usleep(100 * 1000);
	pthread_mutex_unlock(&db->wlock);
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	CHECK_INT_EQ(o[0].rc, 0);
	CHECK_INT_EQ(o[1].rc, DB_INVALID);
	CHECK_INT_EQ(o[2].rc, 0);
	CHECK_INT_EQ(o[3].rc, DB_INVALID);
	CHECK_INT_EQ(o[4].rc, DB_CONFLICT);
	CHECK_INT_EQ(o[5].rc, 0);
	CHECK_INT_EQ(o[5].out.id, first.id);
	CHECK(o[0].out.id > 0 && o[2].out.id > 0 && o[0].out.id != o[2].out.id);
	db_close(db);
	CHECK_INT_EQ(count_rows("partial.db", "SELECT count(*) FROM jobs"), 3);
	CHECK_INT_EQ(count_rows("partial.db", "SELECT count(*) FROM job_events"), 3);
}

int main(void)
{
	tmp = check_tmpdir("db_submit");
	CHECK_RUN(test_idempotency_grouped);
	CHECK_RUN(test_idempotency_single);
	CHECK_RUN(test_concurrent_grouped);
	CHECK_RUN(test_concurrent_same_key);
	CHECK_RUN(test_group_partial_failure);
	return check_finish();
}
