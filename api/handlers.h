/* api/handlers.h - the endpoint handlers, one per file (api/<resource>_<verb>.c).
 *
 * Each reads parse -> authorize -> one db transaction -> reply -> free and
 * ends every path in exactly one api_reply_* (api/reply.h). They are listed
 * in larchd's route table, api/routes.c.
 */
#ifndef LARCH_API_HANDLERS_H
#define LARCH_API_HANDLERS_H

#include "request.h"

enum MHD_Result api_healthz_get(struct api_request *req);   /* GET /healthz */
enum MHD_Result api_openapi_get(struct api_request *req);   /* GET /v1/openapi.json */

#endif
