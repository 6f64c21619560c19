/* service/cluster.c - the admin hooks: threads, the views' snapshots, the
 * local executor's views; see cluster.h. Slurm's commands and their output
 * are cluster_slurm.c's. */
#include "cluster.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "api/jobs_common.h"
#include "clock.h"
#include "cluster_internal.h"
#include "db/jobs.h"
#include "identity.h"
#include "log.h"

static const char *const view_keys[SVC_VIEWS] = { "queues", "nodes" };

void svc_cluster_say(char *out, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, len, fmt, ap);
	va_end(ap);
}


char *svc_cluster_view_body(const char *executor, const char *key, const char *items,
                            int64_t at_ms, const char *error)
{
	char at[32];
	api_time_format(at_ms, at);
	char *err = NULL;
	if (error) {
		json_t *s = json_string(error);
		err = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
		json_decref(s);
		if (!err)
			err = strdup("\"(not UTF-8)\"");
		if (!err)
			return NULL;
	}
	char *body = NULL;
	if (asprintf(&body, "{\"executor\":\"%s\",\"updated_at\":\"%s\",\"stale\":%s%s%s,\"%s\":%s}",
	             executor, at, error ? "true" : "false", error ? ",\"error\":" : "",
	             error ? err : "", key, items) < 0)
		body = NULL;
	free(err);
	return body;
}

/* ---- local views ------------------------------------------------------------ */

static void local_view(struct svc_cluster *c, struct api_admin_call *call)
{
	int64_t counts[DB_STATE_COUNT];
	struct db_err err = { 0 };
	if (db_jobs_count_by_state(c->db, counts, &err) != 0) {
		call->status = err.code == DB_BUSY ? 503 : 500;
		svc_cluster_say(call->message, sizeof call->message, "counting jobs: %s", err.text);
		return;
	}
	long long running = counts[DB_STATE_RUNNING];
	long long pending = counts[DB_STATE_PENDING] + counts[DB_STATE_QUEUED] +
	                    counts[DB_STATE_HELD] + counts[DB_STATE_REQUEUED] +
	                    counts[DB_STATE_PREEMPTED];
	long long slots = c->max_local_jobs, alloc = running < slots ? running : slots;
	char host[256] = "localhost";
	if (gethostname(host, sizeof host - 1) != 0)
		snprintf(host, sizeof host, "localhost");
	host[sizeof host - 1] = '\0';
	json_t *cpus = json_pack("{s:I,s:I,s:I,s:I}", "alloc", (json_int_t)alloc,
	                         "idle", (json_int_t)(slots - alloc), "other", (json_int_t)0,
	                         "total", (json_int_t)slots);
	json_t *items;
	if (call->op == API_ADMIN_QUEUES) {
		items = json_pack("[{s:s,s:s,s:b,s:{s:i,s:[s]},s:o,s:n,s:n,s:{s:I,s:I},s:{s:I,s:I}}]",
		                  "name", "local", "state", "up", "default", 1,
		                  "nodes", "count", 1, "names", host, "cpus", cpus,
		                  "max_time", "max_time_s",
		                  "jobs", "pending", (json_int_t)pending, "running", (json_int_t)running,
		                  "larch_jobs", "pending", (json_int_t)pending,
		                  "running", (json_int_t)running);
	} else {
		struct sysinfo si;
		long long total = -1, avail = -1;
		if (sysinfo(&si) == 0) {
			total = (long long)((unsigned long long)si.totalram * si.mem_unit >> 20);
			avail = (long long)((unsigned long long)si.freeram * si.mem_unit >> 20);
		}
		const char *state = running == 0 ? "idle" : running >= slots ? "alloc" : "mixed";
		items = json_pack("[{s:s,s:s,s:n,s:b,s:o,s:{s:o,s:n,s:o},s:[s],s:n}]",
		                  "name", host, "state", state, "slurm_state", "responding", 1,
		                  "cpus", cpus, "memory_mb",
		                  "total", total < 0 ? json_null() : json_integer(total), "alloc",
		                  "free", avail < 0 ? json_null() : json_integer(avail),
		                  "partitions", "local", "reason");
	}
	char *text = items ? json_dumps(items, JSON_COMPACT) : NULL;
	json_decref(items);
	call->body = text ? svc_cluster_view_body("local", view_keys[call->op == API_ADMIN_QUEUES
	                                                               ? SVC_VIEW_QUEUES
	                                                               : SVC_VIEW_NODES],
	                                          text, db_now_ms(), NULL)
	                  : NULL;
	free(text);
	call->status = call->body ? 200 : 500;
	if (!call->body)
		svc_cluster_say(call->message, sizeof call->message, "out of memory");
}

/* ---- the task queue ------------------------------------------------------------ */

/* Queues a task (under the lock); 0, or -1 when out of memory. */
static int push(struct svc_cluster *c, enum svc_cluster_view view, struct api_admin_call *call,
                api_admin_done_fn done, void *done_arg)
{
	struct svc_cluster_task *t = calloc(1, sizeof *t);
	if (!t)
		return -1;
	*t = (struct svc_cluster_task){ .view = view, .call = call, .done = done,
	                                .done_arg = done_arg };
	if (c->tail)
		c->tail->next = t;
	else
		c->head = t;
	c->tail = t;
	pthread_cond_signal(&c->wake);
	return 0;
}

