/* db/jobs.h - jobs, their event log and idempotency keys.
 *
 * A job id is the row id, shown as "j-%06lld" (j-000123; more digits past
 * 999999); ids are never reused. Every state change goes through
 * db_jobs_transition, which writes the job row and a job_events row in one
 * transaction, and only the transitions of the table in db/jobs.c.
 * Sources: db/jobs.c (state machine), db/jobs_read.c (reads), db/submit.c
 * (submits).
 *
 * Ownership: input strings are borrowed for the call. Output structs own
 * their strings: release them with db_job_release / db_job_list_release /
 * db_event_list_release (which accept zeroed structs, and leave them zeroed).
 */
#ifndef LARCH_DB_JOBS_H
#define LARCH_DB_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

enum db_state {
	DB_STATE_PENDING,     /* stored, not yet handed to an executor */
	DB_STATE_QUEUED,      /* accepted by Slurm or the local queue */
	DB_STATE_RUNNING,
	DB_STATE_COMPLETED,   /* final */
	DB_STATE_FAILED,      /* final */
	DB_STATE_CANCELLED,   /* final */
	DB_STATE_TIMEOUT,     /* final */
	DB_STATE_HELD,
	DB_STATE_REQUEUED,
	DB_STATE_PREEMPTED,
	DB_STATE_COUNT,
	DB_STATE_ANY = -1,    /* db_jobs_transition: no expectation; list: no filter */
};

/* "PENDING", ... (static); NULL for a value out of range. */
const char *db_state_name(enum db_state s);
/* The state named s (exact, upper case), or -1. */
int db_state_parse(const char *s);
int db_state_final(enum db_state s);
/* 1 if the state machine allows from -> to. */
int db_state_legal(enum db_state from, enum db_state to);

/* Job ids: "j-000123" <-> 123. db_job_id_parse accepts "j-" and 1 to 18
 * digits with a value > 0, nothing else (returns 0 or DB_INVALID). */
#define DB_JOB_ID_MAX DB_ID_MAX
void db_job_id_format(int64_t id, char out[DB_JOB_ID_MAX]);
int db_job_id_parse(const char *s, int64_t *id);

struct db_job {
	int64_t id;
	char *owner, *name;
	char *spec;              /* the stored spec JSON text */
	enum db_state state;
	char *executor;          /* "local" or "slurm" */
	char *slurm_job_id;      /* NULL until set */
	int64_t priority;
	char *partition;         /* NULL if none */
	char *node_list;         /* Slurm's NodeList of its latest attempt that got nodes
	                            ("node[1-2]"); NULL: none yet, or the local executor */
	int64_t attempt;         /* 1 at submit, +1 each requeue */
	int64_t submit_ms, start_ms, end_ms;     /* 0 = not yet */
	int has_exit_code;
	int exit_code;
	char *reason;            /* NULL if none */
	char *idem_key;          /* the Idempotency-Key it was created with, or NULL */
	int64_t progress_step, progress_total;   /* 0 = not reported */
	double last_loss;        /* NaN = none */
	char *unix_user;         /* the Unix user it runs as; NULL: larchd's own (run_as service) */
	int64_t sweep;           /* the sweep it is a child of (db/sweeps.h); 0 = none */
	int64_t sweep_index;     /* its index in the sweep (0-based) */
	int sweep_max_parallel;  /* the sweep's max_parallel (0 = no limit, or no sweep) */
	char *params;            /* a child's axis values, JSON object text; NULL = none */
	char *labels;            /* JSON object of strings ("{}" when none) */
};

void db_job_release(struct db_job *job);

/* ---- submit (db/submit.c) ---------------------------------------------------- */

