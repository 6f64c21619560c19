/* tests/unit/test_svc_runner.c - service/runner.c and runner_events.c with a
 * real SQLite database in a scratch directory and the real local executor
 * running the real larch-train (LARCH_TEST_TRAINER, set by ctest) on a tiny
 * GPT over a small text file: PENDING -> QUEUED -> RUNNING -> COMPLETED with
 * its events and job directory, a job that fails, cancels (pending, queued,
 * running), the bound on jobs at once, the import of metrics the trainer
 * could not post, and adoption by a new runner of the jobs an old one left
 * (running, ended, never launched): each ends recorded once, none starts
 * twice. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "db/checkpoints.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "db/tokens.h"
#include "service/executor.h"
#include "service/log.h"
#include "service/runner.h"

static const char *trainer;
static char root[2048];

/* ---- fixtures ------------------------------------------------------------ */

struct fix {
	char state[2600];
	struct db *db;
	struct executor *ex;
	struct svc_runner *r;
};

static void sleep_ms(int ms)
{
	struct timespec d = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&d, NULL);
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct executor *new_executor(int max_running, const char *server_url)
{
	struct exec_local_config cfg = { .trainer_path = trainer, .server_url = server_url,
	                                 .max_running = max_running, .grace_s = 10,
	                                 .threads_per_job = 1, .report_flush_s = 1 };
	char err[256];
	struct executor *ex = exec_local_new(&cfg, err, sizeof err);
	CHECK_MSG(ex != NULL, "exec_local_new: %s", err);
	return ex;
}

/* A runner on the fixture's db and state dir with a new executor; started
 * when start is set. */
static void runner_up(struct fix *f, int max_running, int queue_max, const char *server_url,
                      int start)
{
	char err[512];
	struct svc_runner_config cfg = { .db = f->db, .state_dir = f->state, .poll_ms = 20,
	                                 .queue_max = queue_max };
	f->r = svc_runner_new(&cfg, err, sizeof err);
	CHECK_MSG(f->r != NULL, "svc_runner_new: %s", err);
	f->ex = new_executor(max_running, server_url);
	if (start)
		CHECK_MSG(svc_runner_start(f->r, f->ex, err, sizeof err) == 0, "start: %s", err);
}

static void runner_down(struct fix *f)
{
	svc_runner_free(f->r);
	exec_free(f->ex);
	f->r = NULL;
	f->ex = NULL;
}

static void fix_open(struct fix *f, const char *name)
{
	memset(f, 0, sizeof *f);
	snprintf(f->state, sizeof f->state, "%s/%s", root, name);
	CHECK(mkdir(f->state, 0700) == 0 || errno == EEXIST);
	char path[2700];
	snprintf(path, sizeof path, "%s/larch.db", f->state);
	struct db_err err = { 0 };
	f->db = db_open(path, NULL, &err);
	CHECK_MSG(f->db != NULL, "db_open %s: %s", path, err.text);
	CHECK_INT_EQ(db_users_ensure(f->db, "alice", DB_ROLE_USER, NULL), 0);
}

static void fix_close(struct fix *f)
{
	runner_down(f);
	CHECK_INT_EQ(db_close(f->db), 0);
	while (waitpid(-1, NULL, WNOHANG) > 0)   /* children a freed executor left */
		;
}

/* The spec of a tiny GPT over root/corpus.txt (or data_path). */
static void spec_text(char *out, size_t len, long steps, const char *data_path)
{
	char corpus[2100];
	snprintf(corpus, sizeof corpus, "%s/corpus.txt", root);
	snprintf(out, len,
	         "{\"name\": \"runner-test\", \"model\": {\"type\": \"gpt\", \"layers\": 1, "
	         "\"heads\": 2, \"dim\": 32, \"seq\": 16}, \"data\": {\"format\": \"text\", "
	         "\"path\": \"%s\"}, \"batch\": {\"global\": 8}, \"optimizer\": {\"type\": "
	         "\"adamw\", \"lr\": 0.001}, \"steps\": %ld, \"log_every\": 1}",
	         data_path ? data_path : corpus, steps);
}

