/* db/webhooks.c - webhooks and their outbox; see webhooks.h. */
#include "db/webhooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* ---- ids ---------------------------------------------------------------------- */

void db_webhook_id_format(int64_t id, char out[DB_WEBHOOK_ID_MAX])
{
	db_id_format_s("wh", id, out, DB_WEBHOOK_ID_MAX);
}

int db_webhook_id_parse(const char *s, int64_t *id)
{
	return db_id_parse_s("wh", s, id);
}

/* ---- create, delete ------------------------------------------------------------ */

static const char sql_user[] = "SELECT 1 FROM users WHERE name = ?1";
static const char sql_count[] = "SELECT count(*) FROM webhooks WHERE owner = ?1";
static const char sql_insert[] =
	"INSERT INTO webhooks (owner, url, events, secret, created) VALUES (?1, ?2, ?3, ?4, ?5)";

struct create_arg {
	const struct db_webhook_new *in;
	int max;
	int64_t *id;
};

static int create_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct create_arg *a = arg;
	const struct db_webhook_new *in = a->in;
	sqlite3_stmt *st = DB_STMT(c, sql_user, "create webhook", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	int rc = DB_SQL(c, sqlite3_step(st), "create webhook", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_INVALID, "create webhook: no user %s", in->owner);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	if (!(st = DB_STMT(c, sql_count, "create webhook: count", err)))
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	if (DB_SQL(c, sqlite3_step(st), "create webhook: count", err) != SQLITE_ROW)
		return DB_RC(err);
	if (sqlite3_column_int64(st, 0) >= a->max)
		return DB_FAIL(err, DB_CONFLICT, "create webhook: %s has %d webhooks already",
		               in->owner, a->max);
	if (!(st = DB_STMT(c, sql_insert, "create webhook", err)))
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	db_bind_text(st, 2, in->url);
	db_bind_text(st, 3, in->events);
	db_bind_text(st, 4, in->secret);
	sqlite3_bind_int64(st, 5, in->time_ms ? in->time_ms : db_now_ms());
	if (DB_STEP_DONE(c, st, "create webhook", err))
		return DB_RC(err);
	*a->id = sqlite3_last_insert_rowid(c->h);
	return 0;
}

int db_webhooks_create(struct db *db, const struct db_webhook_new *in, int max_per_user,
                       int64_t *id, struct db_err *err)
{
	if (!in || !in->owner || !in->url || !in->events || !in->secret || !id)
		return DB_FAIL(err, DB_INVALID, "create webhook: owner, url, events and secret are "
		               "required");
	struct create_arg a = { in, max_per_user, id };
	return db_txn(db, create_fn, &a, err);
}

static const char sql_delete[] =
	"DELETE FROM webhooks WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";

struct delete_arg {
	int64_t id;
	const char *owner;
};

static int delete_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct delete_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_delete, "delete webhook", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	db_bind_text(st, 2, a->owner);
	if (DB_STEP_DONE(c, st, "delete webhook", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0)
		return DB_FAIL(err, DB_NOT_FOUND, "delete webhook: no webhook %lld", (long long)a->id);
	return 0;
}

int db_webhooks_delete(struct db *db, int64_t id, const char *owner, struct db_err *err)
{
	struct delete_arg a = { id, owner };
	return db_txn(db, delete_fn, &a, err);
}

/* ---- reading hooks -------------------------------------------------------------- */

#define HOOK_COLUMNS "w.id, w.owner, w.url, w.events, w.created, " \
	"(SELECT count(*) FROM webhook_deliveries WHERE hook = w.id AND state = 'pending'), " \
	"(SELECT count(*) FROM webhook_deliveries WHERE hook = w.id AND state = 'delivered'), " \
	"(SELECT count(*) FROM webhook_deliveries WHERE hook = w.id AND state = 'failed')"

static const char sql_get[] =
	"SELECT " HOOK_COLUMNS " FROM webhooks AS w WHERE w.id = ?1 AND (?2 IS NULL OR w.owner = ?2)";
static const char sql_list[] =
	"SELECT " HOOK_COLUMNS " FROM webhooks AS w WHERE (?1 IS NULL OR w.owner = ?1) "
	"ORDER BY w.id DESC LIMIT ?2";

void db_webhook_release(struct db_webhook *w)
{
	if (!w)
		return;
	free(w->owner);
	free(w->url);
	free(w->events);
	memset(w, 0, sizeof *w);
}

void db_webhooks_free(struct db_webhook *list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++)
		db_webhook_release(&list[i]);
	free(list);
}

