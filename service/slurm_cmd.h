/* service/slurm_cmd.h - running Slurm's command-line tools (sbatch, squeue,
 * scontrol, scancel, sinfo, sacct): argv without a shell, a hard timeout,
 * stdout and stderr captured.
 *
 * The child runs in its own process group with the default signal mask and
 * dispositions (larchd blocks SIGTERM/SIGINT in its threads), stdin from
 * /dev/null, no other inherited descriptors. Slurm's commands find the
 * cluster as usual (SLURM_CONF, /etc/slurm). On timeout the whole group gets
 * SIGKILL; with slurmctld down a command blocks ~9 s before it fails, so
 * callers pass timeouts of that order and never call from an HTTP thread
 * (service/executor_slurm.c calls from its own thread).
 *
 * Every call is counted by command (larch_slurm_calls_total in /metrics);
 * the Slurm executor's poll cycles are timed here too (slurm_poll_record).
 * Thread-safe.
 */
#ifndef LARCH_SERVICE_SLURM_CMD_H
#define LARCH_SERVICE_SLURM_CMD_H

#include <stddef.h>

#define SLURM_CMD_OUT_MAX (64u << 20)  /* stdout beyond this is a failure */
#define SLURM_CMD_ERR_MAX 4096         /* stderr kept (the rest is read and dropped) */

struct slurm_cmd_result {
	int status;        /* exit code; -1 when it did not exit normally (timeout, signal,
	                      could not start) */
	int timed_out;     /* 1 when killed after timeout_ms */
	char *out;         /* stdout, NUL-terminated (malloc'd; "" when none) */
	size_t out_len;
	char err[SLURM_CMD_ERR_MAX];   /* stderr, trimmed, or why it could not run */
};

/* Runs argv[0] (looked up in PATH) with argv. Returns 0 when it ran and
 * exited 0, else -1 (res says why: status, timed_out, err). res must be
 * released with slurm_cmd_release either way. */
int slurm_cmd_run(const char *const argv[], int timeout_ms, struct slurm_cmd_result *res);
void slurm_cmd_release(struct slurm_cmd_result *res);

/* One line describing a failed call into buf: "squeue: timed out after 10 s",
 * "sbatch: exit 1: sbatch: error: invalid partition specified: nope". */
void slurm_cmd_describe(const char *const argv[], const struct slurm_cmd_result *res,
                        char *buf, size_t len);

/* Calls made so far, by command; libslurm's submissions (slurm_submit.h)
 * count as "slurm_submit_batch_job". */
enum slurm_cmd_kind {
	SLURM_CMD_SBATCH, SLURM_CMD_SQUEUE, SLURM_CMD_SCONTROL, SLURM_CMD_SCANCEL,
	SLURM_CMD_SINFO, SLURM_CMD_SACCT, SLURM_CMD_API_SUBMIT, SLURM_CMD_OTHER, SLURM_CMD_KINDS
};
const char *slurm_cmd_kind_name(enum slurm_cmd_kind k);
unsigned long long slurm_cmd_calls(enum slurm_cmd_kind k);
/* Counts a call made otherwise than by slurm_cmd_run. */
void slurm_cmd_count(enum slurm_cmd_kind k);

/* The Slurm executor's poll cycles (one squeue, its rows applied to the jobs
 * followed, and the jobs it no longer lists looked up), for /metrics: larch_slurm_poll_seconds (a histogram of
 * their wall time over slurm_poll_bounds) and
 * larch_slurm_poll_cpu_seconds_total (the polling thread's CPU time in
 * them, squeue's own not counted). */
#define SLURM_POLL_BUCKETS 11
extern const double slurm_poll_bounds[SLURM_POLL_BUCKETS];   /* seconds, ascending */

struct slurm_poll_stats {
	unsigned long long count;
	unsigned long long le[SLURM_POLL_BUCKETS];   /* cycles of at most each bound */
	double wall_s, cpu_s;                        /* sums */
};

void slurm_poll_record(double wall_s, double cpu_s);
void slurm_poll_get(struct slurm_poll_stats *out);

#endif