static struct svc_cluster_task *pop(struct svc_cluster *c)
{
	struct svc_cluster_task *t = c->head;
	if (t) {
		c->head = t->next;
		if (!c->head)
			c->tail = NULL;
	}
	return t;
}

/* ---- snapshots ----------------------------------------------------------------- */

/* A view's answer from its snapshot (under the lock). */
static void answer(struct svc_cluster *c, enum svc_cluster_view v, struct api_admin_call *call)
{
	const struct svc_cluster_snapshot *s = &c->snap[v];
	if (!s->items) {
		call->status = 503;
		svc_cluster_say(call->message, sizeof call->message, "slurm is unreachable: %s",
		         s->error[0] ? s->error : "no answer yet");
		return;
	}
	call->body = svc_cluster_view_body(c->executor, view_keys[v], s->items, s->items_ms,
	                                   s->error[0] ? s->error : NULL);
	call->status = call->body ? 200 : 500;
	if (!call->body)
		svc_cluster_say(call->message, sizeof call->message, "out of memory");
}

/* Makes the snapshots stale after a change to the cluster (under the lock):
 * the next reader refreshes; one already waiting on a refresh that began
 * before the change gets the one after. */
static void invalidate(struct svc_cluster *c)
{
	for (int v = 0; v < SVC_VIEWS; v++) {
		c->snap[v].tried = 0;
		if (c->snap[v].refreshing)
			c->snap[v].dirty = 1;
	}
}

static void refresh(struct svc_cluster *c, enum svc_cluster_view v)
{
	char *items = NULL, error[API_ADMIN_MESSAGE_MAX] = "";
	int rc = v == SVC_VIEW_QUEUES ? svc_cluster_slurm_queues(c, &items, error, sizeof error)
	                              : svc_cluster_slurm_nodes(c, NULL, &items, error, sizeof error);
	if (rc != 0)
		svc_log(SVC_LOG_WARN, "GET /v1/%s: %s", view_keys[v], error);

	pthread_mutex_lock(&c->lock);
	struct svc_cluster_snapshot *s = &c->snap[v];
	if (rc == 0) {
		free(s->items);
		s->items = items;
		s->items_ms = db_now_ms();
		s->error[0] = '\0';
	} else {
		svc_cluster_say(s->error, sizeof s->error, "%s", error);
	}
	s->tried = s->dirty ? 0 : svc_mono_ms();
	struct svc_cluster_waiter *served = s->waiters;
	s->waiters = NULL;
	if (s->dirty && s->later && push(c, v, NULL, NULL, NULL) == 0) {
		/* those who came after a change wait for a refresh begun after it */
		s->waiters = s->later;
		s->later = NULL;
	} else {
		struct svc_cluster_waiter **end = &served;
		while (*end)
			end = &(*end)->next;
		*end = s->later;
		s->later = NULL;
		s->refreshing = 0;
	}
	s->dirty = 0;
	for (struct svc_cluster_waiter *w = served; w; w = w->next)
		answer(c, v, w->call);
	pthread_mutex_unlock(&c->lock);

	while (served) {
		struct svc_cluster_waiter *next = served->next;
		served->done(served->done_arg);
		free(served);
		served = next;
	}
}

static void *worker(void *arg)
{
	struct svc_cluster *c = arg;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->head && !c->stopping)
			pthread_cond_wait(&c->wake, &c->lock);
		struct svc_cluster_task *t = pop(c);
		if (!t)
			break;                 /* stopping, nothing left */
		pthread_mutex_unlock(&c->lock);
		if (!t->call) {
			refresh(c, t->view);
		} else {
			int changed = t->call->op == API_ADMIN_DRAIN || t->call->op == API_ADMIN_RESUME
			              ? svc_cluster_slurm_node(c, t->call)
			              : svc_cluster_slurm_job(c, t->call);
			if (changed) {
				pthread_mutex_lock(&c->lock);
				invalidate(c);
				pthread_mutex_unlock(&c->lock);
			}
			if (t->call->status != 200)
				svc_log(SVC_LOG_INFO, "admin %s: %s", t->call->by ? t->call->by : "?",
				        t->call->message);
			t->done(t->done_arg);
		}
		free(t);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- hooks --------------------------------------------------------------------- */

static void out_of_memory(struct api_admin_call *call, api_admin_done_fn done, void *done_arg)
{
	call->status = 500;
	svc_cluster_say(call->message, sizeof call->message, "out of memory");
	done(done_arg);
}

