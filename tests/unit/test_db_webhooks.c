/* tests/unit/test_db_webhooks.c - db/webhooks.c and the outbox trigger of
 * migration 9: an event and its deliveries only for the hooks that want
 * it, in the job event's transaction; sweep.completed when the last child
 * ends; the cap per
 * user; owner scope; attempts and the delivery's states; delete. Real
 * SQLite files under check_tmpdir(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "db_fixture.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/sweeps.h"
#include "db/tokens.h"
#include "db/webhooks.h"

static const char *tmp;

static struct db *open_db(const char *file)
{
	static const char *const users[] = { "alice", "bob", NULL };
	return db_test_open(tmp, file, users);
}

static int64_t submit(struct db *db, const char *owner)
{
	struct db_job_new in = { .owner = owner, .name = "j", .spec = "{\"steps\": 10}" };
	struct db_submit out;
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_submit(db, &in, &out, &err) == 0, "submit: %s", err.text);
	return out.id;
}

static void move(struct db *db, int64_t id, enum db_state to)
{
	struct db_transition t = { .job = id, .from = DB_STATE_ANY, .to = to, .by = "tester" };
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_transition(db, &t, NULL, &err) == 0, "move: %s", err.text);
}

static int64_t hook(struct db *db, const char *owner, const char *events)
{
	struct db_webhook_new in = { .owner = owner, .url = "http://127.0.0.1:9/",
	                             .events = events, .secret = "0123456789abcdef" };
	int64_t id = 0;
	struct db_err err = { 0 };
	CHECK_MSG(db_webhooks_create(db, &in, 3, &id, &err) == 0, "create: %s", err.text);
	return id;
}

static size_t due_skipping(struct db *db, const char *skip, struct db_webhook_due **out)
{
	size_t n = 0;
	int64_t next;
	CHECK_INT_EQ(db_webhooks_due(db, db_now_ms() + 1000, 32, skip, out, &n, &next, NULL), 0);
	return n;
}

static size_t due(struct db *db, struct db_webhook_due **out)
{
	return due_skipping(db, NULL, out);
}

static void test_outbox_follows_job_events(void)
{
	struct db *db = open_db("outbox.db");
	int64_t h1 = hook(db, "alice", "[\"job.completed\",\"job.running\"]");
	int64_t h2 = hook(db, "alice", "[\"job.completed\"]");
	hook(db, "bob", "[\"job.completed\"]");
	int64_t job = submit(db, "alice");
	struct db_webhook_due *d = NULL;
	CHECK_INT_EQ(due(db, &d), 0);   /* PENDING is no event */
	db_webhook_due_free(d, 0);
	move(db, job, DB_STATE_QUEUED);
	move(db, job, DB_STATE_RUNNING);
	size_t n = due(db, &d);
	CHECK_INT_EQ(n, 1);
	if (n == 1) {
		CHECK_INT_EQ(d[0].hook, h1);
		CHECK_STR_EQ(d[0].type, "job.running");
		CHECK_INT_EQ(d[0].job, job);
		CHECK(d[0].body == NULL);
		CHECK_STR_EQ(d[0].secret, "0123456789abcdef");
	}
	db_webhook_due_free(d, n);
	move(db, job, DB_STATE_COMPLETED);
	n = due(db, &d);
	CHECK_INT_EQ(n, 3);   /* running to h1; completed to h1 and h2 (not bob's) */
	int64_t completed_event = 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(d[i].type, "job.completed") == 0) {
			CHECK(d[i].hook == h1 || d[i].hook == h2);
			CHECK(completed_event == 0 || completed_event == d[i].event);   /* one event */
			completed_event = d[i].event;
		}
	db_webhook_due_free(d, n);

	/* the body is fixed once */
	char *stored = NULL;
	CHECK_INT_EQ(db_webhooks_set_body(db, completed_event, "{\"a\":1}", &stored, NULL), 0);
	CHECK_STR_EQ(stored, "{\"a\":1}");
	free(stored);
	CHECK_INT_EQ(db_webhooks_set_body(db, completed_event, "{\"b\":2}", &stored, NULL), 0);
	CHECK_STR_EQ(stored, "{\"a\":1}");
	free(stored);

	/* attempts: pending with a next time, then failed; delivered */
	n = due(db, &d);
	int64_t now = db_now_ms();
	for (size_t i = 0; i < n; i++) {
		struct db_webhook_attempt a = { .time_ms = now, .status = 500, .error = "HTTP 500",
		                                .duration_ms = 3 };
		CHECK_INT_EQ(db_webhooks_attempt(db, d[i].delivery, &a, now + 3600000, NULL), 0);
		if (d[i].hook == h2) {
			a.status = 0;
			a.error = "no answer";
			CHECK_INT_EQ(db_webhooks_attempt(db, d[i].delivery, &a, 0, NULL), 0);
		} else if (strcmp(d[i].type, "job.completed") == 0) {
			a.status = 204;
			a.error = NULL;
			CHECK_INT_EQ(db_webhooks_attempt(db, d[i].delivery, &a, 0, NULL), 0);
		}
	}
	db_webhook_due_free(d, n);
	struct db_webhook w;
	CHECK_INT_EQ(db_webhooks_get(db, h1, "alice", &w, NULL), 0);
	CHECK_INT_EQ(w.pending, 1);
	CHECK_INT_EQ(w.delivered, 1);
	CHECK_INT_EQ(w.failed, 0);
	db_webhook_release(&w);
	CHECK_INT_EQ(db_webhooks_get(db, h2, NULL, &w, NULL), 0);
	CHECK_INT_EQ(w.failed, 1);
	db_webhook_release(&w);
	CHECK_INT_EQ(db_webhooks_get(db, h2, "bob", &w, NULL), DB_NOT_FOUND);
	struct db_webhook_delivery *ds = NULL;
	CHECK_INT_EQ(db_webhooks_deliveries(db, h2, "alice", 10, &ds, &n, NULL), 0);
	CHECK_INT_EQ(n, 1);
	if (n == 1) {
		CHECK_STR_EQ(ds[0].state, "failed");
		CHECK_INT_EQ(ds[0].n_attempts, 2);
		if (ds[0].n_attempts == 2) {
			CHECK_INT_EQ(ds[0].attempts[0].status, 500);
			CHECK_INT_EQ(ds[0].attempts[1].status, 0);
			CHECK_STR_EQ(ds[0].attempts[1].error, "no answer");
		}
	}
	db_webhook_deliveries_free(ds, n);
	CHECK_INT_EQ(db_webhooks_deliveries(db, h2, "bob", 10, &ds, &n, NULL), DB_NOT_FOUND);

	/* delete: the hook and its deliveries; another user's is not found */
	CHECK_INT_EQ(db_webhooks_delete(db, h1, "bob", NULL), DB_NOT_FOUND);
	CHECK_INT_EQ(db_webhooks_delete(db, h1, "alice", NULL), 0);
	CHECK_INT_EQ(db_webhooks_get(db, h1, NULL, &w, NULL), DB_NOT_FOUND);
	n = due(db, &d);
	CHECK_INT_EQ(n, 0);
	db_webhook_due_free(d, n);
	CHECK_INT_EQ(db_close(db), 0);
}