static int read_hook(sqlite3_stmt *st, struct db_webhook *w, struct db_err *err)
{
	int oom = 0;
	memset(w, 0, sizeof *w);
	w->id = sqlite3_column_int64(st, 0);
	w->owner = db_column_strdup(st, 1, &oom);
	w->url = db_column_strdup(st, 2, &oom);
	w->events = db_column_strdup(st, 3, &oom);
	w->created_ms = sqlite3_column_int64(st, 4);
	w->pending = sqlite3_column_int64(st, 5);
	w->delivered = sqlite3_column_int64(st, 6);
	w->failed = sqlite3_column_int64(st, 7);
	if (oom) {
		db_webhook_release(w);
		return DB_FAIL(err, DB_ERROR, "read webhook: out of memory");
	}
	return 0;
}

struct get_arg {
	int64_t id;
	const char *owner;
	struct db_webhook *out;
};

static int get_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct get_arg *a = arg;
	db_webhook_release(a->out);
	sqlite3_stmt *st = DB_STMT(c, sql_get, "get webhook", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	db_bind_text(st, 2, a->owner);
	int rc = DB_SQL(c, sqlite3_step(st), "get webhook", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "get webhook: no webhook %lld", (long long)a->id);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	return read_hook(st, a->out, err);
}

int db_webhooks_get(struct db *db, int64_t id, const char *owner, struct db_webhook *out,
                    struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct get_arg a = { id, owner, out };
	return db_read(db, get_fn, &a, err);
}

struct list_arg {
	const char *owner;
	int limit;
	struct db_webhook **out;
	size_t *n;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_webhooks_free(*a->out, *a->n);
	*a->out = NULL;
	*a->n = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_list, "list webhooks", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->owner);
	sqlite3_bind_int(st, 2, a->limit);
	struct db_webhook *list = calloc((size_t)a->limit, sizeof *list);
	if (!list)
		return DB_FAIL(err, DB_ERROR, "list webhooks: out of memory");
	*a->out = list;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list webhooks", err)) == SQLITE_ROW &&
	       *a->n < (size_t)a->limit) {
		if (read_hook(st, &list[*a->n], err))
			return DB_RC(err);
		(*a->n)++;
	}
	return DB_SQL_OK(rc) ? 0 : DB_RC(err);
}

int db_webhooks_list(struct db *db, const char *owner, int limit, struct db_webhook **out,
                     size_t *n, struct db_err *err)
{
	*out = NULL;
	*n = 0;
	if (limit < 1)
		limit = 1;
	struct list_arg a = { owner, limit, out, n };
	int rc = db_read(db, list_fn, &a, err);
	if (rc) {
		db_webhooks_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- deliveries ------------------------------------------------------------------ */

static const char sql_deliveries[] =
	"SELECT d.id, d.event, e.job, coalesce(e.sweep, 0), e.type, d.state, e.time, "
	"d.next_attempt FROM webhook_deliveries AS d JOIN webhook_events AS e ON e.id = d.event "
	"WHERE d.hook = ?1 ORDER BY d.id DESC LIMIT ?2";
static const char sql_attempts[] =
	"SELECT n, time, status, error, duration_ms FROM webhook_attempts WHERE delivery = ?1 "
	"ORDER BY n";

void db_webhook_deliveries_free(struct db_webhook_delivery *list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++) {
		free(list[i].type);
		free(list[i].state);
		for (size_t j = 0; j < list[i].n_attempts; j++)
			free(list[i].attempts[j].error);
		free(list[i].attempts);
	}
	free(list);
}

struct deliveries_arg {
	int64_t hook;
	const char *owner;
	int limit;
	struct db_webhook_delivery **out;
	size_t *n;
};

static int read_attempts(struct db_conn *c, struct db_webhook_delivery *d, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_attempts, "webhook attempts", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, d->id);
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "webhook attempts", err)) == SQLITE_ROW) {
		if (d->n_attempts == cap) {
			cap = cap ? 2 * cap : 4;
			struct db_webhook_attempt *grown = realloc(d->attempts, cap * sizeof *grown);
			if (!grown)
				return DB_FAIL(err, DB_ERROR, "webhook attempts: out of memory");
			d->attempts = grown;
		}
		struct db_webhook_attempt *a = &d->attempts[d->n_attempts];
		int oom = 0;
		a->n = sqlite3_column_int(st, 0);
		a->time_ms = sqlite3_column_int64(st, 1);
		a->status = sqlite3_column_int(st, 2);
		a->error = db_column_strdup(st, 3, &oom);
		a->duration_ms = sqlite3_column_int64(st, 4);
		d->n_attempts++;
		if (oom)
			return DB_FAIL(err, DB_ERROR, "webhook attempts: out of memory");
	}
	return DB_SQL_OK(rc) ? 0 : DB_RC(err);
}

