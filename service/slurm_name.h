/* service/slurm_name.h - the names larch gives its Slurm jobs
 * (executor_slurm_name.c), for the Slurm executor that submits and follows
 * them (executor_slurm.c) and the admin job operations that must act on no
 * other job (cluster_slurm.c).
 *
 * A job of its own is "larch-<instance>-j-000123" (its larch id), a sweep's
 * child a task of the array "larch-<instance>-s-000007" (the sweep's id;
 * the task is the child's sweep index). The instance id is 16 hex digits
 * made once per state dir (STATE/instance-id), so that the jobs of two
 * larchd sharing a cluster, or of one state dir and the next, never share
 * a name. Slurm's job ids are no identity: they restart on a clean cluster
 * and slurmctld restarted on an old state gives them out again.
 */
#ifndef LARCH_SERVICE_SLURM_NAME_H
#define LARCH_SERVICE_SLURM_NAME_H

#include <stddef.h>

#define SLURM_INSTANCE_LEN 16         /* hex digits of an instance id */
#define SLURM_NAME_MAX 48             /* a job name's size, its '\0' included */

/* STATE/instance-id into out: read, or made and written (mode 0640) when
 * missing or malformed. 0, or -1 with err. Call it from one thread at a
 * time (larchd's start). */
int slurm_instance_id(const char *state_dir, char out[SLURM_INSTANCE_LEN + 1], char *err,
                      size_t errlen);

/* The name before the number: "larch-<instance>-j-", or with array set
 * "larch-<instance>-s-". */
void slurm_name_prefix(const char *instance, int array, char *out, size_t len);

/* The Slurm job name of larch job `job`; of the array of sweep `sweep`
 * when sweep > 0 (the job is one of its tasks). */
void slurm_job_name(const char *instance, long long job, long long sweep, char *out,
                    size_t len);

#endif
