/* service/executor_local.c - the embedded executor: larch-train as child
 * processes of larchd, a bounded number at a time.
 *
 * Each job runs in its own process group (so a cancel reaches every process
 * it starts), with stdout and stderr appended to the job dir's stdout.log and
 * stderr.log, no inherited descriptors, and LARCH_SERVER_URL, LARCH_JOB_ID and
 * LARCH_JOB_TOKEN (and LARCH_REPORT_FLUSH_S and LARCH_CA when configured) in its
 * environment.
 *
 * Restart safety: before fork larchd takes an exclusive flock on DIR/lock;
 * the child keeps that descriptor (as fd 3) through exec, so the lock is held
 * exactly as long as the job's process lives, whoever its parent is. The
 * child writes DIR/launch (its pid) before it execs the trainer. A job
 * adopted after a restart is never started twice:
 *   - lock held: its process lives (perhaps still between fork and exec);
 *     it is followed, by the pid in launch (waited for if not written yet,
 *     at most LAUNCH_WAIT_MS; a process it names without the lock open
 *     is not the job's and is refused without a wait);
 *   - lock free, launch present: it ran and ended; result.json says how;
 *   - lock free, no launch: the trainer never ran; it is queued again.
 * Processes of a previous larchd are not our children: they are polled
 * through the lock, and their exit code comes from result.json. (Job dirs of
 * a larchd from before the lock have no DIR/lock; those fall back to
 * kill(pid, 0) and /proc: alive, not a zombie, its command line names the
 * job dir.)
 */
#include "executor.h"
#include "clock.h"
#include "identity.h"
#include "jobfs.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainer/env.h"

extern char **environ;

#define LAUNCH_WAIT_MS 5000    /* a child this long before exec is taken as started */
#define RETRY_FIRST_MS 1000    /* a start that failed for now is tried again after this, */
#define RETRY_MAX_MS 60000     /* doubled each time up to this */
#define RETRY_LOG_MS 10000     /* and said in the log at most this often */
/* how often an adoption looks again while a child of a previous larchd is
 * between fork and exec (at most LAUNCH_WAIT_MS) */
static const struct timespec ADOPT_POLL = { 0, 20 * 1000 * 1000 };

struct local_job {
	struct exec_job job;           /* its own copy: owns its paths */
	enum exec_state state;         /* EXEC_QUEUED or EXEC_RUNNING */
	pid_t pid;                     /* process group leader once started */
	int is_child;                  /* 0 for a process adopted after a restart */
	long long started_ms;
	long long term_sent_ms;        /* 0 until SIGTERM was sent */
	int cancel_requested, timed_out, killed;
	uid_t run_uid;                 /* adopted: the uid its process must run as */
	long long retry_at_ms;         /* a start that failed for now: not before this */
	long long retry_wait_ms;       /* the last wait; doubles each time */
	struct local_job *next;
};

struct local {
	struct executor base;          /* first: a struct executor * is a struct local * */
	struct exec_local_config cfg;
	char *trainer_path, *server_url;
	char *env_ca;                  /* "LARCH_CA=FILE", or NULL */
	char *mpirun_path;             /* for jobs of several ranks; NULL: none in PATH */
	char *roots[EXEC_DATA_ROOTS_MAX];  /* data_roots for confined jobs (copies) */
	int n_roots;
	pthread_mutex_t lock;
	struct local_job *jobs;        /* submission order, so queued jobs start FIFO */
	struct exec_events events;     /* observed, not yet reported */
};


/* Records an event for the next poll; called with the lock held. */
static void emit(struct local *lx, const struct local_job *j, enum exec_state state, int exit_code,
                 const char *reason)
{
	struct exec_event *ev = exec_events_add(&lx->events, j->job.id, state, exit_code);
	if (!ev)
		return;
	ev->pid = j->pid;
	ev->started = j->pid > 0;
	snprintf(ev->reason, sizeof ev->reason, "%s", reason ? reason : "");
}

static void job_free(struct local_job *j)
{
	exec_job_release(&j->job);
	free(j);
}

static void unlink_job(struct local *lx, struct local_job *j)
{
	for (struct local_job **p = &lx->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			job_free(j);
			return;
		}
}

static struct local_job *find(struct local *lx, long long id)
{
	for (struct local_job *j = lx->jobs; j; j = j->next)
		if (j->job.id == id)
			return j;
	return NULL;
}

/* ---- launching ------------------------------------------------------------ */

