/* service/runner_events.c - the runner's side of what happens to a job after
 * it was handed over: executor events into transitions (importing a finished
 * job's directory first), a job the executor lost (Slurm forgot it) back to
 * PENDING, and cancels; see runner.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_import.h"
#include "jobfs.h"
#include "log.h"
#include "runner_internal.h"

static int move(struct svc_runner *r, int64_t id, enum db_state from, enum db_state to,
                const char *by, const char *reason, int has_exit_code, int exit_code,
                const struct exec_event *ev)
{
	struct db_transition t = { .job = id, .from = from, .to = to, .by = by,
	                           .reason = reason && *reason ? reason : NULL,
	                           .has_exit_code = has_exit_code, .exit_code = exit_code,
	                           .slurm_job_id = ev && ev->ext_id[0] ? ev->ext_id : NULL,
	                           .partition = ev && ev->partition[0] ? ev->partition : NULL,
	                           .node_list = ev && ev->node_list[0] ? ev->node_list : NULL };
	struct db_err err = { 0 };
	int rc = db_jobs_transition(r->db, &t, NULL, &err);
	char why[EXEC_REASON_MAX + 64];
	if (t.reason)
		svc_log_sanitize(t.reason, why, sizeof why);
	else if (has_exit_code)
		snprintf(why, sizeof why, "exit %d", exit_code);
	else
		why[0] = '\0';
	const char *f = db_state_name(from) ? db_state_name(from) : "?", *s = db_state_name(to);
	if (rc == 0)
		svc_log(SVC_LOG_INFO, "job j-%06lld: %s -> %s%s%s%s", (long long)id, f, s,
		        why[0] ? " (" : "", why, why[0] ? ")" : "");
	else
		svc_log(rc == DB_STALE ? SVC_LOG_INFO : SVC_LOG_WARN,
		        "job j-%06lld: %s -> %s not recorded: %s", (long long)id, f, s, err.text);
	return rc;
}

int svc_runner_move(struct svc_runner *r, int64_t id, enum db_state from, enum db_state to,
                    const char *by, const char *reason, int has_exit_code, int exit_code)
{
	return move(r, id, from, to, by, reason, has_exit_code, exit_code, NULL);
}

int svc_runner_move_ev(struct svc_runner *r, const struct exec_event *ev, enum db_state from,
                       enum db_state to, const char *by, const char *reason, int has_exit_code,
                       int exit_code)
{
	return move(r, ev->id, from, to, by, reason, has_exit_code, exit_code, ev);
}

/* ---- cancel requests ----------------------------------------------------------- */

void svc_runner_note_cancel(struct svc_runner *r, long long id, const char *by,
                            const char *why)
{
	pthread_mutex_lock(&r->lock);
	struct cancel_req *c = r->cancels;
	while (c && c->id != id)
		c = c->next;
	if (!c && (c = calloc(1, sizeof *c)) != NULL) {
		c->id = id;
		c->next = r->cancels;
		r->cancels = c;
	}
	if (c) {
		snprintf(c->by, sizeof c->by, "%s", by);
		snprintf(c->why, sizeof c->why, "%s", why ? why : "");
	}
	pthread_mutex_unlock(&r->lock);

	/* the file is what survives a restart */
	char dir[EXEC_PATH_MAX], line[DB_NAME_MAX + SVC_CANCEL_WHY_MAX + 4];
	int n = snprintf(line, sizeof line, "%s\n%.*s%s", by, SVC_CANCEL_WHY_MAX - 1,
	                 why ? why : "", why ? "\n" : "");
	if (svc_runner_job_dir(r, id, dir, sizeof dir) != 0 ||
	    svc_jobfs_write(dir, "cancel", line, (size_t)n, 0640, (uid_t)-1, (gid_t)-1) != 0)
		svc_log(SVC_LOG_WARN, "job j-%06lld: cannot record the cancel request in its "
		        "directory: %s", id, strerror(errno));
}

