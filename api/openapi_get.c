/* api/openapi_get.c - GET /v1/openapi.json: the OpenAPI 3.0 description of
 * the API (api/openapi.json, embedded); no token needed. */
#include <pthread.h>

#include "handlers.h"
#include "openapi.h"
#include "reply.h"

static pthread_once_t etag_once = PTHREAD_ONCE_INIT;
static char etag[API_ETAG_SIZE];

static void compute_etag(void)
{
	api_etag(api_openapi_json, api_openapi_json_len, etag);
}

enum MHD_Result api_openapi_get(struct api_request *req)
{
	pthread_once(&etag_once, compute_etag);
	return api_reply_static(req, 200, "application/json", api_openapi_json,
	                        api_openapi_json_len, etag);
}
