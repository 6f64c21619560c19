/* api/healthz_get.c - GET /healthz: the server is up; no token needed.
 * "status" is "ok", or "degraded" when the executor cannot reach what runs
 * the jobs (slurmctld down): larchd still answers and stores submits. The
 * answer is 200 either way (the server itself works); the executor's
 * object says what is wrong. */
#include "handlers.h"
#include "jobs_hooks.h"
#include "reply.h"
#include "routes.h"

enum MHD_Result api_healthz_get(struct api_request *req)
{
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char detail[512] = "ok";
	int ok = 1;
	if (hooks && hooks->health)
		ok = hooks->health(hooks->arg, detail, sizeof detail);
	const char *name = hooks && hooks->executor ? hooks->executor : "local";
	return api_reply_json(req, 200, json_pack("{s:s,s:s,s:{s:s,s:s,s:s}}",
	                                          "status", ok ? "ok" : "degraded",
	                                          "version", api_version(),
	                                          "executor", "name", name,
	                                          "status", ok ? "ok" : "degraded",
	                                          "detail", detail));
}