static int64_t submit(struct fix *f, long steps, const char *data_path)
{
	char spec[4096];
	spec_text(spec, sizeof spec, steps, data_path);
	struct db_job_new job = { .owner = "alice", .name = "runner-test", .spec = spec };
	struct db_submit out = { 0 };
	struct db_err err = { 0 };
	CHECK_MSG(db_jobs_submit(f->db, &job, &out, &err) == 0, "submit: %s", err.text);
	return out.id;
}

static enum db_state state_of(struct fix *f, int64_t id)
{
	struct db_job job = { 0 };
	struct db_err err = { 0 };
	if (db_jobs_get(f->db, id, NULL, &job, &err) != 0)
		return DB_STATE_COUNT;
	enum db_state s = job.state;
	db_job_release(&job);
	return s;
}

/* Polls the database until job id is in a state accepted by want (a final
 * one when want is DB_STATE_ANY) or timeout_s passes; returns the state. */
static enum db_state wait_state(struct fix *f, int64_t id, enum db_state want, double timeout_s)
{
	double end = mono_s() + timeout_s;
	enum db_state s;
	for (;;) {
		s = state_of(f, id);
		if (want == DB_STATE_ANY ? db_state_final(s) : s == want)
			return s;
		if (mono_s() > end)
			return s;
		sleep_ms(20);
	}
}

static void job_dir(struct fix *f, int64_t id, char *out, size_t len)
{
	snprintf(out, len, "%s/jobs/j-%06lld", f->state, (long long)id);
}

static int has_file(const char *dir, const char *name)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* The whole of a small file (malloc'd, NUL-terminated), or NULL. */
static char *slurp(const char *dir, const char *name)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	size_t got;
	while ((got = fread(buf + n, 1, cap - n - 1, fp)) > 0) {
		n += got;
		if (n + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(fp);
	buf[n] = '\0';
	return buf;
}

/* The pid in DIR/launch, or 0. */
static long launch_pid(const char *dir)
{
	char *text = slurp(dir, "launch");
	long pid = text ? strtol(text, NULL, 10) : 0;
	free(text);
	return pid;
}

/* Waits until the job's trainer prints a progress line (past its start-up:
 * a SIGTERM now meets its handler). Returns 1 when it did. */
static int wait_training(const char *dir, double timeout_s)
{
	double end = mono_s() + timeout_s;
	while (mono_s() < end) {
		char *text = slurp(dir, "stdout.log");
		int ok = text && strstr(text, "\nstep ");
		free(text);
		if (ok)
			return 1;
		sleep_ms(20);
	}
	return 0;
}

/* Lines of DIR/metrics.jsonl, and how many name the metric (NULL: any). */
static size_t jsonl_points(const char *dir, const char *name)
{
	char *text = slurp(dir, "metrics.jsonl");
	size_t n = 0;
	for (char *line = text, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
		*nl = '\0';
		json_t *pt = json_loads(line, 0, NULL);
		const char *got = json_string_value(json_object_get(pt, "name"));
		if (got && (!name || strcmp(got, name) == 0))
			n++;
		json_decref(pt);
	}
	free(text);
	return n;
}

/* Points the database has for the job (name NULL: every series). */
static size_t db_points(struct fix *f, int64_t id, const char *name)
{
	const char *names[1] = { name };
	struct db_metric_query q = { .names = name ? names : NULL, .n_names = name ? 1 : 0 };
	struct db_series_list list = { 0 };
	struct db_err err = { 0 };
	if (db_metrics_query(f->db, id, &q, &list, &err) != 0)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < list.n; i++)
		n += list.series[i].n;
	db_series_list_release(&list);
	return n;
}

/* How many events moved job id into state to. */
static int events_into(struct fix *f, int64_t id, enum db_state to)
{
	struct db_event_list ev = { 0 };
	struct db_err err = { 0 };
	if (db_jobs_events(f->db, id, NULL, &ev, &err) != 0)
		return -1;
	int n = 0;
	for (size_t i = 0; i < ev.n; i++)
		if (ev.events[i].to == to && ev.events[i].from != (int)to)
			n++;
	db_event_list_release(&ev);
	return n;
}

/* Every member of want is in got with the same value (objects recursively). */
static int json_contains(json_t *got, json_t *want)
{
	if (!json_is_object(want))
		return json_equal(got, want);
	const char *key;
	json_t *value;
	json_object_foreach(want, key, value)
		if (!json_contains(json_object_get(got, key), value))
			return 0;
	return 1;
}

/* Waits for DIR/launch (the child writes it before it execs the trainer);
 * returns the pid in it, or 0. */
static long wait_launch(const char *dir, double timeout_s)
{
	double end = mono_s() + timeout_s;
	long pid;
	while ((pid = launch_pid(dir)) <= 0 && mono_s() < end)
		sleep_ms(10);
	return pid;
}

/* "http://127.0.0.1:PORT" where nobody listens. */
static void closed_port_url(char *url, size_t len)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(getsockname(s, (struct sockaddr *)&a, &alen) == 0);
	snprintf(url, len, "http://127.0.0.1:%d", ntohs(a.sin_port));
	close(s);                               /* nobody listens there now */
}