struct db_job_new {
	const char *owner;       /* required; must exist in users */
	const char *name;        /* required */
	const char *spec;        /* required; valid JSON text (the validated spec) */
	const char *executor;    /* NULL = "local" */
	const char *partition;   /* may be NULL */
	int64_t priority;
	const char *idem_key;    /* Idempotency-Key (1..128 chars) or NULL */
	const char *request_hash;/* identifies the request body for the key; NULL = SHA-256 of spec */
	int64_t time_ms;         /* submit time; 0 = now */
	const char *unix_user;   /* the Unix user it runs as; NULL: larchd's own */
	int64_t total_steps;     /* the run's length in steps when known at submit; 0 = not yet */
	const char *labels;      /* JSON object text; NULL = "{}" */
};

struct db_submit {
	int64_t id;              /* the new job, or the job the key created before */
	int existed;             /* 1: same key and same body as an earlier submit */
};

/* Stores a new PENDING job and its first event ("submitted" by the owner),
 * durably, before returning. Safe to call from many threads at once: their
 * submits are committed together by one writer thread (one fsync per group).
 * Returns 0 (out filled), DB_CONFLICT (the key was used with another body),
 * DB_INVALID (missing or bad field, unknown owner) or DB_ERROR/DB_BUSY. */
int db_jobs_submit(struct db *db, const struct db_job_new *job, struct db_submit *out,
                   struct db_err *err);

/* How db_jobs_submit_async answers: rc as db_jobs_submit returns it, out the
 * job (NULL when rc is not 0), err the error (borrowed for the call). */
typedef void (*db_submit_done_fn)(void *arg, int rc, const struct db_submit *out,
                                  const struct db_err *err);

/* db_jobs_submit for callers that must not block (an HTTP thread that serves
 * many connections): the submit joins the writer's next group and the call
 * returns at once; once the group has committed (or failed), the writer
 * thread calls done(arg, ...) exactly once. done runs on the writer thread:
 * it must be quick and must not call into db/. job and its strings are
 * borrowed until done runs. Returns 0 when done will be called (without
 * group commit: it has been, before this returns), or a negative enum
 * db_code with err filled (a bad field, the database closing), and then
 * done is never called. */
int db_jobs_submit_async(struct db *db, const struct db_job_new *job, db_submit_done_fn done,
                         void *arg, struct db_err *err);
/* Committed groups and the submits in them since db_open (0 without group
 * commit): submits / groups is the mean group size. */
void db_jobs_submit_stats(struct db *db, uint64_t *groups, uint64_t *submits);

/* ---- reads and state changes (db/jobs.c) ------------------------------------- */

/* The job with this id; owner NULL = any (admins). Another owner's job is
 * DB_NOT_FOUND, as a missing one. */
int db_jobs_get(struct db *db, int64_t id, const char *owner, struct db_job *out,
                struct db_err *err);

struct db_transition {
	int64_t job;
	enum db_state from;      /* the state the caller expects, or DB_STATE_ANY (set it:
	                            0 is DB_STATE_PENDING) */
	enum db_state to;
	const char *by;          /* who: a user name, "executor", "reconciler"; required */
	const char *reason;      /* becomes the job's reason (NULL clears it) and the event's */
	int has_exit_code;
	int exit_code;
	const char *slurm_job_id;/* set it (QUEUED under Slurm); NULL = unchanged */
	const char *partition;   /* set it (the partition Slurm put it in); NULL = unchanged */
	const char *node_list;   /* set it (the nodes Slurm gave it); NULL = unchanged */
	int64_t time_ms;         /* 0 = now */
};

/* Moves the job and appends its event, in one transaction. Entering RUNNING
 * sets start time; a final state sets end time and revokes the job's tokens;
 * leaving REQUEUED/PREEMPTED counts a new attempt. Returns DB_NOT_FOUND,
 * DB_STALE (not in t->from), DB_ILLEGAL (the table forbids it; err names both
 * states). out (may be NULL) gets the job after the change. */
int db_jobs_transition(struct db *db, const struct db_transition *t, struct db_job *out,
                       struct db_err *err);

/* An admin change that is not a state change (PATCH priority, partition):
 * the job row and an event (from = to = the current state, with reason) in
 * one transaction. */
