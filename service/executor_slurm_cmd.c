/* service/executor_slurm_cmd.c - Slurm's commands run with a timeout; see slurm_cmd.h. */
#include "slurm_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

extern char **environ;

static atomic_ullong calls[SLURM_CMD_KINDS];

static const char *const kind_names[SLURM_CMD_KINDS] = {
	[SLURM_CMD_SBATCH] = "sbatch", [SLURM_CMD_SQUEUE] = "squeue",
	[SLURM_CMD_SCONTROL] = "scontrol", [SLURM_CMD_SCANCEL] = "scancel",
	[SLURM_CMD_SINFO] = "sinfo", [SLURM_CMD_SACCT] = "sacct",
	[SLURM_CMD_API_SUBMIT] = "slurm_submit_batch_job", [SLURM_CMD_OTHER] = "other",
};

const char *slurm_cmd_kind_name(enum slurm_cmd_kind k)
{
	return (unsigned)k < SLURM_CMD_KINDS ? kind_names[k] : "?";
}

unsigned long long slurm_cmd_calls(enum slurm_cmd_kind k)
{
	return (unsigned)k < SLURM_CMD_KINDS ? atomic_load(&calls[k]) : 0;
}

void slurm_cmd_count(enum slurm_cmd_kind k)
{
	if ((unsigned)k < SLURM_CMD_KINDS)
		atomic_fetch_add(&calls[k], 1);
}

const double slurm_poll_bounds[SLURM_POLL_BUCKETS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5, 10
};
static pthread_mutex_t poll_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slurm_poll_stats polls;

void slurm_poll_record(double wall_s, double cpu_s)
{
	pthread_mutex_lock(&poll_lock);
	polls.count++;
	for (int i = 0; i < SLURM_POLL_BUCKETS; i++)
		polls.le[i] += wall_s <= slurm_poll_bounds[i];
	polls.wall_s += wall_s;
	polls.cpu_s += cpu_s;
	pthread_mutex_unlock(&poll_lock);
}

void slurm_poll_get(struct slurm_poll_stats *out)
{
	pthread_mutex_lock(&poll_lock);
	*out = polls;
	pthread_mutex_unlock(&poll_lock);
}

static enum slurm_cmd_kind kind_of(const char *prog)
{
	const char *base = strrchr(prog, '/');
	base = base ? base + 1 : prog;
	for (int k = 0; k < SLURM_CMD_OTHER; k++)
		if (strcmp(base, kind_names[k]) == 0)
			return (enum slurm_cmd_kind)k;
	return SLURM_CMD_OTHER;
}


/* A child with the default signal mask and dispositions, in its own group,
 * stdin /dev/null, stdout/stderr on the pipes. */
static int spawn(const char *const argv[], int out_fd, int err_fd, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, defaults;
	sigemptyset(&none);
	sigfillset(&defaults);
	int rc = posix_spawn_file_actions_init(&fa);
	if (rc)
		return rc;
	rc = posix_spawnattr_init(&attr);
	if (rc) {
		posix_spawn_file_actions_destroy(&fa);
		return rc;
	}
	if (!(rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
	    !(rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1)) &&
	    !(rc = posix_spawn_file_actions_adddup2(&fa, err_fd, 2)) &&
	    !(rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
	                                           POSIX_SPAWN_SETSIGDEF)) &&
	    !(rc = posix_spawnattr_setpgroup(&attr, 0)) &&
	    !(rc = posix_spawnattr_setsigmask(&attr, &none)) &&
	    !(rc = posix_spawnattr_setsigdefault(&attr, &defaults)))
		rc = posix_spawnp(pid, argv[0], &fa, &attr, (char *const *)argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	return rc;
}

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
		s[--n] = '\0';
}

int slurm_cmd_run(const char *const argv[], int timeout_ms, struct slurm_cmd_result *res)
{
	memset(res, 0, sizeof *res);
	res->status = -1;
	atomic_fetch_add(&calls[kind_of(argv[0])], 1);

	int out_pipe[2] = { -1, -1 }, err_pipe[2] = { -1, -1 };
	if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
		snprintf(res->err, sizeof res->err, "pipe: %s", strerror(errno));
		for (int i = 0; i < 2; i++) {
			if (out_pipe[i] >= 0)
				close(out_pipe[i]);
			if (err_pipe[i] >= 0)
				close(err_pipe[i]);
		}
		return -1;
	}
	pid_t pid;
	int rc = spawn(argv, out_pipe[1], err_pipe[1], &pid);
	close(out_pipe[1]);
	close(err_pipe[1]);
	if (rc != 0) {
		snprintf(res->err, sizeof res->err, "cannot run %s: %s", argv[0], strerror(rc));
		close(out_pipe[0]);
		close(err_pipe[0]);
		return -1;
	}

	size_t cap = 4096, err_len = 0;
	char *out = malloc(cap);
	int too_big = !out;
	long long deadline = svc_mono_ms() + timeout_ms;
	struct pollfd fds[2] = { { .fd = out_pipe[0], .events = POLLIN },
	                         { .fd = err_pipe[0], .events = POLLIN } };
	int open_fds = 2;
	while (open_fds > 0) {
		long long left = deadline - svc_mono_ms();
		if (left <= 0) {
			res->timed_out = 1;
			break;
		}
		int n = poll(fds, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char chunk[8192];
			ssize_t got = read(fds[i].fd, chunk, sizeof chunk);
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {
				close(fds[i].fd);
				fds[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 1) {
				size_t keep = sizeof res->err - 1 - err_len;
				if ((size_t)got < keep)
					keep = (size_t)got;
				memcpy(res->err + err_len, chunk, keep);
				err_len += keep;
				continue;
			}
			if (too_big)
				continue;
			if (res->out_len + (size_t)got + 1 > cap) {
				while (res->out_len + (size_t)got + 1 > cap)
					cap *= 2;
				char *grown = cap <= SLURM_CMD_OUT_MAX ? realloc(out, cap) : NULL;
				if (!grown) {
					too_big = 1;
					continue;
				}
				out = grown;
			}
			memcpy(out + res->out_len, chunk, (size_t)got);
			res->out_len += (size_t)got;
		}
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	if (res->timed_out)
		kill(-pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	res->err[err_len] = '\0';
	trim(res->err);
	if (!out) {
		out = malloc(1);
		res->out_len = 0;
	}
	res->out = out;
	if (out)
		out[res->out_len] = '\0';
	if (res->timed_out) {
		snprintf(res->err, sizeof res->err, "timed out after %d ms", timeout_ms);
		return -1;
	}
	if (too_big || !out) {
		snprintf(res->err, sizeof res->err, "output too large or out of memory");
		return -1;
	}
	if (WIFEXITED(st))
		res->status = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		snprintf(res->err, sizeof res->err, "killed by signal %d", WTERMSIG(st));
	return res->status == 0 ? 0 : -1;
}

void slurm_cmd_release(struct slurm_cmd_result *res)
{
	free(res->out);
	res->out = NULL;
	res->out_len = 0;
}

void slurm_cmd_describe(const char *const argv[], const struct slurm_cmd_result *res,
                        char *buf, size_t len)
{
	const char *base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	/* one line: Slurm's message without its newlines */
	char msg[SLURM_CMD_ERR_MAX];
	snprintf(msg, sizeof msg, "%s", res->err);
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
	if (res->timed_out || res->status < 0)
		snprintf(buf, len, "%s: %s", base, msg[0] ? msg : "did not exit normally");
	else
		snprintf(buf, len, "%s: exit %d%s%s", base, res->status, msg[0] ? ": " : "", msg);
}
