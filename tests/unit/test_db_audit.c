/* tests/unit/test_db_audit.c - db/audit.c: entries come back newest first
 * with every field; pages follow cursors without repeating or skipping an
 * entry while more are appended; filters by actor, action and target, alone
 * and together; bad input and foreign cursors are DB_INVALID; the table
 * refuses UPDATE and DELETE. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db/audit.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char *tmp;
static char db_path[4200];

static struct db *open_db(const char *name)
{
	snprintf(db_path, sizeof db_path, "%s/%s", tmp, name);
	struct db_err err = { 0 };
	struct db *db = db_open(db_path, NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	return db;
}

static int64_t add(struct db *db, const char *actor, const char *action, const char *target,
                   int status, int64_t time_ms)
{
	struct db_audit_new e = { .actor = actor, .action = action, .target = target,
	                          .status = status, .time_ms = time_ms,
	                          .message = status < 400 ? NULL : "it failed" };
	int64_t id = 0;
	struct db_err err = { 0 };
	CHECK_MSG(db_audit_insert(db, &e, &id, &err) == 0, "%s", err.text);
	return id;
}

static void test_insert_and_read_back(void)
{
	struct db *db = open_db("fields.db");
	if (!db)
		return;
	struct db_audit_new e = {
		.actor = "root", .action = "node.drain", .target = "nodes/n1",
		.args = "{\"reason\":\"disk \\u00e9 full\"}", .status = 200,
		.message = "drained", .time_ms = 1234,
	};
	int64_t id1 = 0, id2 = 0;
	CHECK_INT_EQ(db_audit_insert(db, &e, &id1, NULL), 0);
	struct db_audit_new f = { .actor = "root", .action = "job.hold", .target = "jobs/j-000001",
	                          .status = 409, .message = "j-000001 is RUNNING" };
	CHECK_INT_EQ(db_audit_insert(db, &f, &id2, NULL), 0);
	CHECK(id1 > 0 && id2 > id1);

	struct db_audit_filter all = { 0 };
	struct db_audit_list l;
	struct db_err err = { 0 };
	CHECK_MSG(db_audit_list(db, &all, &l, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(l.n, 2);
	CHECK_STR_EQ(l.next_cursor, "");
	if (l.n == 2) {
		CHECK_INT_EQ(l.entries[0].id, id2);      /* newest first */
		CHECK_STR_EQ(l.entries[0].action, "job.hold");
		CHECK_INT_EQ(l.entries[0].status, 409);
		CHECK_STR_EQ(l.entries[0].message, "j-000001 is RUNNING");
		CHECK(l.entries[0].args == NULL);
		CHECK(l.entries[0].time_ms > 1234);      /* 0 = now */
		CHECK_INT_EQ(l.entries[1].id, id1);
		CHECK_INT_EQ(l.entries[1].time_ms, 1234);
		CHECK_STR_EQ(l.entries[1].actor, "root");
		CHECK_STR_EQ(l.entries[1].action, "node.drain");
		CHECK_STR_EQ(l.entries[1].target, "nodes/n1");
		CHECK_STR_EQ(l.entries[1].args, "{\"reason\":\"disk \\u00e9 full\"}");
		CHECK_INT_EQ(l.entries[1].status, 200);
		CHECK_STR_EQ(l.entries[1].message, "drained");
	}
	db_audit_list_release(&l);
	CHECK(l.entries == NULL && l.n == 0);
	db_audit_list_release(&l);                   /* twice: harmless */
	db_close(db);
}