/* VAR=value from the environment of process pid, or "" (static storage). */
static const char *proc_env(long pid, const char *var)
{
	static char value[512];
	char path[64], buf[65536];
	snprintf(path, sizeof path, "/proc/%ld/environ", pid);
	value[0] = '\0';
	FILE *fp = fopen(path, "r");
	if (!fp)
		return value;
	size_t n = fread(buf, 1, sizeof buf - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	size_t len = strlen(var);
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
		if (strncmp(buf + i, var, len) == 0 && buf[i + len] == '=')
			snprintf(value, sizeof value, "%s", buf + i + len + 1);
	return value;
}

/* The parent pid of process pid from /proc, or -1. */
static long proc_ppid(long pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	char *close_paren = strrchr(buf, ')');
	char st;
	long ppid;
	return close_paren && sscanf(close_paren + 1, " %c %ld", &st, &ppid) == 2 ? ppid : -1;
}

/* The API's cancel hook, as POST /v1/jobs/{id}/cancel calls it. */
static int cancel(struct fix *f, int64_t id, const char *by, char *err, size_t errlen)
{
	const struct api_jobs_hooks *h = svc_runner_hooks(f->r);
	return h->cancel(h->arg, id, by, err, errlen);
}

/* ---- cases --------------------------------------------------------------- */

static void test_job_completes(void)
{
	struct fix f;
	fix_open(&f, "complete");
	runner_up(&f, 2, 0, NULL, 1);
	int64_t id = submit(&f, 12, NULL);
	const struct api_jobs_hooks *hooks = svc_runner_hooks(f.r);
	hooks->submitted(hooks->arg, id);
	enum db_state s = wait_state(&f, id, DB_STATE_ANY, 60);
	CHECK_MSG(s == DB_STATE_COMPLETED, "state %s", db_state_name(s) ? db_state_name(s) : "?");

	struct db_job job = { 0 };
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_get(f.db, id, NULL, &job, &err), 0);
	CHECK(job.has_exit_code && job.exit_code == 0);
	CHECK(job.start_ms > 0 && job.end_ms >= job.start_ms && job.start_ms >= job.submit_ms);
	CHECK_INT_EQ(job.progress_step, 12);
	CHECK_INT_EQ(job.progress_total, 12);
	CHECK(job.last_loss == job.last_loss);          /* not NaN */

	/* every change is an event, in order, by the executor */
	struct db_event_list ev = { 0 };
	CHECK_INT_EQ(db_jobs_events(f.db, id, NULL, &ev, &err), 0);
	static const int want[][2] = { { -1, DB_STATE_PENDING },
	                               { DB_STATE_PENDING, DB_STATE_QUEUED },
	                               { DB_STATE_QUEUED, DB_STATE_RUNNING },
	                               { DB_STATE_RUNNING, DB_STATE_COMPLETED } };
	CHECK_INT_EQ(ev.n, 4);
	for (size_t i = 0; i < ev.n && i < 4; i++) {
		CHECK_MSG(ev.events[i].from == want[i][0] && (int)ev.events[i].to == want[i][1],
		          "event %zu: %d -> %d", i, ev.events[i].from, (int)ev.events[i].to);
		CHECK(i == 0 || strcmp(ev.events[i].by, "executor") == 0);
		CHECK(i == 0 || ev.events[i].time_ms >= ev.events[i - 1].time_ms);
	}
	char dir[4096];
	job_dir(&f, id, dir, sizeof dir);
	long pid = wait_launch(dir, 10);
	char pid_reason[64];
	snprintf(pid_reason, sizeof pid_reason, "pid %ld", pid);
	CHECK_MSG(ev.n > 2 && ev.events[2].reason && strcmp(ev.events[2].reason, pid_reason) == 0,
	          "RUNNING reason %s, launch pid %ld", ev.n > 2 && ev.events[2].reason ?
	          ev.events[2].reason : "(none)", pid);
	db_event_list_release(&ev);

	/* the job directory: 0750, the stored spec, logs, metrics, result,
	 * checkpoints, the launch record */
	struct stat sb;
	CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 0777) == 0750);
	/* spec.json: the stored spec, which the trainer rewrote with its defaults */
	char *spec = slurp(dir, "spec.json");
	json_t *on_disk = spec ? json_loads(spec, 0, NULL) : NULL, *stored = json_loads(job.spec, 0, NULL);
	CHECK(on_disk && stored && json_contains(on_disk, stored));
	json_decref(on_disk);
	json_decref(stored);
	free(spec);
	db_job_release(&job);
	CHECK(has_file(dir, "stdout.log") && has_file(dir, "stderr.log"));
	CHECK(has_file(dir, "metrics.jsonl") && has_file(dir, "result.json"));
	CHECK(has_file(dir, "checkpoints") && pid > 1);
	char *out = slurp(dir, "stdout.log");
	CHECK(out && strstr(out, "\nstep "));
	free(out);

	/* the database has every point of metrics.jsonl (nothing posted: imported) */
	size_t lines = jsonl_points(dir, NULL), losses = jsonl_points(dir, "train/loss");
	CHECK_INT_EQ(losses, 12);
	CHECK_INT_EQ(db_points(&f, id, NULL), lines);
	CHECK_INT_EQ(db_points(&f, id, "train/loss"), losses);
	struct db_checkpoint_list ck = { 0 };
	CHECK_INT_EQ(db_checkpoints_list(f.db, id, NULL, &ck, &err), 0);
	CHECK_MSG(ck.n >= 1 && ck.items[ck.n - 1].step == 12, "%zu checkpoints", ck.n);
	db_checkpoint_list_release(&ck);

	/* the job's token was made for the job and revoked at its end */
	struct db_token_list toks = { 0 };
	CHECK_INT_EQ(db_tokens_list(f.db, NULL, &toks, &err), 0);
	int job_tokens = 0;
	for (size_t i = 0; i < toks.n; i++)
		if (toks.items[i].role == DB_ROLE_JOB && toks.items[i].job == id) {
			job_tokens++;
			CHECK(toks.items[i].revoked_ms > 0);
			CHECK_STR_EQ(toks.items[i].user, "alice");
		}
	CHECK_INT_EQ(job_tokens, 1);
	db_token_list_release(&toks);
	fix_close(&f);
}

