/* tests/unit/test_db_checkpoints.c - db/checkpoints.c: add, replace the same
 * step, list by step, owner scope, bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db/checkpoints.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_checkpoints(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/ck.db", check_tmpdir("db_checkpoints"));
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	struct db_job_new in = { .owner = "alice", .name = "c", .spec = "{}" };
	struct db_submit job;
	CHECK_INT_EQ(db_jobs_submit(db, &in, &job, NULL), 0);

	struct db_checkpoint ck = { .step = 2000, .path = "ckpt/step-2000", .bytes = 10,
	                            .sha256 = SHA_A, .time_ms = 5 };
	CHECK_INT_EQ(db_checkpoints_add(db, job.id, &ck, &err), 0);
	ck.step = 1000;
	ck.path = "ckpt/step-1000";
	CHECK_INT_EQ(db_checkpoints_add(db, job.id, &ck, NULL), 0);
	/* the same step again: replaced */
	ck = (struct db_checkpoint){ .step = 2000, .path = "ckpt/step-2000.b", .bytes = 20,
	                             .sha256 = SHA_B, .time_ms = 6 };
	CHECK_INT_EQ(db_checkpoints_add(db, job.id, &ck, NULL), 0);

	struct db_checkpoint_list l;
	CHECK_INT_EQ(db_checkpoints_list(db, job.id, "alice", &l, NULL), 0);
	CHECK_INT_EQ(l.n, 2);
	if (l.n == 2) {
		CHECK_INT_EQ(l.items[0].step, 1000);
		CHECK_STR_EQ(l.items[0].path, "ckpt/step-1000");
		CHECK_INT_EQ(l.items[1].step, 2000);
		CHECK_STR_EQ(l.items[1].path, "ckpt/step-2000.b");
		CHECK_INT_EQ(l.items[1].bytes, 20);
		CHECK_STR_EQ(l.items[1].sha256, SHA_B);
		CHECK_INT_EQ(l.items[1].time_ms, 6);
	}
	db_checkpoint_list_release(&l);
	CHECK_INT_EQ(db_checkpoints_list(db, job.id, "bob", &l, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_checkpoints_list(db, job.id + 1, NULL, &l, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_checkpoints_add(db, job.id + 1, &ck, NULL), DB_NOT_FOUND);
	ck.path = "";
	CHECK_INT_EQ(db_checkpoints_add(db, job.id, &ck, NULL), DB_INVALID);
	ck.path = "x";
	strcpy(ck.sha256, "ABC");
	CHECK_INT_EQ(db_checkpoints_add(db, job.id, &ck, NULL), DB_INVALID);
	CHECK_INT_EQ(db_checkpoints_list(db, job.id, NULL, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 2);
	db_checkpoint_list_release(&l);
	db_close(db);
}

int main(void)
{
	CHECK_RUN(test_checkpoints);
	return check_finish();
}