static void test_pages(void)
{
	struct db *db = open_db("pages.db");
	if (!db)
		return;
	enum { N = 23 };
	int64_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = add(db, "root", "job.hold", "jobs/j-000001", 200, 0);

	/* pages of 5 while entries keep being appended: each entry of before
	 * exactly once, in descending order, and none of the new ones (they are
	 * newer than the first page) */
	int seen = 0, pages = 0;
	int64_t last = INT64_MAX;
	char cursor[DB_CURSOR_MAX] = "";
	do {
		struct db_audit_filter f = { .limit = 5, .cursor = cursor };
		struct db_audit_list l;
		struct db_err err = { 0 };
		CHECK_MSG(db_audit_list(db, &f, &l, &err) == 0, "%s", err.text);
		for (size_t i = 0; i < l.n; i++) {
			CHECK(l.entries[i].id < last);
			CHECK(l.entries[i].id <= ids[N - 1]);
			last = l.entries[i].id;
			seen++;
		}
		CHECK(l.n == 5 || l.next_cursor[0] == '\0');
		snprintf(cursor, sizeof cursor, "%s", l.next_cursor);
		db_audit_list_release(&l);
		add(db, "root", "job.release", "jobs/j-000002", 200, 0);
		pages++;
	} while (cursor[0] && pages < 100);
	CHECK_INT_EQ(seen, N);
	CHECK_INT_EQ(pages, (N + 4) / 5);
	CHECK_INT_EQ(last, ids[0]);

	/* limits */
	struct db_audit_filter f = { .limit = DB_LIST_MAX + 1 };
	struct db_audit_list l;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), DB_INVALID);
	f.limit = -1;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), DB_INVALID);
	f.limit = 1;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	CHECK(l.next_cursor[0] != '\0');
	db_audit_list_release(&l);
	db_close(db);
}

static void test_filters(void)
{
	struct db *db = open_db("filters.db");
	if (!db)
		return;
	add(db, "root", "node.drain", "nodes/n1", 200, 0);
	add(db, "alice", "node.drain", "nodes/n2", 404, 0);
	add(db, "root", "node.resume", "nodes/n1", 200, 0);
	add(db, "alice", "job.hold", "jobs/j-000001", 409, 0);
	add(db, "root", "job.hold", "jobs/j-000001", 200, 0);

	static const struct {
		const char *actor, *action, *target;
		int n;
	} cases[] = {
		{ NULL, NULL, NULL, 5 },
		{ "root", NULL, NULL, 3 },
		{ "alice", NULL, NULL, 2 },
		{ NULL, "node.drain", NULL, 2 },
		{ NULL, NULL, "nodes/n1", 2 },
		{ "root", "node.drain", NULL, 1 },
		{ "alice", NULL, "jobs/j-000001", 1 },
		{ "root", "job.hold", "jobs/j-000001", 1 },
		{ NULL, "job.hold", "nodes/n1", 0 },
		{ "bob", NULL, NULL, 0 },
		{ "ROOT", NULL, NULL, 0 },               /* exact, case-sensitive */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct db_audit_filter f = { .actor = cases[i].actor, .action = cases[i].action,
		                             .target = cases[i].target };
		struct db_audit_list l;
		CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), 0);
		CHECK_MSG((int)l.n == cases[i].n, "case %zu: %zu entries, want %d", i, l.n,
		          cases[i].n);
		for (size_t k = 0; k < l.n; k++) {
			CHECK(!cases[i].actor || strcmp(l.entries[k].actor, cases[i].actor) == 0);
			CHECK(!cases[i].action || strcmp(l.entries[k].action, cases[i].action) == 0);
			CHECK(!cases[i].target || strcmp(l.entries[k].target, cases[i].target) == 0);
		}
		db_audit_list_release(&l);
	}

	/* a filtered page with a cursor */
	struct db_audit_filter f = { .actor = "root", .limit = 2 };
	struct db_audit_list l;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 2);
	char cursor[DB_CURSOR_MAX];
	snprintf(cursor, sizeof cursor, "%s", l.next_cursor);
	db_audit_list_release(&l);
	f.cursor = cursor;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1)
		CHECK_STR_EQ(l.entries[0].action, "node.drain");
	CHECK_STR_EQ(l.next_cursor, "");
	db_audit_list_release(&l);
	db_close(db);
}

