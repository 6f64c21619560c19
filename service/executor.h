/* service/executor.h - where jobs run: one interface, one implementation per
 * executor (executor_local.c: child processes; executor_slurm.c: sbatch).
 *
 * The executor knows nothing of the database. larchd hands it jobs that are
 * stored and validated, asks it to cancel them, and polls it for what changed;
 * each change comes back as an exec_event, which larchd turns into a job state
 * transition. After a restart larchd adopts the jobs its database says were
 * queued or running, and the executor finds them again (or finds them gone):
 * nothing is started twice and nothing acknowledged is lost.
 *
 * A job's directory holds spec.json (written before submit), stdout.log,
 * stderr.log, the trainer's metrics.jsonl, result.json and checkpoints/, and
 * the executor's own launch record (see executor_local.c).
 */
#ifndef LARCH_SERVICE_EXECUTOR_H
#define LARCH_SERVICE_EXECUTOR_H

#include <stddef.h>
#include <sys/types.h>

#define EXEC_PATH_MAX 4096
#define EXEC_REASON_MAX 256
#define EXEC_DATA_ROOTS_MAX 16         /* directories a confined job may read (data_roots) */

enum exec_state {
	EXEC_QUEUED,                   /* accepted, waiting for a slot */
	EXEC_RUNNING,
	EXEC_COMPLETED,                /* exit 0 */
	EXEC_FAILED,                   /* non-zero exit, killed, or lost */
	EXEC_CANCELLED,                /* ended after exec_cancel */
	EXEC_TIMEOUT,                  /* ended after its time limit */
	EXEC_HELD,                     /* Slurm holds it (scontrol hold, or held at submit) */
	EXEC_REQUEUED,                 /* it ran and waits to run again (scontrol requeue,
	                                  node failure); a new attempt follows */
	EXEC_PREEMPTED,                /* Slurm preempted it; a new attempt follows */
	EXEC_LOST,                     /* the executor lost it before its end (Slurm forgot it:
	                                  slurmctld lost its state) and hands it over again;
	                                  started: it may have run (a new attempt follows), else
	                                  it provably never started */
};

const char *exec_state_name(enum exec_state s);
/* 1 when errno e passes (a full disk, out of processes or descriptors): a
 * job that could not be handed over or started for it waits and is tried
 * again, never failed. */
int exec_errno_transient(int e);
/* 1 for COMPLETED, FAILED, CANCELLED and TIMEOUT. */
int exec_state_final(enum exec_state s);

/* A job as its executor sees it. dir and init_path are malloc'd and owned
 * by the exec_job: whoever fills one frees them with exec_job_release. An
 * executor borrows the exec_job handed to submit, adopt or submit_sweep
 * for the call only, and keeps its own copy (exec_job_copy), so that a
 * job it holds takes the memory its paths need, not EXEC_PATH_MAX each. */
struct exec_job {
	long long id;                  /* larch job id (numeric part) */
	char *dir;                     /* the job directory; exists and holds spec.json
	                                  (shorter than EXEC_PATH_MAX) */
	int ranks;                     /* processes (1 until data parallel lands) */
	int min_ranks;                 /* parallel.elastic.min_ranks: it may start on fewer
	                                  ranks, down to this; 0 = exactly ranks */
	long time_limit_s;             /* 0 = none */
	char token[128];               /* the job's token for LARCH_JOB_TOKEN; "" = no reporting */
	/* what Slurm is asked for (the spec's resources, validated names; ""/0 = unset,
	 * the executor's default) */
	char partition[65], qos[65], account[65];
	int nodes, cpus_per_task, gpus_per_node;
	long long mem_mb;              /* 0 = unset */
	/* who it runs as (service/identity.h): "" = larchd's own user; else the
	 * Unix user (run_as owner), looked up when it starts */
	char unix_user[33];
	/* 1: its trainer may read input files only under the executor's
	 * data_roots and init_path (a user-role job of run_as service) */
	int confine;
	char *init_path;               /* a checkpoint larchd resolved for init (NULL none):
	                                  readable even when confined */
	char ext_id[32];               /* adopt: the Slurm id larchd recorded ("" none yet) */
	long long sweep;               /* the sweep it is a child of (0: none) */
	int sweep_max_parallel;        /* at most this many of the sweep's children run at
	                                  once (0: no limit); the rest wait QUEUED */
	int sweep_index;               /* its index in the sweep (0-based) */
};

/* A copy of src into dst with its own paths: 0, or -1 out of memory (dst
 * then holds no paths). */
int exec_job_copy(struct exec_job *dst, const struct exec_job *src);
/* Frees job's paths (NULL after) and wipes its token; accepts a zeroed one. */
void exec_job_release(struct exec_job *job);

