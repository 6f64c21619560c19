/* tests/unit/test_svc_child_run.c - service/child_run.c with real children
 * (/bin/sh, yes, sleep):
 *   - the output and the exit code come back; stderr only with stderr_too;
 *     stdin from the caller's fd;
 *   - keeping the tail of a long output keeps its last bytes; keeping the
 *     head stops reading when full and kills a child that goes on;
 *   - a child past its deadline, one stopped through the stop fd while it
 *     runs (its pid published meanwhile), and one whose caller is already
 *     closing are killed and reaped, or handed to gone;
 *   - the exit codes of a child that never reached exec, make_dir made,
 *     a read-only child's write refused (SIGXFSZ);
 *   - as root: the child runs as nobody, and make_dir is nobody's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "service/child_run.h"

static char *env[] = { "PATH=/usr/bin:/bin", "LC_ALL=C", NULL };

/* A spec running /bin/sh -c script, with room for 4096 bytes of output. */
static struct svc_child_spec sh_spec(char **argv, const char *script)
{
	argv[0] = "/bin/sh";
	argv[1] = "-c";
	argv[2] = (char *)script;
	argv[3] = NULL;
	return (struct svc_child_spec){ .argv = argv, .envp = env, .stdin_fd = -1,
	                                 .timeout_ms = 60000, .stop_fd = -1, .output_max = 4096 };
}

static int exited_with(const struct svc_child_result *r, int code)
{
	return r->reaped && WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

static int killed_by(const struct svc_child_result *r, int sig)
{
	return r->reaped && WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

static void test_output_and_exit_code(void)
{
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "echo out; echo err >&2; exit 3");
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK_STR_EQ(r.output, "out\n");
	CHECK(exited_with(&r, 3));
	CHECK(r.output_ended && !r.timed_out && !r.stopped);
	svc_child_result_release(&r);

	s.stderr_too = 1;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK_STR_EQ(r.output, "out\nerr\n");
	CHECK(exited_with(&r, 3));
	svc_child_result_release(&r);

	/* stdin from the caller's fd; the environment is envp alone */
	FILE *f = tmpfile();
	fputs("hello\n", f);
	fflush(f);
	rewind(f);
	s = sh_spec(argv, "read x; echo \"got $x $LC_ALL ${HOME:-nohome}\"");
	s.stdin_fd = fileno(f);
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK_STR_EQ(r.output, "got hello C nohome\n");
	CHECK(exited_with(&r, 0));
	svc_child_result_release(&r);
	fclose(f);
}

static void test_output_past_the_cap(void)
{
	char *argv[4];
	/* about 20 KB then LAST: the tail keeps the end */
	struct svc_child_spec s = sh_spec(argv, "i=0; while [ $i -lt 2000 ]; do "
	                                  "echo \"line $i of the output\"; i=$((i+1)); done; "
	                                  "echo LAST");
	s.output_max = 1000;
	s.keep_tail = 1;
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK_INT_EQ(r.output_len, 1000);
	CHECK_INT_EQ(strlen(r.output), 1000);
	CHECK(strstr(r.output, "line 1999 of the output\nLAST\n") != NULL);
	CHECK_STR_EQ(r.output + 995, "LAST\n");
	CHECK(exited_with(&r, 0));
	svc_child_result_release(&r);

	/* the head: reading stops when full; a child that goes on is killed */
	s = sh_spec(argv, "exec yes line");
	s.output_max = 1000;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK_INT_EQ(r.output_len, 1000);
	CHECK(r.output_ended);
	CHECK(strncmp(r.output, "line\nline\n", 10) == 0);
	/* killed, or it met its closed pipe first */
	CHECK(killed_by(&r, SIGKILL) || killed_by(&r, SIGPIPE));
	svc_child_result_release(&r);
}

static void test_timeout(void)
{
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "echo started; sleep 60; echo never");
	s.timeout_ms = 300;
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(r.timed_out && !r.stopped && !r.output_ended);
	CHECK(r.output_len == 0 || strcmp(r.output, "started\n") == 0);
	CHECK(killed_by(&r, SIGKILL));
	svc_child_result_release(&r);
}

/* ---- a stop while it runs, its pid published ---------------------------- */

struct stopper {
	pthread_mutex_t lock;
	pid_t running, seen;
	int stop_pipe[2];
};

