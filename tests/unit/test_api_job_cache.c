/* tests/unit/test_api_job_cache.c - api/job_cache.c: an entry answers only
 * for its job and the generation it was read under; copies are the
 * caller's; many threads at once (run under the sanitizers). And
 * db_generation moves with every write transaction. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/job_cache.h"
#include "check.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static void test_hit_and_miss(void)
{
	struct api_job_cache *c = api_job_cache_new();
	char *body, owner[72];
	size_t len;
	CHECK(!api_job_cache_get(c, 5, 1, &body, &len, owner, sizeof owner));
	api_job_cache_put(c, 5, 1, "{\"id\":\"j-000005\"}", 17, "alice");
	CHECK(api_job_cache_get(c, 5, 1, &body, &len, owner, sizeof owner));
	CHECK_INT_EQ(len, 17);
	CHECK_STR_EQ(body, "{\"id\":\"j-000005\"}");
	CHECK_STR_EQ(owner, "alice");
	free(body);
	CHECK(!api_job_cache_get(c, 5, 2, &body, &len, owner, sizeof owner));    /* a write ended */
	CHECK(!api_job_cache_get(c, 5 + 1024, 1, &body, &len, owner, sizeof owner)); /* same slot */
	api_job_cache_put(c, 5 + 1024, 1, "other", 5, "bob");    /* evicts job 5 */
	CHECK(!api_job_cache_get(c, 5, 1, &body, &len, owner, sizeof owner));
	CHECK(api_job_cache_get(c, 5 + 1024, 1, &body, &len, owner, sizeof owner));
	CHECK_STR_EQ(owner, "bob");
	free(body);
	api_job_cache_free(c);
	api_job_cache_free(NULL);
}

struct worker {
	struct api_job_cache *c;
	int seed, bad;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	char text[64], *body, owner[72];
	size_t len;
	for (int i = 0; i < 20000; i++) {
		int64_t id = 1 + (w->seed * 7919 + i) % 3000;
		int n = snprintf(text, sizeof text, "job %lld", (long long)id);
		if (i % 3 == 0) {
			api_job_cache_put(w->c, id, 7, text, (size_t)n, "u");
		} else if (api_job_cache_get(w->c, id, 7, &body, &len, owner, sizeof owner)) {
			w->bad += strcmp(body, text) != 0 || len != (size_t)n;
			free(body);
		}
	}
	return NULL;
}

static void test_threads(void)
{
	struct api_job_cache *c = api_job_cache_new();
	pthread_t t[4];
	struct worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ c, i, 0 };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_INT_EQ(w[i].bad, 0);
	}
	api_job_cache_free(c);
}

static void test_generation_moves_with_writes(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/generation.db", check_tmpdir("job_cache"));
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	uint64_t g0 = db_generation(db);
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	uint64_t g1 = db_generation(db);
	CHECK(g1 > g0);
	struct db_job_new in = { .owner = "alice", .name = "g", .spec = "{}" };
	struct db_submit out;
	CHECK_INT_EQ(db_jobs_submit(db, &in, &out, NULL), 0);
	uint64_t g2 = db_generation(db);
	CHECK(g2 > g1);
	struct db_job job;
	CHECK_INT_EQ(db_jobs_get(db, out.id, NULL, &job, NULL), 0);   /* a read moves nothing */
	db_job_release(&job);
	CHECK(db_generation(db) == g2);
	CHECK_INT_EQ(db_jobs_progress(db, out.id, 1, 10, 0.5, NULL), 0);
	CHECK(db_generation(db) > g2);
	db_close(db);
}

int main(void)
{
	CHECK_RUN(test_hit_and_miss);
	CHECK_RUN(test_threads);
	CHECK_RUN(test_generation_moves_with_writes);
	return check_finish();
}