int svc_runner_cancel_by(struct svc_runner *r, long long id, char by[DB_NAME_MAX + 1],
                         char why[SVC_CANCEL_WHY_MAX], int forget)
{
	int found = 0;
	if (why)
		why[0] = '\0';
	pthread_mutex_lock(&r->lock);
	for (struct cancel_req **p = &r->cancels; *p; p = &(*p)->next) {
		if ((*p)->id != id)
			continue;
		snprintf(by, DB_NAME_MAX + 1, "%s", (*p)->by);
		if (why)
			snprintf(why, SVC_CANCEL_WHY_MAX, "%s", (*p)->why);
		found = 1;
		if (forget) {
			struct cancel_req *gone = *p;
			*p = gone->next;
			free(gone);
		}
		break;
	}
	pthread_mutex_unlock(&r->lock);
	if (found)
		return 1;
	char dir[EXEC_PATH_MAX];
	FILE *f = svc_runner_job_dir(r, id, dir, sizeof dir) == 0 ? svc_jobfs_fopen(dir, "cancel")
	                                                            : NULL;
	if (!f)
		return 0;
	char line[DB_NAME_MAX + 2] = "", reason[SVC_CANCEL_WHY_MAX] = "";
	found = fgets(line, sizeof line, f) != NULL;
	if (found && why && fgets(reason, sizeof reason, f)) {
		reason[strcspn(reason, "\n")] = '\0';
		snprintf(why, SVC_CANCEL_WHY_MAX, "%s", reason);
	}
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	if (!found || !line[0])
		return 0;
	size_t n = strnlen(line, DB_NAME_MAX);
	memcpy(by, line, n);
	by[n] = '\0';
	return 1;
}

int svc_runner_cancel(void *arg, long long id, const char *by, char *err, size_t errlen)
{
	return svc_runner_cancel_why(arg, id, by, NULL, err, errlen);
}

int svc_runner_cancel_why(struct svc_runner *r, long long id, const char *by,
                          const char *reason, char *err, size_t errlen)
{
	if (!by || !*by)
		by = "unknown";
	char why[DB_NAME_MAX + 32];
	if (reason)
		snprintf(why, sizeof why, "%s", reason);
	else
		snprintf(why, sizeof why, "cancelled by %s", by);
	for (int attempt = 0; attempt < 8; attempt++) {
		struct db_job job = { 0 };
		struct db_err dberr = { 0 };
		if (db_jobs_get(r->db, id, NULL, &job, &dberr) != 0) {
			snprintf(err, errlen, "%s", dberr.text);
			return -1;
		}
		enum db_state state = job.state;
		db_job_release(&job);
		if (db_state_final(state))
			return 1;
		if (state != DB_STATE_QUEUED && state != DB_STATE_RUNNING) {
			/* not with the executor: cancelled here and now */
			int rc = svc_runner_move(r, id, state, DB_STATE_CANCELLED, by, why, 0, 0);
			if (rc == 0)
				return 0;
			if (rc == DB_STALE)
				continue;          /* the runner moved it meanwhile: look again */
			snprintf(err, errlen, "cannot record the cancel: %s", db_code_name(rc));
			return -1;
		}
		/* the executor stops it; the final state comes with its end. Noted
		 * first, so that a job the executor does not hold yet (being adopted
		 * at start) is cancelled once it does. */
		svc_runner_note_cancel(r, id, by, reason);
		pthread_mutex_lock(&r->lock);
		struct executor *ex = r->ex;
		pthread_mutex_unlock(&r->lock);
		char xerr[EXEC_REASON_MAX] = "";
		if (ex && exec_cancel(ex, id, xerr, sizeof xerr) != 0)
			svc_log(SVC_LOG_DEBUG, "job j-%06lld: %s (it is ending or being adopted)", id, xerr);
		svc_log(SVC_LOG_INFO, "job j-%06lld: cancel requested by %s (%s)", id, by,
		        db_state_name(state));
		if (state == DB_STATE_QUEUED)
			svc_runner_sync(r, 1000);  /* a queued job ends at the next poll */
		return 0;
	}
	snprintf(err, errlen, "job j-%06lld kept changing state", id);
	return -1;
}

/* ---- executor events --------------------------------------------------------------- */

static void push_retry(struct svc_runner *r, const struct exec_event *ev)
{
	if (r->n_retry == r->cap_retry) {
		int cap = r->cap_retry ? 2 * r->cap_retry : 8;
		struct exec_event *grown = realloc(r->retry, (size_t)cap * sizeof *grown);
		if (!grown) {
			svc_log(SVC_LOG_ERROR, "job j-%06lld: out of memory: its end is recorded at the "
			        "next restart", ev->id);
			return;
		}
		r->retry = grown;
		r->cap_retry = cap;
	}
	r->retry[r->n_retry++] = *ev;
}

