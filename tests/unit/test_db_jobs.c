/* tests/unit/test_db_jobs.c - db/jobs.c: job ids, every legal and illegal
 * pair of the state machine, stale and missing jobs, owner-scoped reads,
 * lists with filters and cursors (also while submits go on), progress,
 * counts and admin updates. Real SQLite files under check_tmpdir(). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db_fixture.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char *tmp;

static struct db *open_db(const char *file)
{
	static const char *const users[] = { "alice", "bob", NULL };
	return db_test_open(tmp, file, users);
}

static int64_t submit(struct db *db, const char *owner, const char *name)
{
	struct db_job_new in = { .owner = owner, .name = name, .spec = "{\"steps\": 10}" };
	struct db_submit out;
	struct db_err err = { 0 };
	int rc = db_jobs_submit(db, &in, &out, &err);
	CHECK_MSG(rc == 0, "submit: %s", err.text);
	return out.id;
}

static int move(struct db *db, int64_t id, enum db_state from, enum db_state to,
                struct db_err *err)
{
	struct db_transition t = { .job = id, .from = from, .to = to, .by = "tester",
	                           .reason = "test" };
	return db_jobs_transition(db, &t, NULL, err);
}

static enum db_state state_of(struct db *db, int64_t id)
{
	struct db_job j;
	if (db_jobs_get(db, id, NULL, &j, NULL) != 0)
		return (enum db_state)-1;
	enum db_state s = j.state;
	db_job_release(&j);
	return s;
}

static size_t n_events(struct db *db, int64_t id)
{
	struct db_event_list ev;
	if (db_jobs_events(db, id, NULL, &ev, NULL) != 0)
		return 0;
	size_t n = ev.n;
	db_event_list_release(&ev);
	return n;
}

static void test_ids(void)
{
	char s[DB_JOB_ID_MAX];
	db_job_id_format(123, s);
	CHECK_STR_EQ(s, "j-000123");
	db_job_id_format(1234567, s);
	CHECK_STR_EQ(s, "j-1234567");
	int64_t id = 0;
	CHECK_INT_EQ(db_job_id_parse("j-000123", &id), 0);
	CHECK_INT_EQ(id, 123);
	CHECK_INT_EQ(db_job_id_parse("j-1234567", &id), 0);
	CHECK_INT_EQ(id, 1234567);
	const char *bad[] = { "", "j-", "j-0", "j-000000", "123", "J-000123", "j-12x", "j--1",
	                      "j-0000000000000000001", "j-000123/../x", "j- 12", NULL };
	for (int i = 0; bad[i]; i++)
		CHECK_MSG(db_job_id_parse(bad[i], &id) == DB_INVALID, "\"%s\" parsed", bad[i]);
	CHECK(db_job_id_parse(NULL, &id) == DB_INVALID);
	CHECK_STR_EQ(db_state_name(DB_STATE_PREEMPTED), "PREEMPTED");
	CHECK_INT_EQ(db_state_parse("HELD"), DB_STATE_HELD);
	CHECK_INT_EQ(db_state_parse("held"), -1);
	CHECK(db_state_name(DB_STATE_COUNT) == NULL);
}

/* The table of docs: written out here independently of db/jobs.c. */
static const char *const legal_pairs[] = {
	"PENDING>QUEUED", "PENDING>CANCELLED", "PENDING>HELD", "PENDING>FAILED",
	"QUEUED>RUNNING", "QUEUED>CANCELLED", "QUEUED>FAILED", "QUEUED>HELD", "QUEUED>PENDING",
	"RUNNING>COMPLETED", "RUNNING>FAILED", "RUNNING>CANCELLED", "RUNNING>TIMEOUT",
	"RUNNING>PREEMPTED", "RUNNING>REQUEUED",
	"HELD>PENDING", "HELD>QUEUED", "HELD>CANCELLED", "HELD>FAILED",
	"PREEMPTED>QUEUED", "PREEMPTED>PENDING", "PREEMPTED>CANCELLED", "PREEMPTED>HELD",
	"PREEMPTED>FAILED",
	"REQUEUED>QUEUED", "REQUEUED>PENDING", "REQUEUED>CANCELLED", "REQUEUED>HELD",
	"REQUEUED>FAILED",
	NULL,
};