/* Waits for the child's pid to be published, then stops it. */
static void *stop_when_running(void *arg)
{
	struct stopper *st = arg;
	for (;;) {
		pthread_mutex_lock(&st->lock);
		pid_t pid = st->running;
		pthread_mutex_unlock(&st->lock);
		if (pid) {
			st->seen = pid;
			break;
		}
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	ssize_t ignored = write(st->stop_pipe[1], "x", 1);
	(void)ignored;
	return NULL;
}

static pid_t gone_pid;

static void note_gone(void *arg, pid_t pid)
{
	struct stopper *st = arg;
	CHECK_INT_EQ(st->running, 0);      /* unpublished, lock held */
	gone_pid = pid;
}

static void test_stop_while_running(void)
{
	struct stopper st = { .lock = PTHREAD_MUTEX_INITIALIZER };
	CHECK_INT_EQ(pipe(st.stop_pipe), 0);
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "echo $$; exec sleep 60");
	s.stop_fd = st.stop_pipe[0];
	s.lock = &st.lock;
	s.running = &st.running;
	pthread_t t;
	pthread_create(&t, NULL, stop_when_running, &st);
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	pthread_join(t, NULL);
	CHECK(r.stopped && !r.timed_out);
	CHECK(killed_by(&r, SIGKILL));
	CHECK_INT_EQ(st.running, 0);
	char want[32];
	snprintf(want, sizeof want, "%d\n", (int)st.seen);
	/* the pid published is the child's own (it printed $$) unless it was
	 * stopped before it printed */
	CHECK(r.output_len == 0 || strcmp(r.output, want) == 0);
	svc_child_result_release(&r);

	/* with gone: a killed child is handed over unreaped */
	char c;
	CHECK_INT_EQ(read(st.stop_pipe[0], &c, 1), 1);
	s.gone = note_gone;
	s.gone_arg = &st;
	gone_pid = 0;
	pthread_create(&t, NULL, stop_when_running, &st);
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	pthread_join(t, NULL);
	CHECK(r.stopped && !r.reaped);
	CHECK_INT_EQ(gone_pid, st.seen);
	int status = 0;
	CHECK_INT_EQ(waitpid(gone_pid, &status, 0), gone_pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	svc_child_result_release(&r);
	close(st.stop_pipe[0]);
	close(st.stop_pipe[1]);
}

static void test_closing_stops_at_once(void)
{
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pid_t running = 0;
	int closing = 1;
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "exec sleep 60");
	s.lock = &lock;
	s.running = &running;
	s.closing = &closing;
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(r.stopped && !r.output_ended);
	CHECK(r.reaped && WIFSIGNALED(r.status));
	CHECK_INT_EQ(running, 0);
	svc_child_result_release(&r);
}

/* ---- before exec: exit codes, make_dir, limits ----------------------------- */

static void test_before_exec(void)
{
	const char *dir = check_tmpdir("child_run_before_exec");
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "pwd; ls -d made");
	s.dir = dir;
	s.make_dir = "made";
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	char want[4200], real[4096];
	CHECK(realpath(dir, real) != NULL);
	snprintf(want, sizeof want, "%s\nmade\n", real);
	CHECK_STR_EQ(r.output, want);
	CHECK(exited_with(&r, 0));
	svc_child_result_release(&r);

	s.dir = "/nonexistent-larch-dir";
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(exited_with(&r, SVC_CHILD_EXIT_DIR));
	svc_child_result_release(&r);

	s = sh_spec(argv, "");
	argv[0] = "/nonexistent-larch-program";
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(exited_with(&r, SVC_CHILD_EXIT_EXEC));
	svc_child_result_release(&r);

	/* cpu_s: no file may be written */
	s = sh_spec(argv, "echo x > written; echo after");
	s.dir = dir;
	s.cpu_s = 30;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(killed_by(&r, SIGXFSZ));
	char path[4300];
	snprintf(path, sizeof path, "%s/written", dir);
	struct stat st;
	CHECK(stat(path, &st) != 0 || st.st_size == 0);
	svc_child_result_release(&r);
}

static void test_as_another_user(void)
{
	struct svc_unix_id id;
	char why[256];
	if (geteuid() != 0 || svc_unix_id_lookup("nobody", &id, why, sizeof why) != 0) {
		printf("  (skipped: needs root and a user nobody)\n");
		return;
	}
	char dir[] = "/tmp/larch-child-run-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	CHECK_INT_EQ(chown(dir, id.uid, id.gid), 0);
	char *argv[4];
	struct svc_child_spec s = sh_spec(argv, "id -u; id -g");
	s.id = &id;
	s.dir = dir;
	s.make_dir = "exports";
	struct svc_child_result r;
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	char want[64];
	snprintf(want, sizeof want, "%u\n%u\n", (unsigned)id.uid, (unsigned)id.gid);
	CHECK_STR_EQ(r.output, want);
	CHECK(exited_with(&r, 0));
	svc_child_result_release(&r);
	char made[64];
	snprintf(made, sizeof made, "%s/exports", dir);
	struct stat st;
	CHECK_INT_EQ(stat(made, &st), 0);
	CHECK_INT_EQ(st.st_uid, id.uid);
	CHECK_INT_EQ(st.st_mode & 0777, 0755);

	/* a directory the user may not enter */
	CHECK_INT_EQ(chown(dir, 0, 0), 0);
	CHECK_INT_EQ(chmod(dir, 0700), 0);
	CHECK_INT_EQ(svc_child_run(&s, &r), 0);
	CHECK(exited_with(&r, SVC_CHILD_EXIT_DIR));
	svc_child_result_release(&r);
	rmdir(made);
	rmdir(dir);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK_RUN(test_output_and_exit_code);
	CHECK_RUN(test_output_past_the_cap);
	CHECK_RUN(test_timeout);
	CHECK_RUN(test_stop_while_running);
	CHECK_RUN(test_closing_stops_at_once);
	CHECK_RUN(test_before_exec);
	CHECK_RUN(test_as_another_user);
	return check_finish();
}