struct db_job_update {
	int64_t job;
	const char *by;          /* required */
	const char *reason;      /* the event's reason; NULL = one describing the change */
	int has_priority;
	int64_t priority;
	const char *partition;   /* NULL = unchanged */
	const char *slurm_job_id;/* NULL = unchanged (a job held while Slurm took it) */
};

/* DB_NOT_FOUND, DB_ILLEGAL for a job in a final state, DB_INVALID when it
 * changes nothing. out (may be NULL) gets the job after the change. */
int db_jobs_update(struct db *db, const struct db_job_update *u, struct db_job *out,
                   struct db_err *err);

/* Appends an event that changes nothing (from = to = the job's state, in
 * any state, final ones too): a note in the job's history, such as the
 * trainer's result ("result: completed, 30 steps"). by and reason are
 * required. DB_NOT_FOUND when there is no such job. */
int db_jobs_note(struct db *db, int64_t id, const char *by, const char *reason,
                 struct db_err *err);

/* The job's reason becomes reason, with a note event saying so (from = to),
 * while it is in state expect (else DB_STALE): what keeps a queued job
 * waiting, as Slurm says it ("AssocMaxJobsLimit"). DB_NOT_FOUND. */
int db_jobs_set_reason(struct db *db, int64_t id, enum db_state expect, const char *by,
                       const char *reason, struct db_err *err);

/* Progress shown on the job (train step, total steps, last loss; NaN = none).
 * One small write transaction. */
int db_jobs_progress(struct db *db, int64_t id, int64_t step, int64_t total, double last_loss,
                     struct db_err *err);

#define DB_LIST_MAX 500
#define DB_CURSOR_MAX 32

struct db_job_filter {
	int has_state;           /* 0: any state (so a zeroed filter lists everything) */
	enum db_state state;     /* with has_state: only this state */
	const char *owner;       /* NULL = everyone's */
	const char *name;        /* NULL = any name */
	int64_t sweep;           /* 0 = any; else only that sweep's children */
	const char *label_key;   /* NULL = any; else only jobs whose labels have key = */
	const char *label_value; /* ... this value (required with label_key) */
	int limit;               /* 1..DB_LIST_MAX; 0 = 50 */
	const char *cursor;      /* NULL/"" = first page; else a next_cursor from before */
};

struct db_job_list {
	struct db_job *jobs;     /* owned, n of them, newest first */
	size_t n;
	char next_cursor[DB_CURSOR_MAX];   /* "" on the last page */
};

/* One page of jobs, newest first. A cursor names the last job of the page
 * before (opaque base64url); pages never repeat or skip a job, whatever is
 * submitted meanwhile. A cursor that is not one of ours is DB_INVALID. */
int db_jobs_list(struct db *db, const struct db_job_filter *f, struct db_job_list *out,
                 struct db_err *err);
void db_job_list_release(struct db_job_list *list);

struct db_event {
	int64_t seq, time_ms;
	int from;                /* enum db_state, or -1 for the submit event */
	enum db_state to;
	char *by, *reason;       /* owned; reason may be NULL */
};

struct db_event_list {
	struct db_event *events; /* owned, in seq order */
	size_t n;
};

/* The job's events, oldest first; owner as in db_jobs_get. */
int db_jobs_events(struct db *db, int64_t id, const char *owner, struct db_event_list *out,
                   struct db_err *err);
void db_event_list_release(struct db_event_list *list);

/* The ids of the oldest jobs in state (by id, at most max) into ids; *n
 * how many. One indexed read: for the runner's scan of PENDING jobs. */
int db_jobs_oldest(struct db *db, enum db_state state, int64_t *ids, size_t max, size_t *n,
                   struct db_err *err);

/* counts[s] = number of jobs in state s (Prometheus). */
int db_jobs_count_by_state(struct db *db, int64_t counts[DB_STATE_COUNT], struct db_err *err);

#endif
