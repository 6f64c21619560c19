/* service/cli/jobs.h - what larch's commands share about the job object
 * (docs/api.md, "The job object"). Sources: service/cli/jobs.c. */
#ifndef LARCH_CLI_JOBS_H
#define LARCH_CLI_JOBS_H

#include <jansson.h>
#include <math.h>

#include "cli.h"

/* 1 for COMPLETED, FAILED, CANCELLED and TIMEOUT; 0 for others and NULL. */
int cli_job_final(const char *state);

/* Appends "/v1/jobs/<id escaped><suffix>" to b. */
void cli_job_path(struct cli_buf *b, const char *id, const char *suffix);

/* GET /v1/jobs/{id}: CLI_OK with *job a new reference, or the exit status
 * after printing why not ("larch: job j-000123 not found"). */
int cli_job_get(struct cli *cli, const char *id, json_t **job);

/* The job's string field key, or NULL; borrowed from job. */
const char *cli_job_str(const json_t *job, const char *key);

/* The job's progress: step and total (-1 when not reported) and the last
 * train/loss (NaN when none). Returns 1 when a step was reported. */
int cli_job_progress(const json_t *job, long long *step, long long *total, double *loss);

/* Prints j as one line of compact JSON on stdout (--json), and flushes. */
void cli_print_json(const json_t *j);

#endif