static int expected_legal(enum db_state from, enum db_state to)
{
	char pair[64];
	snprintf(pair, sizeof pair, "%s>%s", db_state_name(from), db_state_name(to));
	for (int i = 0; legal_pairs[i]; i++)
		if (strcmp(legal_pairs[i], pair) == 0)
			return 1;
	return 0;
}

/* A legal path from PENDING to each state. */
static const enum db_state paths[DB_STATE_COUNT][4] = {
	[DB_STATE_PENDING] = { DB_STATE_PENDING },
	[DB_STATE_QUEUED] = { DB_STATE_QUEUED },
	[DB_STATE_RUNNING] = { DB_STATE_QUEUED, DB_STATE_RUNNING },
	[DB_STATE_COMPLETED] = { DB_STATE_QUEUED, DB_STATE_RUNNING, DB_STATE_COMPLETED },
	[DB_STATE_FAILED] = { DB_STATE_QUEUED, DB_STATE_FAILED },
	[DB_STATE_CANCELLED] = { DB_STATE_CANCELLED },
	[DB_STATE_TIMEOUT] = { DB_STATE_QUEUED, DB_STATE_RUNNING, DB_STATE_TIMEOUT },
	[DB_STATE_HELD] = { DB_STATE_HELD },
	[DB_STATE_REQUEUED] = { DB_STATE_QUEUED, DB_STATE_RUNNING, DB_STATE_REQUEUED },
	[DB_STATE_PREEMPTED] = { DB_STATE_QUEUED, DB_STATE_RUNNING, DB_STATE_PREEMPTED },
};

static void drive(struct db *db, int64_t id, enum db_state target)
{
	for (int k = 0; k < 4 && paths[target][k] != DB_STATE_PENDING; k++) {
		struct db_err err = { 0 };
		int rc = move(db, id, DB_STATE_ANY, paths[target][k], &err);
		CHECK_MSG(rc == 0, "drive to %s: %s", db_state_name(target), err.text);
	}
	CHECK_INT_EQ(state_of(db, id), target);
}

static void test_every_pair(void)
{
	struct db *db = open_db("pairs.db");
	int n_legal = 0;
	for (int from = 0; from < DB_STATE_COUNT; from++) {
		for (int to = 0; to < DB_STATE_COUNT; to++) {
			int want = expected_legal(from, to);
			CHECK_MSG(db_state_legal(from, to) == want, "db_state_legal(%s, %s) != %d",
			          db_state_name(from), db_state_name(to), want);
			int64_t id = submit(db, "alice", "pair");
			drive(db, id, from);
			size_t ev_before = n_events(db, id);
			struct db_job after;
			struct db_err err = { 0 };
			struct db_transition t = { .job = id, .from = from, .to = to, .by = "admin",
			                           .reason = "pair test", .has_exit_code = 1,
			                           .exit_code = 3, .time_ms = 1700000000000 + to };
			int rc = db_jobs_transition(db, &t, &after, &err);
			if (want) {
				n_legal++;
				CHECK_MSG(rc == 0, "%s -> %s refused: %s", db_state_name(from),
				          db_state_name(to), err.text);
				CHECK_INT_EQ(after.state, to);
				CHECK_INT_EQ(n_events(db, id), ev_before + 1);
				if (to == DB_STATE_RUNNING)   /* kept in the event only */
					CHECK(after.reason == NULL);
				else
					CHECK_STR_EQ(after.reason, "pair test");
				CHECK(after.has_exit_code && after.exit_code == 3);
				if (to == DB_STATE_RUNNING)
					CHECK_INT_EQ(after.start_ms, t.time_ms);
				CHECK_INT_EQ(after.end_ms, db_state_final(to) ? t.time_ms : 0);
			} else {
				CHECK_MSG(rc == DB_ILLEGAL, "%s -> %s: rc %d, want DB_ILLEGAL",
				          db_state_name(from), db_state_name(to), rc);
				CHECK_MSG(strstr(err.text, db_state_name(from)) &&
				          strstr(err.text, db_state_name(to)), "message: %s", err.text);
				CHECK_INT_EQ(state_of(db, id), from);
				CHECK_INT_EQ(n_events(db, id), ev_before);
				CHECK(after.owner == NULL);     /* out is zeroed on failure */
			}
			db_job_release(&after);
		}
	}
	CHECK_INT_EQ(n_legal, 29);
	db_close(db);
}

