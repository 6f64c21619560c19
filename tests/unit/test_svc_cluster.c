/* tests/unit/test_svc_cluster.c - service/cluster_slurm.c's reading of
 * Slurm's output: hostlists, node states with their flags, time limits;
 * and the local executor's views through the hooks against a real db. The
 * Slurm views themselves run against a real cluster in
 * tests/integration/test_admin_api.py. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "service/cluster.h"
#include "service/slurm_name.h"

static char *joined(json_t *names)
{
	static char out[4096];
	size_t n = 0, i;
	json_t *v;
	out[0] = '\0';
	json_array_foreach(names, i, v)
		n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", i ? " " : "",
		                      json_string_value(v));
	return out;
}

static void test_hostlist(void)
{
	static const struct {
		const char *list, *names;
	} ok[] = {
		{ "vm", "vm" },
		{ "n1,n2", "n1 n2" },
		{ "n[1-3]", "n1 n2 n3" },
		{ "n[01-03,7],gpu1", "n01 n02 n03 n7 gpu1" },
		{ "n[8-10]", "n8 n9 n10" },
		{ "n[098-101]", "n098 n099 n100 n101" },
		{ "rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2" },
		{ "a[1]b", "a1b" },
		{ "node-1.example", "node-1.example" },
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		json_t *names = svc_hostlist_expand(ok[i].list, 1000);
		CHECK_MSG(names != NULL, "%s", ok[i].list);
		if (names)
			CHECK_STR_EQ(joined(names), ok[i].names);
		json_decref(names);
	}
	static const char *const bad[] = {
		"", "n[", "n]", "n[1-", "n[3-1]", "n[a-b]", "n[[1]]", "n1,", ",n1", "n[]", "n[1,]",
		"n[1-100000000]",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *names = svc_hostlist_expand(bad[i], 1000);
		CHECK_MSG(names == NULL, "\"%s\" expanded to %s", bad[i], names ? joined(names) : "");
		json_decref(names);
	}
	/* the cap */
	json_t *names = svc_hostlist_expand("n[1-10]", 10);
	CHECK(names != NULL && json_array_size(names) == 10);
	json_decref(names);
	CHECK(svc_hostlist_expand("n[1-11]", 10) == NULL);
	CHECK(svc_hostlist_expand(NULL, 10) == NULL);
}

