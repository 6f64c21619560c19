/* api/routes.c - larchd's route table: every endpoint, its handler and the
 * role it needs (api/auth.h). docs/api.md is the contract, openapi.json its
 * OpenAPI description; the three change together. */
#include "routes.h"

#include "handlers.h"

#ifndef LARCH_VERSION
#define LARCH_VERSION "0.0.0"
#endif

const struct api_route api_routes[] = {
	{ .method = "GET", .path = "/healthz", .handler = api_healthz_get, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/metrics", .handler = api_metrics_get, .role = API_ROLE_ADMIN },
	{ .method = "GET", .path = "/v1/openapi.json", .handler = api_openapi_get,
	  .role = API_ROLE_NONE },

	/* the dashboard (api/static_get.c) and its live updates */
	{ .method = "GET", .path = "/", .handler = api_static_index, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/ui/{file}", .handler = api_static_file, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/vendor/{file}", .handler = api_static_vendor,
	  .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/v1/events", .handler = api_events_get, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/whoami", .handler = api_whoami_get, .role = API_ROLE_USER },

	{ .method = "POST", .path = "/v1/jobs", .handler = api_jobs_post, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs", .handler = api_jobs_list, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}", .handler = api_jobs_get, .role = API_ROLE_USER },
	{ .method = "POST", .path = "/v1/jobs/{id}/cancel", .handler = api_jobs_cancel,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/events", .handler = api_jobs_events_get,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/logs", .handler = api_jobs_logs_get,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/checkpoints", .handler = api_jobs_checkpoints_get,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/checkpoints/{step}",
	  .handler = api_jobs_checkpoint_file_get, .role = API_ROLE_USER },
	/* exports to Hugging Face's layout, made by the service (api/jobs_export_*.c) */
	{ .method = "POST", .path = "/v1/jobs/{id}/exports", .handler = api_jobs_export_post,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/exports", .handler = api_jobs_export_list,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/exports/{export}", .handler = api_jobs_export_get,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/exports/{export}/{file}",
	  .handler = api_jobs_export_file_get, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/metrics", .handler = api_jobs_metrics_get,
	  .role = API_ROLE_USER },
	{ .method = "POST", .path = "/v1/jobs/{id}/metrics", .handler = api_jobs_metrics_post,
	  .role = API_ROLE_JOB },
	{ .method = "POST", .path = "/v1/jobs/{id}/result", .handler = api_jobs_result_post,
	  .role = API_ROLE_JOB },
	/* comparing runs: one metric of many jobs (api/metrics_multi_get.c) */
	{ .method = "GET", .path = "/v1/metrics", .handler = api_metrics_multi_get,
	  .role = API_ROLE_USER },

	/* labels: the owner; anything else: admins (api/jobs_patch.c) */
	{ .method = "PATCH", .path = "/v1/jobs/{id}", .handler = api_jobs_patch,
	  .role = API_ROLE_USER },

	/* sweeps (api/sweeps_*.c) */
	{ .method = "POST", .path = "/v1/sweeps", .handler = api_sweeps_post, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/sweeps", .handler = api_sweeps_list, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/sweeps/{id}", .handler = api_sweeps_get,
	  .role = API_ROLE_USER },
	{ .method = "PATCH", .path = "/v1/sweeps/{id}", .handler = api_sweeps_patch,
	  .role = API_ROLE_USER },
	{ .method = "POST", .path = "/v1/sweeps/{id}/cancel", .handler = api_sweeps_cancel,
	  .role = API_ROLE_USER },

	/* webhooks: a user's own; admins see everyone's (api/webhooks_*.c) */
	{ .method = "POST", .path = "/v1/webhooks", .handler = api_webhooks_post,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/webhooks", .handler = api_webhooks_list,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/webhooks/{id}", .handler = api_webhooks_get,
	  .role = API_ROLE_USER },
	{ .method = "DELETE", .path = "/v1/webhooks/{id}", .handler = api_webhooks_delete,
	  .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/webhooks/{id}/deliveries",
	  .handler = api_webhooks_deliveries_get, .role = API_ROLE_USER },

	/* admin: queues, nodes, jobs (api/admin_*.c) */
	{ .method = "POST", .path = "/v1/jobs/{id}/hold", .handler = api_admin_jobs_hold,
	  .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/v1/jobs/{id}/release", .handler = api_admin_jobs_release,
	  .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/v1/jobs/{id}/requeue", .handler = api_admin_jobs_requeue,
	  .role = API_ROLE_ADMIN },
	{ .method = "GET", .path = "/v1/queues", .handler = api_admin_queues_get,
	  .role = API_ROLE_ADMIN },
	{ .method = "GET", .path = "/v1/nodes", .handler = api_admin_nodes_get,
	  .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/v1/nodes/{name}/drain", .handler = api_admin_nodes_drain,
	  .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/v1/nodes/{name}/resume", .handler = api_admin_nodes_resume,
	  .role = API_ROLE_ADMIN },
	{ .method = "GET", .path = "/v1/audit", .handler = api_admin_audit_get,
	  .role = API_ROLE_ADMIN },

	/* accounting: usage (users: their own), Slurm's accounts (admins) */
	{ .method = "GET", .path = "/v1/usage", .handler = api_usage_get, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/accounts", .handler = api_admin_accounts_get,
	  .role = API_ROLE_ADMIN },
	{ .method = "PATCH", .path = "/v1/accounts/{name}", .handler = api_admin_accounts_patch,
	  .role = API_ROLE_ADMIN },
	{ .method = "PATCH", .path = "/v1/accounts/{name}/users/{user}",
	  .handler = api_admin_accounts_user_patch, .role = API_ROLE_ADMIN },
};

const size_t api_routes_count = sizeof api_routes / sizeof api_routes[0];

const char *api_version(void)
{
	return LARCH_VERSION;
}