static void test_events_stale_missing(void)
{
	struct db *db = open_db("events.db");
	int64_t id = submit(db, "alice", "ev");
	struct db_err err = { 0 };
	CHECK_INT_EQ(move(db, id, DB_STATE_RUNNING, DB_STATE_COMPLETED, &err), DB_STALE);
	CHECK_MSG(strstr(err.text, "PENDING") != NULL, "%s", err.text);
	db_err_clear(&err);
	CHECK_INT_EQ(move(db, 999999, DB_STATE_ANY, DB_STATE_QUEUED, &err), DB_NOT_FOUND);
	CHECK_MSG(strstr(err.text, "j-999999") != NULL, "%s", err.text);

	/* a requeue counts an attempt; the Slurm id and partition stick */
	struct db_transition t = { .job = id, .from = DB_STATE_PENDING, .to = DB_STATE_QUEUED,
	                           .by = "executor", .slurm_job_id = "4242", .partition = "debug" };
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
	CHECK_INT_EQ(move(db, id, DB_STATE_QUEUED, DB_STATE_RUNNING, NULL), 0);
	CHECK_INT_EQ(move(db, id, DB_STATE_RUNNING, DB_STATE_PREEMPTED, NULL), 0);
	CHECK_INT_EQ(move(db, id, DB_STATE_PREEMPTED, DB_STATE_QUEUED, NULL), 0);
	CHECK_INT_EQ(move(db, id, DB_STATE_QUEUED, DB_STATE_RUNNING, NULL), 0);
	struct db_transition done = { .job = id, .from = DB_STATE_RUNNING, .to = DB_STATE_FAILED,
	                              .by = "executor", .reason = "exit 1", .has_exit_code = 1,
	                              .exit_code = 1 };
	CHECK_INT_EQ(db_jobs_transition(db, &done, NULL, NULL), 0);
	CHECK_INT_EQ(move(db, id, DB_STATE_ANY, DB_STATE_CANCELLED, &err), DB_ILLEGAL);

	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(db, id, "alice", &j, NULL), 0);
	CHECK_INT_EQ(j.attempt, 2);
	CHECK_STR_EQ(j.slurm_job_id, "4242");
	CHECK_STR_EQ(j.partition, "debug");
	CHECK_INT_EQ(j.state, DB_STATE_FAILED);
	CHECK_STR_EQ(j.reason, "exit 1");
	CHECK(j.has_exit_code && j.exit_code == 1);
	CHECK(j.end_ms > 0 && j.start_ms > 0 && j.submit_ms > 0);
	db_job_release(&j);

	struct db_event_list ev;
	CHECK_INT_EQ(db_jobs_events(db, id, "alice", &ev, NULL), 0);
	static const int want[][2] = { { -1, DB_STATE_PENDING }, { DB_STATE_PENDING, DB_STATE_QUEUED },
	                               { DB_STATE_QUEUED, DB_STATE_RUNNING },
	                               { DB_STATE_RUNNING, DB_STATE_PREEMPTED },
	                               { DB_STATE_PREEMPTED, DB_STATE_QUEUED },
	                               { DB_STATE_QUEUED, DB_STATE_RUNNING },
	                               { DB_STATE_RUNNING, DB_STATE_FAILED } };
	CHECK_INT_EQ(ev.n, 7);
	for (size_t i = 0; i < ev.n && i < 7; i++) {
		CHECK_INT_EQ(ev.events[i].seq, (int64_t)i + 1);
		CHECK_INT_EQ(ev.events[i].from, want[i][0]);
		CHECK_INT_EQ(ev.events[i].to, want[i][1]);
	}
	if (ev.n == 7) {
		CHECK_STR_EQ(ev.events[0].by, "alice");
		CHECK_STR_EQ(ev.events[0].reason, "submitted");
		CHECK_STR_EQ(ev.events[6].by, "executor");
		CHECK_STR_EQ(ev.events[6].reason, "exit 1");
	}
	db_event_list_release(&ev);
	CHECK_INT_EQ(db_jobs_events(db, id, "bob", &ev, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(ev.n, 0);

	/* bad arguments */
	struct db_transition bad = { .job = id, .from = DB_STATE_ANY, .to = DB_STATE_COUNT, .by = "x" };
	CHECK_INT_EQ(db_jobs_transition(db, &bad, NULL, NULL), DB_INVALID);
	bad.to = DB_STATE_QUEUED;
	bad.by = NULL;
	CHECK_INT_EQ(db_jobs_transition(db, &bad, NULL, NULL), DB_INVALID);
	db_close(db);
}

/* Slurm forgot a job: back to PENDING, in no executor, its Slurm id
 * cleared (an id Slurm hands out again is never taken for it); the id
 * Slurm gives it next is recorded as ever. */
static void test_forgotten_back_to_pending(void)
{
	struct db *db = open_db("forgotten.db");
	int64_t id = submit(db, "alice", "lost");
	struct db_transition t = { .job = id, .from = DB_STATE_PENDING, .to = DB_STATE_QUEUED,
	                           .by = "executor", .slurm_job_id = "17" };
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
	struct db_transition back = { .job = id, .from = DB_STATE_QUEUED, .to = DB_STATE_PENDING,
	                              .by = "executor", .reason = "Slurm forgot job 17",
	                              .slurm_job_id = "17" };
	struct db_job j;
	CHECK_INT_EQ(db_jobs_transition(db, &back, &j, NULL), 0);
	CHECK_INT_EQ(j.state, DB_STATE_PENDING);
	CHECK(j.slurm_job_id == NULL);
	CHECK_INT_EQ(j.attempt, 1);
	db_job_release(&j);
	t.slurm_job_id = "23";
	CHECK_INT_EQ(db_jobs_transition(db, &t, &j, NULL), 0);
	CHECK_STR_EQ(j.slurm_job_id, "23");
	db_job_release(&j);
	db_close(db);
}

static void test_owner_scope(void)
{
	struct db *db = open_db("owner.db");
	int64_t a = submit(db, "alice", "mine");
	struct db_job j;
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_get(db, a, "alice", &j, NULL), 0);
	CHECK_STR_EQ(j.owner, "alice");
	CHECK_STR_EQ(j.name, "mine");
	CHECK_STR_EQ(j.spec, "{\"steps\": 10}");
	CHECK_STR_EQ(j.executor, "local");
	CHECK_INT_EQ(j.state, DB_STATE_PENDING);
	CHECK_INT_EQ(j.attempt, 1);
	CHECK(!j.has_exit_code && j.reason == NULL && j.slurm_job_id == NULL);
	CHECK(isnan(j.last_loss));
	db_job_release(&j);
	CHECK_INT_EQ(db_jobs_get(db, a, "bob", &j, &err), DB_NOT_FOUND);
	CHECK(j.owner == NULL);
	CHECK_INT_EQ(db_jobs_get(db, a, NULL, &j, NULL), 0);    /* admin */
	db_job_release(&j);
	CHECK_INT_EQ(db_jobs_get(db, a + 100, NULL, &j, NULL), DB_NOT_FOUND);
	db_close(db);
}