static void test_node_state(void)
{
	static const struct {
		const char *slurm, *state;
		int responding;
	} cases[] = {
		{ "idle", "idle", 1 },        { "idle*", "idle", 0 },
		{ "allocated", "alloc", 1 },  { "drained", "drain", 1 },
		{ "draining", "draining", 1 }, { "mixed~", "mixed", 1 },
		{ "down*", "down", 0 },       { "DOWN", "down", 1 },
		{ "completing", "completing", 1 }, { "", "unknown", 1 },
		{ "idle#", "idle", 1 },       { "drained*$", "drain", 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char out[32];
		int responding = -1;
		svc_node_state(cases[i].slurm, out, sizeof out, &responding);
		CHECK_STR_EQ(out, cases[i].state);
		CHECK_MSG(responding == cases[i].responding, "%s: responding %d", cases[i].slurm,
		          responding);
	}
}

static void test_time_limit(void)
{
	static const struct {
		const char *s;
		long secs;
	} cases[] = {
		{ "30:00", 1800 }, { "1:00:00", 3600 }, { "2-00:00:00", 172800 }, { "1-12", 129600 },
		{ "1-02:03", 93780 }, { "45", 2700 }, { "0:30", 30 }, { "infinite", -1 },
		{ "UNLIMITED", -1 }, { "", -2 }, { "abc", -2 }, { "1:2:3:4", -2 }, { "-5", -2 },
		{ "1-", -2 }, { "1:", -2 }, { "1::2", -2 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		CHECK_MSG(svc_slurm_time_s(cases[i].s) == cases[i].secs, "\"%s\": %ld, want %ld",
		          cases[i].s, svc_slurm_time_s(cases[i].s), cases[i].secs);
	CHECK_INT_EQ(svc_slurm_time_s(NULL), -2);
}

static int called;

static void done(void *arg)
{
	(void)arg;
	called++;
}

static void test_local_views(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/cluster.db", check_tmpdir("svc_cluster"));
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "%s", err.text);
	if (!db)
		return;
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	int64_t ids[3];
	for (int i = 0; i < 3; i++) {
		struct db_job_new in = { .owner = "alice", .name = "c", .spec = "{}" };
		struct db_submit s;
		CHECK_INT_EQ(db_jobs_submit(db, &in, &s, NULL), 0);
		ids[i] = s.id;
	}
	struct db_transition t = { .job = ids[0], .from = DB_STATE_PENDING, .to = DB_STATE_QUEUED,
	                           .by = "executor" };
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);
	t.from = DB_STATE_QUEUED;
	t.to = DB_STATE_RUNNING;
	CHECK_INT_EQ(db_jobs_transition(db, &t, NULL, NULL), 0);

	char e[256];
	CHECK(svc_cluster_new(db, "nope", 4, 10, NULL, e, sizeof e) == NULL);
	CHECK(strstr(e, "local or slurm") != NULL);
	CHECK(svc_cluster_new(db, "slurm", 4, 10, "short", e, sizeof e) == NULL);
	CHECK(strstr(e, "instance id") != NULL);
	struct svc_cluster *c = svc_cluster_new(db, "local", 4, 10, NULL, e, sizeof e);
	CHECK_MSG(c != NULL, "%s", e);
	if (!c) {
		db_close(db);
		return;
	}
	const struct api_admin_hooks *h = svc_cluster_hooks(c);
	CHECK_STR_EQ(h->executor, "local");

	struct api_admin_call q = { .op = API_ADMIN_QUEUES, .by = "root" };
	called = 0;
	h->view(h->arg, &q, done, NULL);
	CHECK_INT_EQ(called, 1);                 /* answered at once */
	CHECK_INT_EQ(q.status, 200);
	json_t *body = q.body ? json_loads(q.body, 0, NULL) : NULL;
	CHECK(body != NULL);
	json_t *queue = json_array_get(json_object_get(body, "queues"), 0);
	CHECK_STR_EQ(json_string_value(json_object_get(body, "executor")), "local");
	CHECK(json_is_false(json_object_get(body, "stale")));
	CHECK_STR_EQ(json_string_value(json_object_get(queue, "name")), "local");
	json_t *jobs = json_object_get(queue, "jobs"), *cpus = json_object_get(queue, "cpus");
	CHECK_INT_EQ(json_integer_value(json_object_get(jobs, "running")), 1);
	CHECK_INT_EQ(json_integer_value(json_object_get(jobs, "pending")), 2);
	CHECK_INT_EQ(json_integer_value(json_object_get(cpus, "total")), 4);
	CHECK_INT_EQ(json_integer_value(json_object_get(cpus, "alloc")), 1);
	CHECK_INT_EQ(json_integer_value(json_object_get(cpus, "idle")), 3);
	json_decref(body);
	free(q.body);

	struct api_admin_call n = { .op = API_ADMIN_NODES, .by = "root" };
	h->view(h->arg, &n, done, NULL);
	CHECK_INT_EQ(n.status, 200);
	body = n.body ? json_loads(n.body, 0, NULL) : NULL;
	json_t *node = json_array_get(json_object_get(body, "nodes"), 0);
	char host[256] = "";
	gethostname(host, sizeof host - 1);
	CHECK_STR_EQ(json_string_value(json_object_get(node, "name")), host);
	CHECK_STR_EQ(json_string_value(json_object_get(node, "state")), "mixed");
	CHECK(json_is_null(json_object_get(node, "reason")));
	json_decref(body);
	free(n.body);

	/* no Slurm: node and job calls are refused at once */
	struct api_admin_call d = { .op = API_ADMIN_DRAIN, .by = "root", .node = "vm",
	                            .reason = "x" };
	h->node(h->arg, &d, done, NULL);
	CHECK_INT_EQ(d.status, 409);
	CHECK(strstr(d.message, "local") != NULL);
	struct api_admin_call j = { .op = API_ADMIN_HOLD, .by = "root", .slurm_job_id = "12" };
	h->job(h->arg, &j, done, NULL);
	CHECK_INT_EQ(j.status, 409);
	CHECK_INT_EQ(called, 4);
	svc_cluster_free(c);
	svc_cluster_free(NULL);
	db_close(db);
}

/* The admin job ops act on a Slurm id only while scontrol names it the
 * larch job's: name, user, and for an array task the task. */
static void test_job_is(void)
{
	const char *inst = "0123456789abcdef";
	char name[SLURM_NAME_MAX], arr[SLURM_NAME_MAX], state[32];
	slurm_job_name(inst, 5, 0, name, sizeof name);
	CHECK_STR_EQ(name, "larch-0123456789abcdef-j-000005");
	slurm_job_name(inst, 41, 7, arr, sizeof arr);
	CHECK_STR_EQ(arr, "larch-0123456789abcdef-s-000007");
	char prefix[SLURM_NAME_MAX];
	slurm_name_prefix(inst, 1, prefix, sizeof prefix);
	CHECK(strncmp(arr, prefix, strlen(prefix)) == 0);

	const char *ours = "JobId=12 JobName=larch-0123456789abcdef-j-000005 UserId=root(0) "
	                   "GroupId=root(0) Priority=1 JobState=PENDING Reason=None\n";
	CHECK_INT_EQ(svc_slurm_job_is(ours, name, "root", -1, state, sizeof state), 1);
	CHECK_STR_EQ(state, "PENDING");
	/* the id given to another job: another name, another user */
	CHECK_INT_EQ(svc_slurm_job_is("JobId=12 JobName=sleep UserId=root(0) JobState=RUNNING\n",
	                              name, "root", -1, state, sizeof state), 0);
	CHECK_STR_EQ(state, "");
	CHECK_INT_EQ(svc_slurm_job_is(ours, name, "alice", -1, state, sizeof state), 0);
	/* another larchd's job 5, a job of this name by hand with a prefix */
	CHECK_INT_EQ(svc_slurm_job_is("JobId=12 JobName=larch-fedcba9876543210-j-000005 "
	                              "UserId=root(0) JobState=PENDING", name, "root", -1, state,
	                              sizeof state), 0);
	CHECK_INT_EQ(svc_slurm_job_is("JobId=12 JobName=xlarch-0123456789abcdef-j-000005 "
	                              "UserId=root(0) JobState=PENDING", name, "root", -1, state,
	                              sizeof state), 0);
	/* a key's value never stands for another key ("OldJobName=") */
	CHECK_INT_EQ(svc_slurm_job_is("JobId=12 OldJobName=larch-0123456789abcdef-j-000005 "
	                              "JobName=x UserId=root(0) JobState=PENDING", name, "root", -1,
	                              state, sizeof state), 0);
	/* array tasks: the array's name, and the task when scontrol names one */
	const char *task = "JobId=30 ArrayJobId=27 ArrayTaskId=3 JobName=larch-0123456789abcdef-"
	                   "s-000007 UserId=alice(1001) JobState=RUNNING";
	CHECK_INT_EQ(svc_slurm_job_is(task, arr, "alice", 3, state, sizeof state), 1);
	CHECK_STR_EQ(state, "RUNNING");
	CHECK_INT_EQ(svc_slurm_job_is(task, arr, "alice", 4, state, sizeof state), 0);
	CHECK_INT_EQ(svc_slurm_job_is(task, arr, "alice", -1, state, sizeof state), 0);
	const char *meta = "JobId=27 ArrayJobId=27 ArrayTaskId=3-6%2 JobName=larch-0123456789abcdef-"
	                   "s-000007 UserId=alice(1001) JobState=PENDING";
	CHECK_INT_EQ(svc_slurm_job_is(meta, arr, "alice", 4, state, sizeof state), 1);
	/* a plain job where an array task was recorded, and the reverse */
	CHECK_INT_EQ(svc_slurm_job_is("JobId=27 JobName=larch-0123456789abcdef-s-000007 "
	                              "UserId=alice(1001) JobState=PENDING", arr, "alice", 4, state,
	                              sizeof state), 0);
	/* nothing to go by */
	CHECK_INT_EQ(svc_slurm_job_is("", name, "root", -1, state, sizeof state), 0);
	CHECK_INT_EQ(svc_slurm_job_is(ours, "", "root", -1, state, sizeof state), 0);
	CHECK_INT_EQ(svc_slurm_job_is(NULL, name, "root", -1, state, sizeof state), 0);
	CHECK_INT_EQ(svc_slurm_job_is("JobName=larch-0123456789abcdef-j-000005 UserId=root(0)",
	                              name, "root", -1, state, sizeof state), 0);

	/* the instance id: made once, read back the same */
	const char *dir = check_tmpdir("svc_cluster_instance");
	char a[SLURM_INSTANCE_LEN + 1], b[SLURM_INSTANCE_LEN + 1], err[256];
	CHECK_INT_EQ(slurm_instance_id(dir, a, err, sizeof err), 0);
	CHECK_INT_EQ((int)strlen(a), SLURM_INSTANCE_LEN);
	CHECK_INT_EQ(slurm_instance_id(dir, b, err, sizeof err), 0);
	CHECK_STR_EQ(a, b);
	char path[256];
	snprintf(path, sizeof path, "%s/instance-id", dir);
	unlink(path);
}

int main(void)
{
	CHECK_RUN(test_job_is);
	CHECK_RUN(test_hostlist);
	CHECK_RUN(test_node_state);
	CHECK_RUN(test_time_limit);
	CHECK_RUN(test_local_views);
	return check_finish();
}
