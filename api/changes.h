/* api/changes.h - the feed of job changes behind GET /v1/events.
 *
 * The database calls api_changes_publish after every commit that changed a
 * job (db_set_change_hook); the feed numbers each change (seq, from 1, in
 * commit order) and keeps the last API_CHANGES_RING of them in memory. A
 * dashboard long-polls with the last seq it has seen: the request is
 * answered at once when there is something newer for it, else parked
 * (api_defer) until a change arrives or its deadline passes. One timer
 * thread owns the deadlines, so a thousand parked clients cost no thread
 * and no database or Slurm work each: a change wakes them, and each reads
 * the ring.
 *
 * A change does not wake its waiters at once but API_CHANGES_BATCH_MS
 * later, with what else came meanwhile: a job's submit, QUEUED and RUNNING
 * (milliseconds apart) reach a dashboard in one answer instead of three,
 * which spares larchd two rounds of every dashboard's follow-up GETs.
 *
 * A stream id (the feed's start time) tells a client that larchd restarted
 * and its seq means nothing here any more.
 */
#ifndef LARCH_API_CHANGES_H
#define LARCH_API_CHANGES_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

#define API_CHANGES_RING 4096      /* changes kept; a client further behind reloads */
#define API_CHANGES_BATCH_MS 100   /* from a change to the answers it wakes */
#define API_STREAM_MAX 24

struct api_changes;
struct api_request;

struct api_change {
	uint64_t seq;
	struct db_change c;
};

/* A new feed with its timer thread; NULL when out of memory or threads. */
struct api_changes *api_changes_new(void);
/* Wakes every parked request (they answer at once) and makes later waits
 * answer at once too: call it when the server starts to drain. NULL is a
 * no-op. */
void api_changes_close(struct api_changes *f);
/* Stops the timer thread and frees f; nothing may be parked on it (close
 * it and let the server drain first). Accepts NULL. */
void api_changes_free(struct api_changes *f);

/* The db change hook (db_change_fn): arg is the feed. */
void api_changes_publish(void *arg, const struct db_change *changes, size_t n);

/* The stream id ("<hex>"), NUL-terminated into out (API_STREAM_MAX). */
void api_changes_stream(const struct api_changes *f, char out[API_STREAM_MAX]);

/* The newest seq of the feed (0 before the first change). */
uint64_t api_changes_last(struct api_changes *f);

/* Copies into out[0..max) the changes after seq after that owner may see
 * (owner NULL: every change), oldest first. *last gets the seq read up to:
 * the newest of the feed, or, when out filled up, the last one copied (the
 * reader asks again from there). Returns how many were copied, or -1 when after is not a
 * position of this feed (ahead of it, or older than the ring keeps). */
long api_changes_read(struct api_changes *f, uint64_t after, const char *owner,
                      struct api_change *out, size_t max, uint64_t *last);

/* Parks req (already deferred with api_defer by the caller) until a change
 * owner may see (owner NULL: any change) is published, the feed closes, or
 * deadline_ms (CLOCK_MONOTONIC milliseconds) passes; then api_resume(req).
 * If any change after seq after is already there (the caller read the feed
 * before it), or the feed is closed, req is resumed at once: the caller
 * reads again. Returns 0; -1 when out of memory (req not parked: the caller
 * resumes it). */
int api_changes_wait(struct api_changes *f, struct api_request *req, uint64_t after,
                     const char *owner, int64_t deadline_ms);

/* Whether the feed is closed (the server is draining). */
int api_changes_closed(struct api_changes *f);

/* For /metrics: requests parked now, and requests answered since start. */
void api_changes_stats(struct api_changes *f, unsigned *waiting, uint64_t *served,
                       uint64_t *published);
/* Counts one long-poll answered (events_get calls it once per reply). */
void api_changes_count_served(struct api_changes *f);

/* CLOCK_MONOTONIC in milliseconds. */
int64_t api_changes_now_ms(void);

#endif