static void test_cap_and_list(void)
{
	struct db *db = open_db("cap.db");
	for (int i = 0; i < 3; i++)
		hook(db, "alice", "[\"job.failed\"]");
	struct db_webhook_new in = { .owner = "alice", .url = "http://127.0.0.1/",
	                             .events = "[\"job.failed\"]", .secret = "0123456789abcdef" };
	int64_t id;
	CHECK_INT_EQ(db_webhooks_create(db, &in, 3, &id, NULL), DB_CONFLICT);
	in.owner = "nobody";
	CHECK_INT_EQ(db_webhooks_create(db, &in, 3, &id, NULL), DB_INVALID);
	hook(db, "bob", "[\"job.failed\"]");
	struct db_webhook *list;
	size_t n;
	CHECK_INT_EQ(db_webhooks_list(db, "alice", 500, &list, &n, NULL), 0);
	CHECK_INT_EQ(n, 3);
	CHECK(n < 2 || list[0].id > list[1].id);
	db_webhooks_free(list, n);
	CHECK_INT_EQ(db_webhooks_list(db, NULL, 500, &list, &n, NULL), 0);
	CHECK_INT_EQ(n, 4);
	db_webhooks_free(list, n);
	CHECK_INT_EQ(db_close(db), 0);
}

static void test_sweep_completed_once(void)
{
	struct db *db = open_db("sweep.db");
	int64_t h = hook(db, "alice", "[\"sweep.completed\"]");
	struct db_sweep_child_new ch[2] = { { .name = "a", .spec = "{}", .params = "{}" },
	                                    { .name = "b", .spec = "{}", .params = "{}" } };
	struct db_sweep_new in = { .owner = "alice", .name = "s", .definition = "{}",
	                           .method = "grid", .children = ch, .n = 2 };
	int64_t sweep;
	struct db_err err = { 0 };
	CHECK_MSG(db_sweeps_submit(db, &in, &sweep, &err) == 0, "sweep: %s", err.text);
	struct db_sweep s;
	struct db_sweep_child *c;
	size_t nc;
	CHECK_INT_EQ(db_sweeps_get(db, sweep, NULL, &s, &c, &nc, NULL), 0);
	CHECK_INT_EQ(nc, 2);
	int64_t j0 = c[0].job, j1 = c[1].job;
	db_sweep_children_free(c, nc);
	db_sweep_release(&s);
	move(db, j0, DB_STATE_CANCELLED);
	struct db_webhook_due *d;
	CHECK_INT_EQ(due(db, &d), 0);
	db_webhook_due_free(d, 0);
	move(db, j1, DB_STATE_QUEUED);
	move(db, j1, DB_STATE_RUNNING);
	move(db, j1, DB_STATE_FAILED);
	size_t n = due(db, &d);
	CHECK_INT_EQ(n, 1);
	if (n == 1) {
		CHECK_STR_EQ(d[0].type, "sweep.completed");
		CHECK_INT_EQ(d[0].sweep, sweep);
		CHECK_INT_EQ(d[0].hook, h);
	}
	db_webhook_due_free(d, n);
	CHECK_INT_EQ(db_close(db), 0);
}

