/* service/executor_slurm.c - the Slurm executor: jobs handed to a Slurm
 * cluster with sbatch, followed with one squeue per poll interval for all of
 * them, stopped with scancel.
 *
 * Every Slurm command runs on this executor's own thread (service/slurm_cmd.h:
 * no shell, a timeout), never on the caller's: submit, adopt and cancel only
 * record what is wanted and wake the thread, poll only hands over the events
 * the thread observed. With slurmctld down the thread keeps retrying; larchd
 * keeps serving from its database, jobs handed over meanwhile stay PENDING
 * (this executor submits asynchronously, executor.h), and health() says
 * degraded.
 *
 * Identity. Slurm's job ids restart on a clean cluster, and several larchd
 * may share one cluster, so a job is known by its name:
 * "larch-<instance>-j-000123", where the instance id is made once per state
 * dir (STATE/instance-id; service/slurm_name.h). Once sbatch answered, the Slurm id is also kept in
 * DIR/slurm-job-id (for people; in the database by the runner, and only the
 * database's is believed: a job's owner may rewrite the file). A job is
 * matched to squeue's rows by its name and its Unix user: another user may
 * name a job of theirs after it.
 *
 * Never submitted twice. A job whose sbatch failed in a way that may have
 * reached slurmctld (a timeout, a lost connection), or whose submission
 * larchd may have been killed in (adopted without a Slurm id recorded), is
 * looked up by name in the next squeue that works before it is submitted
 * again: found, it is followed; not found, it is submitted only if its batch
 * script never started (DIR/slurm-attempt is written by the script's first
 * line), else its end is taken from Slurm's accounting (sacct -c) or from
 * DIR/result.json.
 *
 * The batch script (DIR/slurm.sh) is written from validated values only,
 * each single-quoted; the user's strings (names in the spec) never reach it
 * or a shell: Slurm's options are sbatch's argv. It reads the job token from
 * DIR/job-token (0600) so the token is in no command line or Slurm record,
 * and exits with the trainer's status. sbatch gets --requeue and, with a
 * time limit, --signal=B:USR1@grace: the script forwards that USR1 to the
 * step, larch-train writes a checkpoint and exits 3, and the script waits
 * for the limit so that Slurm ends the job as TIMEOUT (resubmitting it
 * resumes). On TERM (scancel, scontrol requeue, preemption) Slurm signals
 * the step itself: larch-train checkpoints and exits, and a requeued job's
 * next attempt resumes from that checkpoint (larch-train resumes from the
 * newest checkpoint in its job directory by itself).
 *
 * States (squeue's, edge-triggered: an event only when the larch-side state
 * changes): PENDING -> QUEUED, or HELD when the reason is JobHeld*;
 * CONFIGURING/RUNNING/COMPLETING/SUSPENDED/... -> RUNNING; REQUEUED,
 * REQUEUE_HOLD and a restart count that grew -> REQUEUED, or PREEMPTED when
 * slurmstepd wrote that preemption ended the attempt (attempt_preempted);
 * COMPLETED, FAILED, CANCELLED, TIMEOUT/DEADLINE, NODE_FAIL, OUT_OF_MEMORY,
 * BOOT_FAIL, and PREEMPTED (ended by preemption, not requeued) -> final, with
 * the exit code (squeue's raw wait status) and Slurm's state and reason in
 * the event's reason. A job squeue no
 * longer lists (MinJobAge passed) is asked of scontrol, then sacct -c, each
 * record taken only where its name and user are the job's; one Slurm has
 * no record of was forgotten (slurmctld lost its state), and what it left
 * in its directory decides (service/slurm_gone.h): never started, it is
 * submitted again (EXEC_LOST); it may have run, it is submitted again as
 * a new attempt (EXEC_LOST, started), which resumes from its newest
 * checkpoint; else it ended as its result.json says, or FAILED. Cancels
 * and holds go only to ids the last squeue listed as the job's: Slurm hands
 * a forgotten job's id to the next job it takes.
 */
#include "executor.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "identity.h"
#include "jobfs.h"
#include "log.h"
#include "slurm_array.h"
#include "slurm_cmd.h"
#include "slurm_gone.h"
#include "slurm_name.h"
#include "slurm_submit.h"

#define SUBMIT_BATCH 256          /* sbatch calls per pass at most */
#define PARTITIONS_MS 30000       /* sinfo at most this often */
#define MISSING_POLLS 2           /* absent from this many squeues: ask scontrol */
#define BACKOFF_MAX_MS 10000

enum phase {
	PH_SUBMIT,                    /* to sbatch (at next_try_ms) */
	PH_SUBMITTING,                /* an sbatch runs for it now */
	PH_LOOKUP,                    /* maybe in Slurm: look for its name first */
	PH_FOLLOW,                    /* Slurm has it as sid */
};

struct sjob {
	struct exec_job job;          /* its own copy, token wiped: owns its paths */
	struct svc_unix_id owner;     /* job.unix_user's, when set (run_as owner) */
	int as_owner;
	enum phase phase;
	char sid[32];
	char name[64];                /* Slurm's job name */
	int cancel, cancel_sent;
	int hold, hold_sent;          /* held by larch before Slurm took it: submitted held,
	                                 or scontrol hold once Slurm answered */
	int last;                     /* last enum exec_state reported; -1 none */
	int restarts;                 /* RestartCnt seen */
	int seen_running, missing, tries;
	int lost;                     /* times Slurm forgot it and it was submitted again */
	long long forgot_ms;          /* when Slurm was found to have no record of it (0: not) */
	int await_restart;            /* requeued as restart N: RUNNING rows are the old
	                                 attempt ending until its script starts again */
	long long next_try_ms;
	char wait_reason[64];         /* squeue's reason while it waits, as last said */
	char partition[65];           /* the partition Slurm has it in, as last said ("") */
	char nodes[256];              /* the nodes Slurm gave it, as last said ("" none yet) */
	char requeued_from[256];      /* requeued not by preemption: the nodes of the attempt
	                                 that ended, until explain_requeues asked why ("") */
	int requeue_asks;             /* the polls explain_requeues asks it in, left */
	char submit_err[EXEC_REASON_MAX];   /* a permanent sbatch failure, set by a worker */
	/* a sweep's child: task `task` of a job array named after the sweep;
	 * the children handed over together share a group, submitted as one
	 * array. sid is then "<array id>_<task>". */
	int task;                     /* -1: a job of its own */
	long long group;
	struct sjob *next;
};

static void sjob_free(struct sjob *j)
{
	if (j)
		exec_job_release(&j->job);
	free(j);
}

struct slurm_ex {
	struct executor base;         /* first: a struct executor * is a struct slurm_ex * */
	struct exec_slurm_config cfg;
	char *trainer_path, *server_url, *partition, *account, *qos, *state_dir;
	char *ca_file;                 /* LARCH_CA for the jobs, or NULL */
	char *roots[EXEC_DATA_ROOTS_MAX];   /* data_roots for confined jobs (copies) */
	int n_roots;
	char self_user[SVC_UNIX_NAME_MAX + 1];   /* larchd's own Unix user, as squeue names it */
	char instance[SLURM_INSTANCE_LEN + 1];   /* in the job names (slurm_name.h) */
	char prefix[SLURM_NAME_MAX];  /* "larch-<instance>-j-" */
	char sprefix[SLURM_NAME_MAX]; /* "larch-<instance>-s-": a sweep's job arrays */
	int use_api;                  /* submit through libslurm, not sbatch */

	pthread_mutex_t lock;         /* guards all below */
	pthread_cond_t wake;
	pthread_t thread;
	int started, stopping, kicked;
	long long groups;             /* array groups made so far */
	struct sjob *jobs;
	int n_jobs;
	struct exec_events events;
	int healthy;                  /* the last Slurm call reached slurmctld */
	long long unhealthy_since_ms;
	char health_detail[256];
	char **parts;                 /* partitions (sinfo), NULL until known */
	double *part_mem;             /* [n_parts] smallest node memory, bytes (0: unknown) */
	int n_parts;
	int default_part;             /* index of Slurm's default partition, -1: none */
	long long parts_ms;
};



/* ---- events, health ---------------------------------------------------------- */

/* Records an event for the next poll; lock held. Returns it (NULL: lost,
 * out of memory). */
static struct exec_event *emit(struct slurm_ex *sx, struct sjob *j, enum exec_state state,
                               int exit_code, int started, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static struct exec_event *emit(struct slurm_ex *sx, struct sjob *j, enum exec_state state,
                               int exit_code, int started, const char *fmt, ...)
{
	struct exec_event *ev = exec_events_add(&sx->events, j->job.id, state, exit_code);
	if (!ev)
		return NULL;
	ev->started = started;
	snprintf(ev->ext_id, sizeof ev->ext_id, "%s", j->sid);
	snprintf(ev->partition, sizeof ev->partition, "%s", j->partition);
	snprintf(ev->node_list, sizeof ev->node_list, "%s", j->nodes);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ev->reason, sizeof ev->reason, fmt, ap);
	va_end(ap);
	j->last = (int)state;
	return ev;
}

/* Whether a failed call says slurmctld could not be reached (or answered
 * nothing): worth retrying, and the job may or may not be in Slurm. */
static int unreachable(const struct slurm_cmd_result *res)
{
	static const char *const signs[] = {
		"Unable to contact slurm controller", "Socket timed out", "Connection refused",
		"Zero Bytes were transmitted", "temporarily unavailable", "Slurm temporarily unable",
		"Connection reset", "Transport endpoint", "Communication connection failure",
	};
	if (res->timed_out || res->status < 0)
		return 1;
	for (size_t i = 0; i < sizeof signs / sizeof signs[0]; i++)
		if (strcasestr(res->err, signs[i]))
			return 1;
	return 0;
}

/* Notes how the last call to slurmctld went; lock held. */
static void note_health(struct slurm_ex *sx, int ok, const char *what)
{
	if (ok) {
		sx->healthy = 1;
		sx->unhealthy_since_ms = 0;
		snprintf(sx->health_detail, sizeof sx->health_detail, "ok");
		return;
	}
	if (sx->healthy || !sx->unhealthy_since_ms) {
		sx->unhealthy_since_ms = svc_wall_ms();
		fprintf(stderr, "larchd: slurm executor: slurmctld unreachable: %s\n", what);
	}
	sx->healthy = 0;
	snprintf(sx->health_detail, sizeof sx->health_detail, "slurmctld unreachable: %.200s", what);
}

/* ---- files in the job directory ------------------------------------------------ */

/* Writes text to DIR/name through a temporary file and rename (jobfs.h:
 * the directory may be a job owner's), owned by owner when given. */
static int write_file_as(const char *dir, const char *name, const char *text, mode_t mode,
                         const struct svc_unix_id *owner, char *err, size_t errlen)
{
	if (svc_jobfs_write(dir, name, text, strlen(text), mode, owner ? owner->uid : (uid_t)-1,
	                    owner ? owner->gid : (gid_t)-1) != 0) {
		int e = errno;
		svc_msgf(err, errlen, "cannot write %s/%s: %s", dir, name, strerror(e));
		return -1;
	}
	return 0;
}

static int write_file(const char *dir, const char *name, const char *text, mode_t mode,
                      char *err, size_t errlen)
{
	return write_file_as(dir, name, text, mode, NULL, err, errlen);
}

static int read_file(const char *dir, const char *name, char *buf, size_t len)
{
	int fd = svc_jobfs_open(dir, name, O_RDONLY, 0);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	return 0;
}

static int file_exists(const char *dir, const char *name)
{
	return svc_jobfs_exists(dir, name) == 1;
}

