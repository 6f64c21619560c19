/* tests/unit/test_db_migrate.c - db/migrate.c: a fresh database is at the
 * latest version with STRICT tables in WAL mode; a database built by hand at
 * version 1 (the first migration only) with rows in it upgrades on open and
 * keeps every row; a newer schema is refused; a read-only or no-migrate open
 * of an old file does not change it, and db_migrate then does. */
#include <math.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"

static const char *tmp;

static void path_of(char *out, size_t len, const char *file)
{
	snprintf(out, len, "%s/%s", tmp, file);
}

static int raw_exec(const char *file, const char *sql, char *msg, size_t msglen)
{
	char path[4200];
	path_of(path, sizeof path, file);
	sqlite3 *h = NULL;
	char *e = NULL;
	int rc = sqlite3_open(path, &h);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(h, sql, NULL, NULL, &e);
	if (msg)
		snprintf(msg, msglen, "%s", e ? e : "");
	if (rc != SQLITE_OK && !msg)
		fprintf(stderr, "raw_exec: %s\n", e ? e : sqlite3_errmsg(h));
	sqlite3_free(e);
	sqlite3_close(h);
	return rc;
}

static long long raw_int(const char *file, const char *sql)
{
	char path[4200];
	path_of(path, sizeof path, file);
	sqlite3 *h = NULL;
	sqlite3_stmt *st = NULL;
	long long v = -1;
	if (sqlite3_open(path, &h) == SQLITE_OK &&
	    sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return v;
}

static struct db *open_file(const char *file, const struct db_options *o, struct db_err *err)
{
	char path[4200];
	path_of(path, sizeof path, file);
	return db_open(path, o, err);
}

static void test_fresh(void)
{
	struct db_err err = { 0 };
	struct db *db = open_file("fresh.db", NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	int v = 0;
	CHECK_INT_EQ(db_schema_version(db, &v, NULL), 0);
	CHECK_INT_EQ(v, db_schema_latest());
	CHECK(db_schema_latest() >= 2);
	CHECK(db_migration_sql(1) != NULL && db_migration_sql(db_schema_latest() + 1) == NULL);
	int applied = -1;
	CHECK_INT_EQ(db_migrate(db, &applied, NULL), 0);
	CHECK_INT_EQ(applied, 0);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	db_close(db);

	CHECK_INT_EQ(raw_int("fresh.db", "SELECT count(*) FROM schema_version"), db_schema_latest());
	CHECK_INT_EQ(raw_int("fresh.db", "SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
	                     "AND name NOT LIKE 'sqlite_%' AND sql NOT LIKE '%STRICT%'"), 0);
	/* STRICT: a text in an INTEGER column is refused */
	char msg[256];
	CHECK(raw_exec("fresh.db", "INSERT INTO jobs (owner, name, spec, state, submit_time, priority) "
	               "VALUES ('alice', 'x', '{}', 'PENDING', 1, 'high')", msg, sizeof msg) != 0);
	CHECK_MSG(strstr(msg, "cannot store TEXT") != NULL, "%s", msg);
	CHECK(raw_exec("fresh.db", "INSERT INTO jobs (owner, name, spec, state, submit_time) "
	               "VALUES ('alice', 'x', '{}', 'WEIRD', 1)", msg, sizeof msg) != 0);
	/* the event log is append-only */
	CHECK_INT_EQ(raw_exec("fresh.db", "INSERT INTO jobs (owner, name, spec, state, submit_time) "
	                      "VALUES ('alice', 'x', '{}', 'PENDING', 1);"
	                      "INSERT INTO job_events VALUES (1, 1, 1, NULL, 'PENDING', 'alice', NULL)",
	                      NULL, 0), 0);
	CHECK(raw_exec("fresh.db", "UPDATE job_events SET by = 'eve'", msg, sizeof msg) != 0);
	CHECK_MSG(strstr(msg, "append-only") != NULL, "%s", msg);
	CHECK(raw_exec("fresh.db", "DELETE FROM job_events", msg, sizeof msg) != 0);
	char path[4200];
	path_of(path, sizeof path, "fresh.db");
	sqlite3 *h;
	sqlite3_stmt *st;
	CHECK(sqlite3_open(path, &h) == SQLITE_OK &&
	      sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK &&
	      sqlite3_step(st) == SQLITE_ROW);
	CHECK_STR_EQ((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(h);
}

#define OLD_TOKEN "lt_1111111111111111111111111111111111111111111111111111111111111111"

/* A database as the first release of the schema left it. */
static void build_v1(const char *file)
{
	unsigned char md[32];
	unsigned int n;
	EVP_Digest(OLD_TOKEN, strlen(OLD_TOKEN), md, &n, EVP_sha256(), NULL);
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	char *sql = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sql, &len);
	fprintf(f, "PRAGMA journal_mode = WAL;\n"
	        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied INTEGER NOT NULL) "
	        "STRICT;\n%s\nINSERT INTO schema_version VALUES (1, 1);\n", db_migration_sql(1));
	fprintf(f, "INSERT INTO users VALUES ('alice', 'user', 1);\n"
	        "INSERT INTO jobs (id, owner, name, spec, state, executor, priority, attempt,\n"
	        "	submit_time, start_time, created_by)\n"
	        "VALUES (7, 'alice', 'old', '{\"steps\": 5}', 'RUNNING', 'local', 3, 1, 100, 200, 'k1');\n"
	        "INSERT INTO job_events VALUES (7, 1, 100, NULL, 'PENDING', 'alice', 'submitted'),\n"
	        "	(7, 2, 150, 'PENDING', 'QUEUED', 'executor', NULL),\n"
	        "	(7, 3, 200, 'QUEUED', 'RUNNING', 'executor', NULL);\n"
	        "INSERT INTO idempotency VALUES ('alice', 'k1', 'H1', 7, 100);\n"
	        "INSERT INTO tokens (user, role, hash, created) VALUES ('alice', 'user', X'%s', 1);\n",
	        hex);
	fclose(f);
	CHECK_INT_EQ(raw_exec(file, sql, NULL, 0), 0);
	free(sql);
}

static void test_upgrade_from_v1(void)
{
	build_v1("v1.db");
	struct db_err err = { 0 };

	/* no_migrate opens it as it is */
	struct db_options keep = { .no_migrate = 1 };
	struct db *db = open_file("v1.db", &keep, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	int v = 0;
	CHECK_INT_EQ(db_schema_version(db, &v, NULL), 0);
	CHECK_INT_EQ(v, 1);
	db_close(db);
	/* read-only and old: refused, untouched */
	struct db_options ro = { .readonly = 1 };
	db_err_clear(&err);
	CHECK(open_file("v1.db", &ro, &err) == NULL);
	CHECK_MSG(strstr(err.text, "older") != NULL, "%s", err.text);
	CHECK_INT_EQ(raw_int("v1.db", "SELECT max(version) FROM schema_version"), 1);

	/* the normal open upgrades it and keeps the data */
	db_err_clear(&err);
	db = open_file("v1.db", NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	CHECK_INT_EQ(db_schema_version(db, &v, NULL), 0);
	CHECK_INT_EQ(v, db_schema_latest());
	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(db, 7, "alice", &j, NULL), 0);
	CHECK_STR_EQ(j.name, "old");
	CHECK_STR_EQ(j.spec, "{\"steps\": 5}");
	CHECK_INT_EQ(j.state, DB_STATE_RUNNING);
	CHECK_INT_EQ(j.priority, 3);
	CHECK_INT_EQ(j.submit_ms, 100);
	CHECK_INT_EQ(j.start_ms, 200);
	CHECK_STR_EQ(j.idem_key, "k1");
	CHECK_INT_EQ(j.progress_step, 0);
	CHECK(isnan(j.last_loss));
	db_job_release(&j);
	struct db_event_list ev;
	CHECK_INT_EQ(db_jobs_events(db, 7, NULL, &ev, NULL), 0);
	CHECK_INT_EQ(ev.n, 3);
	db_event_list_release(&ev);
	struct db_token t;
	CHECK_INT_EQ(db_tokens_lookup(db, OLD_TOKEN, &t, NULL), 0);
	CHECK_STR_EQ(t.user, "alice");

	/* and it works as a current one */
	struct db_job_new in = { .owner = "alice", .name = "again", .spec = "{}", .idem_key = "k1",
	                         .request_hash = "H1" };
	struct db_submit out;
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	CHECK(out.id == 7 && out.existed);
	in.idem_key = NULL;
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	CHECK_INT_EQ(out.id, 8);
	struct db_metric m = { "train/loss", 10, 0.5, 1 };
	CHECK_INT_EQ(db_metrics_insert(db, 7, &m, 1, NULL, NULL), 0);
	CHECK_INT_EQ(db_jobs_progress(db, 7, 10, 100, 0.5, NULL), 0);
	struct db_transition tr = { .job = 7, .from = DB_STATE_RUNNING, .to = DB_STATE_COMPLETED,
	                            .by = "executor" };
	CHECK_INT_EQ(db_jobs_transition(db, &tr, NULL, NULL), 0);
	CHECK_INT_EQ(db_check(db, NULL, NULL), 0);
	db_close(db);
	CHECK_INT_EQ(raw_int("v1.db", "SELECT count(*) FROM schema_version"), db_schema_latest());
}

static void test_explicit_migrate(void)
{
	build_v1("explicit.db");
	struct db_options keep = { .no_migrate = 1 };
	struct db_err err = { 0 };
	struct db *db = open_file("explicit.db", &keep, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	int applied = 0, v = 0;
	CHECK_INT_EQ(db_migrate(db, &applied, &err), 0);
	CHECK_INT_EQ(applied, db_schema_latest() - 1);
	CHECK_INT_EQ(db_schema_version(db, &v, NULL), 0);
	CHECK_INT_EQ(v, db_schema_latest());
	CHECK_INT_EQ(db_migrate(db, &applied, NULL), 0);
	CHECK_INT_EQ(applied, 0);
	db_close(db);
}

static void test_newer_refused(void)
{
	struct db_err err = { 0 };
	struct db *db = open_file("newer.db", NULL, &err);
	CHECK(db != NULL);
	db_close(db);
	CHECK_INT_EQ(raw_exec("newer.db", "INSERT INTO schema_version VALUES (99, 1)", NULL, 0), 0);
	db_err_clear(&err);
	CHECK(open_file("newer.db", NULL, &err) == NULL);
	CHECK_MSG(strstr(err.text, "newer") != NULL && strstr(err.text, "99") != NULL, "%s", err.text);
	CHECK_INT_EQ(err.code, DB_ERROR);
	/* and a file that is not a database at all */
	char path[4200];
	path_of(path, sizeof path, "garbage.db");
	FILE *f = fopen(path, "wb");
	for (int i = 0; i < 1000; i++)
		fputs("not sqlite ", f);
	fclose(f);
	db_err_clear(&err);
	CHECK(open_file("garbage.db", NULL, &err) == NULL);
	CHECK_MSG(strstr(err.text, "not a database") != NULL, "%s", err.text);
	CHECK(err.file != NULL && err.line > 0);
	/* nor a path that cannot be opened */
	db_err_clear(&err);
	CHECK(open_file("no/such/dir/x.db", NULL, &err) == NULL);
	CHECK_MSG(strstr(err.text, "db: open") == err.text, "%s", err.text);
}

int main(void)
{
	tmp = check_tmpdir("db_migrate");
	CHECK_RUN(test_fresh);
	CHECK_RUN(test_upgrade_from_v1);
	CHECK_RUN(test_explicit_migrate);
	CHECK_RUN(test_newer_refused);
	return check_finish();
}