/* The sender leaves out the users whose deliveries are in flight already
 * (one attempt per user at a time): the others' come first. */
static void test_due_skips_owners(void)
{
	struct db *db = open_db("skip.db");
	int64_t ha = hook(db, "alice", "[\"job.completed\"]");
	int64_t hb = hook(db, "bob", "[\"job.completed\"]");
	for (int i = 0; i < 2; i++) {
		int64_t ja = submit(db, "alice"), jb = submit(db, "bob");
		move(db, ja, DB_STATE_QUEUED);
		move(db, ja, DB_STATE_RUNNING);
		move(db, ja, DB_STATE_COMPLETED);
		move(db, jb, DB_STATE_QUEUED);
		move(db, jb, DB_STATE_RUNNING);
		move(db, jb, DB_STATE_COMPLETED);
	}
	struct db_webhook_due *d = NULL;
	size_t n = due(db, &d);
	CHECK_INT_EQ(n, 4);
	if (n == 4) {
		CHECK_STR_EQ(d[0].owner, "alice");
		CHECK_STR_EQ(d[1].owner, "bob");
	}
	db_webhook_due_free(d, n);
	n = due_skipping(db, "[\"alice\"]", &d);
	CHECK_INT_EQ(n, 2);
	for (size_t i = 0; i < n; i++) {
		CHECK_INT_EQ(d[i].hook, hb);
		CHECK_STR_EQ(d[i].owner, "bob");
	}
	db_webhook_due_free(d, n);
	n = due_skipping(db, "[\"bob\",\"alice\"]", &d);
	CHECK_INT_EQ(n, 0);
	db_webhook_due_free(d, n);
	n = due_skipping(db, "[]", &d);
	CHECK_INT_EQ(n, 4);
	CHECK(n == 0 || d[0].hook == ha);
	db_webhook_due_free(d, n);
	CHECK_INT_EQ(db_close(db), 0);
}

int main(void)
{
	tmp = check_tmpdir("db_webhooks");
	CHECK_RUN(test_due_skips_owners);
	CHECK_RUN(test_outbox_follows_job_events);
	CHECK_RUN(test_cap_and_list);
	CHECK_RUN(test_sweep_completed_once);
	return check_finish();
}
