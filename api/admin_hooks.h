/* api/admin_hooks.h - what the admin endpoints (api/admin_*.c) ask of the
 * service: views of the cluster and the Slurm commands behind hold,
 * release, requeue, job updates, drain and resume.
 *
 * The endpoints decide and record everything in the database themselves
 * (the job's transition, the audit entry); the service only knows how to
 * talk to the executor's world. Slurm's commands may take seconds (with
 * slurmctld down, ~9 s each before they fail), so every hook is
 * asynchronous: the handler parks its request (api_defer), the service
 * carries the call out on a thread of its own, fills in the result and
 * calls done(done_arg) exactly once (which resumes the request). done may
 * be called before the hook returns (an answer from memory), never twice.
 *
 * larchd fills these in (service/cluster.c). Keeping them here keeps the
 * dependency one way: api/ never includes service/.
 */
#ifndef LARCH_API_ADMIN_HOOKS_H
#define LARCH_API_ADMIN_HOOKS_H

#include <stddef.h>

enum api_admin_op {
	API_ADMIN_QUEUES,        /* GET /v1/queues: body = the queues object */
	API_ADMIN_NODES,         /* GET /v1/nodes: body = the nodes object */
	API_ADMIN_DRAIN,         /* node, reason: body = the nodes object of node */
	API_ADMIN_RESUME,        /* node: body = the nodes object of node */
	API_ADMIN_HOLD,          /* slurm_job_id: scontrol hold (a job Slurm has pending) */
	API_ADMIN_RELEASE,       /* slurm_job_id: scontrol release */
	API_ADMIN_REQUEUE,       /* slurm_job_id: scontrol requeue */
	API_ADMIN_UPDATE,        /* slurm_job_id, update: scontrol update JobId=... */
};

/* PATCH /v1/jobs/{id}: what changes (validated by the endpoint). */
struct api_admin_update {
	int has_priority;
	long long priority;      /* 1 .. 4294967294 */
	int has_nice;
	long long nice;          /* -2147483645 .. 2147483645 */
	long time_limit_s;       /* 0 = unchanged */
	const char *partition;   /* NULL = unchanged */
};

#define API_ADMIN_MESSAGE_MAX 512

/* One call: the handler fills the inputs (strings borrowed until done runs)
 * and keeps the struct alive until then; the service fills the outputs. */
struct api_admin_call {
	enum api_admin_op op;
	const char *by;                  /* the admin's user name */
	const char *node;                /* DRAIN, RESUME: a validated node name */
	const char *reason;              /* DRAIN: validated */
	const char *slurm_job_id;        /* job ops: the job's Slurm id */
	/* job ops: the larch job whose Slurm job that id must still be (Slurm
	 * gives ids out again): the service checks its name and user first */
	long long job_id;
	long long sweep;                 /* its sweep, 0: none (else an array task) */
	long long sweep_index;           /* its index in the sweep: the array task */
	const char *unix_user;           /* the Unix user it runs as; NULL or "": larchd's */
	struct api_admin_update update;  /* UPDATE */

	/* out: status 200 when it was done, else the HTTP status that says why
	 * not: 400 (Slurm refused a value), 404 (no such node), 409 (not in a
	 * state that allows it, or the Slurm id is another job's now), 503 (Slurm unreachable or too slow), 500 */
	unsigned status;
	char *body;                      /* 200 of the views, drain, resume: JSON object text,
	                                    malloc'd; the handler frees it */
	char message[API_ADMIN_MESSAGE_MAX];   /* not 200: why (lower case); 200: what
	                                          was run ("scontrol hold 12"), may be "" */
	int partial;                     /* not 200, but Slurm made part of the change (UPDATE:
	                                    all of it but nice, which Slurm kept) */
};

typedef void (*api_admin_done_fn)(void *done_arg);

struct api_admin_hooks {
	/* The executor jobs run on: "local" or "slurm" (static string). With
	 * "local", there are no Slurm nodes or Slurm jobs: view answers at once
	 * from the database and this host, node and job are never called. */
	const char *executor;
	/* API_ADMIN_QUEUES, API_ADMIN_NODES: served from a snapshot at most a
	 * couple of seconds old, refreshed by one call at a time whoever asks. */
	void (*view)(void *arg, struct api_admin_call *call, api_admin_done_fn done,
	             void *done_arg);
	/* API_ADMIN_DRAIN, API_ADMIN_RESUME. */
	void (*node)(void *arg, struct api_admin_call *call, api_admin_done_fn done,
	             void *done_arg);
	/* API_ADMIN_HOLD, _RELEASE, _REQUEUE, _UPDATE on a job Slurm has. */
	void (*job)(void *arg, struct api_admin_call *call, api_admin_done_fn done,
	            void *done_arg);
	void *arg;
};

#endif
