/* db/jobs.c - the job state machine: transitions, admin updates, progress.
 * Reads (get, lists, events, counts) are in db/jobs_read.c; submits (group
 * commit, idempotency) in db/submit.c. */
#include "db/jobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

/* ---- states ----------------------------------------------------------------- */

static const char *const state_names[DB_STATE_COUNT] = {
	[DB_STATE_PENDING] = "PENDING",     [DB_STATE_QUEUED] = "QUEUED",
	[DB_STATE_RUNNING] = "RUNNING",     [DB_STATE_COMPLETED] = "COMPLETED",
	[DB_STATE_FAILED] = "FAILED",       [DB_STATE_CANCELLED] = "CANCELLED",
	[DB_STATE_TIMEOUT] = "TIMEOUT",     [DB_STATE_HELD] = "HELD",
	[DB_STATE_REQUEUED] = "REQUEUED",   [DB_STATE_PREEMPTED] = "PREEMPTED",
};

#define S(x) (1u << DB_STATE_##x)
/* legal[from] = the set of states it may move to; final states have none.
 * PENDING -> FAILED: the executor refused the job (or its directory could not
 * be made). HELD/REQUEUED/PREEMPTED -> FAILED: Slurm ended a job that waited
 * (an unsatisfiable request, a node failure). QUEUED -> PENDING: Slurm forgot
 * a job that never started (slurmctld lost its state); it is handed over
 * again. A job moved to PENDING is in no executor: its Slurm id is cleared. */
static const unsigned legal[DB_STATE_COUNT] = {
	[DB_STATE_PENDING] = S(QUEUED) | S(CANCELLED) | S(HELD) | S(FAILED),
	[DB_STATE_QUEUED] = S(RUNNING) | S(CANCELLED) | S(FAILED) | S(HELD) | S(PENDING),
	[DB_STATE_RUNNING] = S(COMPLETED) | S(FAILED) | S(CANCELLED) | S(TIMEOUT) |
	                     S(PREEMPTED) | S(REQUEUED),
	[DB_STATE_HELD] = S(PENDING) | S(QUEUED) | S(CANCELLED) | S(FAILED),
	[DB_STATE_PREEMPTED] = S(QUEUED) | S(PENDING) | S(CANCELLED) | S(HELD) | S(FAILED),
	[DB_STATE_REQUEUED] = S(QUEUED) | S(PENDING) | S(CANCELLED) | S(HELD) | S(FAILED),
};
#undef S

const char *db_state_name(enum db_state s)
{
	return (int)s >= 0 && s < DB_STATE_COUNT ? state_names[s] : NULL;
}

int db_state_parse(const char *s)
{
	for (int i = 0; s && i < DB_STATE_COUNT; i++)
		if (strcmp(s, state_names[i]) == 0)
			return i;
	return -1;
}

int db_state_final(enum db_state s)
{
	return s == DB_STATE_COMPLETED || s == DB_STATE_FAILED || s == DB_STATE_CANCELLED ||
	       s == DB_STATE_TIMEOUT;
}

int db_state_legal(enum db_state from, enum db_state to)
{
	if ((int)from < 0 || from >= DB_STATE_COUNT || (int)to < 0 || to >= DB_STATE_COUNT)
		return 0;
	return (legal[from] >> to) & 1u;
}
/* ---- transitions ------------------------------------------------------------ */

static const char sql_state[] = "SELECT state FROM jobs WHERE id = ?1";
static const char sql_move[] =
	"UPDATE jobs SET state = ?2, start_time = coalesce(?3, start_time),\n"
	"	end_time = coalesce(?4, end_time),\n"
	"	exit_code = CASE WHEN ?5 THEN ?6 ELSE exit_code END, reason = ?7,\n"
	"	slurm_job_id = CASE WHEN ?2 = 'PENDING' THEN NULL ELSE coalesce(?8, slurm_job_id) END,\n"
	"	attempt = attempt + ?9,\n"
	"	partition = coalesce(?10, partition), node_list = coalesce(?11, node_list)\n"
	"WHERE id = ?1";
static const char sql_event[] =
	"INSERT INTO job_events (job, seq, time, from_state, to_state, by, reason)\n"
	"VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM job_events WHERE job = ?1),\n"
	"	?2, ?3, ?4, ?5, ?6)";
static const char sql_owner[] = "SELECT owner FROM jobs WHERE id = ?1";
static const char sql_revoke_job_tokens[] =
	"UPDATE tokens SET revoked_at = ?2 WHERE job = ?1 AND revoked_at IS NULL";