/* Writes the decimal digits of v into buf (async-signal-safe); returns the length. */
static int format_long(char *buf, long v)
{
	char tmp[24];
	int n = 0, len = 0;
	if (v == 0)
		tmp[n++] = '0';
	while (v > 0) {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	}
	while (n > 0)
		buf[len++] = tmp[--n];
	return len;
}

/* Everything the child needs, prepared before fork: after fork only
 * async-signal-safe calls are allowed (larchd has other threads). */
struct launch {
	char *argv[24 + 2 * EXEC_DATA_ROOTS_MAX];
	char **envp;
	const char *dir;
	struct svc_unix_id id;             /* who it runs as, when as_user */
	int as_user;
	int lock_fd;                       /* DIR/lock, flocked; the child's fd 3 */
	int status_fd;                     /* the child's end of the status pipe (CLOEXEC) */
	char threads[16], ranks[16], env_url[4200], env_id[64], env_token[160], env_flush[48];
	char env_home[300], env_user[48], env_logname[48];
};

/* Environment variables that describe larchd's own user, replaced for a job
 * that runs as another */
static const char *const user_vars[] = { "HOME=", "USER=", "LOGNAME=" };

static int build_env(struct launch *l, const struct local *lx, const struct exec_job *job)
{
	size_t n = 0;
	while (environ[n])
		n++;
	l->envp = calloc(n + 16, sizeof *l->envp);
	if (!l->envp)
		return -1;
	/* larchd's own reporting variables (if it has any) never reach a job,
	 * which gets its own below; the rest (LARCH_DATASET_ROOT, LARCH_BLAS,
	 * PATH, ...) is the job's environment too */
	static const char *const own[] = { "LARCH_SERVER_URL=", "LARCH_JOB_ID=",
	                                   "LARCH_JOB_TOKEN=", "LARCH_REPORT_FLUSH_S=",
	                                   "LARCH_CA=" };
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int skip = 0;
		for (size_t o = 0; o < sizeof own / sizeof own[0]; o++)
			skip |= strncmp(environ[i], own[o], strlen(own[o])) == 0;
		for (size_t o = 0; l->as_user && o < sizeof user_vars / sizeof user_vars[0]; o++)
			skip |= strncmp(environ[i], user_vars[o], strlen(user_vars[o])) == 0;
		if (!skip)
			l->envp[k++] = environ[i];
	}
	if (l->as_user) {
		snprintf(l->env_user, sizeof l->env_user, "USER=%s", l->id.name);
		snprintf(l->env_logname, sizeof l->env_logname, "LOGNAME=%s", l->id.name);
		snprintf(l->env_home, sizeof l->env_home, "HOME=%s", l->id.home[0] ? l->id.home : "/");
		l->envp[k++] = l->env_user;
		l->envp[k++] = l->env_logname;
		l->envp[k++] = l->env_home;
	}
	if (lx->server_url && job->token[0]) {
		snprintf(l->env_url, sizeof l->env_url, "LARCH_SERVER_URL=%s", lx->server_url);
		snprintf(l->env_id, sizeof l->env_id, "LARCH_JOB_ID=j-%06lld", job->id);
		snprintf(l->env_token, sizeof l->env_token, "LARCH_JOB_TOKEN=%s", job->token);
		l->envp[k++] = l->env_url;
		l->envp[k++] = l->env_id;
		l->envp[k++] = l->env_token;
		if (lx->cfg.report_flush_s > 0) {
			snprintf(l->env_flush, sizeof l->env_flush, "LARCH_REPORT_FLUSH_S=%d",
			         lx->cfg.report_flush_s);
			l->envp[k++] = l->env_flush;
		}
		if (lx->env_ca)
			l->envp[k++] = lx->env_ca;
	}
	l->envp[k] = NULL;
	return 0;
}

/* Where a child that did not reach exec failed: written to the status pipe
 * as two ints (the stage, errno); exec closes the pipe with nothing in it. */
enum launch_stage { STAGE_USER = 1, STAGE_DIR, STAGE_LOGS, STAGE_LOCK, STAGE_RECORD, STAGE_EXEC };

static const char *const stage_names[] = {
	[STAGE_USER] = "becoming the job's Unix user",
	[STAGE_DIR] = "entering the job directory",
	[STAGE_LOGS] = "opening stdout.log and stderr.log",
	[STAGE_LOCK] = "keeping the job lock",
	[STAGE_RECORD] = "writing the launch record",
	[STAGE_EXEC] = "executing the trainer",
};

static void child_fail(const struct launch *l, enum launch_stage stage) __attribute__((noreturn));

