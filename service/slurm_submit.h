/* service/slurm_submit.h - one Slurm batch submission, by sbatch's argv or
 * by libslurm in-process.
 *
 * The Slurm executor describes a job once (struct slurm_submit) and submits
 * it either way: sbatch (a process per job, ~6 ms of CPU on a small machine,
 * and the only way where larchd is built without libslurm) or libslurm's
 * slurm_submit_batch_job() (~1 ms; the same request sbatch would send). Both
 * carry the same options; the batch script is DIR/slurm.sh, or for a job
 * array (a sweep's children) a script of its own that starts each task's
 * DIR/slurm.sh.
 *
 * libslurm is Slurm's own client library, of the version installed here: it
 * speaks to a slurmctld of that version or the two before it. Pointed at
 * another cluster, use sbatch (slurm_submit = sbatch in larchd.conf).
 */
#ifndef LARCH_SLURM_SUBMIT_H
#define LARCH_SLURM_SUBMIT_H

#include <stddef.h>
#include <sys/types.h>

struct slurm_submit {
	const char *name;              /* --job-name */
	const char *comment;           /* --comment */
	const char *dir;               /* --chdir; stdout.log, stderr.log and slurm.sh in it */
	const char *array;             /* --array ("0-3%2"); NULL = a job of its own */
	const char *script;            /* the batch script; NULL = DIR/slurm.sh */
	const char *output;            /* --output for stdout and stderr both (% escaped, %a
	                                  the task); NULL = DIR/stdout.log and DIR/stderr.log */
	const char *partition, *qos, *account;   /* NULL or "" = Slurm's default */
	int nodes, ntasks, cpus_per_task, gpus_per_node;
	int min_nodes;                 /* elastic: --nodes=min_nodes-nodes (Slurm starts it on
	                                  as many as are free, at least min_nodes), each node
	                                  one task of the CPUs of ntasks / nodes tasks: no
	                                  task count, which would cap the nodes at it; the
	                                  batch script starts ntasks / nodes a node; 0 =
	                                  exactly nodes and ntasks */
	long long mem_mb;              /* per node; 0 = Slurm's default */
	long time_s;                   /* 0 = the partition's limit */
	long grace_s;                  /* USR1 to the batch shell this long before the limit; 0 none */
	int hold;                      /* submitted held (priority 0) */
	int as_user;                   /* 1: as uid:gid (larchd is root), else as larchd */
	uid_t uid;
	gid_t gid;
};

/* Slurm expands %j and the like in --output/--error: dir with each % doubled
 * and "/name" appended, into out. 0, or -1 when it does not fit. */
int slurm_submit_log_path(const char *dir, const char *name, char *out, size_t len);

/* Whether larchd was built with libslurm. */
int slurm_api_built(void);

/* Reads Slurm's configuration (SLURM_CONF, else Slurm's default path) once
 * for this process. Call it before the first slurm_api_submit and from one
 * thread. 0, or -1 with err: not built with libslurm, or no readable
 * configuration file (libslurm would end the process over a configuration it
 * cannot read; sbatch reports that instead, so the caller falls back). */
int slurm_api_init(char *err, size_t errlen);

/* Submits r. 0 with Slurm's job id in sid; -1 with msg and *transient set
 * when slurmctld may not have received it (unreachable, timed out), clear
 * when it refused the job. Safe from several threads at once. */
int slurm_api_submit(const struct slurm_submit *r, char *sid, size_t sid_len, char *msg,
                     size_t msg_len, int *transient);

#endif