void svc_runner_retry_events(struct svc_runner *r)
{
	int n = r->n_retry;
	if (!n)
		return;
	struct exec_event *events = r->retry;
	r->retry = NULL;
	r->n_retry = r->cap_retry = 0;
	for (int i = 0; i < n; i++)
		svc_runner_on_event(r, &events[i]);
	free(events);
}

static void import_dir(struct svc_runner *r, long long id)
{
	char dir[EXEC_PATH_MAX], err[512] = "";
	if (svc_runner_job_dir(r, id, dir, sizeof dir) != 0)
		return;
	struct svc_import_stats st;
	int rc = svc_import_job(r->db, id, dir, &st, err, sizeof err);
	if (rc != 0)
		svc_log(SVC_LOG_WARN, "job j-%06lld: import from %s: %s", id, dir, err);
	if (st.inserted || st.checkpoints || st.bad_lines || st.torn_tail)
		svc_log(SVC_LOG_INFO, "job j-%06lld: imported %zu metric points of %zu lines (%zu not "
		        "points%s) and %zu checkpoints", id, st.inserted, st.lines, st.bad_lines,
		        st.torn_tail ? ", a torn last line skipped" : "", st.checkpoints);
}

static enum db_state final_state(enum exec_state s)
{
	switch (s) {
	case EXEC_COMPLETED: return DB_STATE_COMPLETED;
	case EXEC_CANCELLED: return DB_STATE_CANCELLED;
	case EXEC_TIMEOUT: return DB_STATE_TIMEOUT;
	default: return DB_STATE_FAILED;
	}
}

/* Moves the job from *state towards QUEUED as the executor's event says it
 * is with the executor again: PENDING (Slurm took it; its id recorded),
 * HELD (released), REQUEUED/PREEMPTED (a new attempt). 0 when *state is
 * QUEUED afterwards. */
static int reach_queued(struct svc_runner *r, const struct exec_event *ev, enum db_state *state)
{
	if (*state == DB_STATE_QUEUED)
		return 0;
	if (*state == DB_STATE_RUNNING)
		return -1;
	if (*state == DB_STATE_PENDING && !ev->ext_id[0])
		return -1;                   /* withdrawn (local); it is handed over again */
	char why[EXEC_REASON_MAX + 64];
	if (*state == DB_STATE_PENDING)
		snprintf(why, sizeof why, "%s", ev->reason[0] ? ev->reason : "queued");
	else if (*state == DB_STATE_HELD)
		snprintf(why, sizeof why, "released%s%s", ev->reason[0] ? ": " : "", ev->reason);
	else
		snprintf(why, sizeof why, "queued again%s%s", ev->reason[0] ? ": " : "", ev->reason);
	int rc = svc_runner_move_ev(r, ev, *state, DB_STATE_QUEUED, "executor", why, 0, 0);
	if (rc == 0)
		*state = DB_STATE_QUEUED;
	return rc;
}

static void running_reason(const struct exec_event *ev, char *why, size_t len)
{
	if (ev->pid > 0)
		snprintf(why, len, "pid %d%s%s", (int)ev->pid, ev->reason[0] ? ", " : "", ev->reason);
	else
		snprintf(why, len, "%s", ev->reason);
}

/* A final event for a job the database has in a state that is not final. */
static void finish(struct svc_runner *r, const struct exec_event *ev, enum db_state state)
{
	import_dir(r, ev->id);               /* first: the final state means "all there" */
	enum db_state to = final_state(ev->state);
	char by[DB_NAME_MAX + 1] = "executor", why[EXEC_REASON_MAX + 96];
	char given[SVC_CANCEL_WHY_MAX];
	if (svc_runner_cancel_by(r, ev->id, by, given, 0) && to != DB_STATE_COMPLETED &&
	    to != DB_STATE_TIMEOUT) {
		to = DB_STATE_CANCELLED;        /* e.g. it exited 3 after our SIGTERM */
		if (given[0])
			snprintf(why, sizeof why, "%s", given);
		else
			snprintf(why, sizeof why, "cancelled by %s", by);
	} else {
		snprintf(by, sizeof by, "executor");
		snprintf(why, sizeof why, "%s", ev->reason);
	}
	int started = ev->started || to == DB_STATE_COMPLETED || to == DB_STATE_TIMEOUT;
	int rc = 0;
	/* through the states it went through unseen: handed over (Slurm's id),
	 * queued again, started */
	if ((state == DB_STATE_PENDING && ev->ext_id[0]) ||
	    ((state == DB_STATE_HELD || state == DB_STATE_REQUEUED ||
	      state == DB_STATE_PREEMPTED) && started))
		rc = reach_queued(r, ev, &state);
	if (rc == 0 && state == DB_STATE_QUEUED && started) {
		char run[EXEC_REASON_MAX + 64];
		running_reason(ev, run, sizeof run);
		rc = svc_runner_move_ev(r, ev, state, DB_STATE_RUNNING, "executor", run, 0, 0);
		if (rc == 0)
			state = DB_STATE_RUNNING;
	}
	if (rc == 0)
		rc = svc_runner_move_ev(r, ev, state, to, by, why, ev->exit_code >= 0, ev->exit_code);
	if (rc == DB_BUSY || rc == DB_ERROR)
		push_retry(r, ev);           /* the executor has forgotten the job: keep its end */
	else
		svc_runner_cancel_by(r, ev->id, by, NULL, 1);
}

