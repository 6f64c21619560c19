/* tests/unit/test_exec_local.c - service/executor_local.c with the real
 * larch-train (LARCH_TEST_TRAINER, set by ctest) on a tiny GPT over a small
 * text file: its own copy of a job, completion, FIFO slots, cancel, time limit, bad spec, and
 * adoption after a restart. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "service/executor.h"

#define MAX_EVENTS 64

static const char *trainer;
static char root[2048];

struct seen {
	struct exec_event ev[MAX_EVENTS];
	int n;
};

static void record(void *ctx, const struct exec_event *ev)
{
	struct seen *s = ctx;
	if (s->n < MAX_EVENTS)
		s->ev[s->n++] = *ev;
}

static const struct exec_event *last_of(const struct seen *s, long long id)
{
	for (int i = s->n - 1; i >= 0; i--)
		if (s->ev[i].id == id)
			return &s->ev[i];
	return NULL;
}

static int is_final(enum exec_state st)
{
	return st != EXEC_QUEUED && st != EXEC_RUNNING;
}

/* Polls every 20 ms until job id reports a final state or timeout_s passes. */
static const struct exec_event *wait_final(struct executor *ex, struct seen *s, long long id,
                                           double timeout_s)
{
	struct timespec d = { 0, 20 * 1000 * 1000 };
	for (double t = 0; t < timeout_s; t += 0.02) {
		exec_poll(ex, record, s);
		const struct exec_event *e = last_of(s, id);
		if (e && is_final(e->state))
			return e;
		nanosleep(&d, NULL);
	}
	return NULL;
}

/* Waits until the job's trainer has printed a progress line: past its
 * start-up, so a SIGTERM now meets its handler (checkpoint, exit 3). */
static void wait_training(const char *dir)
{
	struct timespec d = { 0, 20 * 1000 * 1000 };
	char path[4200], buf[4096];
	snprintf(path, sizeof path, "%s/stdout.log", dir);
	for (int i = 0; i < 1500; i++) {
		FILE *f = fopen(path, "r");
		if (f) {
			size_t n = fread(buf, 1, sizeof buf - 1, f);
			fclose(f);
			buf[n] = '\0';
			if (strstr(buf, "\nstep "))
				return;
		}
		nanosleep(&d, NULL);
	}
}

static void wait_running(struct executor *ex, struct seen *s, long long id)
{
	struct timespec d = { 0, 20 * 1000 * 1000 };
	for (int i = 0; i < 500; i++) {
		exec_poll(ex, record, s);
		const struct exec_event *e = last_of(s, id);
		if (e && e->state == EXEC_RUNNING)
			return;
		nanosleep(&d, NULL);
	}
}

/* A job dir with a spec for a tiny GPT over root/corpus.txt; the caller
 * releases the job (exec_job_release). */
static struct exec_job make_job(long long id, long steps, const char *extra)
{
	struct exec_job job;
	memset(&job, 0, sizeof job);
	job.id = id;
	job.ranks = 1;
	if (asprintf(&job.dir, "%s/j-%06lld", root, id) < 0)
		abort();
	mkdir(job.dir, 0755);
	char path[4200];
	snprintf(path, sizeof path, "%s/spec.json", job.dir);
	FILE *f = fopen(path, "w");
	fprintf(f, "{\"name\": \"exec-test\", \"model\": {\"type\": \"gpt\", \"layers\": 1, \"heads\": 2, "
	        "\"dim\": 32, \"seq\": 16}, \"data\": {\"format\": \"text\", \"path\": \"%s/corpus.txt\"}, "
	        "\"batch\": {\"global\": 8}, \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.001}, "
	        "\"steps\": %ld, \"log_every\": 1, \"checkpoint_every\": 1000000%s}\n",
	        root, steps, extra ? extra : "");
	fclose(f);
	return job;
}

static struct executor *make_executor(int max_running)
{
	struct exec_local_config cfg = { .trainer_path = trainer, .max_running = max_running,
	                                 .grace_s = 10, .threads_per_job = 1 };
	char err[256];
	struct executor *ex = exec_local_new(&cfg, err, sizeof err);
	if (!ex)
		fprintf(stderr, "exec_local_new: %s\n", err);
	return ex;
}

static int file_exists(const char *dir, const char *name)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* exec_job_copy gives the copy paths of its own; exec_job_release frees
 * them and wipes the token. */