static void test_job_fails(void)
{
	struct fix f;
	fix_open(&f, "fail");
	runner_up(&f, 2, 0, NULL, 1);
	char missing[2200];
	snprintf(missing, sizeof missing, "%s/no-such-corpus.txt", root);
	int64_t id = submit(&f, 5, missing);
	svc_runner_sync(f.r, 2000);
	enum db_state s = wait_state(&f, id, DB_STATE_ANY, 60);
	CHECK_MSG(s == DB_STATE_FAILED, "state %s", db_state_name(s) ? db_state_name(s) : "?");
	struct db_job job = { 0 };
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_get(f.db, id, NULL, &job, &err), 0);
	CHECK(job.has_exit_code && job.exit_code != 0);
	/* the reason names the exit and what the trainer said */
	CHECK_MSG(job.reason && strncmp(job.reason, "exit ", 5) == 0 &&
	          strstr(job.reason, "no-such-corpus"), "reason %s", job.reason ? job.reason : "(none)");
	db_job_release(&job);
	CHECK_INT_EQ(events_into(&f, id, DB_STATE_RUNNING), 1);
	CHECK_INT_EQ(events_into(&f, id, DB_STATE_FAILED), 1);
	fix_close(&f);
}

static void test_cancel(void)
{
	struct fix f;
	fix_open(&f, "cancel");
	char err[256];
	char url[64];
	closed_port_url(url, sizeof url);
	/* before the runner starts: a PENDING job is CANCELLED at once */
	runner_up(&f, 1, 0, url, 0);
	int64_t pending = submit(&f, 5, NULL);
	CHECK_INT_EQ(cancel(&f, pending, "alice", err, sizeof err), 0);
	CHECK_INT_EQ(state_of(&f, pending), DB_STATE_CANCELLED);
	CHECK_INT_EQ(cancel(&f, pending, "alice", err, sizeof err), 1);  /* final */

	/* one slot: a long job runs, the next waits QUEUED */
	int64_t run = submit(&f, 1000000, NULL), queued = submit(&f, 5, NULL);
	CHECK_MSG(svc_runner_start(f.r, f.ex, err, sizeof err) == 0, "start: %s", err);
	CHECK_INT_EQ(wait_state(&f, run, DB_STATE_RUNNING, 30), DB_STATE_RUNNING);
	CHECK_INT_EQ(wait_state(&f, queued, DB_STATE_QUEUED, 30), DB_STATE_QUEUED);
	char qdir[4096], rdir[4096];
	job_dir(&f, queued, qdir, sizeof qdir);
	job_dir(&f, run, rdir, sizeof rdir);

	CHECK_INT_EQ(cancel(&f, queued, "bob", err, sizeof err), 0);
	CHECK_INT_EQ(wait_state(&f, queued, DB_STATE_ANY, 10), DB_STATE_CANCELLED);
	CHECK(!has_file(qdir, "launch"));                 /* never started */
	CHECK_INT_EQ(events_into(&f, queued, DB_STATE_RUNNING), 0);

	CHECK(wait_training(rdir, 30));
	/* the trainer itself (no shell between us), leading its own process
	 * group, with its reporting environment and larchd's other variables */
	long rpid = wait_launch(rdir, 10);
	CHECK(rpid > 1 && proc_ppid(rpid) == (long)getpid());
	CHECK(getpgid((pid_t)rpid) == (pid_t)rpid);
	char link[64], exe[4200], want[4200];
	snprintf(link, sizeof link, "/proc/%ld/exe", rpid);
	ssize_t n = readlink(link, exe, sizeof exe - 1);
	exe[n > 0 ? n : 0] = '\0';
	CHECK(realpath(trainer, want) && strcmp(exe, want) == 0);
	CHECK_STR_EQ(proc_env(rpid, "LARCH_SERVER_URL"), url);
	char id_text[32];
	snprintf(id_text, sizeof id_text, "j-%06lld", (long long)run);
	CHECK_STR_EQ(proc_env(rpid, "LARCH_JOB_ID"), id_text);
	CHECK_STR_EQ(proc_env(rpid, "LARCH_REPORT_FLUSH_S"), "1");
	CHECK_STR_EQ(proc_env(rpid, "LARCH_DATASET_ROOT"), "/usr/share/datasets");
	char token[DB_TOKEN_LEN + 1];
	snprintf(token, sizeof token, "%s", proc_env(rpid, "LARCH_JOB_TOKEN"));
	struct db_token who;
	struct db_err terr = { 0 };
	CHECK_MSG(db_tokens_lookup(f.db, token, &who, &terr) == 0, "job token: %s", terr.text);
	CHECK(who.role == DB_ROLE_JOB && who.job == run);   /* this job's, and only a job's */
	CHECK_INT_EQ(cancel(&f, run, "alice", err, sizeof err), 0);
	CHECK_INT_EQ(wait_state(&f, run, DB_STATE_ANY, 30), DB_STATE_CANCELLED);
	struct db_job job = { 0 };
	struct db_err dberr = { 0 };
	CHECK_INT_EQ(db_jobs_get(f.db, run, NULL, &job, &dberr), 0);
	CHECK_MSG(job.reason && strcmp(job.reason, "cancelled by alice") == 0, "reason %s",
	          job.reason ? job.reason : "(none)");
	CHECK(job.has_exit_code && job.exit_code == 3);   /* SIGTERM: checkpoint, exit 3 */
	db_job_release(&job);
	struct db_event_list ev = { 0 };
	CHECK_INT_EQ(db_jobs_events(f.db, run, NULL, &ev, &dberr), 0);
	CHECK(ev.n > 0 && ev.events[ev.n - 1].to == DB_STATE_CANCELLED &&
	      strcmp(ev.events[ev.n - 1].by, "alice") == 0);
	db_event_list_release(&ev);
	/* the trainer checkpointed on SIGTERM, and the checkpoint was recorded */
	struct db_checkpoint_list ck = { 0 };
	CHECK_INT_EQ(db_checkpoints_list(f.db, run, NULL, &ck, &dberr), 0);
	CHECK_MSG(ck.n >= 1, "%zu checkpoints", ck.n);
	db_checkpoint_list_release(&ck);
	long pid = launch_pid(rdir);
	CHECK(pid > 1 && (kill((pid_t)-pid, 0) != 0 && errno == ESRCH));   /* the group is gone */
	fix_close(&f);
}