/* s single-quoted for sh into out ('it'\''s'); -1 if it does not fit. */
static int sh_quote(const char *s, char *out, size_t len)
{
	size_t o = 0;
	if (len < 3)
		return -1;
	out[o++] = '\'';
	for (; *s; s++) {
		if (*s == '\'') {
			if (o + 4 >= len)
				return -1;
			memcpy(out + o, "'\\''", 4);
			o += 4;
		} else {
			if (o + 1 >= len)
				return -1;
			out[o++] = *s;
		}
	}
	if (o + 2 > len)
		return -1;
	out[o++] = '\'';
	out[o] = '\0';
	return 0;
}

/* The trainer's confinement for a confined job (exec_job.confine):
 * " --confine-data --data-root 'DIR' ...", quoted, into out; "" otherwise. */
static int confine_args(const struct slurm_ex *sx, const struct exec_job *j, char *out,
                        size_t len)
{
	out[0] = '\0';
	if (!j->confine)
		return 0;
	size_t o = (size_t)snprintf(out, len, " --confine-data");
	char q[2 * EXEC_PATH_MAX + 8];
	for (int i = 0; i <= sx->n_roots; i++) {
		const char *root = i < sx->n_roots ? sx->roots[i] : j->init_path;
		if (!root || !*root)
			continue;
		if (sh_quote(root, q, sizeof q) != 0 || o + strlen(q) + 16 >= len)
			return -1;
		o += (size_t)snprintf(out + o, len - o, " --data-root %s", q);
	}
	return 0;
}

/* parallel.elastic over several nodes of ranks / nodes tasks each: the
 * fewest nodes that hold min_ranks (Slurm's --nodes=min-max lets it start
 * on what is free, and requeue on what is left); 0 = a job of exactly its
 * nodes and ranks. */
static int elastic_min_nodes(const struct exec_job *j)
{
	if (j->min_ranks <= 0 || j->min_ranks >= j->ranks || j->nodes <= 1 || j->ranks % j->nodes)
		return 0;
	int per = j->ranks / j->nodes;
	int min = (j->min_ranks + per - 1) / per;
	return min < j->nodes ? min : 0;
}