/* An event with Slurm's id for a job an admin held while it was being
 * handed over (HELD, no Slurm id recorded). Not yet started: it stays HELD
 * with the id recorded, and the executor holds it in Slurm too (0). Started
 * before the hold reached Slurm: -1, the event moves it on (it runs). */
static int held_after_handover(struct svc_runner *r, const struct exec_event *ev)
{
	if (ev->state == EXEC_RUNNING || ev->started)
		return -1;
	char why[EXEC_REASON_MAX + 96], xerr[EXEC_REASON_MAX];
	snprintf(why, sizeof why, "handed to Slurm as job %s while held: held there too",
	         ev->ext_id);
	struct db_job_update u = { .job = ev->id, .by = "executor", .reason = why,
	                           .slurm_job_id = ev->ext_id,
	                           .partition = ev->partition[0] ? ev->partition : NULL };
	struct db_err err = { 0 };
	if (db_jobs_update(r->db, &u, NULL, &err) != 0)
		svc_log(SVC_LOG_WARN, "job j-%06lld: recording Slurm job %s: %s", ev->id, ev->ext_id,
		        err.text);
	pthread_mutex_lock(&r->lock);
	struct executor *ex = r->ex;
	pthread_mutex_unlock(&r->lock);
	if (ex && exec_hold(ex, ev->id, xerr, sizeof xerr) != 0)
		svc_log(SVC_LOG_WARN, "job j-%06lld: holding Slurm job %s: %s", ev->id, ev->ext_id,
		        xerr);
	return 0;
}

/* The executor lost the job before its end (Slurm forgot it: slurmctld
 * lost its state) and hands it over again: back to PENDING, its Slurm id
 * cleared (db/jobs.c), QUEUED again when Slurm takes it. One that may have
 * run (the executor saw a trace of it, the database has it RUNNING, or
 * its trainer reported) goes through RUNNING and REQUEUED first: a new
 * attempt, which resumes from its newest checkpoint. */
static void lost(struct svc_runner *r, const struct exec_event *ev, enum db_state state,
                 int reported)
{
	int ran = ev->started || reported || state == DB_STATE_RUNNING;
	char why[EXEC_REASON_MAX + 64];
	int rc = 0;
	if (state == DB_STATE_QUEUED && ran) {
		snprintf(why, sizeof why, "started unseen%s%s", ev->ext_id[0] ? " as slurm job " : "",
		         ev->ext_id);
		rc = svc_runner_move(r, ev->id, state, DB_STATE_RUNNING, "executor", why, 0, 0);
		if (rc == 0)
			state = DB_STATE_RUNNING;
	}
	if (rc == 0 && state == DB_STATE_RUNNING) {
		rc = svc_runner_move(r, ev->id, state, DB_STATE_REQUEUED, "executor", ev->reason, 0, 0);
		if (rc == 0)
			state = DB_STATE_REQUEUED;
	}
	if (rc == 0 && state != DB_STATE_PENDING)
		svc_runner_move(r, ev->id, state, DB_STATE_PENDING, "executor", ev->reason, 0, 0);
}

