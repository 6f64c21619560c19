/* api/metrics_get.c - GET /metrics: Prometheus text format 0.0.4, for
 * admins. Jobs by state (larch_jobs), requests and their latencies by
 * route (api/stats.h), the database's group commits, and the dashboard's
 * live clients (api/changes.h), the Slurm commands larchd ran and its
 * squeue poll cycles' times (the service's hooks). */
#include "db/jobs.h"
#include "changes.h"
#include "handlers.h"
#include "jobs_hooks.h"
#include "jobs_common.h"
#include "job_file.h"
#include "reply.h"
#include "stats.h"

enum MHD_Result api_metrics_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	struct db *db;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret))
		return ret;
	int64_t counts[DB_STATE_COUNT];
	struct db_err err = { 0 };
	int rc = db_jobs_count_by_state(db, counts, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);

	struct api_buf b;
	api_buf_init(&b, 16384);
	api_buf_adds(&b, "# HELP larch_jobs Jobs in the database, by state.\n"
	                 "# TYPE larch_jobs gauge\n");
	for (int s = 0; s < DB_STATE_COUNT; s++)
		api_buf_printf(&b, "larch_jobs{state=\"%s\"} %lld\n", db_state_name(s),
		               (long long)counts[s]);
	api_buf_printf(&b, "# HELP larch_download_hashes_total Files hashed to answer a download "
	                   "(their verdict was not known yet).\n"
	                   "# TYPE larch_download_hashes_total counter\n"
	                   "larch_download_hashes_total %llu\n", api_job_file_hashes());
	uint64_t groups, submits;
	db_jobs_submit_stats(db, &groups, &submits);
	api_buf_printf(&b, "# HELP larch_db_submit_groups_total Group commits of submitted jobs.\n"
	                   "# TYPE larch_db_submit_groups_total counter\n"
	                   "larch_db_submit_groups_total %llu\n"
	                   "# HELP larch_db_submits_total Jobs committed in group commits.\n"
	                   "# TYPE larch_db_submits_total counter\n"
	                   "larch_db_submits_total %llu\n",
	               (unsigned long long)groups, (unsigned long long)submits);
	struct api_changes *feed = req->ctx->changes;
	if (feed) {
		unsigned waiting;
		uint64_t served, published;
		api_changes_stats(feed, &waiting, &served, &published);
		api_buf_printf(&b, "# HELP larch_events_waiting Dashboard long polls (GET /v1/events) "
		                   "parked now, one per live client.\n"
		                   "# TYPE larch_events_waiting gauge\n"
		                   "larch_events_waiting %u\n"
		                   "# HELP larch_events_answered_total Long polls answered.\n"
		                   "# TYPE larch_events_answered_total counter\n"
		                   "larch_events_answered_total %llu\n"
		                   "# HELP larch_job_changes_total Job events the change feed carried.\n"
		                   "# TYPE larch_job_changes_total counter\n"
		                   "larch_job_changes_total %llu\n",
		               waiting, (unsigned long long)served, (unsigned long long)published);
	}
	api_stats_write(&b);
	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	struct api_count calls[32];
	size_t n = hooks && hooks->slurm_calls ? hooks->slurm_calls(hooks->arg, calls, 32) : 0;
	if (n)
		api_buf_adds(&b, "# HELP larch_slurm_calls_total Slurm commands larchd ran, by command.\n"
		                 "# TYPE larch_slurm_calls_total counter\n");
	for (size_t i = 0; i < n; i++)
		api_buf_printf(&b, "larch_slurm_calls_total{command=\"%s\"} %llu\n", calls[i].label,
		               calls[i].value);
	struct api_poll_times pt;
	if (hooks && hooks->slurm_polls && hooks->slurm_polls(hooks->arg, &pt)) {
		api_buf_adds(&b, "# HELP larch_slurm_poll_seconds Wall time of the Slurm executor's "
		                 "poll cycles (one squeue, its rows applied to the jobs followed).\n"
		                 "# TYPE larch_slurm_poll_seconds histogram\n");
		for (size_t i = 0; i < pt.n; i++)
			api_buf_printf(&b, "larch_slurm_poll_seconds_bucket{le=\"%g\"} %llu\n", pt.le[i],
			               pt.count_le[i]);
		api_buf_printf(&b, "larch_slurm_poll_seconds_bucket{le=\"+Inf\"} %llu\n"
		                   "larch_slurm_poll_seconds_sum %.6f\n"
		                   "larch_slurm_poll_seconds_count %llu\n"
		                   "# HELP larch_slurm_poll_cpu_seconds_total CPU time of larchd's "
		                   "polling thread in those cycles (squeue's own not counted).\n"
		                   "# TYPE larch_slurm_poll_cpu_seconds_total counter\n"
		                   "larch_slurm_poll_cpu_seconds_total %.6f\n",
		               pt.count, pt.wall_s, pt.count, pt.cpu_s);
	}
	return api_reply_buf(req, 200, "text/plain; version=0.0.4; charset=utf-8", &b);
}
