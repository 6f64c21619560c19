/* service/job_import.h - what a finished job left in its directory, into the
 * database: the metrics of metrics.jsonl, the checkpoints of checkpoints/,
 * and the job's progress.
 *
 * larch-train posts its metrics while it runs, but the job directory is the
 * complete record (docs/trainer.md): when a job ends, larchd imports the
 * points the database lacks (inserts are idempotent on (job, name, step)),
 * records every checkpoint file with its size and SHA-256, and sets the
 * progress shown on the job to the last train step and loss. Everything here
 * may run again for the same job (after a restart) with the same result.
 *
 * Ownership: every argument is borrowed for the call.
 */
#ifndef LARCH_SERVICE_JOB_IMPORT_H
#define LARCH_SERVICE_JOB_IMPORT_H

#include <stddef.h>
#include <stdint.h>

struct db;

struct svc_import_stats {
	size_t lines;               /* complete lines read from metrics.jsonl */
	size_t bad_lines;           /* complete lines that were not a metric point */
	int torn_tail;              /* the file ended in a partial line (skipped) */
	size_t inserted;            /* points the database did not have */
	int64_t last_step;          /* the largest step of a train/ point; -1 for none */
	double last_loss;           /* train/loss at last_step, NaN for none */
	size_t checkpoints;         /* checkpoint files recorded */
};

/* Imports DIR/metrics.jsonl (a missing file is no metrics). A complete line
 * that is not a point ({"step": N >= 0, "name": "1..128 chars", "value":
 * number or null, "time": seconds}) is counted and skipped; so is a last line
 * without its newline (a write the trainer did not finish). Returns 0, or -1
 * with err filled (the file could not be read, or the database failed: what
 * was inserted before stays). */
int svc_import_metrics(struct db *db, int64_t job, const char *dir, struct svc_import_stats *st,
                       char *err, size_t errlen);

/* Records DIR/checkpoints/step-<digits>.safetensors (other names, such as a
 * writer's temporaries, are ignored) with its bytes and SHA-256 (streamed
 * through OpenSSL's EVP digest, svc_fd_sha256). A missing directory is no checkpoints.
 * Returns 0, or -1 with err filled. */
int svc_import_checkpoints(struct db *db, int64_t job, const char *dir,
                           struct svc_import_stats *st, char *err, size_t errlen);

/* The SHA-256 of fd's file (from offset 0 to its end; trn_sha256_fd) as
 * 64 lower-case hex digits, and its size; closes fd. A file whose identity
 * (fstat before and after) held meanwhile has its download verdict seeded
 * with it (api_job_file_trust). path names it in err. Returns 0, or -1
 * with err filled. */
int svc_fd_sha256(int fd, const char *path, char hex[65], int64_t *bytes, char *err,
                  size_t errlen);

/* All of the above for a job that has ended, then its progress (st's last
 * step and loss; total = the spec's "steps" when it has one, else what the
 * job had). Returns 0, or -1 with err filled (what could be done was done). */
int svc_import_job(struct db *db, int64_t job, const char *dir, struct svc_import_stats *st,
                   char *err, size_t errlen);

#endif