static void test_list(void)
{
	struct db *db = open_db("list.db");
	int64_t ids[120];
	for (int i = 0; i < 120; i++)
		ids[i] = submit(db, i % 3 ? "alice" : "bob", i % 2 ? "odd" : "even");
	for (int i = 0; i < 120; i += 5)
		CHECK_INT_EQ(move(db, ids[i], DB_STATE_ANY, DB_STATE_QUEUED, NULL), 0);

	/* all, 50 a page: newest first, every job once */
	struct db_job_filter f = { .limit = 50 };
	char cursor[DB_CURSOR_MAX] = "";
	int seen = 0, pages = 0;
	int64_t last = INT64_MAX;
	for (;;) {
		struct db_job_list l;
		f.cursor = cursor;
		struct db_err err = { 0 };
		CHECK_MSG(db_jobs_list(db, &f, &l, &err) == 0, "%s", err.text);
		pages++;
		for (size_t i = 0; i < l.n; i++) {
			CHECK(l.jobs[i].id < last);
			last = l.jobs[i].id;
			CHECK_INT_EQ(l.jobs[i].id, ids[119 - seen]);
			seen++;
		}
		snprintf(cursor, sizeof cursor, "%s", l.next_cursor);
		size_t n = l.n;
		db_job_list_release(&l);
		if (!*cursor || n == 0)
			break;
	}
	CHECK_INT_EQ(seen, 120);
	CHECK_INT_EQ(pages, 3);

	/* filters */
	struct db_job_list l;
	f = (struct db_job_filter){ .has_state = 1, .state = DB_STATE_QUEUED, .limit = 500 };
	CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 24);
	CHECK_STR_EQ(l.next_cursor, "");
	for (size_t i = 0; i < l.n; i++)
		CHECK_INT_EQ(l.jobs[i].state, DB_STATE_QUEUED);
	db_job_list_release(&l);
	f = (struct db_job_filter){ .owner = "bob", .name = "even" };
	CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), 0);
	CHECK_INT_EQ(l.n, 20);     /* i % 3 == 0 and i even: i % 6 == 0 */
	for (size_t i = 0; i < l.n; i++)
		CHECK(strcmp(l.jobs[i].owner, "bob") == 0 && strcmp(l.jobs[i].name, "even") == 0);
	db_job_list_release(&l);
	f = (struct db_job_filter){ .has_state = 1, .state = DB_STATE_PENDING, .owner = "alice",
	                            .name = "odd", .limit = 7 };
	int total = 0;
	cursor[0] = '\0';
	do {
		f.cursor = cursor;
		CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), 0);
		total += (int)l.n;
		snprintf(cursor, sizeof cursor, "%s", l.next_cursor);
		db_job_list_release(&l);
	} while (*cursor);
	int want = 0;
	for (int i = 0; i < 120; i++)
		want += i % 3 && i % 2 && i % 5;
	CHECK_INT_EQ(total, want);

	/* garbage cursors and limits */
	const char *garbage[] = { "x", "AAAAAAAAAAAA", "!!!!!!!!!!!!", "AQAAAAAAAAAAA",
	                          "AQAAAAAAAA==", "j-000001", NULL };
	for (int i = 0; garbage[i]; i++) {
		struct db_err err = { 0 };
		f = (struct db_job_filter){ .cursor = garbage[i] };
		CHECK_MSG(db_jobs_list(db, &f, &l, &err) == DB_INVALID, "cursor \"%s\" accepted",
		          garbage[i]);
		CHECK_MSG(strstr(err.text, "cursor") != NULL, "%s", err.text);
		CHECK(l.n == 0 && l.jobs == NULL);
	}
	f = (struct db_job_filter){ .limit = 501 };
	CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), DB_INVALID);
	f.limit = -1;
	CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), DB_INVALID);
	f = (struct db_job_filter){ .has_state = 1, .state = 42 };
	CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), DB_INVALID);
	db_close(db);
}

