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
enum MHD_Result api_metrics_get(struct api_request *req);   /* GET /metrics */

enum MHD_Result api_jobs_post(struct api_request *req);            /* POST /v1/jobs */
enum MHD_Result api_jobs_list(struct api_request *req);            /* GET /v1/jobs */
enum MHD_Result api_jobs_get(struct api_request *req);             /* GET /v1/jobs/{id} */
enum MHD_Result api_jobs_cancel(struct api_request *req);          /* POST .../{id}/cancel */
enum MHD_Result api_jobs_events_get(struct api_request *req);      /* GET .../{id}/events */
enum MHD_Result api_jobs_logs_get(struct api_request *req);        /* GET .../{id}/logs */
enum MHD_Result api_jobs_checkpoints_get(struct api_request *req); /* GET .../{id}/checkpoints */
enum MHD_Result api_jobs_metrics_get(struct api_request *req);     /* GET .../{id}/metrics */
enum MHD_Result api_jobs_metrics_post(struct api_request *req);    /* POST .../{id}/metrics */
enum MHD_Result api_jobs_result_post(struct api_request *req);     /* POST .../{id}/result */

#endif