/* At most max_running jobs run at once, and at most queue_max are with the
 * executor: sampled while they run, and from the start and end times. */
static void test_concurrency_bound(void)
{
	enum { N = 6, MAX_RUNNING = 2, QUEUE_MAX = 3 };
	struct fix f;
	fix_open(&f, "bound");
	runner_up(&f, MAX_RUNNING, QUEUE_MAX, NULL, 1);
	int64_t ids[N];
	for (int i = 0; i < N; i++)
		ids[i] = submit(&f, 40, NULL);
	svc_runner_sync(f.r, 2000);
	int max_running = 0, max_held = 0, done = 0;
	double end = mono_s() + 120;
	while (!done && mono_s() < end) {
		int64_t counts[DB_STATE_COUNT];
		struct db_err err = { 0 };
		CHECK_INT_EQ(db_jobs_count_by_state(f.db, counts, &err), 0);
		int running = (int)counts[DB_STATE_RUNNING];
		int held = running + (int)counts[DB_STATE_QUEUED];
		max_running = running > max_running ? running : max_running;
		max_held = held > max_held ? held : max_held;
		done = counts[DB_STATE_COMPLETED] + counts[DB_STATE_FAILED] == N;
		sleep_ms(10);
	}
	CHECK_MSG(done, "not all jobs ended");
	CHECK_MSG(max_running <= MAX_RUNNING, "%d running at once", max_running);
	CHECK_MSG(max_held <= QUEUE_MAX, "%d with the executor at once", max_held);

	/* from the recorded times: never more than MAX_RUNNING overlap */
	int64_t start[N], stop[N];
	for (int i = 0; i < N; i++) {
		struct db_job job = { 0 };
		struct db_err err = { 0 };
		CHECK_INT_EQ(db_jobs_get(f.db, ids[i], NULL, &job, &err), 0);
		CHECK_MSG(job.state == DB_STATE_COMPLETED, "job %d: %s (%s)", i,
		          db_state_name(job.state), job.reason ? job.reason : "");
		start[i] = job.start_ms;
		stop[i] = job.end_ms;
		db_job_release(&job);
	}
	int overlap_max = 0;
	for (int i = 0; i < N; i++) {
		int overlap = 0;            /* jobs running at the instant job i started */
		for (int j = 0; j < N; j++)
			if (start[j] <= start[i] && stop[j] > start[i])
				overlap++;
		overlap_max = overlap > overlap_max ? overlap : overlap_max;
	}
	CHECK_MSG(overlap_max <= MAX_RUNNING, "%d jobs overlapped", overlap_max);
	/* the oldest jobs started first (FIFO) */
	for (int i = 1; i < N; i++)
		CHECK(start[i] >= start[i - 1]);
	fix_close(&f);
}