struct inserter {
	struct db *db;
	int n;
	int64_t *ids;
};

static void *insert_thread(void *arg)
{
	struct inserter *in = arg;
	for (int i = 0; i < in->n; i++)
		in->ids[i] = submit(in->db, "alice", "late");
	return NULL;
}

static void test_pagination_while_inserting(void)
{
	struct db *db = open_db("paging.db");
	enum { BEFORE = 300, DURING = 200 };
	int64_t *before = calloc(BEFORE, sizeof *before);
	for (int i = 0; i < BEFORE; i++)
		before[i] = submit(db, "alice", "early");
	int64_t max_before = before[BEFORE - 1];
	struct inserter in = { db, DURING, calloc(DURING, sizeof(int64_t)) };
	pthread_t th;
	pthread_create(&th, NULL, insert_thread, &in);

	char *seen = calloc((size_t)max_before + DURING + 10, 1);
	char cursor[DB_CURSOR_MAX] = "";
	struct db_job_filter f = { .owner = "alice", .limit = 7 };
	int dups = 0, pages = 0;
	do {
		struct db_job_list l;
		f.cursor = cursor;
		CHECK_INT_EQ(db_jobs_list(db, &f, &l, NULL), 0);
		for (size_t i = 0; i < l.n; i++) {
			int64_t id = l.jobs[i].id;
			if (id < (int64_t)max_before + DURING + 10)
				dups += seen[id]++ > 0;
		}
		snprintf(cursor, sizeof cursor, "%s", l.next_cursor);
		db_job_list_release(&l);
		pages++;
	} while (*cursor);
	pthread_join(th, NULL);
	CHECK_INT_EQ(dups, 0);
	int missing = 0;
	for (int i = 0; i < BEFORE; i++)
		missing += seen[before[i]] != 1;
	CHECK_INT_EQ(missing, 0);
	CHECK(pages >= BEFORE / 7);
	free(seen);
	free(before);
	free(in.ids);
	db_close(db);
}