/* Keeps the event for the change hook, which runs once the transaction
 * has committed (db_txn). */
static int note_change(struct db_conn *c, int64_t job, int64_t time_ms, const char *to,
                       struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_owner, "job event: read owner", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, job);
	int rc = DB_SQL(c, sqlite3_step(st), "job event: read owner", err);
	if (rc != SQLITE_ROW)
		return rc == SQLITE_DONE ? DB_FAIL(err, DB_NOT_FOUND, "job event: no job %lld",
		                                   (long long)job)
		                         : DB_RC(err);
	if (c->n_chg == c->cap_chg) {
		size_t cap = c->cap_chg ? 2 * c->cap_chg : 16;
		struct db_change *grown = realloc(c->chg, cap * sizeof *grown);
		if (!grown)
			return DB_FAIL(err, DB_ERROR, "job event: out of memory");
		c->chg = grown;
		c->cap_chg = cap;
	}
	struct db_change *ch = &c->chg[c->n_chg++];
	memset(ch, 0, sizeof *ch);
	ch->job = job;
	ch->time_ms = time_ms;
	snprintf(ch->state, sizeof ch->state, "%s", to);
	const char *owner = (const char *)sqlite3_column_text(st, 0);
	snprintf(ch->owner, sizeof ch->owner, "%s", owner ? owner : "");
	sqlite3_reset(st);
	return 0;
}

int db_job_event_insert(struct db_conn *c, int64_t job, int64_t time_ms, const char *from,
                        const char *to, const char *by, const char *reason, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_event, "insert job event", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, job);
	sqlite3_bind_int64(st, 2, time_ms);
	db_bind_text(st, 3, from);
	db_bind_text(st, 4, to);
	db_bind_text(st, 5, by);
	db_bind_text(st, 6, reason);
	if (DB_STEP_DONE(c, st, "insert job event", err))
		return DB_RC(err);
	return note_change(c, job, time_ms, to, err);
}

struct move_arg {
	const struct db_transition *t;
	int64_t now;
	struct db_job *out;     /* may be NULL */
};

/* The state of job id into *state: 0, DB_NOT_FOUND, or a db error. what
 * names the operation in messages. */
static int job_state(struct db_conn *c, int64_t id, const char *what, int *state,
                     struct db_err *err)
{
	char sid[DB_JOB_ID_MAX];
	db_job_id_format(id, sid);
	sqlite3_stmt *st = DB_STMT(c, sql_state, what, err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	int rc = DB_SQL(c, sqlite3_step(st), what, err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "no job %s", sid);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	*state = db_state_parse((const char *)sqlite3_column_text(st, 0));
	if (*state < 0)
		return DB_FAIL(err, DB_ERROR, "%s %s: unknown state in the database", what, sid);
	return 0;
}

static int move_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct move_arg *a = arg;
	const struct db_transition *t = a->t;
	char sid[DB_JOB_ID_MAX];
	db_job_id_format(t->job, sid);
	db_job_release(a->out);

	int from, rc = job_state(c, t->job, "transition", &from, err);
	if (rc)
		return rc;
	if (t->from != DB_STATE_ANY && (int)t->from != from)
		return DB_FAIL(err, DB_STALE, "%s is %s, not %s", sid, state_names[from],
		               state_names[t->from]);
	if (!db_state_legal((enum db_state)from, t->to))
		return DB_FAIL(err, DB_ILLEGAL, "%s cannot go from %s to %s", sid, state_names[from],
		               state_names[t->to]);

