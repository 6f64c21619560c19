/* service/runner.h - the bridge between the job store (db/) and an executor.
 *
 * One thread. It wakes when a job is submitted (the `submitted` hook) or
 * every poll_ms, and on each pass:
 *   - hands PENDING jobs to the executor, oldest first, while the executor
 *     holds fewer than queue_max jobs: makes the job directory
 *     <state>/jobs/j-000123 (0750; where jobs run as their owner, the
 *     owner's: service/jobfs.h says how larchd then reads it), writes
 *     spec.json (the stored spec; an init that names a checkpoint by job
 *     resolved to its file), creates the job's token, submits it and records
 *     PENDING -> QUEUED (PENDING -> FAILED with the reason when that fails
 *     for good; a full disk or the like leaves it PENDING, tried again);
 *   - polls the executor and turns each event into a transition (by
 *     "executor"): QUEUED -> RUNNING (the reason names the pid), and on the
 *     way to a final state first imports what the job left in its directory
 *     (service/job_import.h: metrics.jsonl, checkpoints, progress), so a
 *     client that sees the final state also sees all of its metrics.
 *
 * Restart safety. A job goes PENDING -> QUEUED only after the executor took
 * it, and the executor starts jobs only on poll, which this same thread runs
 * after the transition is committed. At start (svc_runner_start) every job
 * the database has as QUEUED or RUNNING is adopted (exec_adopt: a job that
 * never launched is queued again, one that did is followed or found ended,
 * never started twice); a job whose directory is gone is FAILED ("job
 * directory lost"). A PENDING job whose directory exists already (larchd
 * stopped between making it and committing QUEUED) is adopted too, not
 * submitted. A cancel request is kept in the job directory (`cancel`, the
 * user's name), so a job cancelled before a restart still ends CANCELLED.
 *
 * Cancels come from the API's threads (the `cancel` hook): a job that has not
 * reached the executor (PENDING, HELD, REQUEUED, PREEMPTED) is CANCELLED at
 * once; a QUEUED or RUNNING one is stopped by the executor (SIGTERM, the
 * trainer checkpoints, SIGKILL after the grace time) and becomes CANCELLED,
 * by the user who asked, when its process ends. A QUEUED job's cancel waits
 * (up to a second) for the runner's next pass, so it is usually CANCELLED by
 * the time the hook returns.
 *
 * Every state change is logged in one line (service/log.h):
 *   job j-000123: RUNNING -> COMPLETED (exit 0)
 *
 * Ownership: the runner borrows the db and the executor; both must outlive
 * it. The strings of the config are copied.
 */
#ifndef LARCH_SERVICE_RUNNER_H
#define LARCH_SERVICE_RUNNER_H

#include <stddef.h>

#include "api/jobs_hooks.h"
#include "config.h"

struct db;
struct executor;

struct svc_runner_config {
	struct db *db;                 /* required */
	const char *state_dir;         /* required; job dirs go in <state_dir>/jobs */
	int poll_ms;                   /* between passes when nothing wakes it; 0 = 200 */
	int queue_max;                 /* jobs the executor may hold (queued + running);
	                                  0 = unbounded */
	const char *executor;          /* the executor's name for new jobs; NULL = "local" */
	const struct svc_gpu_memory *gpu_memory;   /* per GPU, for memory plans; NULL = unknown
	                                              (copied) */
	int run_as_owner;              /* 1: jobs run as the Unix user their row names
	                                  (run_as owner); 0: as larchd's user */
	int confine_user_jobs;         /* 1: user-role jobs may read input files only under
	                                  the executor's data_roots (run_as service) */
};

struct svc_runner;

/* A runner that does nothing until svc_runner_start; its hooks may be called
 * already (a submit waits for the start, a cancel of a job the executor has
 * not adopted yet is remembered and applied after adoption). Returns NULL
 * with err filled. */
struct svc_runner *svc_runner_new(const struct svc_runner_config *cfg, char *err, size_t errlen);

/* The hooks for struct api_ctx.jobs (api/jobs_hooks.h); their arg is r.
 * Static storage of r. */
const struct api_jobs_hooks *svc_runner_hooks(struct svc_runner *r);

/* The GPU memory later submits' plans are held to (SIGHUP); g is copied. */
void svc_runner_set_gpu_memory(struct svc_runner *r, const struct svc_gpu_memory *g);

/* Reconciles (adopts what the database says the executor holds) and starts
 * the thread. ex is borrowed. Returns 0, or -1 with err filled. */
int svc_runner_start(struct svc_runner *r, struct executor *ex, char *err, size_t errlen);

/* Wakes the thread and waits until a pass that began after this call has
 * ended, or timeout_ms passed. Returns 0, or -1 on timeout or when the
 * runner is not running. For tests and the cancel hook. */
int svc_runner_sync(struct svc_runner *r, int timeout_ms);

/* Stops the thread (after the pass in progress) and frees r; jobs keep
 * running in the executor, and a later runner adopts them. Accepts NULL. */
void svc_runner_free(struct svc_runner *r);

/* The job's directory: "<state_dir>/jobs/j-000123". 0, or -1 if it does not fit. */
int svc_runner_job_dir(const struct svc_runner *r, long long id, char *buf, size_t len);

#endif