static void test_progress_counts(void)
{
	struct db *db = open_db("progress.db");
	int64_t a = submit(db, "alice", "p");
	int64_t b = submit(db, "bob", "p");
	submit(db, "bob", "p");
	CHECK_INT_EQ(db_jobs_progress(db, a, 120, 1000, 0.25, NULL), 0);
	CHECK_INT_EQ(db_jobs_progress(db, 424242, 1, 2, 0.5, NULL), DB_NOT_FOUND);
	struct db_job j;
	CHECK_INT_EQ(db_jobs_get(db, a, NULL, &j, NULL), 0);
	CHECK_INT_EQ(j.progress_step, 120);
	CHECK_INT_EQ(j.progress_total, 1000);
	CHECK(j.last_loss == 0.25);
	db_job_release(&j);
	CHECK_INT_EQ(db_jobs_progress(db, a, 130, 1000, NAN, NULL), 0);
	CHECK_INT_EQ(db_jobs_get(db, a, NULL, &j, NULL), 0);
	CHECK(isnan(j.last_loss));
	db_job_release(&j);

	CHECK_INT_EQ(move(db, a, DB_STATE_ANY, DB_STATE_QUEUED, NULL), 0);
	CHECK_INT_EQ(move(db, b, DB_STATE_ANY, DB_STATE_CANCELLED, NULL), 0);
	int64_t counts[DB_STATE_COUNT];
	CHECK_INT_EQ(db_jobs_count_by_state(db, counts, NULL), 0);
	CHECK_INT_EQ(counts[DB_STATE_PENDING], 1);
	CHECK_INT_EQ(counts[DB_STATE_QUEUED], 1);
	CHECK_INT_EQ(counts[DB_STATE_CANCELLED], 1);
	CHECK_INT_EQ(counts[DB_STATE_RUNNING], 0);
	db_close(db);
}

/* The runner's scan: the oldest jobs of a state, by id, at most max. */
static void test_oldest(void)
{
	struct db *db = open_db("oldest.db");
	int64_t id[6];
	for (int i = 0; i < 6; i++)
		id[i] = submit(db, i % 2 ? "bob" : "alice", "o");
	CHECK_INT_EQ(move(db, id[1], DB_STATE_ANY, DB_STATE_QUEUED, NULL), 0);
	CHECK_INT_EQ(move(db, id[4], DB_STATE_ANY, DB_STATE_CANCELLED, NULL), 0);
	int64_t got[8];
	size_t n = 99;
	CHECK_INT_EQ(db_jobs_oldest(db, DB_STATE_PENDING, got, 3, &n, NULL), 0);
	CHECK_INT_EQ(n, 3);
	CHECK(got[0] == id[0] && got[1] == id[2] && got[2] == id[3]);
	CHECK_INT_EQ(db_jobs_oldest(db, DB_STATE_PENDING, got, 8, &n, NULL), 0);
	CHECK_INT_EQ(n, 4);
	CHECK(got[3] == id[5]);
	CHECK_INT_EQ(db_jobs_oldest(db, DB_STATE_QUEUED, got, 8, &n, NULL), 0);
	CHECK(n == 1 && got[0] == id[1]);
	CHECK_INT_EQ(db_jobs_oldest(db, DB_STATE_RUNNING, got, 8, &n, NULL), 0);
	CHECK_INT_EQ(n, 0);
	CHECK_INT_EQ(db_jobs_oldest(db, DB_STATE_PENDING, got, 0, &n, NULL), 0);
	CHECK_INT_EQ(n, 0);
	db_close(db);
}