	int final = db_state_final(t->to);
	int again = (from == DB_STATE_REQUEUED || from == DB_STATE_PREEMPTED) &&
	            (t->to == DB_STATE_QUEUED || t->to == DB_STATE_PENDING);
	sqlite3_stmt *st = DB_STMT(c, sql_move, "transition", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, t->job);
	db_bind_text(st, 2, state_names[t->to]);
	if (t->to == DB_STATE_RUNNING)
		sqlite3_bind_int64(st, 3, a->now);
	if (final)
		sqlite3_bind_int64(st, 4, a->now);
	sqlite3_bind_int(st, 5, t->has_exit_code);
	sqlite3_bind_int(st, 6, t->exit_code);
	/* a running job has no reason on it (squeue's "None"); its event keeps
	 * what the executor said (the pid) */
	db_bind_text(st, 7, t->to == DB_STATE_RUNNING ? NULL : t->reason);
	db_bind_text(st, 8, t->slurm_job_id);
	sqlite3_bind_int(st, 9, again);
	db_bind_text(st, 10, t->partition && *t->partition ? t->partition : NULL);
	db_bind_text(st, 11, t->node_list && *t->node_list ? t->node_list : NULL);
	if (DB_STEP_DONE(c, st, "transition: update job", err))
		return DB_RC(err);
	if (db_job_event_insert(c, t->job, a->now, state_names[from], state_names[t->to], t->by,
	                        t->reason, err))
		return DB_RC(err);
	if (final) {
		st = DB_STMT(c, sql_revoke_job_tokens, "transition: revoke job tokens", err);
		if (!st)
			return DB_ERROR;
		sqlite3_bind_int64(st, 1, t->job);
		sqlite3_bind_int64(st, 2, a->now);
		if (DB_STEP_DONE(c, st, "transition: revoke job tokens", err))
			return DB_RC(err);
	}
	return a->out ? db_job_fetch(c, t->job, NULL, a->out, err) : 0;
}

int db_jobs_transition(struct db *db, const struct db_transition *t, struct db_job *out,
                       struct db_err *err)
{
	if (out)
		memset(out, 0, sizeof *out);
	if (!db_state_name(t->to) || (t->from != DB_STATE_ANY && !db_state_name(t->from)))
		return DB_FAIL(err, DB_INVALID, "transition: no such state");
	if (!t->by || !*t->by)
		return DB_FAIL(err, DB_INVALID, "transition: who made the change is required");
	struct move_arg a = { t, t->time_ms ? t->time_ms : db_now_ms(), out };
	int rc = db_txn(db, move_fn, &a, err);
	if (rc)
		db_job_release(out);
	return rc;
}

/* ---- admin updates ---------------------------------------------------------- */

static const char sql_update[] =
	"UPDATE jobs SET priority = CASE WHEN ?2 THEN ?3 ELSE priority END,\n"
	"	partition = coalesce(?4, partition), slurm_job_id = coalesce(?5, slurm_job_id)\n"
	"	WHERE id = ?1";
static const char sql_current[] = "SELECT state, priority, partition FROM jobs WHERE id = ?1";

struct update_arg {
	const struct db_job_update *u;
	int64_t now;
	struct db_job *out;
};

static int update_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct update_arg *a = arg;
	const struct db_job_update *u = a->u;
	char sid[DB_JOB_ID_MAX];
	db_job_id_format(u->job, sid);
	db_job_release(a->out);
	sqlite3_stmt *st = DB_STMT(c, sql_current, "update job", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, u->job);
	int rc = DB_SQL(c, sqlite3_step(st), "update job", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "no job %s", sid);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	int state = db_state_parse((const char *)sqlite3_column_text(st, 0));
	if (state < 0)
		return DB_FAIL(err, DB_ERROR, "update %s: unknown state in the database", sid);
	if (db_state_final((enum db_state)state))
		return DB_FAIL(err, DB_ILLEGAL, "%s has ended (%s)", sid, state_names[state]);
	char why[256];
	const char *reason = u->reason;
	if (!reason) {
		const char *part = (const char *)sqlite3_column_text(st, 2);
		if (u->has_priority && u->partition)
			snprintf(why, sizeof why, "priority %lld -> %lld, partition %s -> %s",
			         (long long)sqlite3_column_int64(st, 1), (long long)u->priority,
			         part ? part : "(none)", u->partition);
		else if (u->has_priority)
			snprintf(why, sizeof why, "priority %lld -> %lld",
			         (long long)sqlite3_column_int64(st, 1), (long long)u->priority);
		else if (u->partition)
			snprintf(why, sizeof why, "partition %s -> %s", part ? part : "(none)", u->partition);
		else
			snprintf(why, sizeof why, "slurm job %s", u->slurm_job_id);
		reason = why;
	}
	st = DB_STMT(c, sql_update, "update job", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, u->job);
	sqlite3_bind_int(st, 2, u->has_priority);
	sqlite3_bind_int64(st, 3, u->priority);
	db_bind_text(st, 4, u->partition);
	db_bind_text(st, 5, u->slurm_job_id);
	if (DB_STEP_DONE(c, st, "update job", err))
		return DB_RC(err);
	if (db_job_event_insert(c, u->job, a->now, state_names[state], state_names[state], u->by,
	                        reason, err))
		return DB_RC(err);
	return a->out ? db_job_fetch(c, u->job, NULL, a->out, err) : 0;
}

