/* db/audit.c - the audit log of admin actions; see audit.h. */
#include "db/audit.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* ---- insert ----------------------------------------------------------------- */

static const char sql_insert[] =
	"INSERT INTO audit (time, actor, action, target, args, status, message, client)\n"
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

struct insert_arg {
	const struct db_audit_new *e;
	int64_t now;
	int64_t *id;
};

static int insert_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct insert_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_insert, "insert audit entry", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->now);
	db_bind_text(st, 2, a->e->actor);
	db_bind_text(st, 3, a->e->action);
	db_bind_text(st, 4, a->e->target);
	db_bind_text(st, 5, a->e->args);
	sqlite3_bind_int(st, 6, a->e->status);
	db_bind_text(st, 7, a->e->message);
	db_bind_text(st, 8, a->e->client);
	if (DB_STEP_DONE(c, st, "insert audit entry", err))
		return DB_RC(err);
	if (a->id)
		*a->id = sqlite3_last_insert_rowid(c->h);
	return 0;
}

static int bad_field(const char *s, size_t max)
{
	return !s || !*s || strlen(s) > max;
}

int db_audit_insert(struct db *db, const struct db_audit_new *e, int64_t *id,
                    struct db_err *err)
{
	if (bad_field(e->actor, DB_AUDIT_NAME_MAX) || bad_field(e->action, DB_AUDIT_NAME_MAX))
		return DB_FAIL(err, DB_INVALID, "audit: actor and action must be 1 to %d bytes",
		               DB_AUDIT_NAME_MAX);
	if (bad_field(e->target, DB_AUDIT_TARGET_MAX))
		return DB_FAIL(err, DB_INVALID, "audit: target must be 1 to %d bytes",
		               DB_AUDIT_TARGET_MAX);
	if (e->status < 100 || e->status > 599)
		return DB_FAIL(err, DB_INVALID, "audit: status must be 100 to 599 (got %d)",
		               e->status);
	if (e->client && strlen(e->client) > DB_AUDIT_CLIENT_MAX)
		return DB_FAIL(err, DB_INVALID, "audit: client is over %d bytes", DB_AUDIT_CLIENT_MAX);
	if (e->message && strlen(e->message) > DB_AUDIT_TEXT_MAX)
		return DB_FAIL(err, DB_INVALID, "audit: message is over %d bytes", DB_AUDIT_TEXT_MAX);
	if (e->args) {
		if (strlen(e->args) > DB_AUDIT_TEXT_MAX)
			return DB_FAIL(err, DB_INVALID, "audit: args are over %d bytes",
			               DB_AUDIT_TEXT_MAX);
		json_t *j = json_loads(e->args, JSON_DECODE_ANY, NULL);
		if (!j)
			return DB_FAIL(err, DB_INVALID, "audit: args must be JSON text");
		json_decref(j);
	}
	struct insert_arg a = { e, e->time_ms ? e->time_ms : db_now_ms(), id };
	return db_txn(db, insert_fn, &a, err);
}

/* ---- list ------------------------------------------------------------------- */

#define AUDIT_COLUMNS "id, time, actor, action, target, args, status, message, client"

/* One SQL text per combination of filters, so that each uses its index:
 * bit 0 actor, bit 1 action, bit 2 target, bit 3 cursor. */
static char list_sql[16][320];
static pthread_once_t list_once = PTHREAD_ONCE_INIT;

static void list_sql_init(void)
{
	static const char *const conds[4] = { "actor = ?1", "action = ?2", "target = ?3",
	                                      "id < ?4" };
	for (int m = 0; m < 16; m++)
		db_list_sql(list_sql[m], sizeof list_sql[m], "SELECT " AUDIT_COLUMNS " FROM audit", conds,
		            m);
}

static void entry_release(struct db_audit_entry *e)
{
	free(e->actor);
	free(e->action);
	free(e->target);
	free(e->args);
	free(e->message);
	free(e->client);
	memset(e, 0, sizeof *e);
}

struct list_arg {
	const struct db_audit_filter *f;
	int64_t before;        /* 0 = first page */
	int limit;
	struct db_audit_list *out;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_audit_list_release(a->out);
	a->out->entries = calloc((size_t)a->limit + 1, sizeof *a->out->entries);
	if (!a->out->entries)
		return DB_FAIL(err, DB_ERROR, "list audit: out of memory");
	int m = (a->f->actor ? 1 : 0) | (a->f->action ? 2 : 0) | (a->f->target ? 4 : 0) |
	        (a->before ? 8 : 0);
	sqlite3_stmt *st = DB_STMT(c, list_sql[m], "list audit", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->f->actor);
	db_bind_text(st, 2, a->f->action);
	db_bind_text(st, 3, a->f->target);
	sqlite3_bind_int64(st, 4, a->before);
	sqlite3_bind_int(st, 5, a->limit + 1);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list audit", err)) == SQLITE_ROW) {
		struct db_audit_entry *e = &a->out->entries[a->out->n++];
		int oom = 0;
		e->id = sqlite3_column_int64(st, 0);
		e->time_ms = sqlite3_column_int64(st, 1);
		e->actor = db_column_strdup(st, 2, &oom);
		e->action = db_column_strdup(st, 3, &oom);
		e->target = db_column_strdup(st, 4, &oom);
		e->args = db_column_strdup(st, 5, &oom);
		e->status = sqlite3_column_int(st, 6);
		e->message = db_column_strdup(st, 7, &oom);
		e->client = db_column_strdup(st, 8, &oom);
		if (oom)
			return DB_FAIL(err, DB_ERROR, "list audit: out of memory");
	}
	if (rc != SQLITE_DONE)
		return DB_RC(err);
	if (a->out->n > (size_t)a->limit) {
		entry_release(&a->out->entries[a->limit]);
		a->out->n = (size_t)a->limit;
		db_cursor_encode(DB_CURSOR_AUDIT, a->out->entries[a->limit - 1].id, a->out->next_cursor);
	}
	return 0;
}

int db_audit_list(struct db *db, const struct db_audit_filter *f, struct db_audit_list *out,
                  struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct list_arg a = { .f = f, .limit = f->limit ? f->limit : 50, .out = out };
	if (a.limit < 1 || a.limit > DB_LIST_MAX)
		return DB_FAIL(err, DB_INVALID, "list audit: limit must be 1..%d (got %d)", DB_LIST_MAX,
		               f->limit);
	if (f->cursor && *f->cursor && db_cursor_decode(DB_CURSOR_AUDIT, "list audit", f->cursor, &a.before, err))
		return DB_INVALID;
	pthread_once(&list_once, list_sql_init);
	int rc = db_read(db, list_fn, &a, err);
	if (rc)
		db_audit_list_release(out);
	return rc;
}

void db_audit_list_release(struct db_audit_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++)
		entry_release(&list->entries[i]);
	free(list->entries);
	memset(list, 0, sizeof *list);
}