static void test_admin_update(void)
{
	struct db *db = open_db("update.db");
	int64_t id = submit(db, "alice", "u");
	struct db_job_update u = { .job = id, .by = "root", .has_priority = 1, .priority = 10 };
	struct db_job after;
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_update(db, &u, &after, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(after.priority, 10);
	CHECK(after.partition == NULL);
	CHECK_INT_EQ(after.state, DB_STATE_PENDING);
	db_job_release(&after);
	u = (struct db_job_update){ .job = id, .by = "root", .partition = "gpu", .reason = "moved" };
	CHECK_INT_EQ(db_jobs_update(db, &u, &after, NULL), 0);
	CHECK_INT_EQ(after.priority, 10);
	CHECK_STR_EQ(after.partition, "gpu");
	db_job_release(&after);
	struct db_event_list ev;
	CHECK_INT_EQ(db_jobs_events(db, id, NULL, &ev, NULL), 0);
	CHECK_INT_EQ(ev.n, 3);
	if (ev.n == 3) {
		CHECK_STR_EQ(ev.events[1].reason, "priority 0 -> 10");
		CHECK_STR_EQ(ev.events[1].by, "root");
		CHECK(ev.events[1].from == DB_STATE_PENDING && ev.events[1].to == DB_STATE_PENDING);
		CHECK_STR_EQ(ev.events[2].reason, "moved");
	}
	db_event_list_release(&ev);
	/* the Slurm id of a job held while Slurm took it: recorded, state kept */
	CHECK_INT_EQ(move(db, id, DB_STATE_PENDING, DB_STATE_HELD, NULL), 0);
	u = (struct db_job_update){ .job = id, .by = "executor", .slurm_job_id = "4242" };
	CHECK_INT_EQ(db_jobs_update(db, &u, &after, NULL), 0);
	CHECK_STR_EQ(after.slurm_job_id, "4242");
	CHECK_INT_EQ(after.state, DB_STATE_HELD);
	CHECK_STR_EQ(after.partition, "gpu");
	db_job_release(&after);
	CHECK_INT_EQ(db_jobs_events(db, id, NULL, &ev, NULL), 0);
	CHECK_INT_EQ(ev.n, 5);
	if (ev.n == 5)
		CHECK_STR_EQ(ev.events[4].reason, "slurm job 4242");
	db_event_list_release(&ev);
	u = (struct db_job_update){ .job = id, .by = "root" };
	CHECK_INT_EQ(db_jobs_update(db, &u, NULL, NULL), DB_INVALID);
	u.partition = "";
	CHECK_INT_EQ(db_jobs_update(db, &u, NULL, NULL), DB_INVALID);
	u = (struct db_job_update){ .job = id, .by = "root", .slurm_job_id = "" };
	CHECK_INT_EQ(db_jobs_update(db, &u, NULL, NULL), DB_INVALID);
	u = (struct db_job_update){ .job = id + 50, .by = "root", .has_priority = 1 };
	CHECK_INT_EQ(db_jobs_update(db, &u, NULL, NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(move(db, id, DB_STATE_ANY, DB_STATE_CANCELLED, NULL), 0);
	u.job = id;
	CHECK_INT_EQ(db_jobs_update(db, &u, NULL, &err), DB_ILLEGAL);
	CHECK_INT_EQ(n_events(db, id), 6);
	db_close(db);
}

int main(void)
{
	tmp = check_tmpdir("db_jobs");
	CHECK_RUN(test_ids);
	CHECK_RUN(test_every_pair);
	CHECK_RUN(test_events_stale_missing);
	CHECK_RUN(test_owner_scope);
	CHECK_RUN(test_forgotten_back_to_pending);
	CHECK_RUN(test_list);
	CHECK_RUN(test_pagination_while_inserting);
	CHECK_RUN(test_progress_counts);
	CHECK_RUN(test_admin_update);
	CHECK_RUN(test_oldest);
	return check_finish();
}
