/* service/cluster_internal.h - for service/cluster*.c only: the module's
 * state, and what cluster_slurm.c (Slurm's commands and their output) does
 * for cluster.c (threads, snapshots, hooks). */
#ifndef LARCH_SERVICE_CLUSTER_INTERNAL_H
#define LARCH_SERVICE_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "slurm_name.h"

enum svc_cluster_view { SVC_VIEW_QUEUES, SVC_VIEW_NODES, SVC_VIEWS };

struct svc_cluster_waiter {
	struct api_admin_call *call;
	api_admin_done_fn done;
	void *done_arg;
	struct svc_cluster_waiter *next;
};

/* A view's snapshot; every field under the cluster's lock. */
struct svc_cluster_snapshot {
	char *items;                 /* the last good refresh's JSON array text; NULL: none */
	int64_t items_ms;            /* when it was taken (ms since the epoch) */
	long long tried;             /* monotonic ms the last refresh ended; 0: never, or made
	                                stale by a change */
	char error[API_ADMIN_MESSAGE_MAX];   /* that refresh's failure; "" when it worked */
	int refreshing;              /* a refresh is queued or running */
	int dirty;                   /* a change happened while it runs: its result is old */
	struct svc_cluster_waiter *waiters;  /* served by the refresh running */
	struct svc_cluster_waiter *later;    /* came after a change: served by the next one */
};

/* A worker's task: a view refresh (call NULL) or an action. */
struct svc_cluster_task {
	enum svc_cluster_view view;
	struct api_admin_call *call;
	api_admin_done_fn done;
	void *done_arg;
	struct svc_cluster_task *next;
};

struct svc_cluster {
	struct db *db;                /* borrowed */
	char executor[8];             /* "local" or "slurm" */
	unsigned max_local_jobs;
	int timeout_ms;               /* each Slurm command */
	char instance[SLURM_INSTANCE_LEN + 1];   /* in larch's Slurm job names; "" local */
	char self_user[64];           /* larchd's own Unix user: the jobs' with no unix_user */
	struct api_admin_hooks hooks;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct svc_cluster_task *head, *tail;
	int stopping;
	pthread_t threads[SVC_CLUSTER_THREADS];
	int n_threads;
	struct svc_cluster_snapshot snap[SVC_VIEWS];
};

/* cluster_slurm.c. The view builders return 0 with *items a new JSON array
 * text (malloc'd), or -1 with msg filled. */
int svc_cluster_slurm_queues(struct svc_cluster *c, char **items, char *msg, size_t len);
/* node NULL: every node; else the nodes of that name or hostlist. */
int svc_cluster_slurm_nodes(struct svc_cluster *c, const char *node, char **items, char *msg,
                            size_t len);
/* Carry out a DRAIN/RESUME or a job op: fill call's status, message (and
 * body for the node ops). Return 1 when Slurm's state changed. */
int svc_cluster_slurm_node(struct svc_cluster *c, struct api_admin_call *call);
int svc_cluster_slurm_job(struct svc_cluster *c, struct api_admin_call *call);

/* snprintf for messages that may be cut (vsnprintf: no truncation warnings). */
void svc_cluster_say(char *out, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* cluster.c: the body of a view answer, {"executor": ..., "updated_at":
 * ..., "stale": ..., ["error": ...,] "<key>": items}; a new string or NULL
 * (out of memory). */
char *svc_cluster_view_body(const char *executor, const char *key, const char *items,
                            int64_t at_ms, const char *error);

#endif
