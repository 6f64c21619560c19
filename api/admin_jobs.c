/* api/admin_jobs.c - POST /v1/jobs/{id}/hold, .../release, .../requeue
 * (admins). No body (or {}).
 *
 * The endpoint moves the job in the database itself, by the admin, as soon
 * as the executor has done its part; the executor's next look at Slurm
 * then agrees (it moves a job only when Slurm's state differs):
 *
 *   hold     PENDING (no Slurm id yet)      -> HELD; the runner hands over
 *                                              no HELD job, and one on its
 *                                              way to Slurm is withdrawn or
 *                                              held there once Slurm has it
 *            QUEUED/REQUEUED/PREEMPTED (or PENDING) with a Slurm id: scontrol
 *                                              hold, -> HELD
 *   release  HELD without a Slurm id        -> PENDING, and the runner is
 *                                              woken to hand it over
 *            HELD with a Slurm id: scontrol release, -> QUEUED
 *   requeue  RUNNING with a Slurm id: scontrol requeue, -> REQUEUED
 *
 * When the executor, following Slurm, has recorded the change (or what came
 * next) before the endpoint does, that is the same success.
 *
 * Anything else is a 409 saying why (a job that has started cannot be
 * held, the local executor cannot hold a job it has taken nor requeue one,
 * a job that has ended cannot change). Slurm's refusals are 409, Slurm
 * unreachable 503. The answer is the job. Every call, refused ones too,
 * leaves an audit entry.
 */
#include <stdio.h>
#include <string.h>

#include "admin_common.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"

enum verb { HOLD, RELEASE, REQUEUE };

static const char *const verb_names[] = { "hold", "release", "requeue" };
static const char *const past[] = { "held", "released", "requeued" };

static enum db_state target_state(enum verb v, int in_slurm)
{
	switch (v) {
	case HOLD: return DB_STATE_HELD;
	case RELEASE: return in_slurm ? DB_STATE_QUEUED : DB_STATE_PENDING;
	default: return DB_STATE_REQUEUED;
	}
}

/* The transition that follows the executor's part (or stands alone). */
static enum MHD_Result move(struct api_request *req, enum verb v)
{
	struct admin_req *s = req->state;
	int in_slurm = s->slurm_id[0] != '\0';
	enum db_state to = target_state(v, in_slurm);
	char reason[128], sid[DB_JOB_ID_MAX];
	snprintf(reason, sizeof reason, "%s by %s", past[v], req->principal.user);
	db_job_id_format(s->job, sid);
	struct db_transition t = { .job = s->job, .from = s->from, .to = to,
	                           .by = req->principal.user, .reason = reason };
	struct db_err err = { 0 };
	int rc = db_jobs_transition(req->ctx->db, &t, NULL, &err);
	const char *note = "";
	if (rc == DB_STALE && in_slurm) {
		/* Slurm did it, and the executor, following Slurm, has recorded it
		 * (or what came next: a requeued job queued again) before us */
		rc = 0;
		note = " (the executor recorded it first)";
	}
	if (rc)
		return admin_fail_db(req, rc, &err);
	const struct api_jobs_hooks *jobs = req->ctx->jobs;
	if (v == RELEASE && !in_slurm && jobs && jobs->submitted)
		jobs->submitted(jobs->arg, s->job);
	if (v == HOLD && !in_slurm && jobs && jobs->held)
		jobs->held(jobs->arg, s->job);   /* it may be on its way to Slurm */
	return admin_ok_job(req, s->job, "%s -> %s%s%s%s", db_state_name(s->from),
	                    db_state_name(to), note, s->call.message[0] ? "; " : "",
	                    s->call.message);
}

static enum MHD_Result hold_done(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? move(req, HOLD) : admin_fail_call(req);
}

static enum MHD_Result release_done(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? move(req, RELEASE) : admin_fail_call(req);
}

static enum MHD_Result requeue_done(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? move(req, REQUEUE) : admin_fail_call(req);
}

static enum MHD_Result conflict(struct api_request *req, const char *fmt, const char *id,
                                enum db_state state)
{
	return admin_fail(req, 409, API_ERR_CONFLICT,
	                  json_pack("{s:s}", "state", db_state_name(state)), fmt, id,
	                  db_state_name(state));
}

/* What verb v does to a job in state st: 0 the db alone, 1 Slurm first,
 * or a 409 replied. */
static int plan_or_reply(struct api_request *req, enum verb v, const struct db_job *job,
                         enum MHD_Result *ret)
{
	char id[DB_JOB_ID_MAX];
	db_job_id_format(job->id, id);
	enum db_state st = job->state;
	int in_slurm = job->slurm_job_id && job->slurm_job_id[0];
	const char *why = NULL;
	if (db_state_final(st))
		why = "%s has already ended (%s)";
	else if (v == HOLD) {
		if (st == DB_STATE_PENDING && !in_slurm)
			return 0;
		if (in_slurm && (st == DB_STATE_PENDING || st == DB_STATE_QUEUED ||
		                 st == DB_STATE_REQUEUED || st == DB_STATE_PREEMPTED))
			return 1;
		why = st == DB_STATE_HELD ? "%s is already %s"
		      : st == DB_STATE_RUNNING ? "%s is %s: only a job that has not started can be held"
		      : "%s is %s on the local executor, which cannot hold a job it has taken "
		        "(cancel it instead)";
	} else if (v == RELEASE) {
		if (st == DB_STATE_HELD)
			return in_slurm;
		why = "%s is %s, not HELD";
	} else {
		if (st == DB_STATE_RUNNING && in_slurm)
			return 1;
		why = st == DB_STATE_RUNNING ? "%s is %s on the local executor, which cannot "
		                               "requeue a job (cancel and submit it again)"
		                             : "%s is %s: only a RUNNING job can be requeued";
	}
	*ret = conflict(req, why, id, st);
	return -1;
}

static enum MHD_Result job_verb(struct api_request *req, enum verb v, const char *action,
                                api_handler_fn then)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	const char *text = api_param(req, "id");
	struct admin_req *s = admin_begin(req, action, "jobs", text);
	if (!s)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	if (api_query_known_or_reply(req, params, &ret) || admin_no_body_or_reply(req, &ret))
		return ret;
	int64_t id;
	struct db_job job;
	if (admin_job_or_reply(req, &id, &job, &ret))
		return ret;
	int slurm = plan_or_reply(req, v, &job, &ret);
	s->job = id;
	s->from = job.state;
	if (slurm == 1)
		admin_call_job(s, &job);
	db_job_release(&job);
	if (slurm < 0)
		return ret;
	if (slurm == 0)
		return move(req, v);

	const struct api_admin_hooks *hooks;
	if (admin_hooks_or_reply(req, &hooks, &ret))
		return ret;
	if (!hooks->job)
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL, "the %s executor cannot %s a "
		                  "Slurm job", hooks->executor, verb_names[v]);
	s->call.op = v == HOLD ? API_ADMIN_HOLD : v == RELEASE ? API_ADMIN_RELEASE
	                                                       : API_ADMIN_REQUEUE;
	return admin_call(req, hooks->job, then);
}

enum MHD_Result api_admin_jobs_hold(struct api_request *req)
{
	return job_verb(req, HOLD, "job.hold", hold_done);
}

enum MHD_Result api_admin_jobs_release(struct api_request *req)
{
	return job_verb(req, RELEASE, "job.release", release_done);
}

enum MHD_Result api_admin_jobs_requeue(struct api_request *req)
{
	return job_verb(req, REQUEUE, "job.requeue", requeue_done);
}