/* larchd is unreachable (a closed port): the trainer keeps metrics.jsonl
 * and the runner imports every point when the job ends. */
static void test_import_when_unreachable(void)
{
	char url[64];
	closed_port_url(url, sizeof url);
	struct fix f;
	fix_open(&f, "import");
	runner_up(&f, 1, 0, url, 1);
	int64_t id = submit(&f, 20, NULL);
	svc_runner_sync(f.r, 2000);
	CHECK_INT_EQ(wait_state(&f, id, DB_STATE_ANY, 60), DB_STATE_COMPLETED);
	char dir[4096];
	job_dir(&f, id, dir, sizeof dir);
	char *err = slurp(dir, "stderr.log");
	CHECK_MSG(err && strstr(err, url + 7), "the trainer did not try %s: %s", url,
	          err ? err : "(no stderr.log)");
	free(err);
	size_t lines = jsonl_points(dir, NULL);
	CHECK_INT_EQ(jsonl_points(dir, "train/loss"), 20);
	CHECK(lines > 20);
	CHECK_INT_EQ(db_points(&f, id, NULL), lines);
	CHECK_INT_EQ(db_points(&f, id, "train/loss"), 20);
	fix_close(&f);
}

/* A runner stops (larchd restarts) with one job running, one that ends
 * while no runner watches, one never launched, and one PENDING whose
 * directory was made before the stop: the next runner records each end
 * once, and starts none twice. */
