/* tests/unit/test_db_usage.c - db/usage.c and the schema's usage triggers:
 * a local job that ran is spread over the hours it ran (its CPUs being
 * cpus_per_task x ranks, its GPUs gpus_per_node x nodes) when it ends, once;
 * one that never ran, or a Slurm executor's, adds nothing; Slurm's jobs
 * added twice count once and the poll mark is kept; queries cut at hours,
 * total by day and keep to one user's rows; bad input is DB_INVALID. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db_fixture.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "db/usage.h"

#define H DB_USAGE_HOUR_MS

static const char *tmp;

static struct db *open_db(const char *file)
{
	static const char *const users[] = { "alice", "bob", NULL };
	return db_test_open(tmp, file, users);
}

static int64_t submit(struct db *db, const char *owner, const char *spec, const char *executor)
{
	struct db_job_new in = { .owner = owner, .name = "u", .spec = spec, .executor = executor };
	struct db_submit out;
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_submit(db, &in, &out, &err) == 0, "submit: %s", err.text);
	return out.id;
}

static void move(struct db *db, int64_t id, enum db_state to, int64_t at)
{
	struct db_transition t = { .job = id, .from = DB_STATE_ANY, .to = to, .by = "tester",
	                           .time_ms = at };
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_transition(db, &t, NULL, &err) == 0, "%s", err.text);
}

/* Runs job id from start to end (ms), ending in state. */
static void run(struct db *db, int64_t id, int64_t start, int64_t end, enum db_state state)
{
	move(db, id, DB_STATE_QUEUED, start - 1000);
	move(db, id, DB_STATE_RUNNING, start);
	move(db, id, state, end);
}

static void query(struct db *db, int64_t from_h, int64_t to_h, const char *local,
                  const char *slurm, int by_day, struct db_usage_list *l)
{
	struct db_usage_filter f = { .from_hour = from_h, .to_hour = to_h, .local_user = local,
	                             .slurm_user = slurm, .by_day = by_day };
	struct db_err err = { 0 };
	CHECK_MSG(db_usage_query(db, &f, l, &err) == 0, "%s", err.text);
}

static const char spec_big[] =
	"{\"resources\":{\"cpus_per_task\":2,\"gpus_per_node\":1,\"nodes\":1,\"account\":\"ml\"},"
	"\"parallel\":{\"ranks\":3}}";
static const char spec_small[] = "{\"resources\":{\"cpus_per_task\":1,\"gpus_per_node\":0,"
	"\"nodes\":1},\"parallel\":{\"ranks\":1}}";

static void test_local_job_spread_over_hours(void)
{
	struct db *db = open_db("local.db");
	const int64_t t0 = 1000 * H;
	int64_t id = submit(db, "alice", spec_big, NULL);
	run(db, id, t0 + H / 2, t0 + 2 * H + H / 4, DB_STATE_COMPLETED);   /* 1.75 h */

	struct db_usage_list l;
	query(db, 0, 2000, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		const struct db_usage_row *r = &l.rows[0];
		CHECK(r->source == DB_USAGE_LOCAL);
		CHECK_STR_EQ(r->user, "alice");
		CHECK_STR_EQ(r->account, "ml");
		CHECK_STR_EQ(r->partition, "");
		CHECK_INT_EQ(r->cpu_ms, 6 * (7 * H / 4));      /* 2 CPUs x 3 ranks */
		CHECK_INT_EQ(r->gpu_ms, 7 * H / 4);
		CHECK_INT_EQ(r->jobs, 1);
	}
	db_usage_list_release(&l);

	/* the middle hour only: its 60 minutes, and not the job (it ended later) */
	query(db, 1001, 1002, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		CHECK_INT_EQ(l.rows[0].cpu_ms, 6 * H);
		CHECK_INT_EQ(l.rows[0].jobs, 0);
	}
	db_usage_list_release(&l);
	query(db, 1002, 1003, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		CHECK_INT_EQ(l.rows[0].cpu_ms, 6 * (H / 4));
		CHECK_INT_EQ(l.rows[0].jobs, 1);
	}
	db_usage_list_release(&l);
	query(db, 0, 1000, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 0);
	db_usage_list_release(&l);

	/* a job cancelled before it ran, and a Slurm executor's: nothing */
	int64_t never = submit(db, "alice", spec_small, NULL);
	move(db, never, DB_STATE_CANCELLED, t0 + H);
	int64_t slurm = submit(db, "alice", spec_small, "slurm");
	run(db, slurm, t0, t0 + H, DB_STATE_COMPLETED);
	/* one that failed counts as it ran */
	int64_t failed = submit(db, "bob", spec_small, NULL);
	run(db, failed, t0, t0 + H / 2, DB_STATE_FAILED);
	query(db, 0, 2000, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 2);
	if (l.n == 2) {
		CHECK_STR_EQ(l.rows[0].user, "alice");
		CHECK_INT_EQ(l.rows[0].jobs, 1);
		CHECK_STR_EQ(l.rows[1].user, "bob");
		CHECK_INT_EQ(l.rows[1].cpu_ms, H / 2);
	}
	db_usage_list_release(&l);
	db_close(db);
}