static int deliveries_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct deliveries_arg *a = arg;
	db_webhook_deliveries_free(*a->out, *a->n);
	*a->out = NULL;
	*a->n = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_get, "webhook deliveries", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->hook);
	db_bind_text(st, 2, a->owner);
	int rc = DB_SQL(c, sqlite3_step(st), "webhook deliveries", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "webhook deliveries: no webhook %lld",
		               (long long)a->hook);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	sqlite3_reset(st);
	struct db_webhook_delivery *list = calloc((size_t)a->limit, sizeof *list);
	if (!list)
		return DB_FAIL(err, DB_ERROR, "webhook deliveries: out of memory");
	*a->out = list;
	if (!(st = DB_STMT(c, sql_deliveries, "webhook deliveries", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->hook);
	sqlite3_bind_int(st, 2, a->limit);
	while ((rc = DB_SQL(c, sqlite3_step(st), "webhook deliveries", err)) == SQLITE_ROW &&
	       *a->n < (size_t)a->limit) {
		struct db_webhook_delivery *d = &list[(*a->n)++];
		int oom = 0;
		d->id = sqlite3_column_int64(st, 0);
		d->event = sqlite3_column_int64(st, 1);
		d->job = sqlite3_column_int64(st, 2);
		d->sweep = sqlite3_column_int64(st, 3);
		d->type = db_column_strdup(st, 4, &oom);
		d->state = db_column_strdup(st, 5, &oom);
		d->event_ms = sqlite3_column_int64(st, 6);
		d->next_ms = sqlite3_column_int64(st, 7);
		if (oom)
			return DB_FAIL(err, DB_ERROR, "webhook deliveries: out of memory");
	}
	if (!DB_SQL_OK(rc))
		return DB_RC(err);
	sqlite3_reset(st);
	for (size_t i = 0; i < *a->n; i++)
		if (read_attempts(c, &list[i], err))
			return DB_RC(err);
	return 0;
}

int db_webhooks_deliveries(struct db *db, int64_t hook, const char *owner, int limit,
                           struct db_webhook_delivery **out, size_t *n, struct db_err *err)
{
	*out = NULL;
	*n = 0;
	if (limit < 1)
		limit = 1;
	struct deliveries_arg a = { hook, owner, limit, out, n };
	int rc = db_read(db, deliveries_fn, &a, err);
	if (rc) {
		db_webhook_deliveries_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- the sender's side ------------------------------------------------------------- */

static const char sql_due[] =
	"SELECT d.id, d.hook, d.event, e.job, coalesce(e.sweep, 0), e.type, w.url, w.secret, "
	"e.body, e.time, d.created, d.attempts, w.owner FROM webhook_deliveries AS d "
	"JOIN webhook_events AS e ON e.id = d.event JOIN webhooks AS w ON w.id = d.hook "
	"WHERE d.state = 'pending' AND d.next_attempt <= ?1 "
	"AND (?3 IS NULL OR w.owner NOT IN (SELECT value FROM json_each(?3))) "
	"ORDER BY d.next_attempt, d.id LIMIT ?2";
static const char sql_next[] =
	"SELECT coalesce(min(next_attempt), 0) FROM webhook_deliveries WHERE state = 'pending' "
	"AND next_attempt > ?1";

void db_webhook_due_free(struct db_webhook_due *list, size_t n)
{
	if (!list)
		return;
	for (size_t i = 0; i < n; i++) {
		free(list[i].type);
		free(list[i].url);
		free(list[i].secret);
		free(list[i].body);
		free(list[i].owner);
	}
	free(list);
}

struct due_arg {
	int64_t now;
	int max;
	const char *skip_owners;
	struct db_webhook_due **out;
	size_t *n;
	int64_t *next;
};

static int due_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct due_arg *a = arg;
	db_webhook_due_free(*a->out, *a->n);
	*a->out = NULL;
	*a->n = 0;
	*a->next = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_due, "webhooks due", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->now);
	sqlite3_bind_int(st, 2, a->max);
	db_bind_text(st, 3, a->skip_owners);
	struct db_webhook_due *list = calloc((size_t)a->max, sizeof *list);
	if (!list)
		return DB_FAIL(err, DB_ERROR, "webhooks due: out of memory");
	*a->out = list;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "webhooks due", err)) == SQLITE_ROW &&
	       *a->n < (size_t)a->max) {
		struct db_webhook_due *d = &list[(*a->n)++];
		int oom = 0;
		d->delivery = sqlite3_column_int64(st, 0);
		d->hook = sqlite3_column_int64(st, 1);
		d->event = sqlite3_column_int64(st, 2);
		d->job = sqlite3_column_int64(st, 3);
		d->sweep = sqlite3_column_int64(st, 4);
		d->type = db_column_strdup(st, 5, &oom);
		d->url = db_column_strdup(st, 6, &oom);
		d->secret = db_column_strdup(st, 7, &oom);
		d->body = db_column_strdup(st, 8, &oom);
		d->event_ms = sqlite3_column_int64(st, 9);
		d->created_ms = sqlite3_column_int64(st, 10);
		d->attempts = sqlite3_column_int(st, 11);
		d->owner = db_column_strdup(st, 12, &oom);
		if (oom)
			return DB_FAIL(err, DB_ERROR, "webhooks due: out of memory");
	}
	if (!DB_SQL_OK(rc))
		return DB_RC(err);
	sqlite3_reset(st);
	if (!(st = DB_STMT(c, sql_next, "webhooks due: next", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->now);
	if (DB_SQL(c, sqlite3_step(st), "webhooks due: next", err) != SQLITE_ROW)
		return DB_RC(err);
	*a->next = sqlite3_column_int64(st, 0);
	return 0;
}

int db_webhooks_due(struct db *db, int64_t now_ms, int max, const char *skip_owners,
                    struct db_webhook_due **out, size_t *n, int64_t *next_ms,
                    struct db_err *err)
{
	*out = NULL;
	*n = 0;
	*next_ms = 0;
	if (max < 1)
		max = 1;
	struct due_arg a = { now_ms, max, skip_owners, out, n, next_ms };
	int rc = db_read(db, due_fn, &a, err);
	if (rc) {
		db_webhook_due_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}

static const char sql_set_body[] =
	"UPDATE webhook_events SET body = ?2 WHERE id = ?1 AND body IS NULL";
static const char sql_body[] = "SELECT body FROM webhook_events WHERE id = ?1";

struct body_arg {
	int64_t event;
	const char *body;
	char **stored;
};

static int body_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct body_arg *a = arg;
	free(*a->stored);
	*a->stored = NULL;
	sqlite3_stmt *st = DB_STMT(c, sql_set_body, "webhook body", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->event);
	db_bind_text(st, 2, a->body);
	if (DB_STEP_DONE(c, st, "webhook body", err))
		return DB_RC(err);
	if (!(st = DB_STMT(c, sql_body, "webhook body", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->event);
	int rc = DB_SQL(c, sqlite3_step(st), "webhook body", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "webhook body: no event %lld", (long long)a->event);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	int oom = 0;
	*a->stored = db_column_strdup(st, 0, &oom);
	sqlite3_reset(st);
	if (oom || !*a->stored)
		return DB_FAIL(err, DB_ERROR, "webhook body: out of memory");
	return 0;
}

int db_webhooks_set_body(struct db *db, int64_t event, const char *body, char **stored,
                         struct db_err *err)
{
	*stored = NULL;
	struct body_arg a = { event, body, stored };
	int rc = db_txn(db, body_fn, &a, err);
	if (rc) {
		free(*stored);
		*stored = NULL;
	}
	return rc;
}

static const char sql_attempt[] =
	"INSERT INTO webhook_attempts (delivery, n, time, status, error, duration_ms)\n"
	"SELECT id, attempts + 1, ?2, ?3, ?4, ?5 FROM webhook_deliveries WHERE id = ?1";
static const char sql_after[] =
	"UPDATE webhook_deliveries SET attempts = attempts + 1, state = ?2, "
	"next_attempt = coalesce(?3, next_attempt) WHERE id = ?1";

struct attempt_arg {
	int64_t delivery;
	const struct db_webhook_attempt *a;
	int64_t next;
};

static int attempt_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct attempt_arg *x = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_attempt, "webhook attempt", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, x->delivery);
	sqlite3_bind_int64(st, 2, x->a->time_ms);
	if (x->a->status)
		sqlite3_bind_int(st, 3, x->a->status);
	db_bind_text(st, 4, x->a->error);
	sqlite3_bind_int64(st, 5, x->a->duration_ms);
	if (DB_STEP_DONE(c, st, "webhook attempt", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0)
		return 0;   /* deleted with its hook */
	if (!(st = DB_STMT(c, sql_after, "webhook attempt", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, x->delivery);
	db_bind_text(st, 2, !x->a->error ? "delivered" : x->next ? "pending" : "failed");
	if (x->a->error && x->next)
		sqlite3_bind_int64(st, 3, x->next);
	if (DB_STEP_DONE(c, st, "webhook attempt", err))
		return DB_RC(err);
	return 0;
}

int db_webhooks_attempt(struct db *db, int64_t delivery, const struct db_webhook_attempt *a,
                        int64_t next_ms, struct db_err *err)
{
	struct attempt_arg x = { delivery, a, next_ms };
	return db_txn(db, attempt_fn, &x, err);
}