/* DIR/slurm.sh for job j (see the top of this file). */
static int write_script(struct slurm_ex *sx, const struct sjob *sj, char *err, size_t errlen)
{
	const struct exec_job *j = &sj->job;
	char dir[2 * EXEC_PATH_MAX + 8], trainer[2 * EXEC_PATH_MAX + 8], url[1024] = "''";
	char confine[(EXEC_DATA_ROOTS_MAX + 1) * (2 * EXEC_PATH_MAX + 24)];
	if (sh_quote(j->dir, dir, sizeof dir) != 0 ||
	    sh_quote(sx->trainer_path, trainer, sizeof trainer) != 0 ||
	    (sx->server_url && sh_quote(sx->server_url, url, sizeof url) != 0) ||
	    confine_args(sx, j, confine, sizeof confine) != 0) {
		snprintf(err, errlen, "a path is too long for the batch script");
		return -1;
	}
	/* a job of its owner's: the owner's HOME, USER and LOGNAME, not those of
	 * the root that submitted it */
	char who[768] = "", home[600];
	if (sj->as_owner && sh_quote(sj->owner.home[0] ? sj->owner.home : "/", home,
	                             sizeof home) == 0)
		snprintf(who, sizeof who, "export HOME=%s USER='%s' LOGNAME='%s'\n", home,
		         sj->owner.name, sj->owner.name);
	/* the CA file the job verifies larchd's certificate with, or none: a
	 * LARCH_CA of larchd's own environment (sbatch passes it on) is not the
	 * job's */
	char flush[64 + 2 * EXEC_PATH_MAX + 32] = "", ca[2 * EXEC_PATH_MAX + 8];
	if (sx->cfg.report_flush_s > 0)
		snprintf(flush, sizeof flush, "\texport LARCH_REPORT_FLUSH_S=%d\n",
		         sx->cfg.report_flush_s);
	if (sx->ca_file && sh_quote(sx->ca_file, ca, sizeof ca) != 0) {
		snprintf(err, errlen, "job_ca: the path is too long for the batch script");
		return -1;
	}
	if (sx->ca_file)
		snprintf(flush + strlen(flush), sizeof flush - strlen(flush),
		         "\texport LARCH_CA=%s\n", ca);
	else
		snprintf(flush + strlen(flush), sizeof flush - strlen(flush), "\tunset LARCH_CA\n");
	/* One rank: a step of its own. Several: a step of N tasks wired up by
	 * Slurm's PMIx plugin, or Open MPI's mpirun, which reads the allocation
	 * and wires the ranks up itself, or a step of N tasks without MPI, which
	 * meet through the job dir (larch-train's comm.h takes any); auto asks
	 * the node's srun which MPI plugins it has, then looks for mpirun. */
	char pmix[192], mpirun[200], none[192], launcher[800], ntasks[64], per[64] = "";
	/* an elastic job: ranks / nodes tasks on each node of the allocation
	 * it got, which may be fewer nodes than its own (slurm_submit.h, min_nodes) */
	if (elastic_min_nodes(j)) {
		int k = j->ranks / j->nodes;
		snprintf(ntasks, sizeof ntasks, "$(( ${SLURM_JOB_NUM_NODES:-%d} * %d ))", j->nodes, k);
		snprintf(per, sizeof per, " --ntasks-per-node=%d --cpus-per-task=%d", k,
		         j->cpus_per_task > 0 ? j->cpus_per_task : 1);
	} else {
		snprintf(ntasks, sizeof ntasks, "%d", j->ranks);
	}
	snprintf(pmix, sizeof pmix, "srun --mpi=pmix --ntasks=%s%s --kill-on-bad-exit=1", ntasks,
	         per);
	snprintf(none, sizeof none, "srun --mpi=none --ntasks=%s%s --kill-on-bad-exit=1", ntasks,
	         per);
	snprintf(mpirun, sizeof mpirun, "mpirun -n %s --bind-to none "
	         "$([ \"$(id -u)\" = 0 ] && echo --allow-run-as-root)", ntasks);
	if (j->ranks <= 1)
		snprintf(launcher, sizeof launcher, "launch='srun --ntasks=1 --kill-on-bad-exit=1'\n");
	else if (sx->cfg.mpi == EXEC_SLURM_MPI_PMIX)
		snprintf(launcher, sizeof launcher, "launch=\"%s\"\n", pmix);
	else if (sx->cfg.mpi == EXEC_SLURM_MPI_MPIRUN)
		snprintf(launcher, sizeof launcher, "launch=\"%s\"\n", mpirun);
	else if (sx->cfg.mpi == EXEC_SLURM_MPI_NONE)
		snprintf(launcher, sizeof launcher, "launch=\"%s\"\n", none);
	else
		snprintf(launcher, sizeof launcher,
		         "if srun --mpi=list 2>&1 | grep -qw pmix; then\n"
		         "\tlaunch=\"%s\"\n"
		         "elif command -v mpirun >/dev/null; then\n"
		         "\tlaunch=\"%s\"\n"
		         "else\n"
		         "\tlaunch=\"%s\"\n"
		         "fi\n", pmix, mpirun, none);
	char *text = NULL;
	int n = asprintf(&text,
		"#!/bin/bash\n"
		"# larch job j-%06lld, generated by larchd. Every value below was validated\n"
		"# and is single-quoted; Slurm's options are on sbatch's command line.\n"
		"cd %s || exit 1\n"
		"%s"
		"printf '%%s\\n' \"${SLURM_RESTART_COUNT:-0}\" > slurm-attempt\n"
		"export LARCH_JOB_ID='j-%06lld'\n"
		"if [ -n %s ] && [ -r job-token ]; then\n"
		"\texport LARCH_SERVER_URL=%s\n"
		"\tLARCH_JOB_TOKEN=$(cat job-token)\n"
		"\texport LARCH_JOB_TOKEN\n"
		"%s"
		"fi\n"
		"child=\n"
		"warned=\n"
		"terminated=\n"
		"# USR1 (--signal, before the time limit): the trainer checkpoints and exits 3\n"
		"trap 'warned=1; [ -n \"$child\" ] && kill -USR1 \"$child\" 2>/dev/null' USR1\n"
		"# TERM (scancel, requeue, preemption, the limit): Slurm signals the step\n"
		"# itself; this shell stays to collect the trainer's status\n"
		"trap 'terminated=1' TERM\n"
		"%s"
		"$launch %s --spec spec.json --job-dir . --threads %d%s &\n"
		"child=$!\n"
		"while :; do\n"
		"\twait \"$child\"\n"
		"\trc=$?\n"
		"\tkill -0 \"$child\" 2>/dev/null || break\n"
		"done\n"
		"if [ -n \"$warned\" ] && [ -z \"$terminated\" ] && [ \"$rc\" = 3 ]; then\n"
		"\t# checkpointed for the time limit: Slurm ends the job as TIMEOUT\n"
		"\twhile [ -z \"$terminated\" ]; do sleep 1; done\n"
		"fi\n"
		"exit \"$rc\"\n",
		j->id, dir, who, j->id, url, url, flush, launcher, trainer,
		j->cpus_per_task > 0 ? j->cpus_per_task : 1, confine);
	if (n < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* a job of its own: sbatch reads it as larchd; an array task's is
	 * started by the array's script, as the job's owner */
	int rc = write_file_as(j->dir, "slurm.sh", text, 0750,
	                       sj->task >= 0 && sj->as_owner ? &sj->owner : NULL, err, errlen);
	free(text);
	return rc;
}

/* ---- job arrays (a sweep's children) ------------------------------------------- */

/* STATE/sweeps/s-000005: Slurm's own output of each task of the sweep's
 * arrays (task-K.log: the array script's errors, slurmstepd's notes); the
 * sweep owner's where jobs run as their owners. The arrays' scripts are
 * larchd's, in STATE/sweeps itself. */
static int sweep_dir(struct slurm_ex *sx, const struct sjob *sj, char *out, size_t len,
                     char *err, size_t errlen)
{
	char top[EXEC_PATH_MAX];
	snprintf(top, sizeof top, "%s/sweeps", sx->state_dir);
	mode_t mode = sj->as_owner ? 0711 : 0750;   /* owners reach their own, list nothing */
	if (snprintf(out, len, "%s/s-%06lld", top, sj->job.sweep) >= (int)len) {
		snprintf(err, errlen, "the sweep directory's path is too long");
		return -1;
	}
	if ((mkdir(top, mode) != 0 && errno != EEXIST) || chmod(top, mode) != 0 ||
	    (mkdir(out, 0700) != 0 && errno != EEXIST)) {
		svc_msgf(err, errlen, "%s: %s", out, strerror(errno));
		return -1;
	}
	int fd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || (sj->as_owner && fchown(fd, sj->owner.uid, sj->owner.gid) != 0) ||
	    fchmod(fd, 0700) != 0) {
		svc_msgf(err, errlen, "%s: %s", out, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The batch script of an array: task K runs the slurm.sh of the child of
 * sweep index K, in its job directory, with its output there. The task ->
 * directory table is in the script itself (Slurm keeps the script of the
 * submission), so nothing a job's owner can write decides it. Written to
 * STATE/sweeps/s-000005-<group>.sh (larchd's); its path into path. */
static int write_array_script(struct slurm_ex *sx, struct sjob **m, int n, char *path,
                              size_t len, char *err, size_t errlen)
{
	char dir[EXEC_PATH_MAX], name[64];
	snprintf(dir, sizeof dir, "%s/sweeps", sx->state_dir);
	snprintf(name, sizeof name, "s-%06lld-%lld.sh", m[0]->job.sweep, m[0]->group);
	if (snprintf(path, len, "%s/%s", dir, name) >= (int)len) {
		snprintf(err, errlen, "the sweep directory's path is too long");
		return -1;
	}
	char *text = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&text, &size);
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	fprintf(f, "#!/bin/bash\n"
	        "# larch sweep s-%06lld, a job array generated by larchd: task K runs the\n"
	        "# batch script of the sweep's child K in its job directory.\n"
	        "case \"${SLURM_ARRAY_TASK_ID:-}\" in\n", m[0]->job.sweep);
	char q[2 * EXEC_PATH_MAX + 8];
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (sh_quote(m[i]->job.dir, q, sizeof q) != 0)
			bad = 1;
		else
			fprintf(f, "%d) dir=%s ;;\n", m[i]->task, q);
	}
	fprintf(f, "*) echo \"larch: no job for array task ${SLURM_ARRAY_TASK_ID:-?}\" >&2; exit 1 ;;\n"
	        "esac\n"
	        "cd \"$dir\" || exit 1\n"
	        "exec >>stdout.log 2>>stderr.log\n"
	        "exec /bin/bash ./slurm.sh\n");
	if (fclose(f) != 0 || bad || !text) {
		free(text);
		snprintf(err, errlen, bad ? "a path is too long for the batch script" : "out of memory");
		return -1;
	}
	int rc = write_file(dir, name, text, 0600, err, errlen);
	free(text);
	return rc;
}


/* ---- sbatch -------------------------------------------------------------------- */

struct argv_buf {
	const char *argv[40];
	char store[20][EXEC_PATH_MAX + 32];
	int n, ns;
};

static void arg(struct argv_buf *a, const char *s)
{
	if (a->n < (int)(sizeof a->argv / sizeof a->argv[0]) - 1)
		a->argv[a->n++] = s;
	a->argv[a->n] = NULL;
}

static void argf(struct argv_buf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void argf(struct argv_buf *a, const char *fmt, ...)
{
	if (a->ns >= (int)(sizeof a->store / sizeof a->store[0]))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->store[a->ns], sizeof a->store[0], fmt, ap);
	va_end(ap);
	arg(a, a->store[a->ns++]);
}

/* The partition a job Slurm just took is in, until squeue says: the one it
 * was submitted to, else Slurm's default (sinfo's, if known yet); lock held. */
static void submitted_to(struct slurm_ex *sx, struct sjob *j)
{
	const char *p = j->job.partition[0] ? j->job.partition : sx->partition;
	if ((!p || !*p) && sx->parts && sx->default_part >= 0 && sx->default_part < sx->n_parts)
		p = sx->parts[sx->default_part];
	snprintf(j->partition, sizeof j->partition, "%s", p ? p : "");
}

/* What Slurm gets for a job (both ways of submitting it). */
static void describe(struct slurm_ex *sx, const struct sjob *sj, char *comment, size_t len,
                     struct slurm_submit *r)
{
	const struct exec_job *j = &sj->job;
	snprintf(comment, len, "larch j-%06lld", j->id);
	*r = (struct slurm_submit){
		.name = sj->name,
		.comment = comment,
		.dir = j->dir,
		.partition = j->partition[0] ? j->partition : sx->partition,
		.qos = j->qos[0] ? j->qos : sx->qos,
		.account = j->account[0] ? j->account : sx->account,
		.nodes = j->nodes > 0 ? j->nodes : 1,
		.ntasks = j->ranks > 0 ? j->ranks : 1,
		.cpus_per_task = j->cpus_per_task > 0 ? j->cpus_per_task : 1,
		.gpus_per_node = j->gpus_per_node,
		.mem_mb = j->mem_mb,
		.time_s = j->time_limit_s,
		.hold = sj->hold,
		.as_user = sj->as_owner,
		.uid = sj->owner.uid,
		.gid = sj->owner.gid,
	};
	r->min_nodes = elastic_min_nodes(j);
	if (j->time_limit_s > 0) {
		/* the checkpoint signal: grace seconds before the end, at most half the run */
		long grace = sx->cfg.grace_s > 0 ? sx->cfg.grace_s : 60;
		if (grace > j->time_limit_s / 2)
			grace = j->time_limit_s / 2;
		r->grace_s = grace >= 1 ? grace : 0;
	}
}

static void sbatch_argv(const struct slurm_submit *r, struct argv_buf *a)
{
	memset(a, 0, sizeof *a);
	arg(a, "sbatch");
	arg(a, "--parsable");
	argf(a, "--job-name=%s", r->name);
	argf(a, "--comment=%s", r->comment);
	argf(a, "--chdir=%s", r->dir);
	char path[2 * EXEC_PATH_MAX + 16];
	if (r->output)
		argf(a, "--output=%s", r->output);
	if (!r->output && slurm_submit_log_path(r->dir, "stdout.log", path, sizeof path) == 0)
		argf(a, "--output=%s", path);
	if (!r->output && slurm_submit_log_path(r->dir, "stderr.log", path, sizeof path) == 0)
		argf(a, "--error=%s", path);
	if (r->array) {                    /* as it is: a list may be long */
		arg(a, "--array");
		arg(a, r->array);
	}
	arg(a, "--open-mode=append");
	arg(a, "--requeue");
	if (r->partition && *r->partition)
		argf(a, "--partition=%s", r->partition);
	if (r->qos && *r->qos)
		argf(a, "--qos=%s", r->qos);
	if (r->account && *r->account)
		argf(a, "--account=%s", r->account);
	if (r->min_nodes > 0 && r->min_nodes < r->nodes) {
		/* elastic (slurm_submit.h): no task count, which would cap the
		 * nodes (sbatch 22.05 makes --ntasks-per-node with a range
		 * min x k tasks, and Slurm then starts it on min nodes) */
		argf(a, "--nodes=%d-%d", r->min_nodes, r->nodes);
		argf(a, "--cpus-per-task=%d", r->ntasks / r->nodes * r->cpus_per_task);
	} else {
		argf(a, "--nodes=%d", r->nodes);
		argf(a, "--ntasks=%d", r->ntasks);
		argf(a, "--cpus-per-task=%d", r->cpus_per_task);
	}
	if (r->mem_mb > 0)
		argf(a, "--mem=%lldM", r->mem_mb);
	if (r->gpus_per_node > 0)
		argf(a, "--gres=gpu:%d", r->gpus_per_node);
	if (r->time_s > 0) {
		long t = r->time_s;
		argf(a, "--time=%ld-%02ld:%02ld:%02ld", t / 86400, t / 3600 % 24, t / 60 % 60, t % 60);
		if (r->grace_s > 0)
			argf(a, "--signal=B:USR1@%ld", r->grace_s);
	}
	if (r->hold)
		arg(a, "--hold");
	if (r->as_user) {
		/* root submits it as its owner: Slurm's limits, fair share and
		 * accounting are the owner's */
		argf(a, "--uid=%u", (unsigned)r->uid);
		argf(a, "--gid=%u", (unsigned)r->gid);
	}
	if (r->script)
		arg(a, r->script);
	else
		argf(a, "%s/slurm.sh", r->dir);
}

/* What a worker thread does for one job: sbatch, and the outcome in sj (the
 * lock is not held: the job is PH_SUBMITTING, which nobody else touches but
 * to set cancel). */
struct outcome {
	struct sjob *sj;              /* a job of its own, or the first of members */
	struct sjob **members;        /* an array's tasks (malloc'd), or NULL */
	int n_members, cap_members;
	int ok, transient, held;
	char sid[32];
	char msg[EXEC_REASON_MAX];
};

struct submit_batch {
	struct slurm_ex *sx;
	struct outcome *out;
	int n;
	atomic_int next;
};

/* The job's Slurm id, once Slurm has it: DIR/slurm-job-id, for a larchd
 * restarted after this. */
static void took(struct outcome *o)
{
	o->ok = 1;
	char err[256], line[40];
	snprintf(line, sizeof line, "%s\n", o->sid);
	if (write_file(o->sj->job.dir, "slurm-job-id", line, 0640, err, sizeof err) != 0)
		fprintf(stderr, "larchd: job j-%06lld: %s\n", o->sj->job.id, err);
}

/* An array's tasks took: each child's Slurm id "<array>_<task>" into its
 * DIR/slurm-job-id. */
static void took_array(struct outcome *o)
{
	o->ok = 1;
	for (int i = 0; i < o->n_members; i++) {
		struct sjob *m = o->members[i];
		char err[256], line[48];
		snprintf(line, sizeof line, "%s_%d\n", o->sid, m->task);
		if (write_file(m->job.dir, "slurm-job-id", line, 0640, err, sizeof err) != 0)
			fprintf(stderr, "larchd: job j-%06lld: %s\n", m->job.id, err);
	}
}

/* What Slurm gets for an array of o's members beyond what describe() says
 * of the first: the sweep's name, --array, its script and output. The
 * strings are the caller's buffers. 0, or -1 with o->msg (tried again). */
static int describe_array(struct slurm_ex *sx, struct outcome *o, struct slurm_submit *r,
                          char *comment, size_t comment_len, char *array, size_t array_len,
                          char *script, size_t script_len, char *sdir, size_t sdir_len,
                          char *output, size_t output_len)
{
	const struct sjob *lead = o->sj;
	int *tasks = malloc(sizeof *tasks * (size_t)o->n_members);
	if (!tasks) {
		snprintf(o->msg, sizeof o->msg, "out of memory");
		return -1;
	}
	for (int i = 0; i < o->n_members; i++)
		tasks[i] = o->members[i]->task;
	int rc = slurm_array_spec(tasks, o->n_members, lead->job.sweep_max_parallel, array,
	                          array_len);
	free(tasks);
	if (rc != 0) {
		snprintf(o->msg, sizeof o->msg, "the sweep's --array list is too long");
		return -1;
	}
	if (sweep_dir(sx, lead, sdir, sdir_len, o->msg, sizeof o->msg) != 0 ||
	    write_array_script(sx, o->members, o->n_members, script, script_len, o->msg,
	                       sizeof o->msg) != 0)
		return -1;
	if (slurm_submit_log_path(sdir, "task-%a.log", output, output_len) != 0) {
		snprintf(o->msg, sizeof o->msg, "the sweep directory's path is too long");
		return -1;
	}
	snprintf(comment, comment_len, "larch s-%06lld", lead->job.sweep);
	r->comment = comment;
	r->dir = sdir;
	r->array = array;
	r->script = script;
	r->output = output;
	r->hold = 0;                       /* held tasks: scontrol hold each (send_holds) */
	return 0;
}

static void submit_one(struct slurm_ex *sx, struct outcome *o)
{
	struct slurm_submit r;
	char comment[64];
	describe(sx, o->sj, comment, sizeof comment, &r);
	char *array = NULL, *script = NULL, *sdir = NULL, *output = NULL;
	if (o->members) {
		size_t alen = 16 + 12 * (size_t)o->n_members, plen = EXEC_PATH_MAX + 64;
		array = malloc(alen);
		script = malloc(plen);
		sdir = malloc(plen);
		output = malloc(2 * plen);
		if (!array || !script || !sdir || !output) {
			snprintf(o->msg, sizeof o->msg, "out of memory");
			o->transient = 1;
			goto out;
		}
		if (describe_array(sx, o, &r, comment, sizeof comment, array, alen, script, plen,
		                   sdir, plen, output, 2 * plen) != 0) {
			o->transient = 1;          /* Slurm never had it: looked up, then again */
			goto out;
		}
	}
	o->held = r.hold;
	if (sx->use_api) {
		slurm_cmd_count(SLURM_CMD_API_SUBMIT);
		if (slurm_api_submit(&r, o->sid, sizeof o->sid, o->msg, sizeof o->msg,
		                     &o->transient) == 0)
			o->members ? took_array(o) : took(o);
		goto out;
	}
	struct argv_buf a;
	sbatch_argv(&r, &a);
	struct slurm_cmd_result res;
	int rc = slurm_cmd_run(a.argv, sx->cfg.timeout_s * 1000, &res);
	if (rc == 0) {
		/* "123" or "123;cluster" */
		size_t k = 0;
		while (k < sizeof o->sid - 1 && isdigit((unsigned char)res.out[k])) {
			o->sid[k] = res.out[k];
			k++;
		}
		o->sid[k] = '\0';
		if (k > 0) {
			o->members ? took_array(o) : took(o);
		} else {
			o->transient = 1;
			snprintf(o->msg, sizeof o->msg, "sbatch printed no job id: %.100s", res.out);
		}
	} else {
		o->transient = unreachable(&res);
		slurm_cmd_describe(a.argv, &res, o->msg, sizeof o->msg);
	}
	slurm_cmd_release(&res);
out:
	free(array);
	free(script);
	free(sdir);
	free(output);
}

static void *submit_worker(void *arg)
{
	struct submit_batch *b = arg;
	for (int i; (i = atomic_fetch_add(&b->next, 1)) < b->n;)
		submit_one(b->sx, &b->out[i]);
	return NULL;
}

static long long backoff_ms(int tries)
{
	long long ms = 500LL << (tries < 5 ? tries : 5);
	return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

/* An array's submission, told to each of its tasks; lock held. */
static void apply_array_outcome(struct slurm_ex *sx, struct outcome *o)
{
	for (int i = 0; i < o->n_members; i++) {
		struct sjob *j = o->members[i];
		if (o->ok) {
			/* a job id is at most 10 digits: "%.19s" bounds it for the compiler */
			snprintf(j->sid, sizeof j->sid, "%.19s_%d", o->sid, j->task);
			j->phase = PH_FOLLOW;
			j->tries = 0;
			submitted_to(sx, j);
			emit(sx, j, EXEC_QUEUED, -1, 0, "slurm job %s (task %d of array %s, %d tasks)",
			     j->sid, j->task, o->sid, o->n_members);
		} else if (o->transient) {
			j->phase = PH_LOOKUP;      /* it may have reached slurmctld: look first */
			j->tries++;
			j->next_try_ms = svc_mono_ms() + backoff_ms(j->tries);
		} else {
			snprintf(j->submit_err, sizeof j->submit_err, "%s", o->msg);
		}
	}
}

/* Hands over every job due, several sbatch at once. */
static void submit_due(struct slurm_ex *sx)
{
	struct outcome *out = calloc(SUBMIT_BATCH, sizeof *out);
	if (!out)
		return;
	int n = 0;
	long long now = svc_mono_ms();
	pthread_mutex_lock(&sx->lock);
	for (struct sjob *j = sx->jobs; j; j = j->next) {
		if (j->phase != PH_SUBMIT || j->cancel || j->next_try_ms > now)
			continue;
		/* an array task joins its group's submission; a job of its own
		 * takes the next slot */
		int k = j->task >= 0 ? 0 : n;
		if (j->task >= 0)
			while (k < n && !(out[k].members && out[k].sj->group == j->group))
				k++;
		if (j->task >= 0 && k == n && n == SUBMIT_BATCH)
			continue;
		if (j->task < 0 && n == SUBMIT_BATCH)
			continue;
		if (k == n)
			out[n++].sj = j;
		if (j->task >= 0) {
			struct outcome *o = &out[k];
			if (o->n_members == o->cap_members) {
				int cap = o->cap_members ? 2 * o->cap_members : 16;
				struct sjob **grown = realloc(o->members, sizeof *grown * (size_t)cap);
				if (!grown) {
					if (!o->n_members)
						n--;       /* not taken: next pass */
					continue;
				}
				o->members = grown;
				o->cap_members = cap;
			}
			o->members[o->n_members++] = j;
		}
		j->phase = PH_SUBMITTING;
	}
	pthread_mutex_unlock(&sx->lock);
	if (n == 0) {
		free(out);
		return;
	}
	struct submit_batch b = { .sx = sx, .out = out, .n = n };
	atomic_init(&b.next, 0);
	int workers = sx->cfg.submit_parallel < n ? sx->cfg.submit_parallel : n;
	pthread_t tids[64];
	int started = 0;
	for (int i = 1; i < workers && i < 64; i++)
		if (pthread_create(&tids[started], NULL, submit_worker, &b) == 0)
			started++;
	submit_worker(&b);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);

	pthread_mutex_lock(&sx->lock);
	int reached = 0, lost = 0;
	const char *lost_msg = "";
	for (int i = 0; i < n; i++) {
		struct outcome *o = &out[i];
		if (o->members) {
			apply_array_outcome(sx, o);
			reached |= o->ok || !o->transient;
			if (!o->ok && o->transient) {
				lost = 1;
				lost_msg = o->msg;
			}
			continue;
		}
		struct sjob *j = o->sj;
		if (o->ok) {
			reached = 1;
			snprintf(j->sid, sizeof j->sid, "%s", o->sid);
			j->phase = PH_FOLLOW;
			j->tries = 0;
			if (o->held)
				j->hold_sent = 1;
			submitted_to(sx, j);
			emit(sx, j, EXEC_QUEUED, -1, 0, "slurm job %s%s", j->sid,
			     o->held ? " (submitted held)" : "");
		} else if (o->transient) {
			lost = 1;
			lost_msg = o->msg;
			j->phase = PH_LOOKUP;      /* it may have reached slurmctld: look first */
			j->tries++;
			j->next_try_ms = svc_mono_ms() + backoff_ms(j->tries);
		} else {
			reached = 1;               /* slurmctld answered: it refused the job */
			snprintf(j->submit_err, sizeof j->submit_err, "%s", o->msg);
		}
	}
	if (reached)
		note_health(sx, 1, "");
	else if (lost)
		note_health(sx, 0, lost_msg);
	/* refused jobs: reported and forgotten */
	for (struct sjob **p = &sx->jobs; *p;) {
		struct sjob *j = *p;
		if (j->phase == PH_SUBMITTING && j->submit_err[0]) {
			emit(sx, j, EXEC_FAILED, -1, 0, "Slurm refused the job: %s", j->submit_err);
			*p = j->next;
			sx->n_jobs--;
			sjob_free(j);
		} else {
			p = &j->next;
		}
	}
	pthread_mutex_unlock(&sx->lock);
	for (int i = 0; i < n; i++)
		free(out[i].members);
	free(out);
}

/* ---- squeue --------------------------------------------------------------------- */

struct row {
	long long id;                 /* larch id from the name (a job of its own), or the
	                                 array id (a sweep's array) */
	char *sid, *name, *state, *nodes, *partition, *reason, *user;
	char *tasks;                  /* ArrayTaskID: the array's tasks it stands for */
	int exit_raw, restarts;
};

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int add_row(struct row **rows, int *n, size_t *cap, const struct row *r)
{
	if ((size_t)*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		struct row *grown = realloc(*rows, c * sizeof *grown);
		if (!grown)
			return -1;
		*rows = grown;
		*cap = c;
	}
	(*rows)[(*n)++] = *r;
	return 0;
}

/* Splits squeue's output (JobID|Name|State|exit_code|RestartCnt|NodeList|
 * Partition|Reason|UserName|ArrayJobID|ArrayTaskID|) into rows of our jobs,
 * sorted by larch id, and rows of our sweeps' arrays (a task each, or the
 * tasks pending together), sorted by array id; the strings point into out. */
static struct row *parse_squeue(struct slurm_ex *sx, char *out, int *n_rows,
                                struct row **arrays, int *n_arrays)
{
	size_t cap = 0, acap = 0;
	int n = 0, na = 0;
	struct row *rows = NULL;
	*arrays = NULL;
	size_t plen = strlen(sx->prefix), splen = strlen(sx->sprefix);
	for (char *line = out, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *f[11];
		int k = 0;
		for (char *p = line; k < 11; k++) {
			f[k] = p;
			char *bar = strchr(p, '|');
			if (!bar) {
				k++;
				break;
			}
			*bar = '\0';
			p = bar + 1;
		}
		if (k < 11)
			continue;
		struct row r = { .sid = f[0], .name = f[1], .state = f[2], .exit_raw = atoi(f[3]),
		                 .restarts = atoi(f[4]), .nodes = f[5], .partition = f[6],
		                 .reason = f[7], .user = f[8], .tasks = f[10] };
		char *end;
		if (strncmp(f[1], sx->prefix, plen) == 0) {
			r.id = strtoll(f[1] + plen, &end, 10);
			if (*end || r.id <= 0 || add_row(&rows, &n, &cap, &r) != 0)
				continue;
		} else if (strncmp(f[1], sx->sprefix, splen) == 0) {
			r.id = strtoll(f[9], &end, 10);
			if (*end || r.id <= 0 || add_row(arrays, &na, &acap, &r) != 0)
				continue;
		}
	}
	if (rows)
		qsort(rows, (size_t)n, sizeof *rows, row_cmp);
	if (*arrays)
		qsort(*arrays, (size_t)na, sizeof **arrays, row_cmp);
	*n_rows = n;
	*n_arrays = na;
	return rows;
}

/* The row of array task j among arrays (sorted by array id): by its Slurm id
 * once known, else (looked up) by its name and task; of its own user. */
static struct row *task_row(struct row *arrays, int n, const struct sjob *j, const char *user)
{
	char aid[24];
	long task = j->task;
	struct row *r = arrays, *end = arrays + n;
	if (j->sid[0] && j->sid[0] != '?') {
		if (slurm_array_sid(j->sid, aid, sizeof aid, &task) != 0)
			return NULL;
		struct row key = { .id = strtoll(aid, NULL, 10) };
		r = bsearch(&key, arrays, (size_t)n, sizeof *arrays, row_cmp);
		if (!r)
			return NULL;
		while (r > arrays && r[-1].id == key.id)
			r--;
		for (; r < end && r->id == key.id; r++)
			if (strcmp(r->user, user) == 0 && strcmp(r->name, j->name) == 0 &&
			    slurm_array_has(r->tasks, task))
				return r;
		return NULL;
	}
	for (; r < end; r++)
		if (strcmp(r->user, user) == 0 && strcmp(r->name, j->name) == 0 &&
		    slurm_array_has(r->tasks, task))
			return r;
	return NULL;
}

enum kind { K_WAIT, K_HELD, K_RUN, K_REQUEUE, K_FINAL };

struct slurm_state {
	enum kind kind;
	enum exec_state final;
};

static struct slurm_state map_state(const char *state, const char *reason)
{
	static const struct { const char *name; enum exec_state st; } finals[] = {
		{ "COMPLETED", EXEC_COMPLETED }, { "FAILED", EXEC_FAILED },
		{ "CANCELLED", EXEC_CANCELLED }, { "TIMEOUT", EXEC_TIMEOUT },
		{ "DEADLINE", EXEC_TIMEOUT }, { "NODE_FAIL", EXEC_FAILED },
		{ "OUT_OF_MEMORY", EXEC_FAILED }, { "BOOT_FAIL", EXEC_FAILED },
		{ "SPECIAL_EXIT", EXEC_FAILED }, { "REVOKED", EXEC_FAILED },
		/* ended by preemption and not requeued (PreemptMode=CANCEL, or a job
		 * without --requeue); a requeued one is PENDING again instead */
		{ "PREEMPTED", EXEC_FAILED },
	};
	for (size_t i = 0; i < sizeof finals / sizeof finals[0]; i++)
		if (strcmp(state, finals[i].name) == 0)
			return (struct slurm_state){ K_FINAL, finals[i].st };
	if (strcmp(state, "PENDING") == 0)
		return (struct slurm_state){ strncmp(reason, "JobHeld", 7) == 0 ? K_HELD : K_WAIT, 0 };
	if (strcmp(state, "REQUEUED") == 0 || strcmp(state, "REQUEUE_FED") == 0)
		return (struct slurm_state){ K_REQUEUE, 0 };
	if (strcmp(state, "REQUEUE_HOLD") == 0)
		return (struct slurm_state){ K_HELD, 0 };
	return (struct slurm_state){ K_RUN, 0 };   /* RUNNING, CONFIGURING, COMPLETING, ... */
}

/* The end of a job: reason text and exit code from its final state. */
static void emit_final(struct slurm_ex *sx, struct sjob *j, enum exec_state st,
                       const char *state, const char *reason, int exit_code, int signo,
                       int started)
{
	char how[64] = "";
	if (signo > 0)
		snprintf(how, sizeof how, ", killed by signal %d", signo);
	else if (exit_code >= 0)
		snprintf(how, sizeof how, ", exit %d", exit_code);
	int has_reason = reason && *reason && strcmp(reason, "None") != 0;
	struct exec_event *ev = emit(sx, j, st, signo > 0 ? -1 : exit_code, started,
	                             "slurm job %s %s%s%s%s", j->sid, state, has_reason ? " (" : "",
	                             has_reason ? reason : "", has_reason ? ")" : "");
	if (!ev)
		return;
	size_t len = strlen(ev->reason);
	snprintf(ev->reason + len, sizeof ev->reason - len, "%s", how);
}

/* Applies one squeue row to j; lock held. Returns 1 when the job ended. */
/* Whether the attempt that just ended was preempted. Slurm requeues a
 * preempted job (PreemptMode=REQUEUE) as PENDING with its restart count up,
 * as it does for scontrol requeue, and keeps no trace of why in squeue or
 * scontrol; slurmstepd does write it into the job's stderr: "*** JOB 12 ON
 * node CANCELLED AT <time> DUE TO PREEMPTION ***". The last such line for
 * this Slurm job in DIR/stderr.log decides. */
static int attempt_preempted(struct slurm_ex *sx, const struct sjob *j)
{
	char tail[8192 + 1], mark[48], sdir[EXEC_PATH_MAX + 32], log[32];
	const char *dir = j->job.dir, *name = "stderr.log";
	if (j->task >= 0) {
		/* an array task's: STATE/sweeps/s-000005/task-K.log, which names the
		 * task's own Slurm job id, not "<array>_<task>" */
		snprintf(sdir, sizeof sdir, "%s/sweeps/s-%06lld", sx->state_dir, j->job.sweep);
		snprintf(log, sizeof log, "task-%d.log", j->task);
		dir = sdir;
		name = log;
	}
	int fd = svc_jobfs_open(dir, name, O_RDONLY, 0);
	if (fd < 0)
		return 0;
	struct stat st;
	off_t from = fstat(fd, &st) == 0 && st.st_size > 8192 ? st.st_size - 8192 : 0;
	ssize_t n = pread(fd, tail, sizeof tail - 1, from);
	close(fd);
	if (n <= 0)
		return 0;
	tail[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (tail[i] == '\0')
			tail[i] = ' ';
	if (j->task >= 0)
		snprintf(mark, sizeof mark, "*** JOB ");
	else
		snprintf(mark, sizeof mark, "*** JOB %s ON ", j->sid);
	const char *last = NULL;
	for (const char *p = tail; (p = strstr(p, mark)) != NULL; p++)
		last = p;
	if (!last)
		return 0;
	const char *eol = strchr(last, '\n');
	const char *pre = strstr(last, "DUE TO PREEMPTION");
	return pre && (!eol || pre < eol);
}

/* The running attempt ended and Slurm queued the job again: REQUEUED, or
 * PREEMPTED when preemption ended it. */
static void emit_requeued(struct slurm_ex *sx, struct sjob *j, int restarts)
{
	if (attempt_preempted(sx, j))
		emit(sx, j, EXEC_PREEMPTED, -1, 1, "slurm job %s preempted, requeued (restart %d)",
		     j->sid, restarts);
	else {
		emit(sx, j, EXEC_REQUEUED, -1, 1, "slurm job %s requeued (restart %d)", j->sid,
		     restarts);
		if (j->task < 0) {   /* why: explain_requeues asks Slurm's job history */
			snprintf(j->requeued_from, sizeof j->requeued_from, "%s", j->nodes);
			j->requeue_asks = 3;
		}
	}
}

/* Why Slurm requeued the jobs emit_requeued marked: the last record of the
 * job in Slurm's job history (sacct -c: jobcomp) is the attempt that ended.
 * A node failure (NODE_FAIL: a node stopped answering, Slurm marked it DOWN
 * and requeued the job) becomes a note on the job once it is QUEUED again
 * (a note is kept only on a queued job), with the nodes of that attempt;
 * anything else says nothing more. Asked in up to 3 polls while the record
 * is not there yet. The commands run without the lock. */
static void explain_requeues(struct slurm_ex *sx)
{
	struct ask { long long id; char sid[32], name[64], nodes[256]; } asks[16];
	int n = 0;
	pthread_mutex_lock(&sx->lock);
	for (struct sjob *j = sx->jobs; j && n < 16; j = j->next)
		if (j->requeue_asks > 0 && j->last == EXEC_QUEUED && j->sid[0] && j->sid[0] != '?') {
			j->requeue_asks--;
			asks[n].id = j->job.id;
			snprintf(asks[n].sid, sizeof asks[n].sid, "%s", j->sid);
			snprintf(asks[n].name, sizeof asks[n].name, "%s", j->name);
			snprintf(asks[n].nodes, sizeof asks[n].nodes, "%s", j->requeued_from);
			n++;
		}
	pthread_mutex_unlock(&sx->lock);
	for (int i = 0; i < n; i++) {
		const char *argv[] = { "sacct", "-c", "--allusers", "-n", "-P", "-j", asks[i].sid, "-o",
		                       "JobID,JobName,State,NodeList", NULL };
		struct slurm_cmd_result res;
		char state[32] = "", nodes[256] = "";
		if (slurm_cmd_run(argv, sx->cfg.timeout_s * 1000, &res) == 0) {
			for (char *line = res.out, *next; line && *line; line = next) {
				next = strchr(line, '\n');
				if (next)
					*next++ = '\0';
				char sid[32] = "", name[96] = "", st[32] = "", nl[256] = "";
				if (sscanf(line, "%31[^|]|%95[^|]|%31[^|]|%255[^|\n]", sid, name, st, nl) >= 3 &&
				    strcmp(sid, asks[i].sid) == 0 && strcmp(name, asks[i].name) == 0) {
					snprintf(state, sizeof state, "%s", st);   /* the last record wins */
					snprintf(nodes, sizeof nodes, "%s", nl);
				}
			}
		}
		slurm_cmd_release(&res);
		if (!state[0])
			continue;                    /* not recorded yet: asked again next poll */
		pthread_mutex_lock(&sx->lock);
		for (struct sjob *j = sx->jobs; j; j = j->next) {
			if (j->job.id != asks[i].id)
				continue;
			j->requeue_asks = 0;
			if (strcmp(state, "NODE_FAIL") == 0 && j->last == EXEC_QUEUED) {
				int last = j->last;
				struct exec_event *ev = emit(sx, j, EXEC_QUEUED, -1, 0,
				                             "slurm job %s: its attempt on %s ended NODE_FAIL "
				                             "(a node stopped answering and Slurm marked it "
				                             "down); requeued", j->sid,
				                             nodes[0] ? nodes : asks[i].nodes);
				if (ev)
					ev->note = 1;
				j->last = last;          /* a note changes no state */
			}
			break;
		}
		pthread_mutex_unlock(&sx->lock);
	}
}

static int apply_row(struct slurm_ex *sx, struct sjob *j, const struct row *r)
{
	struct slurm_state m = map_state(r->state, r->reason);
	snprintf(j->partition, sizeof j->partition, "%s", r->partition);
	if (r->nodes[0] && strcmp(r->nodes, "(null)") != 0)   /* none while it waits */
		snprintf(j->nodes, sizeof j->nodes, "%s", r->nodes);
	int restarted = r->restarts > j->restarts;
	j->restarts = r->restarts;
	if (restarted && j->last == EXEC_RUNNING && m.kind != K_REQUEUE) {
		emit_requeued(sx, j, r->restarts);
		j->await_restart = r->restarts;
	}
	switch (m.kind) {
	case K_WAIT:
		j->await_restart = 0;
		if (j->last == EXEC_RUNNING)
			emit_requeued(sx, j, r->restarts);
		if (j->last != EXEC_QUEUED) {
			emit(sx, j, EXEC_QUEUED, -1, 0, "slurm job %s (%s)", j->sid, r->reason);
		} else if (strcmp(j->wait_reason, r->reason) != 0 && strcmp(r->reason, "None") != 0) {
			/* why it waits changed ("AssocMaxJobsLimit"): said on the job */
			struct exec_event *ev = emit(sx, j, EXEC_QUEUED, -1, 0, "slurm job %s pending: %s",
			                             j->sid, r->reason);
			if (ev)
				ev->note = 1;
		}
		snprintf(j->wait_reason, sizeof j->wait_reason, "%s", r->reason);
		return 0;
	case K_HELD:
		j->await_restart = 0;
		if (j->last == EXEC_RUNNING)
			emit_requeued(sx, j, r->restarts);
		if (j->last != EXEC_HELD)
			emit(sx, j, EXEC_HELD, -1, 0, "slurm job %s held (%s)", j->sid, r->reason);
		return 0;
	case K_REQUEUE:
		if (j->last == EXEC_RUNNING)
			emit_requeued(sx, j, r->restarts);
		return 0;
	case K_RUN:
		if (j->await_restart > 0) {
			char attempt[32] = "";
			if (read_file(j->job.dir, "slurm-attempt", attempt, sizeof attempt) != 0 ||
			    atoi(attempt) < j->await_restart)
				return 0;          /* the requeued attempt is still being stopped */
			j->await_restart = 0;
		}
		j->seen_running = 1;
		if (j->last != EXEC_RUNNING)
			emit(sx, j, EXEC_RUNNING, -1, 1, "slurm job %s on %s", j->sid, r->nodes);
		return 0;
	case K_FINAL:
		break;
	}
	int started = j->seen_running || m.final == EXEC_COMPLETED || m.final == EXEC_TIMEOUT ||
	              (m.final != EXEC_CANCELLED && r->nodes[0]);
	int code = WIFEXITED(r->exit_raw) ? WEXITSTATUS(r->exit_raw) : -1;
	int signo = WIFSIGNALED(r->exit_raw) ? WTERMSIG(r->exit_raw) : 0;
	emit_final(sx, j, m.final, r->state, r->reason, code, signo, started);
	return 1;
}

/* ---- jobs squeue no longer lists (service/slurm_gone.h) ---------------------------- */

/* What became of a job squeue stopped listing. */
struct gone {
	int decided;                  /* 0: Slurm still has it (squeue lists it again) */
	int final;                    /* Slurm's record of its end: st, rec */
	enum exec_state st;
	struct slurm_gone_record rec;
	enum slurm_gone_verdict verdict;   /* !final: Slurm forgot it */
	int may_have_run;
	long long forgot_ms;          /* when Slurm was first found to have no record of it */
	char why[EXEC_REASON_MAX];
};

/* Asks Slurm about j, then reads what j left. Runs commands: called without
 * the lock, on a copy. */
static void resolve_gone(struct slurm_ex *sx, const struct sjob *j, struct gone *g)
{
	memset(g, 0, sizeof *g);
	struct slurm_gone_job q = { .sid = j->sid, .name = j->name, .dir = j->job.dir,
	                            .user = j->as_owner ? j->owner.name : sx->self_user };
	g->forgot_ms = j->forgot_ms;
	if (!g->forgot_ms)                 /* once forgotten, forgotten: not asked again */
		slurm_gone_ask(&q, sx->cfg.timeout_s * 1000, &g->rec);
	if (g->rec.found) {
		struct slurm_state m = map_state(g->rec.state, g->rec.reason);
		if (m.kind != K_FINAL)
			return;                    /* still alive: squeue lists it again */
		g->decided = g->final = 1;
		g->st = m.final;
		g->may_have_run = j->seen_running || m.final != EXEC_CANCELLED;
		return;
	}
	struct slurm_gone_traces t;
	slurm_gone_look(j->job.dir, &t);
	long long now = svc_mono_ms();
	if (!g->forgot_ms)
		g->forgot_ms = now;
	g->decided = 1;
	g->may_have_run = slurm_gone_may_have_run(&t);
	g->verdict = slurm_gone_decide(&t, j->sid, j->lost,
	                               now - g->forgot_ms >= SLURM_GONE_SETTLE_MS, g->why,
	                               sizeof g->why);
}

/* Slurm no longer has j: its Slurm side forgotten, to be submitted again. */
static void resubmit(struct slurm_ex *sx, struct sjob *j)
{
	j->phase = PH_SUBMIT;
	j->sid[0] = '\0';
	j->partition[0] = '\0';
	j->wait_reason[0] = '\0';
	j->cancel_sent = j->hold_sent = 0;
	j->restarts = -1;
	j->seen_running = j->missing = j->tries = j->await_restart = 0;
	j->next_try_ms = 0;
	j->forgot_ms = 0;
	j->lost++;
	sx->kicked = 1;                    /* the thread's next pass submits it */
}

/* Applies g to j; lock held. Returns 1 when j ended (the caller frees it). */
static int apply_gone(struct slurm_ex *sx, struct sjob *j, const struct gone *g)
{
	if (g->final) {
		if (g->rec.partition[0])
			snprintf(j->partition, sizeof j->partition, "%s", g->rec.partition);
		emit_final(sx, j, g->st, g->rec.state, g->rec.reason, g->rec.exit_code, g->rec.signo,
		           g->may_have_run);
		return 1;
	}
	if (j->cancel && g->verdict != SLURM_GONE_COMPLETED && g->verdict != SLURM_GONE_FAILED) {
		/* cancelled while Slurm had forgotten it: nothing of it to stop
		 * (slurmctld kills an attempt it does not know) */
		emit_final(sx, j, EXEC_CANCELLED, "CANCELLED", g->why, -1, 0, g->may_have_run);
		return 1;
	}
	switch (g->verdict) {
	case SLURM_GONE_WAIT:
		if (!j->forgot_ms)
			fprintf(stderr, "larchd: job j-%06lld: %s\n", j->job.id, g->why);
		j->forgot_ms = g->forgot_ms;   /* looked at again at the next poll */
		return 0;
	case SLURM_GONE_COMPLETED:
		emit_final(sx, j, EXEC_COMPLETED, "COMPLETED", g->why, 0, 0, 1);
		return 1;
	case SLURM_GONE_FAILED:
		emit_final(sx, j, EXEC_FAILED, "UNKNOWN", g->why, -1, 0, g->may_have_run);
		return 1;
	case SLURM_GONE_RESUBMIT:
	case SLURM_GONE_REQUEUE:
		fprintf(stderr, "larchd: job j-%06lld: %s\n", j->job.id, g->why);
		emit(sx, j, EXEC_LOST, -1, g->verdict == SLURM_GONE_REQUEUE, "%s", g->why);
		resubmit(sx, j);
		return 0;
	}
	return 0;
}

/* squeue's user filter for the jobs followed: "--me" when they are all
 * larchd's own user's, else "--user=me,alice,bob" (jobs run as their
 * owners), each Unix user once. Jobs' owners change only as jobs are
 * tracked, under the lock. */
static void users_filter(struct slurm_ex *sx, char *out, size_t len)
{
	size_t o = (size_t)snprintf(out, len, "--user=%u", (unsigned)geteuid());
	int others = 0;
	pthread_mutex_lock(&sx->lock);
	for (struct sjob *j = sx->jobs; j && o + SVC_UNIX_NAME_MAX + 2 < len; j = j->next) {
		if (!j->as_owner || j->owner.uid == geteuid())
			continue;
		/* once each: look for ",name," in what is there */
		char key[SVC_UNIX_NAME_MAX + 3];
		snprintf(key, sizeof key, ",%s,", j->owner.name);
		out[o] = ',';
		out[o + 1] = '\0';
		if (!strstr(out + 7, key))
			o += (size_t)snprintf(out + o, len - o, ",%s", j->owner.name);
		out[o] = '\0';
		others = 1;
	}
	pthread_mutex_unlock(&sx->lock);
	if (!others)
		snprintf(out, len, "--me");
}

/* One squeue for every job; then the jobs it did not list. */
static void poll_squeue_once(struct slurm_ex *sx)
{
	char users[8192];
	users_filter(sx, users, sizeof users);
	const char *argv[] = { "squeue", users, "-h", "-t", "all", "-O",
	                       "JobID:|,Name:|,State:|,exit_code:|,RestartCnt:|,NodeList:|,"
	                       "Partition:|,Reason:|,UserName:|,ArrayJobID:|,ArrayTaskID:|", NULL };
	struct slurm_cmd_result res;
	int rc = slurm_cmd_run(argv, sx->cfg.timeout_s * 1000, &res);
	if (rc != 0) {
		char why[EXEC_REASON_MAX];
		slurm_cmd_describe(argv, &res, why, sizeof why);
		slurm_cmd_release(&res);
		pthread_mutex_lock(&sx->lock);
		note_health(sx, 0, why);
		pthread_mutex_unlock(&sx->lock);
		return;
	}
	int n_rows, n_arrays;
	struct row *arrays;
	struct row *rows = parse_squeue(sx, res.out, &n_rows, &arrays, &n_arrays);

	/* jobs to ask about, copied so the commands run without the lock */
	struct sjob *gone = NULL;
	int n_gone = 0, cap_gone = 0;
	pthread_mutex_lock(&sx->lock);
	note_health(sx, 1, "");
	for (struct sjob **p = &sx->jobs; *p;) {
		struct sjob *j = *p;
		struct row key = { .id = j->job.id };
		struct row *r = rows && j->task < 0 ? bsearch(&key, rows, (size_t)n_rows, sizeof *rows,
		                                              row_cmp) : NULL;
		/* several rows for one larch id: another user named a job of theirs
		 * after it (its name is no secret), or it was submitted twice. Only a
		 * row of the job's own user counts, and of those the one with the
		 * recorded id */
		if (r) {
			struct row *first = r;
			while (first > rows && first[-1].id == j->job.id)
				first--;
			const char *user = j->as_owner ? j->owner.name : sx->self_user;
			for (r = first; r < rows + n_rows && r->id == j->job.id; r++)
				if (strcmp(r->user, user) == 0 && (!j->sid[0] || strcmp(r->sid, j->sid) == 0))
					break;
			if (r == rows + n_rows || r->id != j->job.id)
				r = NULL;
		}
		if (j->task >= 0 && (j->phase == PH_LOOKUP || j->phase == PH_FOLLOW))
			r = task_row(arrays, n_arrays, j, j->as_owner ? j->owner.name : sx->self_user);
		int ended = 0;
		if (j->phase == PH_LOOKUP) {
			if (r) {
				if (j->task >= 0)
					snprintf(j->sid, sizeof j->sid, "%lld_%d", r->id, j->task);
				else
					snprintf(j->sid, sizeof j->sid, "%s", r->sid);
				j->phase = PH_FOLLOW;
				char line[40], err[256];
				snprintf(line, sizeof line, "%s\n", j->sid);
				if (write_file(j->job.dir, "slurm-job-id", line, 0640, err, sizeof err) != 0)
					fprintf(stderr, "larchd: job j-%06lld: %s\n", j->job.id, err);
			} else if (!file_exists(j->job.dir, "slurm-attempt")) {
				j->phase = PH_SUBMIT;      /* Slurm never had it: submit (again) */
			} else if (j->sid[0]) {
				j->phase = PH_FOLLOW;      /* it ran; how it ended is asked below */
				j->missing = MISSING_POLLS;
			} else {
				/* it ran and Slurm forgot it, id unknown: what it left says how */
				snprintf(j->sid, sizeof j->sid, "?");
				j->phase = PH_FOLLOW;
				j->missing = MISSING_POLLS;
			}
		}
		if (j->phase == PH_FOLLOW) {
			if (r) {
				j->missing = 0;
				j->forgot_ms = 0;
				ended = apply_row(sx, j, r);
			} else if (++j->missing >= MISSING_POLLS) {
				if (n_gone == cap_gone) {
					cap_gone = cap_gone ? 2 * cap_gone : 8;
					struct sjob *grown = realloc(gone, (size_t)cap_gone * sizeof *gone);
					if (!grown) {
						p = &j->next;
						continue;
					}
					gone = grown;
				}
				/* the copy owns its paths: j may go while the lock is not held */
				gone[n_gone] = *j;
				if (exec_job_copy(&gone[n_gone].job, &j->job) != 0) {
					p = &j->next;
					continue;
				}
				n_gone++;
			}
		}
		if (ended) {
			*p = j->next;
			sx->n_jobs--;
			sjob_free(j);
		} else {
			p = &j->next;
		}
	}
	pthread_mutex_unlock(&sx->lock);
	free(rows);
	free(arrays);
	slurm_cmd_release(&res);

	for (int i = 0; i < n_gone; i++) {
		struct gone g;
		resolve_gone(sx, &gone[i], &g);
		if (!g.decided)
			continue;
		pthread_mutex_lock(&sx->lock);
		for (struct sjob **p = &sx->jobs; *p; p = &(*p)->next) {
			struct sjob *j = *p;
			if (j->job.id != gone[i].job.id || j->phase != PH_FOLLOW ||
			    strcmp(j->sid, gone[i].sid) != 0)
				continue;
			if (apply_gone(sx, j, &g)) {
				*p = j->next;
				sx->n_jobs--;
				sjob_free(j);
			}
			break;
		}
		pthread_mutex_unlock(&sx->lock);
	}
	for (int i = 0; i < n_gone; i++)
		exec_job_release(&gone[i].job);
	free(gone);
}

/* One squeue for every job, timed for /metrics (slurm_poll_record). */
static void poll_squeue(struct slurm_ex *sx)
{
	struct timespec w0, c0, w1, c1;
	clock_gettime(CLOCK_MONOTONIC, &w0);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	poll_squeue_once(sx);
	clock_gettime(CLOCK_MONOTONIC, &w1);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	slurm_poll_record((double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9,
	                  (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9);
}

/* ---- cancels, partitions ------------------------------------------------------------ */

enum order { ORDER_CANCEL, ORDER_HOLD };

/* Whether an order for Slurm id `target` ("123_4", or "123": the whole
 * array) reaches the job of Slurm id sid. */
static int in_order(const char *sid, const char *target)
{
	size_t n = strlen(target);
	return strcmp(sid, target) == 0 ||
	       (!strchr(target, '_') && strncmp(sid, target, n) == 0 && sid[n] == '_');
}

/* Whether every task of array aid that this executor follows is to be
 * cancelled (and one order not yet sent); lock held. */
static int whole_array_cancelled(struct slurm_ex *sx, const char *aid)
{
	for (struct sjob *m = sx->jobs; m; m = m->next)
		if (m->phase == PH_FOLLOW && in_order(m->sid, aid) && !m->cancel)
			return 0;
	return 1;
}

/* The flag that says the order was sent for j. */
static int *order_sent(struct sjob *j, enum order o)
{
	return o == ORDER_CANCEL ? &j->cancel_sent : &j->hold_sent;
}

/* Runs a (scancel or scontrol hold over the n Slurm ids in sids, each job
 * already marked sent); when slurmctld could not be reached, the jobs are
 * marked unsent again so that the next pass repeats the order. */
static void order_jobs(struct slurm_ex *sx, struct argv_buf *a, char sids[][32], int n,
                       enum order o)
{
	if (n == 0)
		return;
	struct slurm_cmd_result res;
	if (slurm_cmd_run(a->argv, sx->cfg.timeout_s * 1000, &res) != 0) {
		char why[EXEC_REASON_MAX];
		slurm_cmd_describe(a->argv, &res, why, sizeof why);
		fprintf(stderr, "larchd: slurm executor: %s\n", why);
		if (unreachable(&res)) {           /* again at the next pass */
			pthread_mutex_lock(&sx->lock);
			for (struct sjob *j = sx->jobs; j; j = j->next)
				for (int i = 0; i < n; i++)
					if (in_order(j->sid, sids[i]))
						*order_sent(j, o) = 0;
			note_health(sx, 0, why);
			pthread_mutex_unlock(&sx->lock);
		}
	}
	slurm_cmd_release(&res);
}

static void send_cancels(struct slurm_ex *sx)
{
	struct argv_buf a;
	memset(&a, 0, sizeof a);
	arg(&a, "scancel");
	int n = 0;
	char sids[16][32];
	pthread_mutex_lock(&sx->lock);
	for (struct sjob **p = &sx->jobs; *p;) {
		struct sjob *j = *p;
		if (!j->cancel) {
			p = &j->next;
			continue;
		}
		if (j->phase == PH_SUBMIT) {
			emit(sx, j, EXEC_CANCELLED, -1, 0, "cancelled before Slurm took it");
			*p = j->next;
			sx->n_jobs--;
			sjob_free(j);
			continue;
		}
		/* only an id the last squeue listed as the job's: one squeue no
		 * longer lists may be another job's now (slurmctld restarted on an
		 * older state hands the same ids out again) */
		if (j->phase == PH_FOLLOW && !j->cancel_sent && j->sid[0] != '?' && !j->missing &&
		    n < 16) {
			/* every task of an array to be cancelled: one order for the
			 * array (a sweep's cancel), its pending tasks included */
			char aid[24];
			long task;
			if (j->task >= 0 && slurm_array_sid(j->sid, aid, sizeof aid, &task) == 0 &&
			    whole_array_cancelled(sx, aid)) {
				snprintf(sids[n], sizeof sids[n], "%s", aid);
				for (struct sjob *m = sx->jobs; m; m = m->next)
					if (in_order(m->sid, aid))
						m->cancel_sent = 1;
			} else {
				snprintf(sids[n], sizeof sids[n], "%s", j->sid);
				j->cancel_sent = 1;
			}
			arg(&a, sids[n++]);
		}
		p = &j->next;
	}
	pthread_mutex_unlock(&sx->lock);
	order_jobs(sx, &a, sids, n, ORDER_CANCEL);
}

/* scontrol hold for the jobs larch held while their submission was under
 * way. A job that has started meanwhile cannot be held: it runs (the runner
 * records that the hold came too late). */
static void send_holds(struct slurm_ex *sx)
{
	struct argv_buf a;
	memset(&a, 0, sizeof a);
	arg(&a, "scontrol");
	arg(&a, "hold");
	int n = 0;
	char sids[16][32];
	pthread_mutex_lock(&sx->lock);
	for (struct sjob *j = sx->jobs; j && n < 16; j = j->next)
		if (j->hold && !j->hold_sent && !j->cancel && j->phase == PH_FOLLOW &&
		    j->sid[0] != '?' && !j->missing) {
			snprintf(sids[n], sizeof sids[n], "%s", j->sid);
			arg(&a, sids[n++]);
			j->hold_sent = 1;
		}
	pthread_mutex_unlock(&sx->lock);
	order_jobs(sx, &a, sids, n, ORDER_HOLD);
}

static void free_parts(char **parts, int n)
{
	for (int i = 0; i < n; i++)
		free(parts[i]);
	free(parts);
}

/* sinfo's partitions, each with the memory of its smallest node: a line per
 * partition and node configuration, "debug* 3907" (the default partition
 * marked, memory in MB, "+" after it where nodes differ). */
static void refresh_partitions(struct slurm_ex *sx)
{
	long long now = svc_mono_ms();
	pthread_mutex_lock(&sx->lock);
	int due = !sx->parts || now - sx->parts_ms >= PARTITIONS_MS;
	pthread_mutex_unlock(&sx->lock);
	if (!due)
		return;
	const char *argv[] = { "sinfo", "-h", "-o", "%P %m", NULL };
	struct slurm_cmd_result res;
	if (slurm_cmd_run(argv, sx->cfg.timeout_s * 1000, &res) != 0) {
		slurm_cmd_release(&res);
		return;
	}
	char **parts = NULL;
	double *mem = NULL;
	int n = 0, def = -1;
	for (char *line = res.out, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *sp = strchr(line, ' ');
		double mb = sp ? strtod(sp + 1, NULL) : 0;
		if (sp)
			*sp = '\0';
		size_t len = strlen(line);
		int is_default = len > 0 && line[len - 1] == '*';
		if (is_default)
			line[--len] = '\0';
		if (!len)
			continue;
		int i = 0;
		while (i < n && strcmp(parts[i], line) != 0)
			i++;
		if (i == n) {
			char **grown = realloc(parts, (size_t)(n + 1) * sizeof *parts);
			if (grown)
				parts = grown;
			double *grown_mem = realloc(mem, (size_t)(n + 1) * sizeof *mem);
			if (grown_mem)
				mem = grown_mem;
			if (!grown || !grown_mem || !(parts[n] = strdup(line)))
				break;
			mem[n++] = 0;
		}
		if (mb > 0 && (mem[i] == 0 || mb * 1048576.0 < mem[i]))
			mem[i] = mb * 1048576.0;
		if (is_default)
			def = i;
	}
	slurm_cmd_release(&res);
	pthread_mutex_lock(&sx->lock);
	free_parts(sx->parts, sx->n_parts);
	free(sx->part_mem);
	sx->parts = parts ? parts : calloc(1, sizeof *parts);
	sx->part_mem = mem;
	sx->n_parts = n;
	sx->default_part = def;
	sx->parts_ms = now;
	pthread_mutex_unlock(&sx->lock);
}

/* ---- the thread ---------------------------------------------------------------------- */

static void *slurm_main(void *arg)
{
	struct slurm_ex *sx = arg;
	long long last_poll = 0;
	pthread_mutex_lock(&sx->lock);
	while (!sx->stopping) {
		sx->kicked = 0;
		int have_jobs = sx->n_jobs > 0;
		pthread_mutex_unlock(&sx->lock);

		refresh_partitions(sx);
		send_cancels(sx);
		submit_due(sx);
		send_cancels(sx);                  /* cancelled while their sbatch ran */
		send_holds(sx);
		if (have_jobs && svc_mono_ms() - last_poll >= sx->cfg.poll_ms) {
			last_poll = svc_mono_ms();
			poll_squeue(sx);
			explain_requeues(sx);
		}

		pthread_mutex_lock(&sx->lock);
		if (sx->kicked || sx->stopping)
			continue;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		long long wait = sx->cfg.poll_ms - (svc_mono_ms() - last_poll);
		if (wait < 20)
			wait = 20;
		long long ns = until.tv_nsec + wait * 1000000;
		until.tv_sec += ns / 1000000000;
		until.tv_nsec = ns % 1000000000;
		while (!sx->kicked && !sx->stopping &&
		       pthread_cond_timedwait(&sx->wake, &sx->lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&sx->lock);
	return NULL;
}

static void kick(struct slurm_ex *sx)
{
	sx->kicked = 1;
	pthread_cond_signal(&sx->wake);
}

/* ---- operations ----------------------------------------------------------------------- */

static struct sjob *find(struct slurm_ex *sx, long long id)
{
	for (struct sjob *j = sx->jobs; j; j = j->next)
		if (j->job.id == id)
			return j;
	return NULL;
}

/* A new job to track in phase (not yet tracked); writes its script and
 * token file. A sweep's child is a task of an array named after the sweep.
 * NULL with err. */
static struct sjob *new_sjob(struct slurm_ex *sx, const struct exec_job *job, enum phase phase,
                             const char *sid, char *err, size_t errlen)
{
	struct sjob *j = calloc(1, sizeof *j);
	if (!j || exec_job_copy(&j->job, job) != 0) {
		free(j);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	j->task = job->sweep > 0 ? job->sweep_index : -1;
	if (job->unix_user[0]) {
		if (svc_unix_id_lookup(job->unix_user, &j->owner, err, errlen) != 0) {
			sjob_free(j);
			return NULL;
		}
		j->as_owner = 1;
	}
	char token[sizeof job->token + 2];
	snprintf(token, sizeof token, "%s\n", job->token);
	if (write_script(sx, j, err, errlen) != 0 ||
	    (job->token[0] && write_file_as(job->dir, "job-token", token, 0600,
	                                    j->as_owner ? &j->owner : NULL, err, errlen) != 0)) {
		explicit_bzero(token, sizeof token);
		sjob_free(j);
		return NULL;
	}
	explicit_bzero(token, sizeof token);
	explicit_bzero(j->job.token, sizeof j->job.token);
	j->phase = phase;
	j->last = -1;
	j->restarts = -1;
	snprintf(j->sid, sizeof j->sid, "%s", sid ? sid : "");
	slurm_job_name(sx->instance, job->id, job->sweep, j->name, sizeof j->name);
	return j;
}

/* Whether two array tasks can be one array: Slurm gives every task the
 * same resources, user and limits. */
static int same_shape(const struct sjob *a, const struct sjob *b)
{
	const struct exec_job *x = &a->job, *y = &b->job;
	return x->sweep == y->sweep && x->ranks == y->ranks && x->time_limit_s == y->time_limit_s &&
	       x->nodes == y->nodes && x->cpus_per_task == y->cpus_per_task &&
	       x->gpus_per_node == y->gpus_per_node && x->mem_mb == y->mem_mb &&
	       strcmp(x->partition, y->partition) == 0 && strcmp(x->qos, y->qos) == 0 &&
	       strcmp(x->account, y->account) == 0 && strcmp(x->unix_user, y->unix_user) == 0;
}

/* Tracks js[0..n) (FIFO: appended), the tasks among them in array groups:
 * one per shape. 0, or -1 with err when one is tracked already (then none
 * is, and js stay the caller's). */
static int track_all(struct slurm_ex *sx, struct sjob **js, int n, char *err, size_t errlen)
{
	pthread_mutex_lock(&sx->lock);
	for (int i = 0; i < n; i++)
		if (find(sx, js[i]->job.id)) {
			pthread_mutex_unlock(&sx->lock);
			snprintf(err, errlen, "job j-%06lld is already with the slurm executor",
			         js[i]->job.id);
			return -1;
		}
	for (int i = 0; i < n; i++) {
		if (js[i]->task < 0)
			continue;
		int k = 0;
		while (k < i && !(js[k]->task >= 0 && same_shape(js[k], js[i])))
			k++;
		js[i]->group = k < i ? js[k]->group : ++sx->groups;
	}
	struct sjob **p = &sx->jobs;
	while (*p)
		p = &(*p)->next;
	for (int i = 0; i < n; i++) {
		*p = js[i];
		p = &js[i]->next;
		sx->n_jobs++;
	}
	kick(sx);
	pthread_mutex_unlock(&sx->lock);
	return 0;
}

/* A new tracked job in phase; writes its script and token file. */
static int track(struct slurm_ex *sx, const struct exec_job *job, enum phase phase,
                 const char *sid, char *err, size_t errlen)
{
	struct sjob *j = new_sjob(sx, job, phase, sid, err, errlen);
	if (!j)
		return -1;
	if (track_all(sx, &j, 1, err, errlen) != 0) {
		sjob_free(j);
		return -1;
	}
	return 0;
}

static int slurm_submit_sweep(struct executor *ex, const struct exec_job *jobs, int n,
                              char *err, size_t errlen)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	struct sjob **js = calloc((size_t)(n > 0 ? n : 1), sizeof *js);
	if (!js) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int made = 0, rc = 0;
	while (made < n && (js[made] = new_sjob(sx, &jobs[made], PH_SUBMIT, NULL, err, errlen)))
		made++;
	if (made < n || track_all(sx, js, n, err, errlen) != 0) {
		for (int i = 0; i < made; i++)
			sjob_free(js[i]);
		rc = -1;
	}
	free(js);
	return rc;
}

static int slurm_cancel_sweep(struct executor *ex, long long sweep)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	int n = 0;
	pthread_mutex_lock(&sx->lock);
	for (struct sjob *j = sx->jobs; j; j = j->next)
		if (j->job.sweep == sweep) {
			j->cancel = 1;
			n++;
		}
	if (n)
		kick(sx);
	pthread_mutex_unlock(&sx->lock);
	return n;
}

static int slurm_submit(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	return track((struct slurm_ex *)ex, job, PH_SUBMIT, NULL, err, errlen);
}

static int slurm_adopt(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	/* the Slurm id larchd recorded (the database's, never the job directory's
	 * slurm-job-id, which a job's owner may rewrite to name another's job) */
	if (job->ext_id[0])
		return track((struct slurm_ex *)ex, job, PH_FOLLOW, job->ext_id, err, errlen);
	/* killed between sbatch and its answer or the commit, or before sbatch:
	 * look for it by name first */
	return track((struct slurm_ex *)ex, job, PH_LOOKUP, NULL, err, errlen);
}

static int slurm_cancel(struct executor *ex, long long id, char *err, size_t errlen)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	struct sjob *j = find(sx, id);
	if (j) {
		j->cancel = 1;
		kick(sx);
	}
	pthread_mutex_unlock(&sx->lock);
	if (!j)
		snprintf(err, errlen, "job j-%06lld is not with the slurm executor", id);
	return j ? 0 : -1;
}

static int slurm_hold(struct executor *ex, long long id, char *err, size_t errlen)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	struct sjob **p = &sx->jobs;
	while (*p && (*p)->job.id != id)
		p = &(*p)->next;
	struct sjob *j = *p;
	if (j && j->phase == PH_SUBMIT) {
		/* Slurm never had it: withdrawn (released, it is handed over again) */
		*p = j->next;
		sx->n_jobs--;
		sjob_free(j);
	} else if (j) {
		j->hold = 1;
		kick(sx);
	}
	pthread_mutex_unlock(&sx->lock);
	if (!j)
		snprintf(err, errlen, "job j-%06lld is not with the slurm executor", id);
	return j ? 0 : -1;
}

static void slurm_poll(struct executor *ex, exec_event_fn fn, void *ctx)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	struct exec_events taken = sx->events;
	sx->events = (struct exec_events){ 0 };
	pthread_mutex_unlock(&sx->lock);
	exec_events_deliver(&taken, fn, ctx);
}

static int slurm_count(struct executor *ex)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	int n = sx->n_jobs;
	pthread_mutex_unlock(&sx->lock);
	return n;
}

static int slurm_has(struct executor *ex, long long id)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	int found = find(sx, id) != NULL;
	pthread_mutex_unlock(&sx->lock);
	return found;
}

static int slurm_health(struct executor *ex, char *detail, size_t len)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	int ok = sx->healthy;
	if (ok) {
		snprintf(detail, len, "ok");
	} else {
		time_t since = (time_t)(sx->unhealthy_since_ms / 1000);
		struct tm tm;
		char when[32] = "";
		if (since && gmtime_r(&since, &tm))
			strftime(when, sizeof when, " since %Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(detail, len, "%s%s", sx->health_detail, when);
	}
	pthread_mutex_unlock(&sx->lock);
	return ok;
}

static int slurm_host_memory(struct executor *ex, const char *partition, double *bytes)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	int rc = -1;
	pthread_mutex_lock(&sx->lock);
	int i = partition && *partition ? 0 : sx->default_part;
	if (partition && *partition)
		while (i < sx->n_parts && strcmp(sx->parts[i], partition) != 0)
			i++;
	if (sx->part_mem && i >= 0 && i < sx->n_parts && sx->part_mem[i] > 0) {
		*bytes = sx->part_mem[i];
		rc = 0;
	}
	pthread_mutex_unlock(&sx->lock);
	return rc;
}

