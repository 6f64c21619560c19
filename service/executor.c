/* service/executor.c - what every executor shares: state names, the event
 * queue and the dispatch through struct executor_ops (executor.h). */
#include "executor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

const char *exec_state_name(enum exec_state s)
{
	static const char *const names[] = {
		[EXEC_QUEUED] = "QUEUED", [EXEC_RUNNING] = "RUNNING", [EXEC_COMPLETED] = "COMPLETED",
		[EXEC_FAILED] = "FAILED", [EXEC_CANCELLED] = "CANCELLED", [EXEC_TIMEOUT] = "TIMEOUT",
		[EXEC_HELD] = "HELD", [EXEC_REQUEUED] = "REQUEUED", [EXEC_PREEMPTED] = "PREEMPTED",
		[EXEC_LOST] = "LOST",
	};
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

int exec_errno_transient(int e)
{
	return e == ENOSPC || e == EDQUOT || e == ENOMEM || e == EAGAIN || e == EMFILE ||
	       e == ENFILE || e == EINTR || e == ETXTBSY;
}

int exec_state_final(enum exec_state s)
{
	return s == EXEC_COMPLETED || s == EXEC_FAILED || s == EXEC_CANCELLED || s == EXEC_TIMEOUT;
}

int exec_job_copy(struct exec_job *dst, const struct exec_job *src)
{
	*dst = *src;
	dst->dir = src->dir ? strdup(src->dir) : NULL;
	dst->init_path = src->init_path ? strdup(src->init_path) : NULL;
	if ((src->dir && !dst->dir) || (src->init_path && !dst->init_path)) {
		free(dst->dir);
		free(dst->init_path);
		dst->dir = dst->init_path = NULL;
		return -1;
	}
	return 0;
}

void exec_job_release(struct exec_job *job)
{
	free(job->dir);
	free(job->init_path);
	job->dir = job->init_path = NULL;
	explicit_bzero(job->token, sizeof job->token);
}

struct exec_event *exec_events_add(struct exec_events *q, long long id, enum exec_state state,
                                   int exit_code)
{
	if (q->n == q->cap) {
		int cap = q->cap ? q->cap * 2 : 16;
		struct exec_event *grown = realloc(q->ev, sizeof *grown * (size_t)cap);
		if (!grown) {
			fprintf(stderr, "larchd: executor: out of memory for an event of job %lld\n", id);
			return NULL;
		}
		q->ev = grown;
		q->cap = cap;
	}
	struct exec_event *ev = &q->ev[q->n++];
	memset(ev, 0, sizeof *ev);
	ev->id = id;
	ev->state = state;
	ev->exit_code = exit_code;
	ev->time_ms = svc_wall_ms();
	return ev;
}

void exec_events_deliver(struct exec_events *taken, exec_event_fn fn, void *ctx)
{
	for (int i = 0; i < taken->n; i++)
		fn(ctx, &taken->ev[i]);
	exec_events_release(taken);
}

void exec_events_release(struct exec_events *q)
{
	free(q->ev);
	*q = (struct exec_events){ 0 };
}

int exec_submit(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	return ex->ops->submit(ex, job, err, errlen);
}

int exec_adopt(struct executor *ex, const struct exec_job *job, char *err, size_t errlen)
{
	return ex->ops->adopt(ex, job, err, errlen);
}

int exec_cancel(struct executor *ex, long long id, char *err, size_t errlen)
{
	return ex->ops->cancel(ex, id, err, errlen);
}

void exec_poll(struct executor *ex, exec_event_fn fn, void *ctx)
{
	ex->ops->poll(ex, fn, ctx);
}

int exec_count(struct executor *ex)
{
	return ex->ops->count(ex);
}

int exec_has(struct executor *ex, long long id)
{
	return ex->ops->has ? ex->ops->has(ex, id) : 0;
}

int exec_health(struct executor *ex, char *detail, size_t len)
{
	if (ex->ops->health)
		return ex->ops->health(ex, detail, len);
	if (len)
		snprintf(detail, len, "ok");
	return 1;
}

int exec_host_memory(struct executor *ex, const char *partition, double *bytes)
{
	return ex->ops->host_memory ? ex->ops->host_memory(ex, partition, bytes) : -1;
}

int exec_partition_ok(struct executor *ex, const char *partition, char *err, size_t errlen)
{
	return ex->ops->partition_ok ? ex->ops->partition_ok(ex, partition, err, errlen) : 1;
}

int exec_hold(struct executor *ex, long long id, char *err, size_t errlen)
{
	if (!ex->ops->hold) {
		snprintf(err, errlen, "the %s executor cannot hold a job", ex->ops->name);
		return -1;
	}
	return ex->ops->hold(ex, id, err, errlen);
}

int exec_submit_sweep(struct executor *ex, const struct exec_job *jobs, int n, int *taken,
                      char *err, size_t errlen)
{
	*taken = 0;
	if (ex->ops->submit_sweep) {
		if (ex->ops->submit_sweep(ex, jobs, n, err, errlen) != 0)
			return -1;
		*taken = n;
		return 0;
	}
	for (; *taken < n; ++*taken)
		if (ex->ops->submit(ex, &jobs[*taken], err, errlen) != 0)
			return -1;
	return 0;
}

int exec_cancel_sweep(struct executor *ex, long long sweep)
{
	return ex->ops->cancel_sweep ? ex->ops->cancel_sweep(ex, sweep) : 0;
}

void exec_free(struct executor *ex)
{
	if (ex)
		ex->ops->free(ex);
}
