/* api/changes.c - the job change feed; see changes.h. */
#include "changes.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "request.h"

struct waiter {
	struct api_request *req;
	uint64_t after;
	int64_t deadline_ms;              /* resumed then: its timeout, or a change's batch end */
	char owner[72];                   /* whose changes wake it; "" for every change */
	struct waiter *next;
};

struct api_changes {
	pthread_mutex_t lock;
	pthread_cond_t wake;              /* the timer thread: a new waiter, a change, close */
	pthread_t thread;
	struct api_change ring[API_CHANGES_RING];
	uint64_t last;                    /* the newest seq; ring[last % RING] */
	struct waiter *waiters;
	unsigned n_waiting;
	int closed, stop;
	uint64_t served, published;
	char stream[API_STREAM_MAX];
};

int64_t api_changes_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether one of changes[0..n) is w's to see. */
static int sees(const struct waiter *w, const struct db_change *changes, size_t n)
{
	if (!w->owner[0])
		return n > 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(changes[i].owner, w->owner) == 0)
			return 1;
	return 0;
}

/* Takes the waiters that are due off the list: every one when every is
 * set, else those whose deadline is at or before now. f->lock held. */
static struct waiter *take_due(struct api_changes *f, int every, int64_t now)
{
	struct waiter *due = NULL, **pp = &f->waiters;
	while (*pp) {
		struct waiter *w = *pp;
		if (every || w->deadline_ms <= now) {
			*pp = w->next;
			w->next = due;
			due = w;
			f->n_waiting--;
		} else {
			pp = &w->next;
		}
	}
	return due;
}

/* Resumes the taken waiters, outside the lock (api_resume takes MHD's). */
static void resume_all(struct waiter *due)
{
	for (struct waiter *w = due, *next; w; w = next) {
		next = w->next;
		api_resume(w->req);
		free(w);
	}
}

/* The timer thread: resumes waiters whose deadline passed. Changes and
 * close resume theirs where they happen. */
static void *timer(void *arg)
{
	struct api_changes *f = arg;
	pthread_mutex_lock(&f->lock);
	while (!f->stop) {
		int64_t now = api_changes_now_ms(), next = now + 60 * 1000;
		for (struct waiter *w = f->waiters; w; w = w->next)
			if (w->deadline_ms < next)
				next = w->deadline_ms;
		if (next > now) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			int64_t ns = ts.tv_nsec + (next - now) % 1000 * 1000000;
			ts.tv_sec += (next - now) / 1000 + ns / 1000000000;
			ts.tv_nsec = ns % 1000000000;
			pthread_cond_timedwait(&f->wake, &f->lock, &ts);
			continue;
		}
		struct waiter *due = take_due(f, f->closed, now);
		pthread_mutex_unlock(&f->lock);
		resume_all(due);
		pthread_mutex_lock(&f->lock);
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

struct api_changes *api_changes_new(void)
{
	struct api_changes *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->wake, &ca);
	pthread_condattr_destroy(&ca);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(f->stream, sizeof f->stream, "%llx",
	         (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000);
	if (pthread_create(&f->thread, NULL, timer, f) != 0) {
		pthread_cond_destroy(&f->wake);
		pthread_mutex_destroy(&f->lock);
		free(f);
		return NULL;
	}
	return f;
}

void api_changes_close(struct api_changes *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	f->closed = 1;
	struct waiter *due = take_due(f, 1, 0);
	pthread_mutex_unlock(&f->lock);
	resume_all(due);
}

void api_changes_free(struct api_changes *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	f->stop = 1;
	f->closed = 1;
	struct waiter *due = take_due(f, 1, 0);
	pthread_cond_signal(&f->wake);
	pthread_mutex_unlock(&f->lock);
	resume_all(due);                  /* none, when the caller closed and drained first */
	pthread_join(f->thread, NULL);
	pthread_cond_destroy(&f->wake);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void api_changes_publish(void *arg, const struct db_change *changes, size_t n)
{
	struct api_changes *f = arg;
	if (!n)
		return;
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < n; i++) {
		f->last++;
		struct api_change *slot = &f->ring[f->last % API_CHANGES_RING];
		slot->seq = f->last;
		slot->c = changes[i];
	}
	f->published += n;
	/* the waiters that see a change answer at the end of its batch, with
	 * whatever else the batch brought */
	int64_t at = api_changes_now_ms() + API_CHANGES_BATCH_MS;
	int sooner = 0;
	for (struct waiter *w = f->waiters; w; w = w->next)
		if (w->deadline_ms > at && sees(w, changes, n)) {
			w->deadline_ms = at;
			sooner = 1;
		}
	if (sooner)
		pthread_cond_signal(&f->wake);
	pthread_mutex_unlock(&f->lock);
}

void api_changes_stream(const struct api_changes *f, char out[API_STREAM_MAX])
{
	memcpy(out, f->stream, API_STREAM_MAX);
}

uint64_t api_changes_last(struct api_changes *f)
{
	pthread_mutex_lock(&f->lock);
	uint64_t last = f->last;
	pthread_mutex_unlock(&f->lock);
	return last;
}

long api_changes_read(struct api_changes *f, uint64_t after, const char *owner,
                      struct api_change *out, size_t max, uint64_t *last)
{
	pthread_mutex_lock(&f->lock);
	*last = f->last;
	uint64_t oldest = f->last > API_CHANGES_RING ? f->last - API_CHANGES_RING + 1 : 1;
	if (after > f->last || after + 1 < oldest) {
		pthread_mutex_unlock(&f->lock);
		return -1;
	}
	size_t n = 0;
	uint64_t s;
	for (s = after + 1; s <= f->last && n < max; s++) {
		const struct api_change *ch = &f->ring[s % API_CHANGES_RING];
		if (owner && strcmp(owner, ch->c.owner) != 0)
			continue;
		out[n++] = *ch;
	}
	if (n == max && max > 0)
		*last = s - 1;               /* full: the reader goes on from here */
	pthread_mutex_unlock(&f->lock);
	return (long)n;
}

int api_changes_wait(struct api_changes *f, struct api_request *req, uint64_t after,
                     const char *owner, int64_t deadline_ms)
{
	struct waiter *w = malloc(sizeof *w);
	if (!w)
		return -1;
	*w = (struct waiter){ .req = req, .after = after, .deadline_ms = deadline_ms };
	snprintf(w->owner, sizeof w->owner, "%s", owner ? owner : "");
	pthread_mutex_lock(&f->lock);
	if (f->closed || after < f->last || deadline_ms <= api_changes_now_ms()) {
		pthread_mutex_unlock(&f->lock);
		free(w);
		api_resume(req);
		return 0;
	}
	w->next = f->waiters;
	f->waiters = w;
	f->n_waiting++;
	pthread_cond_signal(&f->wake);    /* its deadline may be the nearest */
	pthread_mutex_unlock(&f->lock);
	return 0;
}

int api_changes_closed(struct api_changes *f)
{
	pthread_mutex_lock(&f->lock);
	int closed = f->closed;
	pthread_mutex_unlock(&f->lock);
	return closed;
}

void api_changes_stats(struct api_changes *f, unsigned *waiting, uint64_t *served,
                       uint64_t *published)
{
	pthread_mutex_lock(&f->lock);
	*waiting = f->n_waiting;
	*served = f->served;
	*published = f->published;
	pthread_mutex_unlock(&f->lock);
}

void api_changes_count_served(struct api_changes *f)
{
	pthread_mutex_lock(&f->lock);
	f->served++;
	pthread_mutex_unlock(&f->lock);
}
