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
enum MHD_Result api_events_get(struct api_request *req);    /* GET /v1/events (long poll) */
enum MHD_Result api_whoami_get(struct api_request *req);    /* GET /v1/whoami */
enum MHD_Result api_static_index(struct api_request *req);  /* GET / (the dashboard) */
enum MHD_Result api_static_file(struct api_request *req);   /* GET /ui/{file} */
enum MHD_Result api_static_vendor(struct api_request *req); /* GET /vendor/{file} */

enum MHD_Result api_jobs_post(struct api_request *req);            /* POST /v1/jobs */
enum MHD_Result api_jobs_list(struct api_request *req);            /* GET /v1/jobs */
enum MHD_Result api_jobs_get(struct api_request *req);             /* GET /v1/jobs/{id} */
enum MHD_Result api_jobs_cancel(struct api_request *req);          /* POST .../{id}/cancel */
enum MHD_Result api_jobs_events_get(struct api_request *req);      /* GET .../{id}/events */
enum MHD_Result api_jobs_logs_get(struct api_request *req);        /* GET .../{id}/logs */
enum MHD_Result api_jobs_checkpoints_get(struct api_request *req); /* GET .../{id}/checkpoints */
enum MHD_Result api_jobs_checkpoint_file_get(struct api_request *req); /* GET .../checkpoints/{step} */
enum MHD_Result api_jobs_export_post(struct api_request *req);     /* POST .../{id}/exports */
enum MHD_Result api_jobs_export_list(struct api_request *req);     /* GET .../{id}/exports */
enum MHD_Result api_jobs_export_get(struct api_request *req);      /* GET .../exports/{export} */
enum MHD_Result api_jobs_export_file_get(struct api_request *req); /* GET .../{export}/{file} */
enum MHD_Result api_jobs_metrics_get(struct api_request *req);     /* GET .../{id}/metrics */
enum MHD_Result api_jobs_metrics_post(struct api_request *req);    /* POST .../{id}/metrics */
enum MHD_Result api_jobs_result_post(struct api_request *req);     /* POST .../{id}/result */
enum MHD_Result api_metrics_multi_get(struct api_request *req);    /* GET /v1/metrics (compare) */
enum MHD_Result api_jobs_patch(struct api_request *req);           /* PATCH /v1/jobs/{id} */

/* sweeps: a parent over child jobs (api/sweeps_*.c) */
enum MHD_Result api_sweeps_post(struct api_request *req);          /* POST /v1/sweeps */
enum MHD_Result api_sweeps_list(struct api_request *req);          /* GET /v1/sweeps */
enum MHD_Result api_sweeps_get(struct api_request *req);           /* GET /v1/sweeps/{id} */
enum MHD_Result api_sweeps_patch(struct api_request *req);         /* PATCH /v1/sweeps/{id} */
enum MHD_Result api_sweeps_cancel(struct api_request *req);        /* POST .../{id}/cancel */

/* webhooks (api/webhooks_*.c; api/webhooks_hooks.h is what they ask of the service) */
enum MHD_Result api_webhooks_post(struct api_request *req);        /* POST /v1/webhooks */
enum MHD_Result api_webhooks_list(struct api_request *req);        /* GET /v1/webhooks */
enum MHD_Result api_webhooks_get(struct api_request *req);         /* GET /v1/webhooks/{id} */
enum MHD_Result api_webhooks_delete(struct api_request *req);      /* DELETE .../{id} */
enum MHD_Result api_webhooks_deliveries_get(struct api_request *req); /* GET .../deliveries */

/* admin (api/admin_*.c; api/admin_hooks.h is what they ask of the service) */
enum MHD_Result api_admin_queues_get(struct api_request *req);     /* GET /v1/queues */
enum MHD_Result api_admin_nodes_get(struct api_request *req);      /* GET /v1/nodes */
enum MHD_Result api_admin_nodes_drain(struct api_request *req);    /* POST .../{name}/drain */
enum MHD_Result api_admin_nodes_resume(struct api_request *req);   /* POST .../{name}/resume */
enum MHD_Result api_admin_jobs_hold(struct api_request *req);      /* POST /v1/jobs/{id}/hold */
enum MHD_Result api_admin_jobs_release(struct api_request *req);   /* POST .../{id}/release */
enum MHD_Result api_admin_jobs_requeue(struct api_request *req);   /* POST .../{id}/requeue */
enum MHD_Result api_admin_jobs_patch(struct api_request *req);     /* PATCH /v1/jobs/{id} */
enum MHD_Result api_admin_audit_get(struct api_request *req);      /* GET /v1/audit */

/* accounting (api/acct_hooks.h is what they ask of the service) */
enum MHD_Result api_usage_get(struct api_request *req);            /* GET /v1/usage */
enum MHD_Result api_admin_accounts_get(struct api_request *req);   /* GET /v1/accounts */
enum MHD_Result api_admin_accounts_patch(struct api_request *req); /* PATCH .../{name} */
enum MHD_Result api_admin_accounts_user_patch(struct api_request *req);
                                                        /* PATCH .../{name}/users/{user} */

#endif