int db_jobs_update(struct db *db, const struct db_job_update *u, struct db_job *out,
                   struct db_err *err)
{
	if (out)
		memset(out, 0, sizeof *out);
	if (!u->by || !*u->by)
		return DB_FAIL(err, DB_INVALID, "update job: who made the change is required");
	if (!u->has_priority && !u->partition && !u->slurm_job_id)
		return DB_FAIL(err, DB_INVALID, "update job: nothing to change");
	if (u->slurm_job_id && !*u->slurm_job_id)
		return DB_FAIL(err, DB_INVALID, "update job: slurm_job_id must not be empty");
	if (u->partition && !*u->partition)
		return DB_FAIL(err, DB_INVALID, "update job: partition must not be empty");
	struct update_arg a = { u, db_now_ms(), out };
	int rc = db_txn(db, update_fn, &a, err);
	if (rc)
		db_job_release(out);
	return rc;
}

/* ---- notes ------------------------------------------------------------------ */

struct note_arg {
	int64_t id;
	const char *by, *reason;
};

static int note_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct note_arg *a = arg;
	int state, rc = job_state(c, a->id, "note", &state, err);
	if (rc)
		return rc;
	return db_job_event_insert(c, a->id, db_now_ms(), state_names[state], state_names[state],
	                           a->by, a->reason, err) ? DB_RC(err) : 0;
}

int db_jobs_note(struct db *db, int64_t id, const char *by, const char *reason,
                 struct db_err *err)
{
	if (!by || !*by || !reason || !*reason)
		return DB_FAIL(err, DB_INVALID, "note: who and why are required");
	struct note_arg a = { id, by, reason };
	return db_txn(db, note_fn, &a, err);
}

/* ---- a new reason in the same state ------------------------------------------ */

static const char sql_set_reason[] = "UPDATE jobs SET reason = ?2 WHERE id = ?1";

struct reason_arg {
	int64_t id;
	enum db_state expect;
	const char *by, *reason;
};

static int reason_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct reason_arg *a = arg;
	char sid[DB_JOB_ID_MAX];
	db_job_id_format(a->id, sid);
	int state, rc = job_state(c, a->id, "set reason", &state, err);
	if (rc)
		return rc;
	if (state != (int)a->expect)
		return DB_FAIL(err, DB_STALE, "%s is %s, not %s", sid, state_names[state],
		               state_names[a->expect]);
	sqlite3_stmt *st = DB_STMT(c, sql_set_reason, "set reason", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	db_bind_text(st, 2, a->reason);
	if (DB_STEP_DONE(c, st, "set reason", err))
		return DB_RC(err);
	return db_job_event_insert(c, a->id, db_now_ms(), state_names[state], state_names[state],
	                           a->by, a->reason, err) ? DB_RC(err) : 0;
}

int db_jobs_set_reason(struct db *db, int64_t id, enum db_state expect, const char *by,
                       const char *reason, struct db_err *err)
{
	if (!by || !*by || !reason || !*reason)
		return DB_FAIL(err, DB_INVALID, "set reason: who and why are required");
	struct reason_arg a = { id, expect, by, reason };
	return db_txn(db, reason_fn, &a, err);
}

/* ---- progress --------------------------------------------------------------- */

static const char sql_progress[] =
	"UPDATE jobs SET progress_step = ?2, progress_total = ?3, last_loss = ?4 WHERE id = ?1";

struct progress_arg {
	int64_t id, step, total;
	double loss;
};

static int progress_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct progress_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_progress, "update progress", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	sqlite3_bind_int64(st, 2, a->step);
	sqlite3_bind_int64(st, 3, a->total);
	if (isfinite(a->loss))
		sqlite3_bind_double(st, 4, a->loss);
	if (DB_STEP_DONE(c, st, "update progress", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0) {
		char sid[DB_JOB_ID_MAX];
		db_job_id_format(a->id, sid);
		return DB_FAIL(err, DB_NOT_FOUND, "no job %s", sid);
	}
	return 0;
}

int db_jobs_progress(struct db *db, int64_t id, int64_t step, int64_t total, double last_loss,
                     struct db_err *err)
{
	struct progress_arg a = { id, step, total, last_loss };
	return db_txn(db, progress_fn, &a, err);
}
