/* service/preflight.h - what a submit learns about a job before it is stored,
 * off the HTTP threads.
 *
 * An HTTP thread never opens a path a user named: a data file can be a FIFO,
 * a pty or sit on a hung filesystem, and an HTTP thread that blocks on it is
 * lost to everyone. So POST /v1/jobs parks the request and hands the spec
 * here (the `preflight` hook of api/jobs_hooks.h). A worker thread
 *   1. decides who the job runs as: with run_as owner, the submitter's Unix
 *      user (db_users_unix, then NSS); a user without a Unix account is
 *      refused (403), and so is a user-role submitter whose account is uid 0;
 *   2. runs `larch-train --probe` as that user (run_as service: as larchd's
 *      user, confined to data_roots for user-role submitters), in its own
 *      process group, with a clean environment, the spec on stdin
 *      (child_run.h): the probe resolves the spec's input paths (relative
 *      ones against the job directory to be), opens each as a regular file
 *      without blocking, and prints the data's shape or what is wrong
 *      (docs/trainer.md);
 *   3. answers through the done callback: refused (the HTTP status and
 *      message), or go on with the Unix user and, when the probe answered in
 *      time, the data's shape for the memory preflight.
 * A probe that has not answered within preflight_timeout seconds is killed
 * and the submit goes on unexamined (the trainer checks the files itself when
 * it starts, and fails the job with the reason); a probe stuck in the kernel
 * (a hung NFS mount) is left to be reaped later, never waited for. At most
 * PREFLIGHT_WORKERS probes run at once, at most PER_USER_RUNNING of one
 * user's (so a user whose every submit names a hung mount leaves workers to
 * the others); PREFLIGHT_QUEUE_MAX submits wait, PER_USER_WAITING of one
 * user's; more are answered 503, or 429 to that user.
 *
 * svc_preflight_close answers everything queued or running with 503 at
 * once, so that larchd's shutdown never waits on a probe.
 */
#ifndef LARCH_SERVICE_PREFLIGHT_H
#define LARCH_SERVICE_PREFLIGHT_H

#include <stddef.h>

#include "api/jobs_hooks.h"
#include "config.h"

struct db;

struct svc_preflight_config {
	struct db *db;                 /* borrowed: users and their Unix users */
	const char *trainer_path;      /* larch-train, which probes */
	const char *jobs_dir;          /* <state>/jobs: relative paths resolve below it */
	int run_as_owner;              /* 1: probe as the submitter's Unix user */
	int slurm;                     /* 1: the jobs run elsewhere: a file missing here is no
	                                  reason to refuse */
	const struct svc_path_list *data_roots;   /* run_as service: user-role confinement */
	unsigned timeout_s;
};

struct svc_preflight;

/* A preflight with its worker threads. NULL with err filled. The config's
 * strings and list are copied. */
struct svc_preflight *svc_preflight_new(const struct svc_preflight_config *cfg, char *err,
                                        size_t errlen);

/* The api_jobs_hooks.preflight of larchd; arg is a struct svc_preflight *. */
int svc_preflight_submit(void *arg, const struct api_preflight *in, api_preflight_done_fn done,
                         void *done_arg);

/* The seconds a probe may take from the next one on (SIGHUP). */
void svc_preflight_set_timeout(struct svc_preflight *pf, unsigned timeout_s);

/* Answers every waiting and running preflight with 503 now and refuses new
 * ones; probes still running are killed. */
void svc_preflight_close(struct svc_preflight *pf);
/* Closes it (if not yet) and frees it. Accepts NULL. */
void svc_preflight_free(struct svc_preflight *pf);

#endif