static void child_fail(const struct launch *l, enum launch_stage stage)
{
	int msg[2] = { (int)stage, errno };
	ssize_t ignored = write(l->status_fd, msg, sizeof msg);
	(void)ignored;
	_exit(126);
}

/* In the child, between fork and exec (its own copy of l). Never returns. */
static void child(struct launch *l) __attribute__((noreturn));

static void child(struct launch *l)
{
	/* out of the way of 0-4 first: the lock becomes fd 3, the pipe fd 4 */
	l->lock_fd = fcntl(l->lock_fd, F_DUPFD_CLOEXEC, 10);
	l->status_fd = fcntl(l->status_fd, F_DUPFD_CLOEXEC, 10);
	if (l->lock_fd < 0 || l->status_fd < 0)
		_exit(126);
	setpgid(0, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);              /* ignored dispositions survive exec */

	/* the owner's groups, gid and uid first: the files it makes are its own */
	if (l->as_user && svc_unix_id_become(&l->id) != 0)
		child_fail(l, STAGE_USER);
	/* the trainer's working directory: relative paths in its spec are the
	 * job directory's (docs/spec.md) */
	if (chdir(l->dir) != 0)
		child_fail(l, STAGE_DIR);
	int in = open("/dev/null", O_RDONLY);
	int out = open("stdout.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0640);
	int err = open("stderr.log", O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0640);
	if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		child_fail(l, STAGE_LOGS);
	fcntl(1, F_SETFL, O_APPEND);
	fcntl(2, F_SETFL, O_APPEND);
	/* the job lock lives as long as this process: fd 3, kept through exec;
	 * the status pipe goes to 4 (it closes at exec) */
	if (dup2(l->lock_fd, 3) < 0 || dup3(l->status_fd, 4, O_CLOEXEC) < 0)
		child_fail(l, STAGE_LOCK);
	l->status_fd = 4;
	syscall(SYS_close_range, 5U, ~0U, 0U);  /* no db, socket or log fd leaks into jobs */

	char pid[24];
	int len = format_long(pid, (long)getpid());
	pid[len++] = '\n';
	unlink("launch.tmp");
	int fd = open("launch.tmp", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0640);
	if (fd < 0 || write(fd, pid, (size_t)len) != len || fsync(fd) != 0 || close(fd) != 0 ||
	    rename("launch.tmp", "launch") != 0)
		child_fail(l, STAGE_RECORD);

	execve(l->argv[0], l->argv, l->envp);
	child_fail(l, STAGE_EXEC);
}

/* Starts j; called with the lock held. 0; 1 when it could not start for
 * now (reason says why: it stays queued); -1 when it cannot start (reason). */
static int start(struct local *lx, struct local_job *j, char *reason, size_t len)
{
	struct launch l;
	memset(&l, 0, sizeof l);
	const char *dir = j->job.dir;
	l.dir = dir;
	l.status_fd = -1;
	if (j->job.unix_user[0]) {
		if (svc_unix_id_lookup(j->job.unix_user, &l.id, reason, len) != 0)
			return -1;
		l.as_user = 1;
	}
	uid_t run_uid = l.as_user ? l.id.uid : geteuid();
	int a = 0;
	if (j->job.ranks > 1) {
		/* data parallel: mpirun starts the ranks (larch-train's comm.h) */
		if (!lx->mpirun_path) {
			snprintf(reason, len, "parallel.ranks is %d: that needs mpirun (Open MPI) on larchd's "
			         "PATH, and there is none", j->job.ranks);
			return -1;
		}
		snprintf(l.ranks, sizeof l.ranks, "%d", j->job.ranks);
		l.argv[a++] = lx->mpirun_path;
		l.argv[a++] = "-n";
		l.argv[a++] = l.ranks;
		l.argv[a++] = "--oversubscribe";        /* more ranks than cores still runs */
		l.argv[a++] = "--bind-to";              /* each rank's OpenMP threads spread */
		l.argv[a++] = "none";
		if (run_uid == 0)
			l.argv[a++] = "--allow-run-as-root";
	}
	l.argv[a++] = lx->trainer_path;
	l.argv[a++] = "--spec";
	l.argv[a++] = "spec.json";
	l.argv[a++] = "--job-dir";
	l.argv[a++] = j->job.dir;
	if (lx->cfg.threads_per_job > 0) {
		snprintf(l.threads, sizeof l.threads, "%d", lx->cfg.threads_per_job);
		l.argv[a++] = "--threads";
		l.argv[a++] = l.threads;
	}
	if (j->job.confine) {
		l.argv[a++] = "--confine-data";
		for (int i = 0; i < lx->n_roots; i++) {
			l.argv[a++] = "--data-root";
			l.argv[a++] = lx->roots[i];
		}
		if (j->job.init_path) {
			l.argv[a++] = "--data-root";
			l.argv[a++] = j->job.init_path;
		}
	}
	l.argv[a] = NULL;
	l.lock_fd = svc_jobfs_open(dir, "lock", O_RDWR | O_CREAT, 0600);
	if (l.lock_fd < 0) {
		int e = errno;
		snprintf(reason, len, "the job's lock file: %s", strerror(e));
		return exec_errno_transient(e) ? 1 : -1;
	}
	if (flock(l.lock_fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		close(l.lock_fd);
		snprintf(reason, len, "the job's lock file: %s", e == EWOULDBLOCK ?
		         "held: a process of this job is still running" : strerror(e));
		return -1;
	}
	int status[2];
	if (pipe2(status, O_CLOEXEC) != 0) {
		int e = errno;
		close(l.lock_fd);
		snprintf(reason, len, "pipe: %s", strerror(e));
		return exec_errno_transient(e) ? 1 : -1;
	}
	l.status_fd = status[1];
	if (build_env(&l, lx, &j->job) != 0) {
		close(l.lock_fd);
		close(status[0]);
		close(status[1]);
		snprintf(reason, len, "out of memory");
		return 1;
	}
	pid_t pid = fork();
	if (pid == 0)
		child(&l);
	int saved = errno;
	close(l.lock_fd);   /* the child's copy holds the lock now */
	close(status[1]);
	free(l.envp);
	if (pid < 0) {
		close(status[0]);
		snprintf(reason, len, "fork: %s", strerror(saved));
		return exec_errno_transient(saved) ? 1 : -1;
	}
	setpgid(pid, pid);   /* also here, so a signal sent right away reaches the group */
	/* exec closes the pipe with nothing written; a child that failed before
	 * says where (it exits 126) */
	int msg[2] = { 0, 0 };
	struct pollfd pfd = { .fd = status[0], .events = POLLIN };
	ssize_t got = 0;
	if (poll(&pfd, 1, LAUNCH_WAIT_MS) == 1)
		got = read(status[0], msg, sizeof msg);
	close(status[0]);
	if (got == (ssize_t)sizeof msg && msg[0] > 0 && msg[0] <= STAGE_EXEC) {
		waitpid(pid, NULL, 0);
		if (msg[0] != STAGE_USER)
			svc_jobfs_unlink(dir, "launch");   /* it never ran: no record of a run */
		snprintf(reason, len, "%s: %s", stage_names[msg[0]], strerror(msg[1]));
		return exec_errno_transient(msg[1]) ? 1 : -1;
	}
	j->pid = pid;
	j->is_child = 1;
	j->state = EXEC_RUNNING;
	j->started_ms = svc_wall_ms();
	return 0;
}

/* ---- following processes -------------------------------------------------- */

/* The real uid process pid runs as (/proc/PID/status), or -1. */
static long process_uid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long uid = -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "Uid:", 4) == 0) {
			uid = strtol(line + 4, NULL, 10);
			break;
		}
	fclose(f);
	return uid;
}

