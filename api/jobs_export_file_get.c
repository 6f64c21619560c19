/* api/jobs_export_file_get.c - GET (and HEAD) /v1/jobs/{id}/exports/{export}/{file}:
 * one file of a done export (config.json, model.safetensors), for the job's
 * owner or an admin.
 *
 * The file's name must be one of the fixed table (api_export_file_names);
 * its path is built from the job's directory, the export's id (step and
 * format, parsed) and that name, never from the request's text. Its size
 * and sha256 are the export's manifest's, and api/job_file.h sends it as it
 * sends a checkpoint: no link followed, a regular file of one link owned by
 * the job's user, the sha256 checked, ETag, Range, If-Range, HEAD. An
 * export not done yet is a 409.
 */
#include <stdio.h>
#include <string.h>

#include "db/jobs.h"
#include "handlers.h"
#include "job_file.h"
#include "jobs_common.h"
#include "jobs_export.h"
#include "jobs_hooks.h"
#include "reply.h"

#define JOB_DIR_MAX 4096

enum MHD_Result api_jobs_export_file_get(struct api_request *req)
{
	enum MHD_Result ret;
	int64_t id;
	char job[DB_JOB_ID_MAX];
	if (api_export_job_or_reply(req, &id, job, &ret))
		return ret;
	const char *name = api_param(req, "file");
	int known = -1;
	for (int i = 0; api_export_file_names[i]; i++)
		if (name && strcmp(name, api_export_file_names[i]) == 0)
			known = i;
	struct api_export x;
	if (api_export_find_or_reply(req, id, job, &x, &ret))
		return ret;
	if (known < 0)
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "export %s of %s has no file \"%s\" "
		                       "(its files: config.json, model.safetensors)", x.id, job,
		                       name ? name : "");
	if (x.state != API_EXPORT_DONE || x.n_files <= known)
		return api_reply_error(req, 409, API_ERR_CONFLICT, "export %s of %s is %s: its files "
		                       "are there once it is done", x.id, job,
		                       api_export_state_name(x.state));

	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char dir[JOB_DIR_MAX], path[JOB_DIR_MAX + 128], what[160], filename[128];
	if (!hooks->job_dir || hooks->job_dir(hooks->arg, id, dir, sizeof dir) != 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "the job's directory is unknown");
	snprintf(path, sizeof path, "%s/exports/%s/%s", dir, x.id, api_export_file_names[known]);
	snprintf(what, sizeof what, "%s of export %s of %s", api_export_file_names[known], x.id,
	         job);
	snprintf(filename, sizeof filename, "%s", api_export_file_names[known]);
	struct api_job_file f = { .dir = dir, .path = path, .bytes = x.files[known].bytes,
	                          .sha256 = x.files[known].sha256, .what = what,
	                          .filename = filename,
	                          .content_type = known == 0 ? "application/json"
	                                                     : "application/octet-stream" };
	return api_job_file_reply(req, &f);
}
