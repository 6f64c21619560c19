/* service/cluster.h - the admin endpoints' view of the cluster and the Slurm
 * commands behind them: larchd's side of api/admin_hooks.h.
 *
 * Under Slurm (executor "slurm"):
 *   - GET /v1/queues is `sinfo -h -a -s -o ...` (partitions) and `squeue -h
 *     -a -t PD,R,CF -O ...` (their jobs, larch's own counted apart by their
 *     Slurm ids in the database); GET /v1/nodes is `sinfo -h -a -N -O ...`.
 *     Each view is a snapshot kept in memory and refreshed when asked for
 *     and older than SVC_CLUSTER_MAX_AGE_MS, by one refresh at a time: a
 *     reader who comes while it runs waits for it, so any number of clients
 *     cost at most one sinfo per view every SVC_CLUSTER_MAX_AGE_MS. A
 *     refresh that fails is remembered as long (no retry storm while
 *     slurmctld is down): readers get the last good snapshot marked
 *     "stale": true with the error, or 503 when there is none.
 *   - drain/resume are `scontrol update NodeName=N State=DRAIN Reason=R` /
 *     `State=RESUME`, answered with the node(s) as `sinfo -N -n N` shows
 *     them right after; hold/release/requeue/update are `scontrol hold ID`
 *     (only of a job Slurm has PENDING), `scontrol release ID`, `scontrol
 *     requeue ID`, `scontrol update JobId=ID ...`. Each is sent only after
 *     `scontrol -o show job ID` says the Slurm job of that id is still the
 *     larch job's: its name (slurm_name.h; an array task's, its array's
 *     with the task) and its user. Slurm gives ids out again (slurmctld
 *     restarted on an old state, a clean cluster): an id that is another
 *     job's now is a 409 and nothing is sent to Slurm.
 *     A change makes the snapshots it affects stale at once.
 * Every command goes through slurm_cmd_run (argv, never a shell; node
 * names, reasons and partitions arrive validated by the API) with a timeout
 * of slurm_timeout seconds, at most SVC_CLUSTER_TIMEOUT_CAP_S (an HTTP
 * client is waiting), on one of the module's own threads: no HTTP thread
 * ever waits for Slurm.
 *
 * With the local executor, the views are one queue "local" (max_local_jobs
 * slots counted as its CPUs, jobs counted from the database) and this host,
 * answered at once; there are no Slurm nodes or jobs to act on.
 *
 * Ownership: the db is borrowed and must outlive the cluster; free it after
 * the HTTP server has stopped (no request may be waiting on it).
 */
#ifndef LARCH_SERVICE_CLUSTER_H
#define LARCH_SERVICE_CLUSTER_H

#include <jansson.h>
#include <stddef.h>

#include "api/admin_hooks.h"

#define SVC_CLUSTER_MAX_AGE_MS 2000     /* a snapshot younger than this is served as it is */
#define SVC_CLUSTER_TIMEOUT_CAP_S 10    /* the longest a Slurm command may take here */
#define SVC_CLUSTER_THREADS 4           /* Slurm calls at once */

struct db;
struct svc_cluster;

/* executor: "local" or "slurm" (copied). Under Slurm, starts the threads;
 * slurm_instance is the instance id in larch's Slurm job names
 * (slurm_name.h; copied), which the job ops check. Returns NULL with err
 * filled. */
struct svc_cluster *svc_cluster_new(struct db *db, const char *executor,
                                    unsigned max_local_jobs, unsigned slurm_timeout_s,
                                    const char *slurm_instance, char *err, size_t errlen);
/* For struct api_ctx.admin; static storage of c. */
const struct api_admin_hooks *svc_cluster_hooks(struct svc_cluster *c);
/* Stops the threads (after the calls they are running) and frees c.
 * Accepts NULL. */
void svc_cluster_free(struct svc_cluster *c);

/* Parsing Slurm's output (exposed for tests/unit/test_svc_cluster.c). */

/* The names of a Slurm hostlist ("n[01-03,7],gpu1" -> n01 n02 n03 n7 gpu1)
 * as a new JSON array of strings; NULL when malformed or longer than max. */
json_t *svc_hostlist_expand(const char *list, size_t max);
/* A node state of `sinfo -O StateLong` ("idle", "allocated*", "drained",
 * "mixed~") as the API names it, into out: "alloc", "drain", the others as
 * they are, without the flag; *responding = 0 for the '*' flag. */
void svc_node_state(const char *slurm, char *out, size_t len, int *responding);
/* A Slurm time limit ("30:00", "1:00:00", "2-00:00:00", "infinite") in
 * seconds; -1 for none (infinite, unlimited), -2 when it is not one. */
long svc_slurm_time_s(const char *s);
/* Whether `scontrol -o show job ID` output (out) is of the Slurm job
 * named `name` (slurm_name.h) of Unix user `user`; for an array task
 * (task >= 0), Slurm's ArrayTaskId must name that task when it names one
 * task. 1 with Slurm's JobState ("PENDING", ...) in state, else 0. */
int svc_slurm_job_is(const char *out, const char *name, const char *user, long long task,
                     char *state, size_t len);
struct slurm_cmd_result;
/* Whether a Slurm command failed because Slurm could not be asked (timed
 * out, did not run, or said it could not reach slurmctld or slurmdbd)
 * rather than because it said no. */
int svc_slurm_unreachable(const struct slurm_cmd_result *r);

#endif