/* For a process that is not our child: alive, not a zombie, and running this
 * job: its command line has the job dir as an argument, and it runs as the
 * job's user (a launch record the job's owner rewrote cannot point larchd,
 * root, at another's process). */
static int adopted_alive(pid_t pid, const char *dir, uid_t uid)
{
	if (kill(pid, 0) != 0 && errno != EPERM)
		return 0;
	if (process_uid(pid) != (long)uid)
		return 0;
	char path[64], buf[8192];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *close_paren = strrchr(buf, ')');   /* the name may hold spaces and ')' */
	if (!close_paren || close_paren[1] != ' ' || close_paren[2] == 'Z' || close_paren[2] == 'X')
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the arguments, each NUL-terminated */
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
		if (strcmp(buf + i, dir) == 0)
			return 1;
	return 0;
}

/* Whether a process holds the job's lock: 1 held (the job's process lives),
 * 0 free, -1 no lock file (a job dir from before the lock). */
static int lock_held(const char *dir)
{
	int fd = svc_jobfs_open(dir, "lock", O_RDONLY, 0);
	if (fd < 0)
		return errno == ENOENT ? -1 : 1;   /* unreadable: assume alive, never start twice */
	int held = flock(fd, LOCK_SH | LOCK_NB) != 0;
	close(fd);                            /* releases our shared lock, if we got it */
	return held;
}