struct exec_event {
	long long id;
	enum exec_state state;
	int exit_code;                 /* process exit code; -1 when unknown */
	pid_t pid;                     /* 0 when not started (or not a local process) */
	int started;                   /* the job's program ran (a final event may come
	                                  without a RUNNING one before it) */
	char ext_id[32];               /* the Slurm job id ("" for the local executor) */
	char partition[65];            /* the Slurm partition it is in, as Slurm says ("" when
	                                  not known, and for the local executor) */
	char node_list[256];           /* the nodes Slurm gave it, as NodeList says
	                                  ("node[1-2]"; "" when not known yet, and for the
	                                  local executor); the last attempt's while it waits */
	long long time_ms;             /* when the executor saw it (ms since the epoch) */
	char reason[EXEC_REASON_MAX];  /* "exit 1", "killed by signal 9", ... ("" when none) */
	int note;                      /* 1: no change of state: why the job waits changed
	                                  (Slurm's pending reason); reason says it */
};

typedef void (*exec_event_fn)(void *ctx, const struct exec_event *ev);

/* For the executors: the events one has seen and its poll has not yet
 * handed out, in order, guarded by the executor's own lock. Zeroed is
 * empty. */
struct exec_events {
	struct exec_event *ev;
	int n, cap;
};
/* A new event at the end of q: zeroed but for id, state, exit_code and
 * time_ms (now, Unix ms). NULL when out of memory: the event is lost (said
 * on stderr), the job's state stays visible to the reconciler's next look. */
struct exec_event *exec_events_add(struct exec_events *q, long long id, enum exec_state state,
                                   int exit_code);
/* Hands q's events to fn in order and empties q. The caller takes them
 * out under its lock (taken = *q, *q = empty) and calls this outside it:
 * fn may write the database. */
void exec_events_deliver(struct exec_events *taken, exec_event_fn fn, void *ctx);
void exec_events_release(struct exec_events *q);

struct executor;

struct executor_ops {
	const char *name;
	/* Accepts a job; it starts when a slot is free. 0, or -1 with err. */
	int (*submit)(struct executor *ex, const struct exec_job *job, char *err, size_t errlen);
	/* Takes back a job larchd had handed over before a restart: finds its
	 * process if it runs, reads its result if it ended, queues it again if it
	 * never started. 0, or -1 with err. */
	int (*adopt)(struct executor *ex, const struct exec_job *job, char *err, size_t errlen);
	/* Stops a job: a queued one at once, a running one with SIGTERM to its
	 * process group (the trainer checkpoints), SIGKILL after the grace time.
	 * -1 with err when the job is unknown. */
	int (*cancel)(struct executor *ex, long long id, char *err, size_t errlen);
	/* Starts what fits, reaps what ended, enforces time limits and grace
	 * times, and reports every change since the last poll through fn. */
	void (*poll)(struct executor *ex, exec_event_fn fn, void *ctx);
	/* Jobs it holds (queued or running). */
	int (*count)(struct executor *ex);
	void (*free)(struct executor *ex);

	/* 0: submit means queued (the runner records QUEUED when submit returns).
	 * 1: submit only takes the job; it is QUEUED once the executor reports an
	 * EXEC_QUEUED event (with ext_id): Slurm took it. Until then the job stays
	 * PENDING, and survives the executor's outages so. */
	int async_submit;
	/* Optional. 1 if the executor holds job id (submitted, being handed over,
	 * or followed). */
	int (*has)(struct executor *ex, long long id);
	/* Optional. 1 when the executor works, 0 when degraded (detail says why,
	 * "slurmctld unreachable since ..."). */
	int (*health)(struct executor *ex, char *detail, size_t len);
	/* Optional. Whether a job may ask for this partition: 1 yes, 0 no (err
	 * says why), -1 cannot tell now (accepted; the executor decides later). */
	int (*partition_ok)(struct executor *ex, const char *partition, char *err, size_t errlen);
	/* Optional. Host memory of one node of partition (NULL or "": the
	 * default one), the smallest where nodes differ: 0 with *bytes, or -1
	 * when not known (yet). */
	int (*host_memory)(struct executor *ex, const char *partition, double *bytes);
	/* Optional. Job id, handed over but not yet QUEUED, was held by larch:
	 * one Slurm has not been asked about is withdrawn (exec_has says 0
	 * after; released, it is handed over again); one whose submission is
	 * under way is submitted held or held once Slurm answers (its EXEC_QUEUED
	 * event then finds it HELD). 0, or -1 with err when the job is unknown. */
	int (*hold)(struct executor *ex, long long id, char *err, size_t errlen);
	/* Optional. Accepts jobs[0..n), children of one sweep, as one unit (a
	 * Slurm job array): all of them or, -1 with err, none. Without it each
	 * child is submitted on its own. As submit otherwise (async_submit). */
	int (*submit_sweep)(struct executor *ex, const struct exec_job *jobs, int n, char *err,
	                    size_t errlen);
	/* Optional. Stops every child of sweep that it holds, as one order where
	 * it can (scancel of the whole array); each still ends with its own
	 * event. Returns how many it holds. */
	int (*cancel_sweep)(struct executor *ex, long long sweep);
};