static void test_job_copy_owns_paths(void)
{
	struct exec_job job = make_job(13, 3, NULL), copy;
	job.init_path = strdup("/ckpt/step-3.safetensors");
	snprintf(job.token, sizeof job.token, "secret");
	CHECK(exec_job_copy(&copy, &job) == 0);
	CHECK(copy.dir != job.dir && strcmp(copy.dir, job.dir) == 0);
	CHECK(copy.init_path != job.init_path && strcmp(copy.init_path, job.init_path) == 0);
	CHECK(copy.id == 13 && strcmp(copy.token, "secret") == 0);
	exec_job_release(&job);
	CHECK(!job.dir && !job.init_path && job.token[0] == '\0');
	CHECK(strcmp(copy.init_path, "/ckpt/step-3.safetensors") == 0);
	exec_job_release(&copy);
	struct exec_job none = { .id = 14 };    /* no paths: none copied */
	CHECK(exec_job_copy(&copy, &none) == 0 && !copy.dir && !copy.init_path);
	exec_job_release(&copy);
}

static void test_job_completes(void)
{
	struct executor *ex = make_executor(2);
	struct seen s = { 0 };
	struct exec_job job = make_job(1, 3, NULL);
	char err[256], dir[2100];
	snprintf(dir, sizeof dir, "%s", job.dir);
	CHECK(exec_submit(ex, &job, err, sizeof err) == 0);
	CHECK(exec_submit(ex, &job, err, sizeof err) != 0);   /* the same id twice */
	exec_job_release(&job);        /* the executor keeps its own copy; it starts on poll */
	const struct exec_event *e = wait_final(ex, &s, 1, 60);
	CHECK_MSG(e && e->state == EXEC_COMPLETED, "state %s reason %s", e ? exec_state_name(e->state) : "none",
	          e ? e->reason : "");
	CHECK(e && e->exit_code == 0);
	CHECK(s.n >= 2 && s.ev[0].state == EXEC_RUNNING && s.ev[0].pid > 0);
	CHECK(file_exists(dir, "launch") && file_exists(dir, "result.json"));
	CHECK(file_exists(dir, "stdout.log") && file_exists(dir, "stderr.log"));
	CHECK_INT_EQ(exec_count(ex), 0);
	exec_free(ex);
}

static void test_slots_are_fifo(void)
{
	struct executor *ex = make_executor(1);
	struct seen s = { 0 };
	char err[256];
	struct exec_job a = make_job(2, 3, NULL), b = make_job(3, 3, NULL);
	CHECK(exec_submit(ex, &a, err, sizeof err) == 0);
	CHECK(exec_submit(ex, &b, err, sizeof err) == 0);
	exec_poll(ex, record, &s);
	CHECK(last_of(&s, 2) && last_of(&s, 2)->state == EXEC_RUNNING);
	CHECK(!last_of(&s, 3));                                /* waits for the slot */
	CHECK(!file_exists(b.dir, "launch"));
	CHECK(wait_final(ex, &s, 3, 120) && last_of(&s, 3)->state == EXEC_COMPLETED);
	/* b started only after a ended */
	int a_end = -1, b_start = -1;
	for (int i = 0; i < s.n; i++) {
		if (s.ev[i].id == 2 && is_final(s.ev[i].state))
			a_end = i;
		if (s.ev[i].id == 3 && s.ev[i].state == EXEC_RUNNING)
			b_start = i;
	}
	CHECK(a_end >= 0 && b_start > a_end);
	exec_free(ex);
	exec_job_release(&a);
	exec_job_release(&b);
}

static void test_cancel_queued_and_running(void)
{
	struct executor *ex = make_executor(1);
	struct seen s = { 0 };
	char err[256];
	struct exec_job run = make_job(4, 1000000, NULL), queued = make_job(5, 3, NULL);
	CHECK(exec_submit(ex, &run, err, sizeof err) == 0);
	CHECK(exec_submit(ex, &queued, err, sizeof err) == 0);
	wait_running(ex, &s, 4);
	CHECK(exec_cancel(ex, 5, err, sizeof err) == 0);
	exec_poll(ex, record, &s);
	CHECK(last_of(&s, 5) && last_of(&s, 5)->state == EXEC_CANCELLED);
	CHECK(!file_exists(queued.dir, "launch"));
	wait_training(run.dir);
	CHECK(exec_cancel(ex, 4, err, sizeof err) == 0);
	const struct exec_event *e = wait_final(ex, &s, 4, 60);
	CHECK_MSG(e && e->state == EXEC_CANCELLED, "state %s", e ? exec_state_name(e->state) : "none");
	/* the trainer got SIGTERM: it checkpointed and exited 3 */
	CHECK(e && e->exit_code == 3);
	CHECK(exec_cancel(ex, 4, err, sizeof err) != 0);       /* gone */
	exec_free(ex);
	exec_job_release(&run);
	exec_job_release(&queued);
}

