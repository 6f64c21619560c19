/* service/child_run.c - a child process as a given user, its output read
 * back with a deadline; see child_run.h. */
#include "child_run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define READ_CHUNK 4096            /* bytes read at once when keeping the tail */
#define POLL_MAX_MS 60000          /* the deadline is looked at again at least this often */

/* In the child (async-signal-safe calls only): its fds 0, 1 and 2, nothing
 * else open. 0, or -1. */
static int child_fds(const struct svc_child_spec *s, int out_fd)
{
	int null = open("/dev/null", O_RDWR);
	if (null < 0 || (null = fcntl(null, F_DUPFD, 10)) < 0)
		return -1;
	int in = s->stdin_fd >= 0 ? fcntl(s->stdin_fd, F_DUPFD, 10) : null;
	int out = fcntl(out_fd, F_DUPFD, 10);
	if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
	    dup2(s->stderr_too ? out : null, 2) < 0)
		return -1;
	syscall(SYS_close_range, 3U, ~0U, 0U);
	return 0;
}

/* In the child (async-signal-safe calls only). Never returns. */
static void child_main(const struct svc_child_spec *s, int out_fd) __attribute__((noreturn));

static void child_main(const struct svc_child_spec *s, int out_fd)
{
	setpgid(0, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (child_fds(s, out_fd) != 0)
		_exit(SVC_CHILD_EXIT_USER);
	if (s->cpu_s) {
		struct rlimit cpu = { s->cpu_s, s->cpu_s + 1 }, zero = { 0, 0 };
		setrlimit(RLIMIT_CPU, &cpu);
		setrlimit(RLIMIT_FSIZE, &zero);
		setrlimit(RLIMIT_CORE, &zero);
	}
	if (s->id && svc_unix_id_become(s->id) != 0)
		_exit(SVC_CHILD_EXIT_USER);
	/* as the user from here: its directories, its permissions */
	if (chdir(s->dir ? s->dir : "/") != 0 ||
	    (s->make_dir && mkdir(s->make_dir, 0755) != 0 && errno != EEXIST))
		_exit(SVC_CHILD_EXIT_DIR);
	umask(022);
	execve(s->argv[0], s->argv, s->envp);
	_exit(SVC_CHILD_EXIT_EXEC);
}

/* Reads once from fd into r's output. 1 once the output has ended (or,
 * keeping the first bytes, is full), else 0. */
static int read_once(const struct svc_child_spec *s, int fd, struct svc_child_result *r)
{
	size_t max = s->output_max;
	if (!s->keep_tail) {
		ssize_t k = read(fd, r->output + r->output_len, max - r->output_len);
		if (k < 0 && errno == EINTR)
			return 0;
		return k <= 0 || (r->output_len += (size_t)k) == max;
	}
	char tmp[READ_CHUNK];
	ssize_t k = read(fd, tmp, sizeof tmp);
	if (k < 0 && errno == EINTR)
		return 0;
	if (k <= 0)
		return 1;
	size_t n = (size_t)k;
	const char *from = tmp;
	if (n > max) {
		from += n - max;
		n = max;
	}
	/* the last max bytes: what a failing program says last is at the end */
	if (r->output_len + n > max) {
		size_t drop = r->output_len + n - max;
		memmove(r->output, r->output + drop, r->output_len - drop);
		r->output_len -= drop;
	}
	memcpy(r->output + r->output_len, from, n);
	r->output_len += n;
	return 0;
}

/* Reads the output until it ends, the deadline or a stop. */
static void read_output(const struct svc_child_spec *s, int fd, struct svc_child_result *r)
{
	int64_t deadline = svc_mono_ms() + s->timeout_ms;
	for (;;) {
		int64_t left = deadline - svc_mono_ms();
		if (left <= 0) {
			r->timed_out = 1;
			return;
		}
		struct pollfd fds[2] = { { .fd = fd, .events = POLLIN },
		                         { .fd = s->stop_fd, .events = POLLIN } };
		int n = poll(fds, 2, left > POLL_MAX_MS ? POLL_MAX_MS : (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (fds[1].revents) {
			r->stopped = 1;
			return;
		}
		if (n > 0 && read_once(s, fd, r)) {
			r->output_ended = 1;
			return;
		}
	}
}

/* Whether pid has ended or ends within ms; it is left unreaped, so that its
 * pid (and process group) stays its own until reaped. */
static int ends_within(pid_t pid, unsigned ms)
{
	for (unsigned waited = 0;; waited += 2) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		int rc = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
		if ((rc == 0 && si.si_pid == pid) || (rc != 0 && errno != EINTR))
			return 1;
		if (waited >= ms)
			return 0;
		struct timespec ts = { 0, 2 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Publishes pid in *running (0: none); 1 when the caller is closing. */
static int publish(const struct svc_child_spec *s, pid_t pid)
{
	if (!s->lock)
		return 0;
	pthread_mutex_lock(s->lock);
	*s->running = pid;
	int closing = s->closing && *s->closing;
	pthread_mutex_unlock(s->lock);
	return closing;
}

/* Kills the child unless it ended, unpublishes it, then reaps it or hands
 * it to gone. */
static void finish(const struct svc_child_spec *s, pid_t pid, struct svc_child_result *r)
{
	int ended = r->output_ended && ends_within(pid, s->exit_wait_ms);
	if (!ended)
		kill(-pid, SIGKILL);
	if (s->lock)
		pthread_mutex_lock(s->lock);
	if (s->running)
		*s->running = 0;
	int hand_over = !ended && s->gone;
	if (hand_over)
		s->gone(s->gone_arg, pid);
	if (s->lock)
		pthread_mutex_unlock(s->lock);
	if (hand_over)
		return;
	while (waitpid(pid, &r->status, 0) < 0 && errno == EINTR)
		;
	r->reaped = 1;
}

int svc_child_run(const struct svc_child_spec *s, struct svc_child_result *r)
{
	memset(r, 0, sizeof *r);
	int out[2];
	if (!(r->output = malloc(s->output_max + 1))) {
		snprintf(r->why, sizeof r->why, "out of memory");
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) != 0) {
		snprintf(r->why, sizeof r->why, "pipe: %s", strerror(errno));
		svc_child_result_release(r);
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0)
		child_main(s, out[1]);
	int fork_errno = errno;
	close(out[1]);
	if (pid < 0) {
		close(out[0]);
		snprintf(r->why, sizeof r->why, "fork: %s", strerror(fork_errno));
		svc_child_result_release(r);
		return -1;
	}
	setpgid(pid, pid);
	if (publish(s, pid))
		r->stopped = 1;
	else
		read_output(s, out[0], r);
	close(out[0]);
	r->output[r->output_len] = '\0';
	finish(s, pid, r);
	return 0;
}

void svc_child_result_release(struct svc_child_result *r)
{
	free(r->output);
	r->output = NULL;
	r->output_len = 0;
}
