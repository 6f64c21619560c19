/* api/whoami_get.c - GET /v1/whoami: who the token is ({"user", "role"}),
 * for clients that show it (the dashboard's header, its admin pages). */
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

enum MHD_Result api_whoami_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	if (api_query_known_or_reply(req, params, &ret))
		return ret;
	return api_reply_json(req, 200, json_pack("{s:s,s:s}", "user", req->principal.user,
	                                          "role", api_role_name(req->principal.role)));
}
