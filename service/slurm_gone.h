/* service/slurm_gone.h - what became of a job that squeue no longer lists
 * (executor_slurm_gone.c), for the Slurm executor's poll.
 *
 * First Slurm is asked about the Slurm id larch recorded: scontrol (a job
 * that ended less than MinJobAge ago), then the job completion log (sacct
 * -c). A record counts only when it is this job's: its name (the larch id
 * in "larch-<instance>-j-000123") and its user are the job's. Slurm's ids
 * are not: slurmctld restarted on a state saved before it handed them out
 * gives the same ids to other jobs, and another larchd or user may have
 * had the id before.
 *
 * When Slurm has no record of the job, it forgot it (slurmctld lost its
 * state: killed before it saved the jobs it had just taken). What the job
 * left in its directory then says what it may have done:
 *   - slurm-attempt: the batch script's first line (written as the job's
 *     user, before anything else runs), the launch record;
 *   - stdout.log, stderr.log: opened by slurmstepd when it launched the
 *     script;
 *   - metrics.jsonl, result.json, checkpoints/step-*.safetensors: the
 *     trainer's.
 * slurm_gone_decide turns that into a verdict: never started (none of
 * them): handed over again as it is; may have run: handed over again as a
 * new attempt, which resumes from its newest checkpoint (larch-train does
 * that by itself), once the attempt is over; ended by itself (result.json
 * completed or failed): that end; and FAILED once Slurm has lost the same
 * job SLURM_GONE_MAX_LOST times.
 *
 * Over: the attempt Slurm forgot may still run on its node (slurmd keeps
 * running what slurmctld forgot until slurmctld, back, tells it to kill
 * what it does not know), and two attempts in one job directory would
 * write the same checkpoints. An attempt that ends by itself leaves
 * result.json newer than its launch record (completed, failed, or
 * interrupted: checkpointed on SIGTERM); one killed with SIGKILL leaves
 * nothing, so the executor waits SLURM_GONE_SETTLE_MS after it found the
 * job forgotten before it takes the attempt for over.
 */
#ifndef LARCH_SERVICE_SLURM_GONE_H
#define LARCH_SERVICE_SLURM_GONE_H

#include <stddef.h>

#define SLURM_GONE_MAX_LOST 3         /* handed over again at most this many times */
#define SLURM_GONE_SETTLE_MS 30000    /* an attempt with no result is over after this */

/* The job asked about; the strings are borrowed. */
struct slurm_gone_job {
	const char *sid;              /* the Slurm id larch recorded; "" or "?": none */
	const char *name;             /* its Slurm job name */
	const char *user;             /* its Unix user, as Slurm names it */
	const char *dir;              /* its job directory */
};

/* What Slurm still knows of the job. */
struct slurm_gone_record {
	int found;                    /* a record of this job (its name and user) */
	char state[32];               /* Slurm's state ("COMPLETED", "RUNNING", ...) */
	char reason[128], partition[65];
	int exit_code, signo;         /* -1 and 0 when not said */
};

/* 1 when a record of Slurm named `name`, of user `user`, is j's: both are
 * j's (an id seen again for another job is never taken for this one). */
int slurm_gone_ours(const char *name, const char *user, const struct slurm_gone_job *j);

/* Reads `scontrol -o show job` output into rec when it is j's job. Returns
 * rec->found. */
int slurm_gone_scontrol(const char *out, const struct slurm_gone_job *j,
                        struct slurm_gone_record *rec);

/* Reads `sacct -c -n -P -o JobID,JobName,User,State,ExitCode,Partition`
 * output (modified in place; the completion log's User is "alice(1001)")
 * into rec: the last line of j's Slurm id that is j's (a requeued job has
 * several). Returns rec->found. */
int slurm_gone_sacct(char *out, const struct slurm_gone_job *j, struct slurm_gone_record *rec);

/* Asks scontrol, then sacct -c, each under timeout_ms (service/slurm_cmd.h).
 * Runs commands: call it without locks held. */
void slurm_gone_ask(const struct slurm_gone_job *j, int timeout_ms,
                    struct slurm_gone_record *rec);

/* What a job left in its directory. */
struct slurm_gone_traces {
	int launched;                 /* slurm-attempt */
	int output;                   /* stdout.log or stderr.log */
	int metrics;                  /* metrics.jsonl */
	int reported;                 /* the trainer reported to larchd (the runner's to say) */
	char result[32];              /* result.json's status; "" none */
	int result_fresh;             /* result.json is no older than slurm-attempt: the
	                                 last attempt's end */
	long checkpoint;              /* the newest checkpoint's step; -1 none */
};

/* Reads dir (service/jobfs.h) into t. */
void slurm_gone_look(const char *dir, struct slurm_gone_traces *t);

/* 1 when t shows the job may have started (any trace of it), else 0. */
int slurm_gone_may_have_run(const struct slurm_gone_traces *t);

enum slurm_gone_verdict {
	SLURM_GONE_RESUBMIT,          /* never started: handed over again as it is */
	SLURM_GONE_REQUEUE,           /* may have run: handed over again, a new attempt */
	SLURM_GONE_WAIT,              /* may be running still: asked again later */
	SLURM_GONE_COMPLETED,         /* result.json says completed */
	SLURM_GONE_FAILED,            /* ended by itself, or lost too often */
};

/* The verdict on a job Slurm forgot that left t, whose Slurm id was sid
 * ("" or "?": unknown), lost `lost` times before; settled: it was found
 * forgotten SLURM_GONE_SETTLE_MS ago or more. why says it in a line. */
enum slurm_gone_verdict slurm_gone_decide(const struct slurm_gone_traces *t, const char *sid,
                                          int lost, int settled, char *why, size_t len);

#endif
