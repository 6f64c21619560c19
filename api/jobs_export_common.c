/* api/jobs_export_common.c - what the export endpoints and the service
 * share (api/exports_hooks.h): the formats, the file names, export ids,
 * states; and the export object of docs/api.md (jobs_export.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/jobs.h"
#include "exports_hooks.h"
#include "jobs_common.h"
#include "jobs_export.h"
#include "jobs_hooks.h"
#include "reply.h"

const char *const api_export_formats[] = { "hf-gpt2", "hf-mlp", NULL };
const char *const api_export_file_names[] = { "config.json", "model.safetensors", NULL };

const char *api_export_state_name(enum api_export_state s)
{
	switch (s) {
	case API_EXPORT_QUEUED: return "queued";
	case API_EXPORT_RUNNING: return "running";
	case API_EXPORT_DONE: return "done";
	case API_EXPORT_FAILED: return "failed";
	}
	return "unknown";
}

int api_export_id_parse(const char *id, int64_t *step, const char **format)
{
	if (!id || id[0] < '0' || id[0] > '9' || (id[0] == '0' && id[1] != '-'))
		return -1;
	int64_t v = 0;
	const char *p = id;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (p - id >= 16)
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (*p != '-' || v > (INT64_C(1) << 53))
		return -1;
	for (int i = 0; api_export_formats[i]; i++)
		if (strcmp(p + 1, api_export_formats[i]) == 0) {
			*step = v;
			*format = api_export_formats[i];
			return 0;
		}
	return -1;
}

void api_export_write(struct api_buf *b, const char *job, const struct api_export *x)
{
	api_buf_adds(b, "{\"id\":");
	api_buf_json_str(b, x->id);
	api_buf_adds(b, ",\"job\":");
	api_buf_json_str(b, job);
	api_buf_printf(b, ",\"step\":%" PRId64 ",\"format\":", x->step);
	api_buf_json_str(b, x->format);
	api_buf_adds(b, ",\"state\":");
	api_buf_json_str(b, api_export_state_name(x->state));
	api_buf_adds(b, ",\"error\":");
	if (x->state == API_EXPORT_FAILED)
		api_buf_json_str(b, x->error);
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"checkpoint_sha256\":");
	api_buf_json_str(b, x->checkpoint_sha256);
	api_buf_adds(b, ",\"created\":");
	api_buf_json_time(b, x->created_ms);
	api_buf_adds(b, ",\"finished\":");
	api_buf_json_time(b, x->finished_ms);
	api_buf_adds(b, ",\"files\":[");
	for (int i = 0; i < x->n_files; i++) {
		const struct api_export_file *f = &x->files[i];
		api_buf_adds(b, i ? ",{\"name\":" : "{\"name\":");
		api_buf_json_str(b, f->name);
		api_buf_printf(b, ",\"bytes\":%" PRId64 ",\"sha256\":", f->bytes);
		api_buf_json_str(b, f->sha256);
		api_buf_printf(b, ",\"url\":\"/v1/jobs/%s/exports/%s/%s\"}", job, x->id, f->name);
	}
	api_buf_printf(b, "],\"url\":\"/v1/jobs/%s/exports/%s\"}", job, x->id);
}

int api_export_job_or_reply(struct api_request *req, int64_t *id, char job[DB_JOB_ID_MAX],
                            enum MHD_Result *ret)
{
	static const char *const params[] = { NULL };
	struct db *db;
	if (api_job_request_or_reply(req, params, &db, id, ret))
		return -1;
	struct db_job j = { 0 };
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, *id, api_owner_scope(req), &j, &err);
	db_job_release(&j);
	if (rc) {
		*ret = api_reply_db_error(req, rc, &err);
		return -1;
	}
	db_job_id_format(*id, job);
	return 0;
}

const struct api_exports_hooks *api_exports_hooks_or_reply(struct api_request *req,
                                                           enum MHD_Result *ret)
{
	const struct api_jobs_hooks *jobs = req->ctx->jobs;
	if (jobs && jobs->exports && jobs->exports->start && jobs->exports->list)
		return jobs->exports;
	*ret = api_reply_error(req, 503, API_ERR_UNAVAILABLE, "exports are not available on this "
	                       "larchd");
	return NULL;
}

int api_export_find_or_reply(struct api_request *req, int64_t id, const char *job,
                             struct api_export *out, enum MHD_Result *ret)
{
	const char *eid = api_param(req, "export");
	int64_t step;
	const char *format;
	if (api_export_id_parse(eid, &step, &format) != 0) {
		*ret = api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s has no export \"%s\" (an export "
		                       "is <step>-<format>, e.g. 1000-hf-gpt2)", job, eid ? eid : "");
		return -1;
	}
	const struct api_exports_hooks *hooks = api_exports_hooks_or_reply(req, ret);
	if (!hooks)
		return -1;
	struct api_export *all = NULL;
	int n = hooks->list(hooks->arg, id, &all);
	if (n < 0) {
		*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (strcmp(all[i].id, eid) == 0) {
			*out = all[i];
			free(all);
			return 0;
		}
	free(all);
	*ret = api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s has no export %s (POST "
	                       "/v1/jobs/%s/exports makes one)", job, eid, job);
	return -1;
}
