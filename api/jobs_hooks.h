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

struct api_jobs_hooks {
	/* A job was stored as PENDING: hand it to the executor soon (wakes the
	 * runner; returns at once). */
	void (*submitted)(void *arg, long long id);
	/* Cancels job id for principal `by`: a job not yet running is CANCELLED at
	 * once; a running one gets SIGTERM (it checkpoints) and becomes CANCELLED
	 * when its process ends. Returns 0, 1 when the job is already final (the
	 * API answers 409), or -1 with err filled (500). */
	int (*cancel)(void *arg, long long id, const char *by, char *err, size_t errlen);
	/* The job's directory ("<state>/jobs/j-000123") into buf; 0, or -1. */
	int (*job_dir)(void *arg, long long id, char *buf, size_t len);
	void *arg;
};

#endif
