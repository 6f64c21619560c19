/* api/healthz_get.c - GET /healthz: the server is up; no token needed. */
#include "handlers.h"
#include "reply.h"
#include "routes.h"

enum MHD_Result api_healthz_get(struct api_request *req)
{
	return api_reply_json(req, 200, json_pack("{s:s,s:s}", "status", "ok",
	                                          "version", api_version()));
}