struct executor {
	const struct executor_ops *ops;
};

struct exec_local_config {
	const char *trainer_path;      /* larch-train */
	const char *server_url;        /* LARCH_SERVER_URL for the jobs; NULL = no reporting */
	const char *ca_file;           /* LARCH_CA for the jobs that report (an absolute path
	                                  they can read); NULL = none, the system's CA store */
	int max_running;               /* slots (>= 1): a job takes one per rank */
	int grace_s;                   /* SIGTERM -> SIGKILL (default 30) */
	int threads_per_job;           /* --threads for each job; 0 = the trainer's default */
	int report_flush_s;            /* LARCH_REPORT_FLUSH_S for jobs that report (the seconds
	                                  their final flush may take; keep it well under grace_s);
	                                  0 = the trainer's default */
	const char *const *data_roots; /* for confined jobs (exec_job.confine): canonical dirs */
	int n_data_roots;
};

/* The embedded executor: child processes on this machine. Returns NULL with
 * err filled. The config's strings are copied. */
struct executor *exec_local_new(const struct exec_local_config *cfg, char *err, size_t errlen);

enum exec_slurm_submit {
	EXEC_SLURM_SUBMIT_AUTO,        /* libslurm when built with it and slurm.conf is readable */
	EXEC_SLURM_SUBMIT_LIBSLURM,    /* libslurm or fail */
	EXEC_SLURM_SUBMIT_SBATCH,      /* an sbatch process per job */
};

/* How the batch script starts a job of several ranks. */
enum exec_slurm_mpi {
	EXEC_SLURM_MPI_AUTO,           /* pmix when the node's srun lists it, else mpirun
	                                  where there is one, else none */
	EXEC_SLURM_MPI_PMIX,           /* srun --mpi=pmix */
	EXEC_SLURM_MPI_MPIRUN,         /* Open MPI's mpirun inside the allocation */
	EXEC_SLURM_MPI_NONE,           /* srun --mpi=none: the ranks meet over TCP (comm_tcp.c) */
};

struct exec_slurm_config {
	const char *trainer_path;      /* larch-train, as the compute node sees it */
	const char *server_url;        /* LARCH_SERVER_URL for the jobs; NULL = no reporting */
	const char *ca_file;           /* as for the local executor; the same path on the nodes */
	const char *state_dir;         /* larchd's; its instance id lives there */
	const char *partition, *account, *qos;   /* defaults; NULL/"" = Slurm's */
	int poll_ms;                   /* between squeue calls (>= 100) */
	int timeout_s;                 /* a Slurm command running longer is killed */
	int submit_parallel;           /* submissions at once */
	enum exec_slurm_submit submit_via;
	enum exec_slurm_mpi mpi;
	int grace_s;                   /* --signal=B:USR1@grace before the time limit */
	int report_flush_s;            /* as for the local executor */
	const char *const *data_roots; /* as for the local executor */
	int n_data_roots;
};

/* The Slurm executor: sbatch, one squeue per poll for every job, scancel;
 * see executor_slurm.c. It runs Slurm's commands on its own thread. Returns
 * NULL with err filled. */
struct executor *exec_slurm_new(const struct exec_slurm_config *cfg, char *err, size_t errlen);
/* "libslurm" or "sbatch": how a Slurm executor hands jobs over. */
const char *exec_slurm_submits_with(const struct executor *ex);

/* dispatch helpers */
int exec_submit(struct executor *ex, const struct exec_job *job, char *err, size_t errlen);
int exec_adopt(struct executor *ex, const struct exec_job *job, char *err, size_t errlen);
int exec_cancel(struct executor *ex, long long id, char *err, size_t errlen);
void exec_poll(struct executor *ex, exec_event_fn fn, void *ctx);
int exec_count(struct executor *ex);
int exec_has(struct executor *ex, long long id);
int exec_health(struct executor *ex, char *detail, size_t len);
int exec_partition_ok(struct executor *ex, const char *partition, char *err, size_t errlen);
int exec_host_memory(struct executor *ex, const char *partition, double *bytes);
int exec_hold(struct executor *ex, long long id, char *err, size_t errlen);
/* submit_sweep where the executor has it, else exec_submit of each job (on
 * a refusal, the jobs before it stay submitted: -1 with *taken of them). */
int exec_submit_sweep(struct executor *ex, const struct exec_job *jobs, int n, int *taken,
                      char *err, size_t errlen);
/* cancel_sweep where the executor has it; else 0 (cancel each child). */
int exec_cancel_sweep(struct executor *ex, long long sweep);
void exec_free(struct executor *ex);   /* accepts NULL; running jobs keep running */

#endif
