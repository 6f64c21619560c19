/* api/routes.c - larchd's route table: every endpoint, its handler and the
 * role it needs (api/auth.h). The job endpoints join when db/ lands. */
#include "routes.h"

#include "handlers.h"

#ifndef LARCH_VERSION
#define LARCH_VERSION "0.0.0"
#endif

const struct api_route api_routes[] = {
	{ .method = "GET", .path = "/healthz", .handler = api_healthz_get, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/v1/openapi.json", .handler = api_openapi_get,
	  .role = API_ROLE_NONE },
};

const size_t api_routes_count = sizeof api_routes / sizeof api_routes[0];

const char *api_version(void)
{
	return LARCH_VERSION;
}