static void test_bad_input(void)
{
	struct db *db = open_db("bad.db");
	if (!db)
		return;
	char longname[DB_AUDIT_NAME_MAX + 2], longtarget[DB_AUDIT_TARGET_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	memset(longtarget, 't', sizeof longtarget - 1);
	longtarget[sizeof longtarget - 1] = '\0';
	char *longtext = malloc(DB_AUDIT_TEXT_MAX + 2);
	memset(longtext, 'm', DB_AUDIT_TEXT_MAX + 1);
	longtext[DB_AUDIT_TEXT_MAX + 1] = '\0';

	const struct db_audit_new ok = { .actor = "root", .action = "job.hold", .target = "jobs/x",
	                                 .status = 200 };
	struct db_audit_new e;
	struct db_err err = { 0 };
#define BAD(field, value)                                                                      \
	do {                                                                                   \
		e = ok;                                                                        \
		e.field = value;                                                               \
		db_err_clear(&err);                                                            \
		CHECK_MSG(db_audit_insert(db, &e, NULL, &err) == DB_INVALID, "%s = %s", #field, \
		          #value);                                                             \
		CHECK(strstr(err.text, "audit: ") != NULL);                                    \
	} while (0)
	BAD(actor, NULL);
	BAD(actor, "");
	BAD(actor, longname);
	BAD(action, NULL);
	BAD(action, longname);
	BAD(target, "");
	BAD(target, longtarget);
	BAD(status, 0);
	BAD(status, 99);
	BAD(status, 600);
	BAD(args, "{not json");
	BAD(args, "");
	BAD(args, longtext);
	BAD(message, longtext);
#undef BAD
	free(longtext);
	/* the longest values that fit */
	e = ok;
	longname[DB_AUDIT_NAME_MAX] = '\0';
	longtarget[DB_AUDIT_TARGET_MAX] = '\0';
	e.actor = longname;
	e.target = longtarget;
	e.args = "[1, \"two\", null]";
	CHECK_INT_EQ(db_audit_insert(db, &e, NULL, NULL), 0);

	struct db_audit_list l;
	static const char *const cursors[] = {
		"x", "AAAAAAAAAAAA", "????????????", "AQAAAAAAAAAB",   /* a job list's cursor */
		"AgAAAAAAAAAAA",
	};
	for (size_t i = 0; i < sizeof cursors / sizeof cursors[0]; i++) {
		struct db_audit_filter f = { .cursor = cursors[i] };
		CHECK_MSG(db_audit_list(db, &f, &l, NULL) == DB_INVALID, "cursor %s", cursors[i]);
		CHECK(l.entries == NULL && l.n == 0);
	}
	/* a job list's own cursor is refused here */
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	for (int i = 0; i < 2; i++) {
		struct db_job_new in = { .owner = "alice", .name = "c", .spec = "{}" };
		struct db_submit s;
		CHECK_INT_EQ(db_jobs_submit(db, &in, &s, NULL), 0);
	}
	struct db_job_filter jf = { .limit = 1 };
	struct db_job_list jl;
	CHECK_INT_EQ(db_jobs_list(db, &jf, &jl, NULL), 0);
	struct db_audit_filter f = { .cursor = jl.next_cursor };
	CHECK(jl.next_cursor[0] != '\0');
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), DB_INVALID);
	db_job_list_release(&jl);
	db_close(db);
}

static void test_append_only(void)
{
	struct db *db = open_db("append.db");
	if (!db)
		return;
	add(db, "root", "node.drain", "nodes/n1", 200, 0);
	db_close(db);

	sqlite3 *h = NULL;
	CHECK_INT_EQ(sqlite3_open(db_path, &h), SQLITE_OK);
	char *msg = NULL;
	CHECK(sqlite3_exec(h, "UPDATE audit SET actor = 'mallory'", NULL, NULL, &msg) != SQLITE_OK);
	CHECK(msg && strstr(msg, "append-only"));
	sqlite3_free(msg);
	msg = NULL;
	CHECK(sqlite3_exec(h, "DELETE FROM audit", NULL, NULL, &msg) != SQLITE_OK);
	CHECK(msg && strstr(msg, "append-only"));
	sqlite3_free(msg);
	sqlite3_close(h);

	db = open_db("append.db");
	struct db_audit_filter f = { 0 };
	struct db_audit_list l;
	CHECK_INT_EQ(db_audit_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1)
		CHECK_STR_EQ(l.entries[0].actor, "root");
	db_audit_list_release(&l);
	db_close(db);
}

int main(void)
{
	tmp = check_tmpdir("db_audit");
	CHECK_RUN(test_insert_and_read_back);
	CHECK_RUN(test_pages);
	CHECK_RUN(test_filters);
	CHECK_RUN(test_bad_input);
	CHECK_RUN(test_append_only);
	return check_finish();
}
