/* service/child_run.h - one program run as a child of larchd, as a given
 * Unix user, its output read back with a deadline: what the preflight's
 * probe (preflight.c) and an export (export.c) are.
 *
 * The child gets its own process group, an empty signal mask and SIGPIPE's
 * default, stdin from stdin_fd (or /dev/null), stdout (and stderr with
 * stderr_too, else /dev/null) into a pipe larchd reads, no other open fd;
 * then optional resource limits, the user's groups, gid and uid
 * (svc_unix_id_become), the directory dir, make_dir made there as that
 * user, umask 022, and execve of argv with envp and nothing else. A child
 * that fails before exec exits with one of the SVC_CHILD_EXIT_* codes.
 *
 * svc_child_run reads the output until it ends, the deadline passes, or
 * stop_fd becomes readable, keeping the first (keep_tail 0: reading stops
 * once output_max bytes came, as if the output had ended) or the last
 * (keep_tail 1) output_max bytes. A child whose output ended is given
 * exit_wait_ms to exit; one that does not, or that timed out or was
 * stopped, has its process group killed (SIGKILL). An exited child is
 * reaped; a killed one is reaped too, or, when gone is set, handed to gone
 * unreaped (the caller reaps it later: a process stuck in the kernel may
 * never end, and the caller's thread is not to wait for it).
 *
 * While it runs its pid is published in *running (under lock, when lock is
 * set), so that the caller's shutdown may kill its process group from
 * another thread; a *closing already set then stops it at once. *running
 * goes back to 0 before the child is reaped or handed to gone (called with
 * lock held).
 *
 * Blocks the calling thread; meant for worker threads. Safe on many
 * threads at once (the child makes only async-signal-safe calls).
 */
#ifndef LARCH_SERVICE_CHILD_RUN_H
#define LARCH_SERVICE_CHILD_RUN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "identity.h"

/* How a child that never reached exec exits. */
#define SVC_CHILD_EXIT_DIR 125     /* cannot enter dir or make make_dir */
#define SVC_CHILD_EXIT_USER 126    /* cannot set up its fds or become id */
#define SVC_CHILD_EXIT_EXEC 127    /* execve failed */

struct svc_child_spec {
	char *const *argv;             /* argv[0]: the program's path; NULL-terminated */
	char *const *envp;             /* the whole environment; NULL-terminated */
	const struct svc_unix_id *id;  /* NULL: as larchd's user */
	const char *dir;               /* entered as id; NULL: "/" */
	const char *make_dir;          /* NULL, or a directory made (0755) in dir as id when
	                                  missing */
	int stdin_fd;                  /* its stdin (dup'ed, the caller keeps it); -1: /dev/null */
	int stderr_too;                /* 1: stderr into the output as well; 0: /dev/null */
	unsigned cpu_s;                /* 0: no limit; else RLIMIT_CPU cpu_s, no file written
	                                  (RLIMIT_FSIZE 0) and no core */
	int64_t timeout_ms;            /* from the start: then it is killed */
	int stop_fd;                   /* readable: kill it now; -1: none */
	size_t output_max;             /* bytes of output kept (> 0) */
	int keep_tail;                 /* 1: the last output_max bytes; 0: the first */
	unsigned exit_wait_ms;         /* after its output ended, before it is killed */
	pthread_mutex_t *lock;         /* NULL: the pid is not published */
	pid_t *running;                /* the child's pid while it runs, else 0; under lock */
	const int *closing;            /* nonzero when it is published: it is stopped at once */
	void (*gone)(void *arg, pid_t pid);   /* NULL: a killed child is reaped here */
	void *gone_arg;
};

struct svc_child_result {
	int output_ended;              /* its output ended (or the first output_max bytes came) */
	int timed_out;                 /* killed at the deadline */
	int stopped;                   /* killed for stop_fd or *closing */
	int reaped;                    /* 1: status is its wait status; 0: handed to gone */
	int status;                    /* as waitpid's (WIFEXITED, WEXITSTATUS, WTERMSIG) */
	char *output;                  /* output_len bytes and a NUL; owned: release */
	size_t output_len;
	char why[128];                 /* when it could not start: "fork: ..." */
};

/* Runs spec's child to its end (above). 0 with *r filled, or -1 when it
 * could not start (r->why says why; r holds nothing to release).
 * Borrows spec and everything it points to. */
int svc_child_run(const struct svc_child_spec *spec, struct svc_child_result *r);

/* Frees r's output. Accepts a zeroed result. */
void svc_child_result_release(struct svc_child_result *r);

#endif