static void test_slurm_jobs_once(void)
{
	struct db *db = open_db("slurm.db");
	const int64_t t0 = 500 * H;
	struct db_usage_job jobs[] = {
		{ .key = "12@1@2", .user = "alice", .account = "ml", .partition = "debug",
		  .start_ms = t0, .end_ms = t0 + H, .cpus = 4, .gpus = 2 },
		{ .key = "13@1@2", .user = "bob", .account = "phys", .partition = "batch",
		  .start_ms = t0 + 30 * H, .end_ms = t0 + 30 * H + 60000, .cpus = 1 },
	};
	size_t added = 0;
	struct db_err err = { 0 };
	CHECK_MSG(db_usage_add(db, DB_USAGE_SLURM, jobs, 2, t0 + 40 * H, &added, &err) == 0, "%s",
	          err.text);
	CHECK_INT_EQ(added, 2);
	CHECK_INT_EQ(db_usage_add(db, DB_USAGE_SLURM, jobs, 2, t0 + 41 * H, &added, NULL), 0);
	CHECK_INT_EQ(added, 0);
	int64_t polled = 0;
	CHECK_INT_EQ(db_usage_polled(db, DB_USAGE_SLURM, &polled, NULL), 0);
	CHECK_INT_EQ(polled, t0 + 41 * H);
	CHECK_INT_EQ(db_usage_polled(db, DB_USAGE_LOCAL, &polled, NULL), 0);
	CHECK_INT_EQ(polled, 0);

	struct db_usage_list l;
	query(db, 0, 1000, NULL, NULL, 1, &l);
	CHECK_INT_EQ(l.n, 2);
	if (l.n == 2) {
		CHECK(l.rows[0].source == DB_USAGE_SLURM);
		CHECK_STR_EQ(l.rows[0].partition, "debug");
		CHECK_INT_EQ(l.rows[0].cpu_ms, 4 * H);
		CHECK_INT_EQ(l.rows[0].gpu_ms, 2 * H);
		CHECK_INT_EQ(l.rows[0].day, t0 / H / 24);
		CHECK_INT_EQ(l.rows[1].day, (t0 + 30 * H) / H / 24);
		CHECK_INT_EQ(l.rows[1].cpu_ms, 60000);
	}
	db_usage_list_release(&l);

	/* whose rows: a local user and a Slurm user, apart */
	query(db, 0, 1000, NULL, "bob", 0, &l);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1)
		CHECK_STR_EQ(l.rows[0].user, "bob");
	db_usage_list_release(&l);
	query(db, 0, 1000, "bob", NULL, 0, &l);
	CHECK_INT_EQ(l.n, 0);           /* bob's rows are Slurm's, not local */
	db_usage_list_release(&l);

	/* bad input adds nothing */
	struct db_usage_job bad[] = {
		{ .key = "ok", .user = "carol", .start_ms = t0, .end_ms = t0 + 1 },
		{ .key = "x", .user = "carol", .start_ms = t0, .end_ms = t0 - 1 },
	};
	CHECK_INT_EQ(db_usage_add(db, DB_USAGE_SLURM, bad, 2, 0, NULL, NULL), DB_INVALID);
	struct db_usage_job nouser = { .key = "y", .user = "", .start_ms = t0, .end_ms = t0 };
	CHECK_INT_EQ(db_usage_add(db, DB_USAGE_SLURM, &nouser, 1, 0, NULL, NULL), DB_INVALID);
	query(db, 0, 1000, NULL, "carol", 0, &l);
	CHECK_INT_EQ(l.n, 0);
	db_usage_list_release(&l);
	struct db_usage_filter backwards = { .from_hour = 10, .to_hour = 5 };
	CHECK_INT_EQ(db_usage_query(db, &backwards, &l, NULL), DB_INVALID);
	db_close(db);
}

static void test_long_job_capped_hours(void)
{
	struct db *db = open_db("long.db");
	/* longer than the hours a job is spread over (a year): every ms is
	 * still counted, the first hour taking what came before */
	struct db_usage_job j = { .key = "1@0@0", .user = "alice", .start_ms = 0,
	                          .end_ms = 10000 * H, .cpus = 1 };
	CHECK_INT_EQ(db_usage_add(db, DB_USAGE_SLURM, &j, 1, 0, NULL, NULL), 0);
	struct db_usage_list l;
	query(db, 0, 20000, NULL, NULL, 0, &l);
	CHECK_INT_EQ(l.n, 1);
	if (l.n == 1) {
		CHECK_INT_EQ(l.rows[0].cpu_ms, 10000 * H);
		CHECK_INT_EQ(l.rows[0].jobs, 1);
	}
	db_usage_list_release(&l);
	/* a job ending on an hour's edge belongs to the hour before */
	struct db_usage_job edge = { .key = "2@0@0", .user = "bob", .start_ms = 3 * H,
	                             .end_ms = 4 * H, .cpus = 1 };
	CHECK_INT_EQ(db_usage_add(db, DB_USAGE_SLURM, &edge, 1, 0, NULL, NULL), 0);
	query(db, 4, 5, NULL, "bob", 0, &l);
	CHECK_INT_EQ(l.n, 0);
	db_usage_list_release(&l);
	db_close(db);
}

int main(void)
{
	tmp = check_tmpdir("db_usage");
	CHECK_RUN(test_local_job_spread_over_hours);
	CHECK_RUN(test_slurm_jobs_once);
	CHECK_RUN(test_long_job_capped_hours);
	return check_finish();
}