void svc_runner_on_event(void *ctx, const struct exec_event *ev)
{
	struct svc_runner *r = ctx;
	int final = exec_state_final(ev->state);
	if (ev->state == EXEC_QUEUED && !ev->ext_id[0])
		return;                      /* the local executor: QUEUED when submit returned */
	if (ev->note) {
		/* Slurm says why it waits now: on the job, if it is still QUEUED */
		struct db_err nerr = { 0 };
		int rc = db_jobs_set_reason(r->db, ev->id, DB_STATE_QUEUED, "executor", ev->reason,
		                            &nerr);
		if (rc != 0 && rc != DB_STALE && rc != DB_NOT_FOUND)
			svc_log(SVC_LOG_WARN, "job j-%06lld: %s", ev->id, nerr.text);
		return;
	}
	struct db_job job = { 0 };
	struct db_err err = { 0 };
	int rc = db_jobs_get(r->db, ev->id, NULL, &job, &err);
	if (rc != 0) {
		svc_log(SVC_LOG_WARN, "job j-%06lld: executor says %s: %s", ev->id,
		        exec_state_name(ev->state), err.text);
		if (final && rc != DB_NOT_FOUND)
			push_retry(r, ev);
		return;
	}
	enum db_state state = job.state;
	/* the trainer reported: it ran (an attempt of it) */
	int reported = job.progress_step > 0 || !isnan(job.last_loss);
	/* held by an admin while it was being handed over: Slurm has it now */
	int held_in_handover = state == DB_STATE_HELD && ev->ext_id[0] &&
	                       !(job.slurm_job_id && job.slurm_job_id[0]);
	db_job_release(&job);
	if (db_state_final(state)) {
		if (final) {
			import_dir(r, ev->id);   /* idempotent; whatever ended it, keep its files' record */
			return;
		}
		/* cancelled while it was being handed over: the executor has it now */
		char xerr[EXEC_REASON_MAX];
		pthread_mutex_lock(&r->lock);
		struct executor *ex = r->ex;
		pthread_mutex_unlock(&r->lock);
		if (ex && exec_cancel(ex, ev->id, xerr, sizeof xerr) == 0)
			svc_log(SVC_LOG_INFO, "job j-%06lld: %s, but the executor says %s: stopping it",
			        ev->id, db_state_name(state), exec_state_name(ev->state));
		return;
	}
	if (state == DB_STATE_PENDING && !ev->ext_id[0]) {
		/* withdrawn after the QUEUED transition failed; it is handed over again */
		svc_log(SVC_LOG_DEBUG, "job j-%06lld: PENDING, executor says %s: ignored", ev->id,
		        exec_state_name(ev->state));
		return;
	}
	if (final) {
		finish(r, ev, state);
		return;
	}
	if (ev->state == EXEC_LOST) {
		lost(r, ev, state, reported);
		return;
	}
	if (held_in_handover && held_after_handover(r, ev) == 0)
		return;
	char why[EXEC_REASON_MAX + 64];
	switch (ev->state) {
	case EXEC_QUEUED:
		if (state == DB_STATE_RUNNING &&   /* requeued while nobody watched */
		    svc_runner_move(r, ev->id, state, DB_STATE_REQUEUED, "executor",
		                    "requeued by Slurm", 0, 0) == 0)
			state = DB_STATE_REQUEUED;
		reach_queued(r, ev, &state);
		break;
	case EXEC_RUNNING:
		running_reason(ev, why, sizeof why);
		if (state == DB_STATE_RUNNING) {
			svc_log(SVC_LOG_INFO, "job j-%06lld: RUNNING (%s)", ev->id, why);
			break;
		}
		if (held_in_handover) {
			char late[EXEC_REASON_MAX + 96];
			snprintf(late, sizeof late, "the hold came too late: Slurm had started job %s",
			         ev->ext_id);
			svc_log(SVC_LOG_WARN, "job j-%06lld: %s", ev->id, late);
			if (svc_runner_move_ev(r, ev, state, DB_STATE_QUEUED, "executor", late, 0, 0) == 0)
				state = DB_STATE_QUEUED;
		}
		if (reach_queued(r, ev, &state) == 0)
			svc_runner_move_ev(r, ev, state, DB_STATE_RUNNING, "executor", why, 0, 0);
		break;
	case EXEC_HELD:
		if (state == DB_STATE_HELD)
			break;
		if (state == DB_STATE_PENDING && reach_queued(r, ev, &state) != 0)
			break;
		svc_runner_move_ev(r, ev, state, DB_STATE_HELD, "executor", ev->reason, 0, 0);
		break;
	case EXEC_REQUEUED:
	case EXEC_PREEMPTED:
		if (state == DB_STATE_RUNNING)
			svc_runner_move(r, ev->id, state, ev->state == EXEC_REQUEUED ? DB_STATE_REQUEUED
			                                                              : DB_STATE_PREEMPTED,
			                "executor", ev->reason, 0, 0);
		break;
	default:
		break;
	}
}
