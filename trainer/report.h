/* trainer/report.h - what a run tells the outside world: metrics.jsonl,
 * progress lines on stdout, result.json, and the same metrics and result
 * posted to larchd when the environment asks for it (reporter.h).
 *
 * metrics.jsonl has one JSON object per line:
 *   {"step":120,"time":1763851234.512,"name":"train/loss","value":0.4312}
 * (time in Unix seconds). On resume from step s, lines past s are dropped
 * first, so a metric never appears twice for one step.
 */
#ifndef LARCH_TRAINER_REPORT_H
#define LARCH_TRAINER_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "err.h"

struct trn_reporter;

struct trn_report {
	FILE *metrics;                 /* DIR/metrics.jsonl */
	int quiet;
	struct trn_reporter *remote;   /* posts to larchd (owned); NULL when not reporting */
};

/* Reads LARCH_SERVER_URL, LARCH_JOB_ID and LARCH_JOB_TOKEN (reporter.h) and,
 * when all three are set, starts posting every metric to larchd as well.
 * r must be zeroed. -1 with err when only some are set or one is unusable
 * (a usage error); larchd being unreachable is never an error. */
int trn_report_connect(struct trn_report *r, struct trn_err *err);

/* Opens DIR/metrics.jsonl for appending, first dropping lines whose step is
 * past keep_until (pass -1 to start a new file). */
int trn_report_open(struct trn_report *r, const char *job_dir, long keep_until,
                    struct trn_err *err);
/* Closes metrics.jsonl; stops the reporter if trn_report_finish has not. */
void trn_report_close(struct trn_report *r);

void trn_report_metric(struct trn_report *r, long step, const char *name, double value);
void trn_report_flush(struct trn_report *r);

/* Writes DIR/result.json atomically:
 *   {"status": status, "steps": steps, "final": final, "wall_s": wall_s,
 *    "exit_code": code, "reason": reason (only when not NULL)}
 * final is borrowed (may be NULL). */
int trn_report_result(const char *job_dir, const char *status, long steps, json_t *final,
                      double wall_s, int exit_code, const char *reason, struct trn_err *err);

struct trn_result {
	const char *status;            /* "completed", "failed", "interrupted" */
	long steps;
	json_t *final;                 /* borrowed; may be NULL */
	double wall_s;
	int exit_code;
	const char *reason;            /* may be NULL */
};

/* The run's last report: writes DIR/result.json as trn_report_result does
 * (skipped when job_dir is NULL: a dir that could not be made), then, when
 * reporting, posts what is still queued for at most LARCH_REPORT_FLUSH_S
 * seconds, posts the same result text, and stops the reporter. Returns -1
 * with err only when result.json cannot be written: larchd never fails it. */
int trn_report_finish(struct trn_report *r, const char *job_dir, const struct trn_result *res,
                      struct trn_err *err);

/* Writes text to path atomically (temporary name, fsync, rename). */
int trn_write_file_atomic(const char *path, const char *text, struct trn_err *err);

/* "1h02m", "3m05s", "12.3s" */
void trn_format_duration(char *buf, size_t len, double seconds);

#endif
