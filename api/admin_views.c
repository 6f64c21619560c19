/* api/admin_views.c - GET /v1/queues and GET /v1/nodes: the cluster as the
 * executor sees it (admins).
 *
 * The service answers (api/admin_hooks.h: view): under Slurm from a
 * snapshot of sinfo and squeue at most a couple of seconds old, shared by
 * every client; with the local executor one queue "local" and this host.
 * The bodies are docs/api.md's "queues" and "nodes" objects. Slurm
 * unreachable and no earlier snapshot: 503; with one, it is served with
 * "stale": true and the error. Reading is not an action: no audit entry.
 */
#include "admin_common.h"
#include "handlers.h"
#include "jobs_common.h"

static enum MHD_Result viewed(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? admin_ok_body(req) : admin_fail_call(req);
}

static enum MHD_Result view(struct api_request *req, enum api_admin_op op)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	const struct api_admin_hooks *hooks;
	if (api_query_known_or_reply(req, params, &ret))
		return ret;
	struct admin_req *s = admin_begin(req, NULL, NULL, NULL);
	if (!s)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	if (admin_hooks_or_reply(req, &hooks, &ret))
		return ret;
	if (!hooks->view)
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "no view of the %s executor",
		                       hooks->executor);
	s->call.op = op;
	return admin_call(req, hooks->view, viewed);
}

enum MHD_Result api_admin_queues_get(struct api_request *req)
{
	return view(req, API_ADMIN_QUEUES);
}

enum MHD_Result api_admin_nodes_get(struct api_request *req)
{
	return view(req, API_ADMIN_NODES);
}