static void test_adoption(void)
{
	struct fix f;
	fix_open(&f, "adopt");
	runner_up(&f, 2, 0, NULL, 1);
	int64_t running = submit(&f, 2000, NULL), ends = submit(&f, 20, NULL);
	int64_t never = submit(&f, 8, NULL);
	svc_runner_sync(f.r, 2000);
	CHECK_INT_EQ(wait_state(&f, running, DB_STATE_RUNNING, 30), DB_STATE_RUNNING);
	CHECK_INT_EQ(wait_state(&f, ends, DB_STATE_RUNNING, 30), DB_STATE_RUNNING);
	CHECK_INT_EQ(state_of(&f, never), DB_STATE_QUEUED);
	char rdir[4096], edir[4096], ndir[4096], pdir[4096];
	job_dir(&f, running, rdir, sizeof rdir);
	job_dir(&f, ends, edir, sizeof edir);
	job_dir(&f, never, ndir, sizeof ndir);
	long rpid = wait_launch(rdir, 10), epid = wait_launch(edir, 10);
	CHECK(rpid > 1 && epid > 1 && !has_file(ndir, "launch"));
	runner_down(&f);                         /* "larchd stops": the jobs run on */

	/* the short job ends while nobody watches (its zombie stays ours) */
	double end = mono_s() + 60;
	while (!has_file(edir, "result.json") && mono_s() < end)
		sleep_ms(20);
	CHECK(has_file(edir, "result.json"));
	CHECK(!has_file(rdir, "result.json"));   /* the long one still runs */
	/* a PENDING job whose directory was made just before the stop */
	int64_t pending = submit(&f, 8, NULL);
	job_dir(&f, pending, pdir, sizeof pdir);
	CHECK(mkdir(pdir, 0750) == 0);

	runner_up(&f, 2, 0, NULL, 1);
	CHECK_INT_EQ(wait_state(&f, ends, DB_STATE_ANY, 30), DB_STATE_COMPLETED);
	CHECK_INT_EQ(wait_state(&f, never, DB_STATE_ANY, 60), DB_STATE_COMPLETED);
	CHECK_INT_EQ(wait_state(&f, pending, DB_STATE_ANY, 60), DB_STATE_COMPLETED);
	CHECK_INT_EQ(wait_state(&f, running, DB_STATE_ANY, 120), DB_STATE_COMPLETED);

	/* started once each: one RUNNING event, the same launch record */
	int64_t all[] = { running, ends, never, pending };
	for (int i = 0; i < 4; i++) {
		CHECK_MSG(events_into(&f, all[i], DB_STATE_RUNNING) == 1, "job %lld: %d RUNNING events",
		          (long long)all[i], events_into(&f, all[i], DB_STATE_RUNNING));
		CHECK_INT_EQ(events_into(&f, all[i], DB_STATE_COMPLETED), 1);
		char dir[4096];
		job_dir(&f, all[i], dir, sizeof dir);
		char *out = slurp(dir, "stdout.log");
		int starts = 0;            /* the trainer's first line, once per process */
		for (char *p = out; p && (p = strstr(p, "larch-train")) != NULL; p++)
			starts += p == out || p[-1] == '\n';
		CHECK_MSG(starts == 1, "job %lld: stdout.log shows %d starts:\n%s", (long long)all[i],
		          starts, out ? out : "");
		free(out);
		CHECK_INT_EQ(db_points(&f, all[i], "train/loss"), jsonl_points(dir, "train/loss"));
	}
	CHECK_INT_EQ(launch_pid(rdir), rpid);
	CHECK_INT_EQ(launch_pid(edir), epid);
	CHECK_INT_EQ(db_points(&f, running, "train/loss"), 2000);
	struct db_job job = { 0 };
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_get(f.db, running, NULL, &job, &err), 0);
	CHECK(job.has_exit_code && job.exit_code == 0 && job.progress_step == 2000);
	db_job_release(&job);
	fix_close(&f);
}