static void test_time_limit_and_bad_spec(void)
{
	struct executor *ex = make_executor(2);
	struct seen s = { 0 };
	char err[256];
	struct exec_job slow = make_job(6, 1000000, NULL);
	slow.time_limit_s = 1;
	struct exec_job bad = make_job(7, 3, ", \"bogus\": 1");
	CHECK(exec_submit(ex, &slow, err, sizeof err) == 0);
	CHECK(exec_submit(ex, &bad, err, sizeof err) == 0);
	const struct exec_event *e = wait_final(ex, &s, 7, 30);
	CHECK_MSG(e && e->state == EXEC_FAILED && strstr(e->reason, "exit 2"), "reason %s",
	          e ? e->reason : "none");
	CHECK(e && strstr(e->reason, "unknown field"));
	e = wait_final(ex, &s, 6, 60);
	CHECK_MSG(e && e->state == EXEC_TIMEOUT, "state %s", e ? exec_state_name(e->state) : "none");
	exec_free(ex);
	exec_job_release(&slow);
	exec_job_release(&bad);
}

static void test_adopt_after_restart(void)
{
	char err[256];
	struct seen s = { 0 };
	struct executor *first = make_executor(2);
	struct exec_job running = make_job(8, 1000000, NULL), done = make_job(9, 2, NULL);
	struct exec_job never = make_job(10, 2, NULL);
	CHECK(exec_submit(first, &running, err, sizeof err) == 0);
	CHECK(exec_submit(first, &done, err, sizeof err) == 0);
	wait_running(first, &s, 8);
	CHECK(wait_final(first, &s, 9, 60) != NULL);
	exec_free(first);                       /* "larchd restarts": the job keeps running */

	struct executor *second = make_executor(2);
	struct seen t = { 0 };
	CHECK(exec_adopt(second, &running, err, sizeof err) == 0);
	CHECK(exec_adopt(second, &done, err, sizeof err) == 0);
	CHECK(exec_adopt(second, &never, err, sizeof err) == 0);
	exec_poll(second, record, &t);
	CHECK_MSG(last_of(&t, 8) && last_of(&t, 8)->state == EXEC_RUNNING, "running job not found");
	CHECK(last_of(&t, 9) && last_of(&t, 9)->state == EXEC_COMPLETED);   /* from result.json */
	CHECK(last_of(&t, 10) && last_of(&t, 10)->state == EXEC_RUNNING);   /* started now */
	CHECK(wait_final(second, &t, 10, 60) && last_of(&t, 10)->state == EXEC_COMPLETED);

	wait_training(running.dir);
	CHECK(exec_cancel(second, 8, err, sizeof err) == 0);
	const struct exec_event *e = wait_final(second, &t, 8, 60);
	CHECK_MSG(e && e->state == EXEC_CANCELLED, "state %s", e ? exec_state_name(e->state) : "none");
	exec_free(second);
	while (waitpid(-1, NULL, WNOHANG) > 0)  /* the first executor's children */
		;
	exec_job_release(&running);
	exec_job_release(&done);
	exec_job_release(&never);
}

/* How many times a trainer started in dir: its header lines in stdout.log. */
static int trainer_starts(const char *dir)
{
	char path[4200], line[4096];
	snprintf(path, sizeof path, "%s/stdout.log", dir);
	FILE *f = fopen(path, "r");
	int n = 0;
	while (f && fgets(line, sizeof line, f))
		n += strncmp(line, "larch-train: ", 13) == 0;
	if (f)
		fclose(f);
	return n;
}

/* larchd killed between fork and the child's launch record: a process holds
 * the job's lock but has written no launch yet. The next executor must wait
 * for the record and follow that process, not start the job again; and it
 * must not take the process for dead while its command line is not yet the
 * trainer's. The stand-in does what executor_local.c's child does, slowly. */
