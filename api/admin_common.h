/* api/admin_common.h - what the admin endpoints (api/admin_*.c) share: the
 * per-request state, the audit entry every action leaves, the request body,
 * node names, and calling the service's hooks (api/admin_hooks.h).
 *
 * An action's handler starts with admin_begin, which names the action and
 * its target for the audit log; from then on every path ends in one of
 * admin_fail, admin_fail_db, admin_ok_job or admin_ok_body, which write the
 * audit entry (actor, action, target, arguments, status, message) and then
 * reply, so that no answer leaves without its entry, failures included. A
 * failed audit write does not change the answer (the action has happened
 * or has been refused either way).
 *
 * The ..._or_reply helpers follow api/jobs_common.h's convention: 0 to go
 * on, or -1 with the reply sent and its MHD result in *ret.
 */
#ifndef LARCH_API_ADMIN_COMMON_H
#define LARCH_API_ADMIN_COMMON_H

#include <jansson.h>
#include <stdint.h>

#include "acct_hooks.h"
#include "admin_hooks.h"
#include "db/audit.h"
#include "db/jobs.h"
#include "reply.h"
#include "request.h"

#define ADMIN_REASON_MAX 256     /* drain reasons: 1..256 characters */
#define ADMIN_NODE_MAX 128       /* node names (and Slurm hostlists): 1..128 bytes */

/* A request's admin state (req->state), freed with the request. */
struct admin_req {
	const char *action;                     /* "job.hold"; NULL: not audited (views) */
	char target[DB_AUDIT_TARGET_MAX + 1];   /* "jobs/j-000123", "nodes/n1" */
	char *args;                             /* the body as compact JSON, or NULL; owned */
	struct api_admin_call call;             /* the hook call, if any */

	/* what the continuation of a deferred action needs */
	int64_t job;
	enum db_state from;                     /* the job's state when the call began */
	char slurm_id[32];
	char unix_user[65];                     /* the job's, for call.unix_user */
	char node[ADMIN_NODE_MAX + 1];
	char reason[4 * ADMIN_REASON_MAX + 1];
	char partition[65];
	int64_t old_priority;
	char account[API_ACCT_NAME_MAX + 1];   /* PATCH /v1/accounts/...: the path's names */
	char user[API_ACCT_NAME_MAX + 1];
	struct api_acct_limits limits;         /* ... and what to set (api/acct_hooks.h) */
};

/* Allocates the state, attaches it to req and, for an action, names it and
 * its target ("%s/%s", kind, the path's {name} or {id} as sent). NULL when
 * out of memory (the caller replies 500 with api_reply_error). */
struct admin_req *admin_begin(struct api_request *req, const char *action, const char *kind,
                              const char *param);

/* Points call's job fields (slurm_job_id, job_id, sweep, unix_user) at
 * job's, copied into s (job may be released after). */
void admin_call_job(struct admin_req *s, const struct db_job *job);

/* Audit entry, then an error reply (detail may be NULL; stolen). */
enum MHD_Result admin_fail(struct api_request *req, unsigned status, enum api_error code,
                           json_t *detail, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* The same for a failed db call (statuses as api_reply_db_error). */
enum MHD_Result admin_fail_db(struct api_request *req, int rc, const struct db_err *err);
/* The same for a hook call that did not succeed (call.status, call.message). */
enum MHD_Result admin_fail_call(struct api_request *req);
/* Audit entry (status 200, message) and the job as the answer. */
enum MHD_Result admin_ok_job(struct api_request *req, int64_t id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Audit entry (when an action; status 200, call.message) and call.body as
 * the answer. */
enum MHD_Result admin_ok_body(struct api_request *req);

/* The request's body as a JSON object, kept as the audit entry's args.
 * No body is NULL in *out (fine for the caller to allow); anything else
 * than an object is 400 (audited). */
int admin_body_or_reply(struct api_request *req, json_t **out, enum MHD_Result *ret);
/* Refuses (400, audited) a body that is not absent or {}. */
int admin_no_body_or_reply(struct api_request *req, enum MHD_Result *ret);
/* Refuses (400, audited) an object with a key not in allowed (NULL-ended). */
int admin_known_fields_or_reply(struct api_request *req, json_t *obj,
                                const char *const *allowed, enum MHD_Result *ret);

/* The job the path's {id} names (canonical "j-000123"), read from the
 * database into *job (release it), or a reply (audited): 404 for a bad or
 * unknown id, 503 without a job store, the database's error. */
int admin_job_or_reply(struct api_request *req, int64_t *id, struct db_job *job,
                       enum MHD_Result *ret);

/* The service's hooks, or 503 (audited) when larchd has none. */
int admin_hooks_or_reply(struct api_request *req, const struct api_admin_hooks **hooks,
                         enum MHD_Result *ret);

/* 1 if name is a node name or Slurm hostlist we pass on: 1..128 of
 * A-Z a-z 0-9 _ . - [ ] , not starting with '-'. */
int admin_node_name_ok(const char *name);
/* 1 if s is a Slurm partition name we pass on: 1..64 of A-Z a-z 0-9 _ . -,
 * not starting with '.' or '-'. */
int admin_partition_ok(const char *s);

/* A duration as the admin endpoints take it: "HH:MM:SS", "D-HH:MM:SS" or an
 * integer of minutes, in seconds; -1 for anything else or more than max_s. */
long admin_duration_s(const json_t *v, long max_s);

/* Parks req and hands its call (req->state's) to fn; the continuation then
 * runs on an MHD thread once the service is done. Returns what the handler
 * returns. */
enum MHD_Result admin_call(struct api_request *req,
                           void (*fn)(void *, struct api_admin_call *, api_admin_done_fn, void *),
                           api_handler_fn then);

#endif
