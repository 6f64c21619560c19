/* api/admin_accounts_patch.c - PATCH /v1/accounts/{name} and PATCH
 * /v1/accounts/{name}/users/{user}: set the limits of a Slurm account's
 * association, or of one user's association with it (admins).
 *
 * Body: an object with at least one of
 *   "max_jobs": integer 0..1000000 (Slurm's MaxJobs: jobs running at once)
 *   "max_wall": "HH:MM:SS" | "D-HH:MM:SS" | integer minutes, up to 366 days
 *               (MaxWall: the longest time limit a job may have)
 *   "grp_tres": {"cpu": integer 0..10000000, "gpu": integer 0..1000000}
 *               (GrpTRES: what the association's jobs may hold at once)
 * where null removes the limit. Unknown fields and wrong types are 400;
 * names are 1 to 64 of A-Z a-z 0-9 _ . - not starting with . or -.
 *
 * The service runs `sacctmgr -i modify account|user where ... set ...`
 * (Slurm's own tool: the limits are Slurm's, enforced by slurmctld) and
 * answers with the account as GET /v1/accounts shows it right after. No
 * such account, or user in it, 404; Slurm refused a value 400; without
 * Slurm's accounting 409; Slurm unreachable 503. Every call, refused ones
 * too, leaves an audit entry (action "account.limits").
 */
#include <stdio.h>
#include <string.h>

#include "admin_common.h"
#include "handlers.h"
#include "jobs_common.h"

#define MAX_JOBS 1000000LL
#define MAX_CPUS 10000000LL
#define MAX_GPUS 1000000LL
#define MAX_WALL_S (366L * 24 * 3600)

/* A count limit: null (clear) or an integer in [0, max]; -3 for neither. */
static long long count_of(const json_t *v, long long max)
{
	if (json_is_null(v))
		return API_ACCT_CLEAR;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
		return -3;
	return json_integer_value(v);
}

/* Reads the body into s->limits; 0, or -1 with the 400 replied. */
static int limits_or_reply(struct api_request *req, json_t *body, enum MHD_Result *ret)
{
	static const char *const fields[] = { "max_jobs", "max_wall", "grp_tres", NULL };
	static const char *const tres_fields[] = { "cpu", "gpu", NULL };
	struct admin_req *s = req->state;
	struct api_acct_limits *l = &s->limits;
	*l = (struct api_acct_limits){ .account = s->account, .user = s->user[0] ? s->user : NULL,
	                               .max_jobs = API_ACCT_UNSET, .max_wall_s = API_ACCT_UNSET,
	                               .grp_cpu = API_ACCT_UNSET, .grp_gpu = API_ACCT_UNSET };
	if (!body || json_object_size(body) == 0) {
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "body: give at least one of "
		                  "max_jobs, max_wall, grp_tres");
		return -1;
	}
	if (admin_known_fields_or_reply(req, body, fields, ret))
		return -1;
	const char *bad = NULL, *why = NULL;
	json_t *v;
	if ((v = json_object_get(body, "max_jobs")) &&
	    (l->max_jobs = count_of(v, MAX_JOBS)) == -3)
		bad = "max_jobs", why = "must be an integer from 0 to 1000000, or null for none";
	if (!bad && (v = json_object_get(body, "max_wall"))) {
		l->max_wall_s = json_is_null(v) ? API_ACCT_CLEAR : admin_duration_s(v, MAX_WALL_S);
		if (l->max_wall_s == -1 && !json_is_null(v))
			bad = "max_wall", why = "must be \"HH:MM:SS\", \"D-HH:MM:SS\" or an integer of "
			                        "minutes, at most 366 days, or null for none";
	}
	if (!bad && (v = json_object_get(body, "grp_tres"))) {
		const char *key;
		json_t *t;
		if (!json_is_object(v) || json_object_size(v) == 0) {
			bad = "grp_tres", why = "must be an object with cpu, gpu or both";
		} else {
			json_object_foreach(v, key, t) {
				size_t k = 0;
				while (tres_fields[k] && strcmp(tres_fields[k], key) != 0)
					k++;
				if (!tres_fields[k]) {
					bad = "grp_tres", why = "knows cpu and gpu only";
					break;
				}
			}
		}
		if (!bad && (t = json_object_get(v, "cpu")) &&
		    (l->grp_cpu = count_of(t, MAX_CPUS)) == -3)
			bad = "grp_tres.cpu", why = "must be an integer from 0 to 10000000, or null for "
			                            "none";
		if (!bad && (t = json_object_get(v, "gpu")) &&
		    (l->grp_gpu = count_of(t, MAX_GPUS)) == -3)
			bad = "grp_tres.gpu", why = "must be an integer from 0 to 1000000, or null for "
			                            "none";
	}
	if (bad) {
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "field", bad),
		                  "%s: %s", bad, why);
		return -1;
	}
	return 0;
}

static enum MHD_Result changed(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? admin_ok_body(req) : admin_fail_call(req);
}

static void call_done(void *done_arg)
{
	api_resume(done_arg);
}

static enum MHD_Result patch(struct api_request *req, int of_user)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	const char *name = api_param(req, "name"), *user = of_user ? api_param(req, "user") : NULL;
	char target[DB_AUDIT_TARGET_MAX + 1];
	snprintf(target, sizeof target, "%s%s%s", name ? name : "", of_user ? "/users/" : "",
	         of_user && user ? user : "");
	struct admin_req *s = admin_begin(req, "account.limits", "accounts", target);
	if (!s)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	if (api_query_known_or_reply(req, params, &ret))
		return ret;
	if (!name || !admin_partition_ok(name))
		return admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "parameter", "name"),
		                  "name: an account name is 1 to 64 characters of A-Z a-z 0-9 _ . - "
		                  "not starting with . or -");
	if (of_user && (!user || !admin_partition_ok(user)))
		return admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "parameter", "user"),
		                  "user: a user name is 1 to 64 characters of A-Z a-z 0-9 _ . - not "
		                  "starting with . or -");
	snprintf(s->account, sizeof s->account, "%s", name);
	snprintf(s->user, sizeof s->user, "%s", of_user ? user : "");
	json_t *body = NULL;
	if (admin_body_or_reply(req, &body, &ret))
		return ret;
	int rc = limits_or_reply(req, body, &ret);
	json_decref(body);
	if (rc)
		return ret;
	const struct api_acct_hooks *acct = req->ctx ? req->ctx->acct : NULL;
	if (!acct || !acct->set_limits)
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL,
		                  "accounting is not configured: larchd has no slurm accounting");
	ret = api_defer(req, changed);
	acct->set_limits(acct->arg, &s->limits, &s->call, call_done, req);
	return ret;
}

enum MHD_Result api_admin_accounts_patch(struct api_request *req)
{
	return patch(req, 0);
}

enum MHD_Result api_admin_accounts_user_patch(struct api_request *req)
{
	return patch(req, 1);
}
