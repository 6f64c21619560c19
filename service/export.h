/* service/export.h - exports of jobs' checkpoints to Hugging Face's layout,
 * made by larchd (POST /v1/jobs/{id}/exports; api/exports_hooks.h is the
 * contract).
 *
 * An export runs `larch-train --export <checkpoint> --format F -o
 * exports/<id>` (trainer/export_hf.h) as a child process (child_run.h),
 * never on an HTTP thread: EXPORT_WORKERS worker threads take queued
 * exports in order, at most EXPORT_QUEUE_MAX wait, at most EXPORT_PER_USER
 * of one owner's are queued or running. The child runs as the job's Unix
 * user (run_as owner; the user the job itself ran as) or as larchd's
 * (run_as service): groups, gid and uid set before exec (identity.h), then
 * it changes into the job's directory, makes exports/ if missing, and gets
 * only relative paths: it reads and writes what the job's user may, nothing
 * more. It has its own process group, a clean environment, no stdin, and
 * EXPORT_TIMEOUT_S seconds before it is killed.
 *
 * When the child succeeded larchd opens the two files it wrote as
 * api/job_file.h opens any file of a job directory (no link followed, a
 * regular file of one link owned by the job directory's owner), hashes them
 * and writes the manifest exports/<id>/export.json (svc_jobfs_write, owned
 * by the job's user): the record the download route checks the files
 * against (export_manifest.h). The exports in memory (queued, running,
 * failed, done) are larchd's own; after a restart the done ones are read
 * back from their manifests (at most LIST_MAX of a job), whose file names
 * are only ever those of the fixed table.
 *
 * Ownership: the config's strings are copied; hooks() returns a pointer
 * into the object, valid until svc_export_free.
 */
#ifndef LARCH_SERVICE_EXPORT_H
#define LARCH_SERVICE_EXPORT_H

#include <stddef.h>

#include "api/exports_hooks.h"

struct svc_export_config {
	const char *trainer_path;      /* larch-train */
	int run_as_owner;              /* 1: as the job's Unix user; a job without one is refused */
	/* the job's directory into buf: 0, or -1 (svc_runner_job_dir) */
	int (*job_dir)(void *arg, long long id, char *buf, size_t len);
	void *job_dir_arg;
};

struct svc_export;

/* Starts the workers. NULL with err filled. */
struct svc_export *svc_export_new(const struct svc_export_config *cfg, char *err, size_t errlen);

/* The hooks for api_jobs_hooks.exports. */
const struct api_exports_hooks *svc_export_hooks(struct svc_export *x);

/* Kills running exports (they are failed), fails queued ones, refuses new
 * ones and joins the workers. */
void svc_export_close(struct svc_export *x);
/* Closes (if not yet) and frees. Accepts NULL. */
void svc_export_free(struct svc_export *x);

#endif