static int slurm_partition_ok(struct executor *ex, const char *partition, char *err,
                              size_t errlen)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	int known = -1;
	if (sx->parts && sx->n_parts > 0) {
		known = 0;
		for (int i = 0; i < sx->n_parts && !known; i++)
			known = strcmp(sx->parts[i], partition) == 0;
		if (!known) {
			size_t o = 0;
			o += (size_t)snprintf(err, errlen, "partition \"%s\" is not in the cluster (it has",
			                      partition);
			for (int i = 0; i < sx->n_parts && o < errlen; i++)
				o += (size_t)snprintf(err + o, errlen - o, "%s %s", i ? "," : "",
				                      sx->parts[i]);
			if (o < errlen)
				snprintf(err + o, errlen - o, ")");
		}
	}
	pthread_mutex_unlock(&sx->lock);
	return known;
}

static void slurm_free(struct executor *ex)
{
	struct slurm_ex *sx = (struct slurm_ex *)ex;
	pthread_mutex_lock(&sx->lock);
	sx->stopping = 1;
	kick(sx);
	int started = sx->started;
	pthread_mutex_unlock(&sx->lock);
	if (started)
		pthread_join(sx->thread, NULL);
	for (struct sjob *j = sx->jobs, *next; j; j = next) {
		next = j->next;
		sjob_free(j);
	}
	free_parts(sx->parts, sx->n_parts);
	free(sx->part_mem);
	exec_events_release(&sx->events);
	free(sx->trainer_path);
	free(sx->state_dir);
	free(sx->server_url);
	free(sx->ca_file);
	free(sx->partition);
	free(sx->account);
	free(sx->qos);
	for (int i = 0; i < sx->n_roots; i++)
		free(sx->roots[i]);
	pthread_cond_destroy(&sx->wake);
	pthread_mutex_destroy(&sx->lock);
	free(sx);
}