/* Whether process pid, running as uid, has the job's lock file open: the
 * job's own process does from before it writes its launch record (the lock
 * is its fd 3, kept through exec), so one that has not executed the trainer
 * yet is told apart from a process the record names that is not the job's. */
static int holds_job_lock(pid_t pid, const char *dir, uid_t uid)
{
	if (process_uid(pid) != (long)uid)
		return 0;
	int fd = svc_jobfs_open(dir, "lock", O_RDONLY, 0);
	struct stat lock;
	int ok = fd >= 0 && fstat(fd, &lock) == 0;
	if (fd >= 0)
		close(fd);
	if (!ok)
		return 0;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d)) != NULL) {
		struct stat sb;
		char fdpath[64 + sizeof e->d_name];
		if (e->d_name[0] == '.')
			continue;
		snprintf(fdpath, sizeof fdpath, "%s/%s", path, e->d_name);
		found = stat(fdpath, &sb) == 0 && sb.st_dev == lock.st_dev && sb.st_ino == lock.st_ino;
	}
	closedir(d);
	return found;
}

/* For a process that is not our child: is it still running the job? */
static int adopted_running(const struct local_job *j)
{
	int held = lock_held(j->job.dir);
	return held >= 0 ? held : adopted_alive(j->pid, j->job.dir, j->run_uid);
}

/* exit_code and reason from DIR/result.json; -1 when there is none. */
static int read_result(const char *dir, char *reason, size_t len)
{
	FILE *f = svc_jobfs_fopen(dir, "result.json");
	json_t *r = f ? json_loadf(f, 0, NULL) : NULL;
	if (f)
		fclose(f);
	if (!r)
		return -1;
	json_t *code = json_object_get(r, "exit_code"), *why = json_object_get(r, "reason");
	int exit_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
	if (json_is_string(why))
		snprintf(reason, len, "%s", json_string_value(why));
	json_decref(r);
	return exit_code;
}

/* The last non-empty line of DIR/stderr.log, for a job that failed before it
 * could write result.json (a bad spec, a missing trainer). */
static void last_stderr_line(const char *dir, char *out, size_t len)
{
	char buf[1024];
	FILE *f = svc_jobfs_fopen(dir, "stderr.log");
	if (!f)
		return;
	if (fseek(f, -(long)(sizeof buf - 1), SEEK_END) != 0)
		rewind(f);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	buf[n] = '\0';
	const char *line = strrchr(buf, '\n');
	const char *src = line ? line + 1 : buf;
	size_t m = strlen(src);
	if (m >= len)
		m = len - 1;   /* a long message is cut at the reason's size */
	memcpy(out, src, m);
	out[m] = '\0';
}

/* Reports how a started job ended and forgets it; lock held. */
static void finish(struct local *lx, struct local_job *j, int exited, int code, int sig)
{
	char trainer_reason[EXEC_REASON_MAX - 32] = "", reason[EXEC_REASON_MAX];
	read_result(j->job.dir, trainer_reason, sizeof trainer_reason);
	if (!trainer_reason[0] && !(exited && code == 0))
		last_stderr_line(j->job.dir, trainer_reason, sizeof trainer_reason);
	enum exec_state state;
	if (j->timed_out) {
		state = EXEC_TIMEOUT;
		snprintf(reason, sizeof reason, "time limit of %lds reached", j->job.time_limit_s);
	} else if (j->cancel_requested) {
		state = EXEC_CANCELLED;
		snprintf(reason, sizeof reason, "cancelled");
	} else if (exited && code == 0) {
		state = EXEC_COMPLETED;
		reason[0] = '\0';
	} else {
		state = EXEC_FAILED;
		if (!exited)
			snprintf(reason, sizeof reason, "killed by signal %d", sig);
		else if (trainer_reason[0])
			snprintf(reason, sizeof reason, "exit %d: %s", code, trainer_reason);
		else
			snprintf(reason, sizeof reason, "exit %d", code);
	}
	emit(lx, j, state, exited ? code : -1, reason);
	unlink_job(lx, j);
}