/* A job whose directory vanished while larchd was down is FAILED at start. */
static void test_lost_directory(void)
{
	struct fix f;
	fix_open(&f, "lost");
	int64_t id = submit(&f, 5, NULL);
	struct db_transition t = { .job = id, .from = DB_STATE_PENDING, .to = DB_STATE_QUEUED,
	                           .by = "executor" };
	struct db_err err = { 0 };
	CHECK_INT_EQ(db_jobs_transition(f.db, &t, NULL, &err), 0);
	runner_up(&f, 1, 0, NULL, 1);
	CHECK_INT_EQ(state_of(&f, id), DB_STATE_FAILED);
	struct db_job job = { 0 };
	CHECK_INT_EQ(db_jobs_get(f.db, id, NULL, &job, &err), 0);
	CHECK(job.reason && strcmp(job.reason, "job directory lost") == 0);
	db_job_release(&job);
	fix_close(&f);
}

int main(void)
{
	trainer = getenv("LARCH_TEST_TRAINER");
	if (!trainer || access(trainer, X_OK) != 0) {
		fprintf(stderr, "LARCH_TEST_TRAINER is not an executable larch-train: skipping\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	/* larchd's environment: its own reporting variables must not reach a
	 * job, the rest must */
	setenv("LARCH_JOB_TOKEN", "lt_stale", 1);
	setenv("LARCH_SERVER_URL", "http://127.0.0.1:1", 1);
	setenv("LARCH_DATASET_ROOT", "/usr/share/datasets", 1);
	snprintf(root, sizeof root, "%s", check_tmpdir("svc_runner"));
	char corpus[2200];
	snprintf(corpus, sizeof corpus, "%s/corpus.txt", root);
	FILE *f = fopen(corpus, "w");
	for (int i = 0; i < 200; i++)
		fputs("the quick brown fox jumps over the lazy dog. ", f);
	fclose(f);

	CHECK_RUN(test_job_completes);
	CHECK_RUN(test_job_fails);
	CHECK_RUN(test_cancel);
	CHECK_RUN(test_concurrency_bound);
	CHECK_RUN(test_import_when_unreachable);
	CHECK_RUN(test_adoption);
	CHECK_RUN(test_lost_directory);
	return check_finish();
}
