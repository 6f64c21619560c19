/* tests/unit/test_db_maint.c - db/maint.c: db_check on a clean database and
 * on one with a dangling foreign key; db_backup while submits go on (the copy
 * opens, passes the check, holds every job committed before the backup, is
 * mode 0600), and a backup that cannot be written. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db_fixture.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char *tmp;

static struct db *open_db(const char *file)
{
	static const char *const users[] = { "alice", NULL };
	return db_test_open(tmp, file, users);
}

static int64_t submit(struct db *db, const char *name)
{
	struct db_job_new in = { .owner = "alice", .name = name, .spec = "{}" };
	struct db_submit out = { 0 };
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	return out.id;
}

static void test_check(void)
{
	struct db *db = open_db("check.db");
	int64_t id = submit(db, "a");
	char *report = NULL;
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_check(db, &report, &err), 0);
	CHECK_STR_EQ(report, "");
	free(report);

	/* a dangling reference written behind the db layer's back */
	char path[4200];
	snprintf(path, sizeof path, "%s/check.db", tmp);
	sqlite3 *h = NULL;
	CHECK(sqlite3_open(path, &h) == SQLITE_OK);
	CHECK(sqlite3_exec(h, "PRAGMA foreign_keys = OFF; INSERT INTO job_events VALUES "
	                   "(4242, 1, 1, NULL, 'PENDING', 'ghost', NULL)", NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(h);
	CHECK_INT_EQ(db_check(db, &report, &err), DB_CORRUPT);
	CHECK_MSG(report && strstr(report, "job_events") != NULL, "%s", report ? report : "(null)");
	CHECK_MSG(strstr(err.text, "1 problem") != NULL, "%s", err.text);
	free(report);
	db_err_clear(&err);
	CHECK_INT_EQ(db_check(db, NULL, &err), DB_CORRUPT);
	CHECK(id > 0);
	db_close(db);
}

struct pusher {
	struct db *db;
	volatile int stop;
	int n;
};

static void *push_main(void *arg)
{
	struct pusher *p = arg;
	while (!p->stop) {
		submit(p->db, "during");
		p->n++;
	}
	return NULL;
}

static void test_backup(void)
{
	struct db *db = open_db("live.db");
	enum { N = 300 };
	for (int i = 0; i < N; i++)
		submit(db, "before");
	struct pusher p = { .db = db };
	pthread_t th;
	pthread_create(&th, NULL, push_main, &p);
	char dst[4200], tmpfile[4300];
	snprintf(dst, sizeof dst, "%s/backup.db", tmp);
	snprintf(tmpfile, sizeof tmpfile, "%s.tmp", dst);
	struct db_err err = { 0 };
	usleep(20 * 1000);
	CHECK_MSG(db_backup(db, dst, &err) == 0, "%s", err.text);
	p.stop = 1;
	pthread_join(th, NULL);
	CHECK(access(tmpfile, F_OK) != 0);
	/* a second backup over the first, which had been left readable by all */
	CHECK(chmod(dst, 0644) == 0);
	mode_t old = umask(022);
	CHECK_MSG(db_backup(db, dst, &err) == 0, "%s", err.text);
	umask(old);
	struct stat st;
	CHECK(stat(dst, &st) == 0 && (st.st_mode & 07777) == 0600);
	db_close(db);

	db_err_clear(&err);
	db = db_open(dst, NULL, &err);
	CHECK_MSG(db != NULL, "open the backup: %s", err.text);
	if (!db)
		return;
	CHECK_INT_EQ(db_check(db, NULL, NULL), 0);
	int64_t counts[DB_STATE_COUNT];
	CHECK_INT_EQ(db_jobs_count_by_state(db, counts, NULL), 0);
	CHECK_INT_EQ(counts[DB_STATE_PENDING], N + p.n);     /* the second backup had them all */
	db_close(db);

	db = open_db("live.db");
	db_err_clear(&err);
	CHECK_INT_EQ(db_backup(db, "/nonexistent-dir/x/backup.db", &err), DB_ERROR);
	CHECK_MSG(strstr(err.text, "backup") != NULL, "%s", err.text);
	db_close(db);
}

int main(void)
{
	tmp = check_tmpdir("db_maint");
	CHECK_RUN(test_check);
	CHECK_RUN(test_backup);
	return check_finish();
}