static void hook_view(void *arg, struct api_admin_call *call, api_admin_done_fn done,
                      void *done_arg)
{
	struct svc_cluster *c = arg;
	if (call->op != API_ADMIN_QUEUES && call->op != API_ADMIN_NODES) {
		call->status = 500;
		svc_cluster_say(call->message, sizeof call->message, "not a view");
		done(done_arg);
		return;
	}
	if (strcmp(c->executor, "slurm") != 0) {
		local_view(c, call);
		done(done_arg);
		return;
	}
	enum svc_cluster_view v = call->op == API_ADMIN_QUEUES ? SVC_VIEW_QUEUES : SVC_VIEW_NODES;
	pthread_mutex_lock(&c->lock);
	struct svc_cluster_snapshot *s = &c->snap[v];
	if (!s->refreshing && s->tried && svc_mono_ms() - s->tried < SVC_CLUSTER_MAX_AGE_MS) {
		answer(c, v, call);
		pthread_mutex_unlock(&c->lock);
		done(done_arg);
		return;
	}
	struct svc_cluster_waiter *w = calloc(1, sizeof *w);
	if (!w || (!s->refreshing && push(c, v, NULL, NULL, NULL) != 0)) {
		pthread_mutex_unlock(&c->lock);
		free(w);
		out_of_memory(call, done, done_arg);
		return;
	}
	*w = (struct svc_cluster_waiter){ .call = call, .done = done, .done_arg = done_arg };
	struct svc_cluster_waiter **list = s->refreshing && s->dirty ? &s->later : &s->waiters;
	while (*list)
		list = &(*list)->next;
	*list = w;
	s->refreshing = 1;
	pthread_mutex_unlock(&c->lock);
}

static void hook_action(void *arg, struct api_admin_call *call, api_admin_done_fn done,
                        void *done_arg)
{
	struct svc_cluster *c = arg;
	if (strcmp(c->executor, "slurm") != 0) {
		call->status = 409;
		svc_cluster_say(call->message, sizeof call->message, "the %s executor has no Slurm",
		         c->executor);
		done(done_arg);
		return;
	}
	pthread_mutex_lock(&c->lock);
	int stopping = c->stopping;
	int rc = stopping ? -1 : push(c, SVC_VIEW_QUEUES, call, done, done_arg);
	pthread_mutex_unlock(&c->lock);
	if (stopping) {
		call->status = 503;
		svc_cluster_say(call->message, sizeof call->message, "larchd is stopping");
		done(done_arg);
	} else if (rc != 0) {
		out_of_memory(call, done, done_arg);
	}
}

/* ---- lifecycle ----------------------------------------------------------------- */

struct svc_cluster *svc_cluster_new(struct db *db, const char *executor,
                                    unsigned max_local_jobs, unsigned slurm_timeout_s,
                                    const char *slurm_instance, char *err, size_t errlen)
{
	int slurm = executor && strcmp(executor, "slurm") == 0;
	if (!db || (!slurm && (!executor || strcmp(executor, "local") != 0))) {
		snprintf(err, errlen, "cluster: needs a database and the executor local or slurm");
		return NULL;
	}
	if (slurm && (!slurm_instance || strlen(slurm_instance) != SLURM_INSTANCE_LEN)) {
		snprintf(err, errlen, "cluster: needs the instance id of larch's slurm job names");
		return NULL;
	}
	struct svc_cluster *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->db = db;
	snprintf(c->executor, sizeof c->executor, "%s", executor);
	c->max_local_jobs = max_local_jobs ? max_local_jobs : 1;
	if (slurm) {
		struct svc_unix_id self;
		char why[256];
		if (svc_unix_id_self(&self, why, sizeof why) != 0) {
			snprintf(err, errlen, "cluster: %s", why);
			free(c);
			return NULL;
		}
		snprintf(c->instance, sizeof c->instance, "%s", slurm_instance);
		snprintf(c->self_user, sizeof c->self_user, "%s", self.name);
	}
	unsigned t = slurm_timeout_s && slurm_timeout_s < SVC_CLUSTER_TIMEOUT_CAP_S
	             ? slurm_timeout_s : SVC_CLUSTER_TIMEOUT_CAP_S;
	c->timeout_ms = (int)t * 1000;
	c->hooks = (struct api_admin_hooks){ .executor = slurm ? "slurm" : "local",
	                                     .view = hook_view, .node = hook_action,
	                                     .job = hook_action, .arg = c };
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	for (int i = 0; slurm && i < SVC_CLUSTER_THREADS; i++) {
		int rc = pthread_create(&c->threads[i], NULL, worker, c);
		if (rc != 0) {
			snprintf(err, errlen, "cluster: cannot start a thread: %s", strerror(rc));
			svc_cluster_free(c);
			return NULL;
		}
		c->n_threads++;
	}
	return c;
}

const struct api_admin_hooks *svc_cluster_hooks(struct svc_cluster *c)
{
	return &c->hooks;
}

void svc_cluster_free(struct svc_cluster *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = 1;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < c->n_threads; i++)
		pthread_join(c->threads[i], NULL);
	/* the server has stopped: no request waits on what is left */
	for (int v = 0; v < SVC_VIEWS; v++) {
		struct svc_cluster_waiter *lists[2] = { c->snap[v].waiters, c->snap[v].later };
		for (int k = 0; k < 2; k++)
			while (lists[k]) {
				struct svc_cluster_waiter *next = lists[k]->next;
				free(lists[k]);
				lists[k] = next;
			}
		free(c->snap[v].items);
	}
	while (c->head)
		free(pop(c));
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
