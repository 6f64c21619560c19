/* api/sweeps_cancel.c - POST /v1/sweeps/{id}/cancel: cancels every child
 * that has not ended, each as POST /v1/jobs/{id}/cancel would (the jobs
 * hook: a waiting child at once, a running one by SIGTERM). Children that
 * had ended are left as they are. The owner or an admin; another user's
 * sweep is 404. The answer is the sweep. */
#include <stdio.h>

#include "db/sweeps.h"
#include "db/tokens.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "sweeps_hooks.h"
#include "reply.h"
#include "sweeps_common.h"

enum MHD_Result api_sweeps_cancel(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_sweep_request_or_reply(req, &db, &id, &ret))
		return ret;
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	if (!hooks || !hooks->cancel)
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "no executor to cancel with");
	/* the children no executor holds yet, all in one transaction; then the
	 * others, each through the executor */
	char reason[DB_NAME_MAX + 32];
	snprintf(reason, sizeof reason, "cancelled by %s", req->principal.user);
	struct db_err err = { 0 };
	int rc = db_sweeps_cancel_waiting(db, id, api_owner_scope(req), req->principal.user,
	                                  reason, NULL, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct db_sweep s;
	struct db_sweep_child *children;
	size_t n;
	rc = db_sweeps_get(db, id, api_owner_scope(req), &s, &children, &n, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	char why[256] = "";
	int failed = 0;
	const struct api_sweeps_hooks *sh = req->ctx->sweeps;
	if (sh && sh->sweep_cancel)
		sh->sweep_cancel(sh->arg, id);   /* one order for what runs as one unit */
	for (size_t i = 0; i < n; i++) {
		if (db_state_final(children[i].state))
			continue;
		char e[256];
		/* 1: it ended meanwhile, which is what was asked */
		if (hooks->cancel(hooks->arg, children[i].job, req->principal.user, e, sizeof e) < 0 &&
		    !failed++)
			snprintf(why, sizeof why, "%s", e);
	}
	db_sweep_children_free(children, n);
	db_sweep_release(&s);
	if (failed)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "%d children could not be "
		                       "cancelled: %s", failed, why);
	return api_reply_sweep(req, 200, id);
}
