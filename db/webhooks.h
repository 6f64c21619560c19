/* db/webhooks.h - webhooks: users' URLs for job and sweep events, and the
 * durable outbox of their deliveries.
 *
 * A hook id is the row id, shown as "wh-%06lld"; an event "ev-%06lld"; a
 * delivery "d-%06lld". The outbox is filled by a trigger on job_events
 * (db/migrate.c, step 9) inside the transaction that records the job's
 * change, so an event is never lost to a crash between the change and its
 * delivery: larchd's delivery thread (service/webhooks.c) reads what is due,
 * sends it, and records each attempt. A delivery is pending until an
 * attempt gets a 2xx (delivered) or its sender gives up (failed).
 *
 * Ownership: inputs are borrowed for the call. Outputs own their strings:
 * release them with the matching _release / _free (which accept zeroed or
 * NULL values).
 */
#ifndef LARCH_DB_WEBHOOKS_H
#define LARCH_DB_WEBHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

#define DB_WEBHOOK_ID_MAX 24
void db_webhook_id_format(int64_t id, char out[DB_WEBHOOK_ID_MAX]);
/* "wh-" and 1 to 18 digits with a value > 0; 0 or DB_INVALID. */
int db_webhook_id_parse(const char *s, int64_t *id);

struct db_webhook_new {
	const char *owner;           /* required; must exist in users */
	const char *url;             /* required; checked by the caller */
	const char *events;          /* required: JSON array of event types, checked by the caller */
	const char *secret;          /* required, 1..256 bytes */
	int64_t time_ms;             /* 0 = now */
};

/* Stores a hook unless its owner has max_per_user already (DB_CONFLICT,
 * nothing stored). *id gets the new hook's id. */
int db_webhooks_create(struct db *db, const struct db_webhook_new *in, int max_per_user,
                       int64_t *id, struct db_err *err);

struct db_webhook {
	int64_t id;
	char *owner, *url;
	char *events;                /* JSON array text */
	int64_t created_ms;
	int64_t pending, delivered, failed;   /* its deliveries by state */
};
void db_webhook_release(struct db_webhook *w);

/* One hook; owner NULL: any (admins), else another user's is DB_NOT_FOUND. */
int db_webhooks_get(struct db *db, int64_t id, const char *owner, struct db_webhook *out,
                    struct db_err *err);
/* Every hook of owner (NULL: everyone's), newest first, at most limit. */
int db_webhooks_list(struct db *db, const char *owner, int limit, struct db_webhook **out,
                     size_t *n, struct db_err *err);
void db_webhooks_free(struct db_webhook *list, size_t n);
/* Deletes the hook and its deliveries (pending ones are never sent). */
int db_webhooks_delete(struct db *db, int64_t id, const char *owner, struct db_err *err);

struct db_webhook_attempt {
	int n;                       /* 1, 2, ... */
	int64_t time_ms;
	int status;                  /* the HTTP status; 0: no answer */
	char *error;                 /* NULL: delivered */
	int64_t duration_ms;
};

struct db_webhook_delivery {
	int64_t id, event, job, sweep;   /* sweep 0: a job event */
	char *type;                  /* "job.completed" */
	char *state;                 /* "pending", "delivered" or "failed" */
	int64_t event_ms, next_ms;   /* next_ms: the next attempt (pending only) */
	struct db_webhook_attempt *attempts;   /* oldest first */
	size_t n_attempts;
};
void db_webhook_deliveries_free(struct db_webhook_delivery *list, size_t n);

/* The hook's deliveries (owner as in db_webhooks_get), newest first, at most
 * limit, each with its attempts. */
int db_webhooks_deliveries(struct db *db, int64_t hook, const char *owner, int limit,
                           struct db_webhook_delivery **out, size_t *n, struct db_err *err);

/* ---- the sender's side (service/webhooks.c) ---------------------------------- */

struct db_webhook_due {
	int64_t delivery, hook, event, job, sweep;
	char *type, *url, *secret;
	char *body;                  /* NULL until the first attempt fixed it */
	int64_t event_ms, created_ms;
	int attempts;                /* made so far */
	char *owner;                 /* the hook's */
};
void db_webhook_due_free(struct db_webhook_due *list, size_t n);

/* Pending deliveries whose next attempt is at or before now_ms, the
 * earliest first, at most max, leaving out the hooks of the users named in
 * skip_owners (a JSON array of names; NULL: none left out). *next_ms gets
 * the earliest next attempt of those not due (0: none pending). */
int db_webhooks_due(struct db *db, int64_t now_ms, int max, const char *skip_owners,
                    struct db_webhook_due **out, size_t *n, int64_t *next_ms,
                    struct db_err *err);
/* Fixes the event's body unless it has one already; *stored gets a new copy
 * of the body the event has now (the one to send). */
int db_webhooks_set_body(struct db *db, int64_t event, const char *body, char **stored,
                         struct db_err *err);
/* Records an attempt (a->error NULL: delivered) and the delivery's new
 * state: delivered, pending until next_ms, or (next_ms 0) failed. A
 * delivery deleted meanwhile (its hook deleted) is left alone. */
int db_webhooks_attempt(struct db *db, int64_t delivery, const struct db_webhook_attempt *a,
                        int64_t next_ms, struct db_err *err);

#endif