static const struct executor_ops slurm_ops = {
	.name = "slurm",
	.submit = slurm_submit,
	.adopt = slurm_adopt,
	.cancel = slurm_cancel,
	.poll = slurm_poll,
	.count = slurm_count,
	.free = slurm_free,
	.async_submit = 1,
	.has = slurm_has,
	.health = slurm_health,
	.partition_ok = slurm_partition_ok,
	.host_memory = slurm_host_memory,
	.hold = slurm_hold,
	.submit_sweep = slurm_submit_sweep,
	.cancel_sweep = slurm_cancel_sweep,
};

const char *exec_slurm_submits_with(const struct executor *ex)
{
	return ((const struct slurm_ex *)ex)->use_api ? "libslurm" : "sbatch";
}

static char *dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

struct executor *exec_slurm_new(const struct exec_slurm_config *cfg, char *err, size_t errlen)
{
	if (!cfg->trainer_path || !cfg->state_dir) {
		snprintf(err, errlen, "slurm executor: needs the trainer's path and the state dir");
		return NULL;
	}
	struct slurm_ex *sx = calloc(1, sizeof *sx);
	if (!sx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	sx->base.ops = &slurm_ops;
	sx->cfg = *cfg;
	if (sx->cfg.poll_ms < 100)
		sx->cfg.poll_ms = 100;
	if (sx->cfg.timeout_s < 1)
		sx->cfg.timeout_s = 30;
	if (sx->cfg.submit_parallel < 1)
		sx->cfg.submit_parallel = 1;
	if (sx->cfg.submit_parallel > 64)
		sx->cfg.submit_parallel = 64;
	sx->healthy = 1;
	snprintf(sx->health_detail, sizeof sx->health_detail, "ok");
	pthread_mutex_init(&sx->lock, NULL);
	sx->default_part = -1;
	pthread_cond_init(&sx->wake, NULL);
	sx->trainer_path = strdup(cfg->trainer_path);
	sx->state_dir = strdup(cfg->state_dir);
	sx->server_url = dup_or_null(cfg->server_url);
	sx->ca_file = dup_or_null(cfg->ca_file);
	sx->partition = dup_or_null(cfg->partition);
	sx->account = dup_or_null(cfg->account);
	sx->qos = dup_or_null(cfg->qos);
	int oom = !sx->trainer_path || !sx->state_dir || (cfg->ca_file && !sx->ca_file);
	sx->cfg.ca_file = NULL;             /* copied into ca_file */
	for (int i = 0; i < cfg->n_data_roots && i < EXEC_DATA_ROOTS_MAX; i++)
		oom |= !(sx->roots[sx->n_roots++] = strdup(cfg->data_roots[i]));
	sx->cfg.data_roots = NULL;          /* borrowed for the call only */
	struct svc_unix_id self;
	char self_err[256];
	if (svc_unix_id_self(&self, self_err, sizeof self_err) == 0)
		snprintf(sx->self_user, sizeof sx->self_user, "%s", self.name);
	if (oom || slurm_instance_id(cfg->state_dir, sx->instance, err, errlen) != 0) {
		if (oom)
			snprintf(err, errlen, "out of memory");
		slurm_free(&sx->base);
		return NULL;
	}
	slurm_name_prefix(sx->instance, 0, sx->prefix, sizeof sx->prefix);
	slurm_name_prefix(sx->instance, 1, sx->sprefix, sizeof sx->sprefix);
	if (cfg->submit_via != EXEC_SLURM_SUBMIT_SBATCH) {
		char why[256];
		if (slurm_api_init(why, sizeof why) == 0) {
			sx->use_api = 1;
		} else if (cfg->submit_via == EXEC_SLURM_SUBMIT_LIBSLURM) {
			snprintf(err, errlen, "slurm executor: %s", why);
			slurm_free(&sx->base);
			return NULL;
		}
	}
	int rc = pthread_create(&sx->thread, NULL, slurm_main, sx);
	if (rc != 0) {
		snprintf(err, errlen, "slurm executor: thread: %s", strerror(rc));
		slurm_free(&sx->base);
		return NULL;
	}
	sx->started = 1;
	return &sx->base;
}
