/* api/jobs_hooks.h - what the job endpoints ask of the service.
 *
 * The api layer stores and reads jobs through db/ itself; what only the
 * service can do (hand a job to an executor, stop one, know where its files
 * are) it asks through these hooks, which larchd fills in (service/runner.c).
 * Keeping them here keeps the dependency one way: api/ never includes
 * service/.
 */
#ifndef LARCH_API_JOBS_HOOKS_H
#define LARCH_API_JOBS_HOOKS_H

#include <stddef.h>

struct api_buf;

struct api_jobs_hooks {
	/* A job was stored as PENDING: hand it to the executor soon (wakes the
	 * runner; returns at once). */
	void (*submitted)(void *arg, long long id);
	/* Cancels job id for principal `by`: a job not yet running is CANCELLED at
	 * once; a running one gets SIGTERM (it checkpoints) and becomes CANCELLED
	 * when its process ends. Returns 0, 1 when the job is already final (the
	 * API answers 409), or -1 with err filled (500). */
	int (*cancel)(void *arg, long long id, const char *by, char *err, size_t errlen);
	/* Optional. An admin held job id, which was PENDING with no Slurm id:
	 * keep the executor from starting it if it has it (withdrawn, or held in
	 * Slurm once Slurm answers). 0, or -1. Returns at once. */
	int (*held)(void *arg, long long id);
	/* The job's directory ("<state>/jobs/j-000123") into buf; 0, or -1. */
	int (*job_dir)(void *arg, long long id, char *buf, size_t len);
	/* Optional. Whether a job may ask for this partition: 0 yes (or cannot
	 * tell now), -1 no with err naming it (the API answers 400). */
	int (*partition_ok)(void *arg, const char *partition, char *err, size_t errlen);
	/* Optional. The memory a job's rank may use: host bytes per node of
	 * partition (NULL: the default one; 0 = unknown) and bytes per GPU (0 =
	 * unknown), for the submit-time memory plan. */
	void (*memory_limits)(void *arg, const char *partition, double *host, double *gpu);
	/* Optional. The executor's health for /healthz: 1 ok, 0 degraded (detail
	 * says why). */
	int (*health)(void *arg, char *detail, size_t len);
	/* Optional. More Prometheus lines for /metrics (the executor's calls). */
	void (*metrics)(void *arg, struct api_buf *b);
	const char *executor;          /* "local" or "slurm": the new jobs' executor */
	void *arg;
};

#endif
