/* tests/unit/test_db_tokens.c - db/tokens.c: users, token format, lookup,
 * wrong and malformed tokens, revoke, list without secrets, last_used
 * throttling, job tokens (scope, revoked when the job ends), and that the
 * secret itself is nowhere in the database files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char *tmp;
static char path[4200];

static struct db *open_db(const char *file)
{
	snprintf(path, sizeof path, "%s/%s", tmp, file);
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	if (!db)
		exit(1);
	return db;
}

/* 1 if needle occurs in the file (the db or its WAL) */
static int file_contains(const char *file, const char *needle)
{
	FILE *f = fopen(file, "rb");
	if (!f)
		return 0;
	size_t n = strlen(needle), len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	size_t got;
	while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
		len += got;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	int found = len >= n && memmem(buf, len, needle, n) != NULL;
	free(buf);
	return found;
}

static void test_users(void)
{
	struct db *db = open_db("users.db");
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_ADMIN, &err), DB_CONFLICT);
	CHECK_MSG(strstr(err.text, "alice") != NULL, "%s", err.text);
	CHECK_INT_EQ(db_users_ensure(db, "", DB_ROLE_USER, NULL), DB_INVALID);
	CHECK_INT_EQ(db_users_ensure(db, "x", DB_ROLE_JOB, NULL), DB_INVALID);
	char long_name[100];
	memset(long_name, 'n', 99);
	long_name[99] = '\0';
	CHECK_INT_EQ(db_users_ensure(db, long_name, DB_ROLE_USER, NULL), DB_INVALID);
	CHECK_STR_EQ(db_role_name(DB_ROLE_JOB), "job");
	CHECK_INT_EQ(db_role_parse("admin"), DB_ROLE_ADMIN);
	CHECK_INT_EQ(db_role_parse("root"), -1);
	db_close(db);
}

static void test_create_lookup_revoke(void)
{
	struct db *db = open_db("tokens.db");
	char tok[DB_TOKEN_LEN + 1], tok2[DB_TOKEN_LEN + 1];
	struct db_token info, t;
	struct db_err err = { 0 };
	CHECK_MSG(db_tokens_create(db, "root", DB_ROLE_ADMIN, 0, tok, &info, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(strlen(tok), 67);
	CHECK(strncmp(tok, "lt_", 3) == 0 && strspn(tok + 3, "0123456789abcdef") == 64);
	CHECK(info.id > 0 && info.role == DB_ROLE_ADMIN && info.created_ms > 0);
	CHECK_STR_EQ(info.user, "root");
	CHECK_INT_EQ(db_tokens_create(db, "alice", DB_ROLE_USER, 0, tok2, NULL, NULL), 0);
	CHECK(strcmp(tok, tok2) != 0);

	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, NULL), 0);
	CHECK_INT_EQ(t.id, info.id);
	CHECK_STR_EQ(t.user, "root");
	CHECK_INT_EQ(t.role, DB_ROLE_ADMIN);
	CHECK_INT_EQ(t.job, 0);
	CHECK_INT_EQ(db_tokens_lookup(db, tok2, &t, NULL), 0);
	CHECK_STR_EQ(t.user, "alice");
	CHECK_INT_EQ(t.role, DB_ROLE_USER);

	/* wrong, malformed */
	char wrong[DB_TOKEN_LEN + 1];
	memcpy(wrong, tok, sizeof wrong);
	wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
	db_err_clear(&err);
	CHECK_INT_EQ(db_tokens_lookup(db, wrong, &t, &err), DB_NOT_FOUND);
	CHECK(strstr(err.text, wrong + 3) == NULL);
	CHECK_INT_EQ(t.id, 0);
	const char *malformed[] = { "", "lt_", "lt_abc", "xx_" "0123456789abcdef0123456789abcdef"
	                            "0123456789abcdef0123456789abcdef", NULL };
	for (int i = 0; malformed[i]; i++)
		CHECK_INT_EQ(db_tokens_lookup(db, malformed[i], &t, NULL), DB_NOT_FOUND);
	char upper[DB_TOKEN_LEN + 1];
	memcpy(upper, tok, sizeof upper);
	for (char *p = upper + 3; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	if (strcmp(upper, tok) != 0)
		CHECK_INT_EQ(db_tokens_lookup(db, upper, &t, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_tokens_lookup(db, NULL, &t, NULL), DB_NOT_FOUND);

	/* bad creates */
	char bad[DB_TOKEN_LEN + 1] = "x";
	CHECK_INT_EQ(db_tokens_create(db, NULL, DB_ROLE_USER, 0, bad, NULL, NULL), DB_INVALID);
	CHECK_INT_EQ(db_tokens_create(db, "alice", DB_ROLE_USER, 5, bad, NULL, NULL), DB_INVALID);
	CHECK_INT_EQ(db_tokens_create(db, "alice", DB_ROLE_ADMIN, 0, bad, NULL, NULL), DB_CONFLICT);
	CHECK_STR_EQ(bad, "");

	/* touch: written when stale, not otherwise */
	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, NULL), 0);
	CHECK_INT_EQ(t.last_used_ms, 0);
	CHECK_INT_EQ(db_tokens_touch(db, &t, 1000000, NULL), 0);
	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, NULL), 0);
	CHECK_INT_EQ(t.last_used_ms, 1000000);
	CHECK_INT_EQ(db_tokens_touch(db, &t, 1000000 + DB_TOKEN_TOUCH_MS - 1, NULL), 0);
	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, NULL), 0);
	CHECK_INT_EQ(t.last_used_ms, 1000000);
	CHECK_INT_EQ(db_tokens_touch(db, &t, 1000000 + DB_TOKEN_TOUCH_MS, NULL), 0);
	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, NULL), 0);
	CHECK_INT_EQ(t.last_used_ms, 1000000 + DB_TOKEN_TOUCH_MS);

	/* list, revoke */
	struct db_token_list l;
	CHECK_INT_EQ(db_tokens_list(db, NULL, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 2);
	db_token_list_release(&l);
	CHECK_INT_EQ(db_tokens_list(db, "alice", &l, NULL), 0);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1)
		CHECK_INT_EQ(l.items[0].role, DB_ROLE_USER);
	db_token_list_release(&l);
	CHECK_INT_EQ(db_tokens_revoke(db, info.id, 5000, NULL), 0);
	db_err_clear(&err);
	CHECK_INT_EQ(db_tokens_lookup(db, tok, &t, &err), DB_NOT_FOUND);
	CHECK_MSG(strstr(err.text, "revoked") != NULL, "%s", err.text);
	CHECK_INT_EQ(db_tokens_revoke(db, info.id, 9000, NULL), 0);      /* keeps the first time */
	CHECK_INT_EQ(db_tokens_list(db, NULL, &l, NULL), 0);
	CHECK(l.n == 2 && l.items[0].id == info.id && l.items[0].revoked_ms == 5000);
	db_token_list_release(&l);
	CHECK_INT_EQ(db_tokens_revoke(db, 424242, 0, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_tokens_lookup(db, tok2, &t, NULL), 0);           /* the other still works */
	db_close(db);

	/* only hashes are stored */
	char wal[4300];
	snprintf(wal, sizeof wal, "%s-wal", path);
	CHECK(!file_contains(path, tok + 3) && !file_contains(wal, tok + 3));
	CHECK(!file_contains(path, tok2 + 3) && !file_contains(wal, tok2 + 3));
}

