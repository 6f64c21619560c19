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

struct api_exports_hooks;

/* One labelled count for /metrics (api_jobs_hooks.slurm_calls). */
struct api_count {
	const char *label;             /* static */
	unsigned long long value;
};

/* The Slurm executor's poll cycles for /metrics (api_jobs_hooks.slurm_polls):
 * a histogram of their wall time and their CPU time. */
#define API_POLL_BUCKETS_MAX 16

struct api_poll_times {
	size_t n;                                    /* buckets used */
	double le[API_POLL_BUCKETS_MAX];             /* upper bounds, seconds, ascending */
	unsigned long long count_le[API_POLL_BUCKETS_MAX];   /* cycles of at most le[i] */
	unsigned long long count;
	double wall_s, cpu_s;                        /* sums */
};

/* A submit's preflight (service/preflight.h): who the job will run as, and
 * the look at its input files that no HTTP thread may take. */
struct api_preflight {
	const char *user;              /* the submitter (a larch user) */
	int admin;                     /* 1: the submitter's role is admin */
	const char *spec;              /* the validated spec, canonical JSON */
};

#define API_PREFLIGHT_TEXT 1024

struct api_preflight_result {
	int status;                    /* 0: go on; else the status to answer (400, 403, 503) */
	char field[128];               /* status 400: the spec field at fault */
	char message[API_PREFLIGHT_TEXT];   /* status != 0: why; else a note, or "" */
	char unix_user[33];            /* who the job runs as; "" = larchd's own user */
	char *shape;                   /* the data's shape as JSON text (trainer/data.h), or
	                                  NULL when it was not learned; owned by the preflight
	                                  for the duration of the callback only */
};

/* Called once per preflight, on a preflight thread: quick, no db calls. */
typedef void (*api_preflight_done_fn)(void *arg, const struct api_preflight_result *res);

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
	/* Optional. Starts a submit's preflight; done(done_arg, result) is called
	 * exactly once, later, on another thread. Returns 0; or -1 when it was not
	 * started (larchd stopping, too many waiting: answered 503), -2 when this
	 * user has too many waiting (429); then done is never called. in is
	 * borrowed for the call. */
	int (*preflight)(void *arg, const struct api_preflight *in, api_preflight_done_fn done,
	                 void *done_arg);
	void *preflight_arg;
	/* Optional. The executor's health for /healthz: 1 ok, 0 degraded (detail
	 * says why). */
	int (*health)(void *arg, char *detail, size_t len);
	/* Optional. The Slurm commands larchd has run, by command, for /metrics
	 * (larch_slurm_calls_total): fills at most max, returns how many. */
	size_t (*slurm_calls)(void *arg, struct api_count *out, size_t max);
	/* Optional. Exports of checkpoints (api/exports_hooks.h); NULL: the
	 * export endpoints answer 503. */
	const struct api_exports_hooks *exports;
	/* Optional. The Slurm executor's poll cycles so far, for /metrics
	 * (larch_slurm_poll_seconds); returns 0 when there is no Slurm executor
	 * (nothing written), else 1. */
	int (*slurm_polls)(void *arg, struct api_poll_times *out);
	const char *executor;          /* "local" or "slurm": the new jobs' executor */
	unsigned compare_max_jobs;     /* GET /v1/metrics: jobs per request (0: its default) */
	void *arg;
};

#endif
