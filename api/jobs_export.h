/* api/jobs_export.h - what the export endpoints (api/jobs_export_*.c)
 * share: the export object of docs/api.md and the lookups their handlers
 * start with (the ..._or_reply convention of jobs_common.h). */
#ifndef LARCH_API_JOBS_EXPORT_H
#define LARCH_API_JOBS_EXPORT_H

#include <stdint.h>

#include "buf.h"
#include "db/jobs.h"
#include "exports_hooks.h"
#include "request.h"

/* Writes export x of job ("j-000123") as docs/api.md's export object. */
void api_export_write(struct api_buf *b, const char *job, const struct api_export *x);

/* The start of the export GETs: no query parameter, the job of the path's
 * {id} visible to the caller (another user's is a 404, as a job that does
 * not exist), its id into *id and as text ("j-000123") into job: 0, or -1
 * with the error replied. */
int api_export_job_or_reply(struct api_request *req, int64_t *id, char job[DB_JOB_ID_MAX],
                            enum MHD_Result *ret);

/* The service's export hooks, or NULL with a 503 replied. */
const struct api_exports_hooks *api_exports_hooks_or_reply(struct api_request *req,
                                                           enum MHD_Result *ret);

/* The export the path's {export} names, of job id (shown as job), into
 * *out: 0, or -1 with the 404 (no such id, or none made) replied. */
int api_export_find_or_reply(struct api_request *req, int64_t id, const char *job,
                             struct api_export *out, enum MHD_Result *ret);

#endif