static void test_adopt_while_starting(void)
{
	struct exec_job job = make_job(11, 5, NULL);
	char lock[4200], rec[4200], out[4200], spec[4200];
	snprintf(lock, sizeof lock, "%s/lock", job.dir);
	snprintf(rec, sizeof rec, "%s/launch", job.dir);
	snprintf(out, sizeof out, "%s/stdout.log", job.dir);
	snprintf(spec, sizeof spec, "%s/spec.json", job.dir);
	int sync[2];
	CHECK(pipe(sync) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(lock, O_RDWR | O_CREAT, 0600);
		if (fd < 0 || flock(fd, LOCK_EX) != 0 || write(sync[1], "x", 1) != 1)
			_exit(126);
		struct timespec d = { 0, 300 * 1000 * 1000 };
		nanosleep(&d, NULL);                  /* the window: locked, no launch */
		FILE *f = fopen(rec, "w");
		if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
			_exit(126);
		nanosleep(&d, NULL);                  /* launch written, not yet the trainer */
		int o = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (o < 0 || dup2(o, 1) < 0)
			_exit(126);
		execl(trainer, trainer, "--spec", spec, "--job-dir", job.dir, "--threads", "1",
		      (char *)NULL);
		_exit(127);
	}
	char c;
	CHECK(read(sync[0], &c, 1) == 1);
	close(sync[0]);
	close(sync[1]);

	struct executor *ex = make_executor(2);
	struct seen s = { 0 };
	char err[256] = "";
	CHECK_MSG(exec_adopt(ex, &job, err, sizeof err) == 0, "%s", err);
	exec_poll(ex, record, &s);
	const struct exec_event *e = last_of(&s, 11);
	CHECK_MSG(e && e->state == EXEC_RUNNING && e->pid == pid, "adopted as %s, pid %d (want %d)",
	          e ? exec_state_name(e->state) : "nothing", e ? (int)e->pid : 0, (int)pid);
	e = wait_final(ex, &s, 11, 60);
	CHECK_MSG(e && e->state == EXEC_COMPLETED, "state %s", e ? exec_state_name(e->state) : "none");
	CHECK_INT_EQ(trainer_starts(job.dir), 1);
	exec_free(ex);
	CHECK(waitpid(pid, NULL, 0) == pid);
	exec_job_release(&job);
}

/* A job owner rewrites the launch record of a running job to name another
 * process (larchd's own, a daemon's): the next executor must not take that
 * process for the job's, nor ever signal it. */
static void test_adopt_refuses_a_launch_record_naming_another_process(void)
{
	char err[256] = "";
	struct seen s = { 0 };
	struct executor *first = make_executor(2);
	struct exec_job job = make_job(12, 1000000, NULL);
	CHECK(exec_submit(first, &job, err, sizeof err) == 0);
	wait_running(first, &s, 12);
	exec_free(first);                       /* "larchd restarts": the job keeps running */

	pid_t other = fork();                   /* a process that is not the job's */
	if (other == 0) {
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	char rec[4200], line[32];
	snprintf(rec, sizeof rec, "%s/launch", job.dir);
	long real = 0;
	FILE *f = fopen(rec, "r");
	CHECK(f && fscanf(f, "%ld", &real) == 1);
	if (f)
		fclose(f);
	snprintf(line, sizeof line, "%d\n", (int)other);
	f = fopen(rec, "w");
	CHECK(f && fputs(line, f) >= 0);
	if (f)
		fclose(f);

	struct executor *second = make_executor(2);
	CHECK(exec_adopt(second, &job, err, sizeof err) != 0);
	CHECK_MSG(strstr(err, "is not this job's") != NULL, "%s", err);
	CHECK(exec_cancel(second, 12, err, sizeof err) != 0);   /* not followed: nothing to signal */
	exec_free(second);
	CHECK(kill(other, 0) == 0);             /* untouched */
	kill(other, SIGKILL);
	waitpid(other, NULL, 0);
	if (real > 1)
		kill(-(pid_t)real, SIGKILL);        /* the real trainer, whose group it leads */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	exec_job_release(&job);
}

int main(void)
{
	trainer = getenv("LARCH_TEST_TRAINER");
	if (!trainer || access(trainer, X_OK) != 0) {
		fprintf(stderr, "LARCH_TEST_TRAINER is not an executable larch-train: skipping\n");
		return 77;
	}
	snprintf(root, sizeof root, "%s", check_tmpdir("exec"));
	char corpus[4200];
	snprintf(corpus, sizeof corpus, "%s/corpus.txt", root);
	FILE *f = fopen(corpus, "w");
	for (int i = 0; i < 200; i++)
		fputs("the quick brown fox jumps over the lazy dog. ", f);
	fclose(f);

	CHECK_RUN(test_job_copy_owns_paths);
	CHECK_RUN(test_job_completes);
	CHECK_RUN(test_slots_are_fifo);
	CHECK_RUN(test_cancel_queued_and_running);
	CHECK_RUN(test_time_limit_and_bad_spec);
	CHECK_RUN(test_adopt_after_restart);
	CHECK_RUN(test_adopt_while_starting);
	CHECK_RUN(test_adopt_refuses_a_launch_record_naming_another_process);
	return check_finish();
}