static void test_job_tokens(void)
{
	struct db *db = open_db("jobtokens.db");
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	struct db_job_new in = { .owner = "alice", .name = "j", .spec = "{}" };
	struct db_submit a, b;
	CHECK_INT_EQ(db_jobs_submit(db, &in, &a, NULL), 0);
	CHECK_INT_EQ(db_jobs_submit(db, &in, &b, NULL), 0);

	char ta[DB_TOKEN_LEN + 1], tb[DB_TOKEN_LEN + 1], tx[DB_TOKEN_LEN + 1];
	struct db_token t;
	struct db_err err = { 0 };
	CHECK_MSG(db_tokens_create(db, NULL, DB_ROLE_JOB, a.id, ta, NULL, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(db_tokens_create(db, "alice", DB_ROLE_JOB, b.id, tb, NULL, NULL), 0);
	CHECK_INT_EQ(db_tokens_create(db, "bob", DB_ROLE_JOB, b.id, tx, NULL, NULL), DB_INVALID);
	CHECK_INT_EQ(db_tokens_create(db, NULL, DB_ROLE_JOB, 0, tx, NULL, NULL), DB_INVALID);
	CHECK_INT_EQ(db_tokens_create(db, NULL, DB_ROLE_JOB, 999, tx, NULL, NULL), DB_NOT_FOUND);

	CHECK_INT_EQ(db_tokens_lookup(db, ta, &t, NULL), 0);
	CHECK_INT_EQ(t.role, DB_ROLE_JOB);
	CHECK_INT_EQ(t.job, a.id);
	CHECK_STR_EQ(t.user, "alice");
	CHECK_INT_EQ(db_tokens_lookup(db, tb, &t, NULL), 0);
	CHECK_INT_EQ(t.job, b.id);

	/* a requeue keeps it; the end of its job revokes it, not the other's */
	struct db_transition tr = { .job = a.id, .from = DB_STATE_ANY, .by = "executor" };
	enum db_state steps[] = { DB_STATE_QUEUED, DB_STATE_RUNNING, DB_STATE_REQUEUED,
	                         DB_STATE_QUEUED, DB_STATE_RUNNING };
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		tr.to = steps[i];
		CHECK_INT_EQ(db_jobs_transition(db, &tr, NULL, NULL), 0);
		CHECK_INT_EQ(db_tokens_lookup(db, ta, &t, NULL), 0);
	}
	tr.to = DB_STATE_COMPLETED;
	CHECK_INT_EQ(db_jobs_transition(db, &tr, NULL, NULL), 0);
	CHECK_INT_EQ(db_tokens_lookup(db, ta, &t, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_tokens_lookup(db, tb, &t, NULL), 0);
	db_err_clear(&err);
	CHECK_INT_EQ(db_tokens_create(db, NULL, DB_ROLE_JOB, a.id, tx, NULL, &err), DB_INVALID);
	CHECK_MSG(strstr(err.text, "ended") != NULL, "%s", err.text);
	tr = (struct db_transition){ .job = b.id, .from = DB_STATE_PENDING, .to = DB_STATE_CANCELLED,
	                             .by = "alice" };
	CHECK_INT_EQ(db_jobs_transition(db, &tr, NULL, NULL), 0);
	CHECK_INT_EQ(db_tokens_lookup(db, tb, &t, NULL), DB_NOT_FOUND);
	db_close(db);
}

int main(void)
{
	tmp = check_tmpdir("db_tokens");
	CHECK_RUN(test_users);
	CHECK_RUN(test_create_lookup_revoke);
	CHECK_RUN(test_job_tokens);
	return check_finish();
}