/* An adopted process that is gone: its result.json tells the rest. */
static void finish_adopted(struct local *lx, struct local_job *j)
{
	char why[EXEC_REASON_MAX] = "";
	int code = read_result(j->job.dir, why, sizeof why);
	if (code < 0) {
		if (j->cancel_requested)
			emit(lx, j, EXEC_CANCELLED, -1, "cancelled");
		else
			emit(lx, j, EXEC_FAILED, -1, "the process ended while larchd was not watching and "
			     "left no result.json");
		unlink_job(lx, j);
		return;
	}
	finish(lx, j, 1, code, 0);
}

static void signal_group(struct local_job *j, int sig)
{
	/* a process of a previous larchd's is signalled only while it is still
	 * the job's (its pid came from the job directory's launch record) */
	if (j->pid > 0 && (j->is_child || adopted_alive(j->pid, j->job.dir, j->run_uid)))
		kill(-j->pid, sig);
}

/* ---- the interface -------------------------------------------------------- */

static int local_submit(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	struct local *lx = (struct local *)ex;
	struct local_job *j = calloc(1, sizeof *j);
	if (!j || exec_job_copy(&j->job, job) != 0) {
		free(j);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	j->state = EXEC_QUEUED;
	pthread_mutex_lock(&lx->lock);
	if (find(lx, job->id)) {
		pthread_mutex_unlock(&lx->lock);
		job_free(j);
		snprintf(err, errlen, "job %lld is already with the executor", job->id);
		return -1;
	}
	struct local_job **tail = &lx->jobs;
	while (*tail)
		tail = &(*tail)->next;
	*tail = j;
	pthread_mutex_unlock(&lx->lock);
	return 0;
}

static int local_adopt(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	struct local *lx = (struct local *)ex;
	FILE *f = svc_jobfs_fopen(job->dir, "launch");
	/* no launch record but the lock held: a previous larchd forked it a moment
	 * ago and the child has not written the record yet; wait for it */
	long long deadline = svc_mono_ms() + LAUNCH_WAIT_MS;
	while (!f && lock_held(job->dir) == 1 && svc_mono_ms() < deadline) {
		nanosleep(&ADOPT_POLL, NULL);
		f = svc_jobfs_fopen(job->dir, "launch");
	}
	if (!f) {
		if (lock_held(job->dir) == 1) {
			snprintf(err, errlen, "%s/lock: held, but no launch record after %d s", job->dir,
			         LAUNCH_WAIT_MS / 1000);
			return -1;
		}
		return local_submit(ex, job, err, errlen);   /* never started: queue it again */
	}
	long pid = 0;
	int ok = fscanf(f, "%ld", &pid) == 1 && pid > 1;
	struct stat sb;
	long long launched_ms = fstat(fileno(f), &sb) == 0 ?
		(long long)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000 : svc_wall_ms();
	fclose(f);
	if (!ok) {
		snprintf(err, errlen, "%s/launch: not a launch record", job->dir);
		return -1;
	}
	/* whose process it must be: the owner's where jobs run as their owners */
	struct svc_unix_id id;
	uid_t run_uid = geteuid();
	if (job->unix_user[0]) {
		if (svc_unix_id_lookup(job->unix_user, &id, err, errlen) != 0)
			return -1;
		run_uid = id.uid;
	}
	/* a child of a previous larchd writes its launch record just before it
	 * executes the trainer: while the process the record names holds the
	 * job's lock, give it the moment to become the job's; one that does not
	 * hold it is not the job's, and is refused at once */
	int alive = 0, held = lock_held(job->dir) == 1;
	deadline = svc_mono_ms() + LAUNCH_WAIT_MS;
	while (held && !(alive = adopted_alive((pid_t)pid, job->dir, run_uid)) &&
	       holds_job_lock((pid_t)pid, job->dir, run_uid) && svc_mono_ms() < deadline) {
		nanosleep(&ADOPT_POLL, NULL);
		held = lock_held(job->dir) == 1;
	}
	if (held && !alive) {
		snprintf(err, errlen, "its launch record names process %ld, which is not this job's "
		         "(another user's, or another command)", pid);
		return -1;
	}
	struct local_job *j = calloc(1, sizeof *j);
	if (!j || exec_job_copy(&j->job, job) != 0) {
		free(j);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	j->state = EXEC_RUNNING;
	j->pid = (pid_t)pid;
	j->run_uid = run_uid;
	j->is_child = 0;
	j->started_ms = launched_ms;   /* its time limit counts from its launch */
	pthread_mutex_lock(&lx->lock);
	if (find(lx, job->id)) {
		pthread_mutex_unlock(&lx->lock);
		job_free(j);
		snprintf(err, errlen, "job %lld is already with the executor", job->id);
		return -1;
	}
	j->next = lx->jobs;
	lx->jobs = j;
	if (adopted_running(j))
		emit(lx, j, EXEC_RUNNING, -1, "adopted after a restart");
	else
		finish_adopted(lx, j);
	pthread_mutex_unlock(&lx->lock);
	return 0;
}

static int local_cancel(struct executor *ex, long long id, char *err, size_t errlen)
{
	struct local *lx = (struct local *)ex;
	pthread_mutex_lock(&lx->lock);
	struct local_job *j = find(lx, id);
	if (!j) {
		pthread_mutex_unlock(&lx->lock);
		snprintf(err, errlen, "job %lld is not with the executor", id);
		return -1;
	}
	j->cancel_requested = 1;
	if (j->state == EXEC_QUEUED) {
		emit(lx, j, EXEC_CANCELLED, -1, "cancelled before it started");
		unlink_job(lx, j);
	} else if (!j->term_sent_ms) {
		signal_group(j, SIGTERM);
		j->term_sent_ms = svc_wall_ms();
	}
	pthread_mutex_unlock(&lx->lock);
	return 0;
}

/* Job slots a job takes: one per rank (each rank is a process with its
 * threads). */
/* 1 when j is a sweep's child and max_parallel of its siblings run. */
static int sweep_full(const struct local *lx, const struct local_job *j)
{
	if (j->job.sweep <= 0 || j->job.sweep_max_parallel <= 0)
		return 0;
	int n = 0;
	for (const struct local_job *o = lx->jobs; o; o = o->next)
		n += o->state == EXEC_RUNNING && o->job.sweep == j->job.sweep;
	return n >= j->job.sweep_max_parallel;
}

static int job_slots(const struct local_job *j)
{
	return j->job.ranks > 1 ? j->job.ranks : 1;
}

static void local_poll(struct executor *ex, exec_event_fn fn, void *ctx)
{
	struct local *lx = (struct local *)ex;
	pthread_mutex_lock(&lx->lock);
	long long now = svc_wall_ms();
	int running = 0;
	for (struct local_job *j = lx->jobs, *next; j; j = next) {
		next = j->next;
		if (j->state != EXEC_RUNNING)
			continue;
		if (j->is_child) {
			int st;
			pid_t r = waitpid(j->pid, &st, WNOHANG);
			if (r == j->pid) {
				finish(lx, j, WIFEXITED(st), WIFEXITED(st) ? WEXITSTATUS(st) : -1,
				       WIFSIGNALED(st) ? WTERMSIG(st) : 0);
				continue;
			}
		} else if (!adopted_running(j)) {
			finish_adopted(lx, j);
			continue;
		}
		running += job_slots(j);
		if (j->job.time_limit_s > 0 && !j->term_sent_ms &&
		    now - j->started_ms >= j->job.time_limit_s * 1000LL) {
			j->timed_out = 1;
			signal_group(j, SIGTERM);
			j->term_sent_ms = now;
		}
		if (j->term_sent_ms && !j->killed && now - j->term_sent_ms >= lx->cfg.grace_s * 1000LL) {
			signal_group(j, SIGKILL);
			j->killed = 1;
		}
	}
	for (struct local_job *j = lx->jobs, *next; j && running < lx->cfg.max_running; j = next) {
		next = j->next;
		if (j->state != EXEC_QUEUED)
			continue;
		/* a sweep's child past its sweep's max_parallel waits for a sibling
		 * to end; the jobs behind it go on */
		if (sweep_full(lx, j))
			continue;
		/* first come, first served: a job of more ranks than the free slots
		 * waits, and the jobs behind it with it (a stream of small jobs
		 * would starve it otherwise); one larger than the whole machine runs
		 * alone, oversubscribed */
		if (running > 0 && running + job_slots(j) > lx->cfg.max_running)
			break;
		if (now < j->retry_at_ms)
			break;                 /* the first in line waits to try again */
		char reason[EXEC_REASON_MAX];
		int rc = start(lx, j, reason, sizeof reason);
		if (rc == 0) {
			emit(lx, j, EXEC_RUNNING, -1, NULL);
			running += job_slots(j);
		} else if (rc > 0) {
			/* the disk full, out of processes: it stays queued and is tried
			 * again, later each time, up to a minute apart */
			long long wait = j->retry_wait_ms ? j->retry_wait_ms * 2 : RETRY_FIRST_MS;
			j->retry_wait_ms = wait < RETRY_MAX_MS ? wait : RETRY_MAX_MS;
			j->retry_at_ms = now + j->retry_wait_ms;
			static struct svc_log_limit limit;
			svc_log_limited(&limit, RETRY_LOG_MS, SVC_LOG_WARN, "job j-%06lld: cannot start "
			                "it now, trying again in %lld s: %s", j->job.id,
			                j->retry_wait_ms / 1000, reason);
			break;
		} else {
			emit(lx, j, EXEC_FAILED, -1, reason);
			unlink_job(lx, j);
		}
	}
	struct exec_events taken = lx->events;
	lx->events = (struct exec_events){ 0 };
	pthread_mutex_unlock(&lx->lock);
	exec_events_deliver(&taken, fn, ctx);   /* outside the lock: it writes the database */
}

static int local_count(struct executor *ex)
{
	struct local *lx = (struct local *)ex;
	pthread_mutex_lock(&lx->lock);
	int n = 0;
	for (struct local_job *j = lx->jobs; j; j = j->next)
		n++;
	pthread_mutex_unlock(&lx->lock);
	return n;
}

static void local_free(struct executor *ex)
{
	struct local *lx = (struct local *)ex;
	for (struct local_job *j = lx->jobs, *next; j; j = next) {
		next = j->next;
		job_free(j);
	}
	exec_events_release(&lx->events);
	free(lx->trainer_path);
	free(lx->mpirun_path);
	free(lx->server_url);
	free(lx->env_ca);
	for (int i = 0; i < lx->n_roots; i++)
		free(lx->roots[i]);
	pthread_mutex_destroy(&lx->lock);
	free(lx);
}

static int local_has(struct executor *ex, long long id)
{
	struct local *lx = (struct local *)ex;
	pthread_mutex_lock(&lx->lock);
	int found = find(lx, id) != NULL;
	pthread_mutex_unlock(&lx->lock);
	return found;
}

/* The jobs run on this machine: its physical memory. */
static int local_host_memory(struct executor *ex, const char *partition, double *bytes)
{
	(void)ex;
	(void)partition;
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || size <= 0)
		return -1;
	*bytes = (double)pages * (double)size;
	return 0;
}

static const struct executor_ops local_ops = {
	.name = "local",
	.submit = local_submit,
	.adopt = local_adopt,
	.cancel = local_cancel,
	.poll = local_poll,
	.count = local_count,
	.free = local_free,
	.has = local_has,
	.host_memory = local_host_memory,
};

/* The absolute path of an executable called name in PATH (malloc'd), or NULL. */
static char *find_in_path(const char *name)
{
	const char *path = trn_env_str("PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");
		char buf[EXEC_PATH_MAX + 64];
		if (n > 0 && n < EXEC_PATH_MAX) {
			snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, name);
			if (access(buf, X_OK) == 0)
				return strdup(buf);
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return NULL;
}

struct executor *exec_local_new(const struct exec_local_config *cfg, char *err, size_t errlen)
{
	if (!cfg->trainer_path || access(cfg->trainer_path, X_OK) != 0) {
		snprintf(err, errlen, "trainer %s: %s", cfg->trainer_path ? cfg->trainer_path : "(none)",
		         cfg->trainer_path ? strerror(errno) : "not configured");
		return NULL;
	}
	struct local *lx = calloc(1, sizeof *lx);
	if (!lx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	lx->base.ops = &local_ops;
	lx->cfg = *cfg;
	if (lx->cfg.max_running < 1)
		lx->cfg.max_running = 1;
	if (lx->cfg.grace_s <= 0)
		lx->cfg.grace_s = 30;
	lx->trainer_path = strdup(cfg->trainer_path);
	lx->server_url = cfg->server_url ? strdup(cfg->server_url) : NULL;
	lx->mpirun_path = find_in_path("mpirun");
	int oom = 0;
	if (cfg->ca_file && asprintf(&lx->env_ca, "LARCH_CA=%s", cfg->ca_file) < 0) {
		lx->env_ca = NULL;
		oom = 1;
	}
	lx->cfg.ca_file = NULL;             /* copied into env_ca */
	for (int i = 0; i < cfg->n_data_roots && i < EXEC_DATA_ROOTS_MAX; i++)
		oom |= !(lx->roots[lx->n_roots++] = strdup(cfg->data_roots[i]));
	lx->cfg.data_roots = NULL;          /* borrowed for the call only */
	pthread_mutex_init(&lx->lock, NULL);
	if (oom || !lx->trainer_path || (cfg->server_url && !lx->server_url)) {
		local_free(&lx->base);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	return &lx->base;
}
