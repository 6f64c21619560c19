/* service/runner_internal.h - what runner.c (the thread, handing jobs over,
 * adoption) and runner_events.c (executor events, cancels) share. Not for
 * use outside service/runner*.c. */
#ifndef LARCH_SERVICE_RUNNER_INTERNAL_H
#define LARCH_SERVICE_RUNNER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "db/jobs.h"
#include "db/tokens.h"
#include "executor.h"
#include "runner.h"

/* A cancel asked for while the job was with the executor; also kept in the
 * job directory's `cancel` file, so that it survives a restart. */
#define SVC_CANCEL_WHY_MAX 64
struct cancel_req {
	long long id;
	char by[DB_NAME_MAX + 1];
	char why[SVC_CANCEL_WHY_MAX];  /* the final reason; "" = "cancelled by <by>" */
	struct cancel_req *next;
};

struct svc_runner {
	struct api_jobs_hooks hooks;
	struct db *db;
	char *state_dir, *executor_name;
	int poll_ms, queue_max;
	int run_as_owner, confine_user_jobs;   /* svc_runner_config's */
	struct svc_gpu_memory gpu_memory;   /* per GPU, for memory plans */

	pthread_mutex_t lock;          /* guards the fields below */
	pthread_cond_t wake;           /* kicks the thread */
	pthread_cond_t passed;         /* a pass ended (svc_runner_sync) */
	struct executor *ex;           /* NULL until svc_runner_start */
	pthread_t thread;
	int running, stopping, kicked;
	unsigned long long begun, ended;   /* passes begun and ended */
	struct cancel_req *cancels;

	/* the runner thread's own (no lock) */
	struct exec_event *retry;      /* final events whose transition failed: again next pass */
	int n_retry, cap_retry;
};

/* "job j-000123: FROM -> TO (reason)" in the log, and the transition itself
 * (expecting from; by and reason as in struct db_transition). Returns 0 or
 * the db code (logged). */
int svc_runner_move(struct svc_runner *r, int64_t id, enum db_state from, enum db_state to,
                    const char *by, const char *reason, int has_exit_code, int exit_code);

/* svc_runner_move of the job of executor event ev that also records what ev
 * says of it: its Slurm id and partition ("" = unchanged). */
int svc_runner_move_ev(struct svc_runner *r, const struct exec_event *ev, enum db_state from,
                       enum db_state to, const char *by, const char *reason, int has_exit_code,
                       int exit_code);

/* The executor event callback (exec_event_fn); ctx is the runner. */
void svc_runner_on_event(void *ctx, const struct exec_event *ev);
/* Replays the final events whose transition failed before. */
void svc_runner_retry_events(struct svc_runner *r);

/* Remembers that `by` asked to cancel job id, and why (NULL: the reason
 * will be "cancelled by <by>") (memory and DIR/cancel: by, then why, a line
 * each). */
void svc_runner_note_cancel(struct svc_runner *r, long long id, const char *by,
                            const char *why);
/* The user who asked to cancel job id (memory, else DIR/cancel) into by,
 * and the reason they gave into why (may be NULL; "" for none); 1 if there
 * was one, else 0. With forget, the memory entry is dropped. */
int svc_runner_cancel_by(struct svc_runner *r, long long id, char by[DB_NAME_MAX + 1],
                         char why[SVC_CANCEL_WHY_MAX], int forget);

/* The cancel hook (api/jobs_hooks.h). */
int svc_runner_cancel(void *arg, long long id, const char *by, char *err, size_t errlen);
/* The cancel hook's work with the final state's reason given (NULL:
 * "cancelled by <by>"): the sweep pass's early stop (service/sweep.h). */
int svc_runner_cancel_why(struct svc_runner *r, long long id, const char *by, const char *why,
                          char *err, size_t errlen);

#endif
