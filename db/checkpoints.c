/* db/checkpoints.c - see checkpoints.h. */
#include "db/checkpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

static const char sql_add[] =
	"INSERT INTO checkpoints (job, step, path, bytes, sha256, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6)\n"
	"ON CONFLICT (job, step) DO UPDATE SET path = excluded.path, bytes = excluded.bytes,\n"
	"	sha256 = excluded.sha256, time = excluded.time";
static const char sql_list[] =
	"SELECT step, path, bytes, sha256, time FROM checkpoints WHERE job = ?1 ORDER BY step";

struct add_arg {
	int64_t job, now;
	const struct db_checkpoint *ck;
};

static int add_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct add_arg *a = arg;
	if (db_job_visible(c, a->job, NULL, "add checkpoint", err))
		return DB_RC(err);
	sqlite3_stmt *st = DB_STMT(c, sql_add, "add checkpoint", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	sqlite3_bind_int64(st, 2, a->ck->step);
	db_bind_text(st, 3, a->ck->path);
	sqlite3_bind_int64(st, 4, a->ck->bytes);
	db_bind_text(st, 5, a->ck->sha256);
	sqlite3_bind_int64(st, 6, a->now);
	return DB_STEP_DONE(c, st, "add checkpoint", err);
}

int db_checkpoints_add(struct db *db, int64_t job, const struct db_checkpoint *ck,
                       struct db_err *err)
{
	if (!ck->path || !*ck->path)
		return DB_FAIL(err, DB_INVALID, "add checkpoint: path is required");
	size_t n = strnlen(ck->sha256, sizeof ck->sha256);
	if (n != 64 || strspn(ck->sha256, "0123456789abcdef") != 64)
		return DB_FAIL(err, DB_INVALID, "add checkpoint: sha256 must be 64 lower-case hex digits");
	struct add_arg a = { job, ck->time_ms ? ck->time_ms : db_now_ms(), ck };
	return db_txn(db, add_fn, &a, err);
}

struct list_arg {
	int64_t job;
	const char *owner;
	struct db_checkpoint_list *out;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_checkpoint_list_release(a->out);
	if (db_job_visible(c, a->job, a->owner, "list checkpoints", err))
		return DB_RC(err);
	sqlite3_stmt *st = DB_STMT(c, sql_list, "list checkpoints", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->job);
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list checkpoints", err)) == SQLITE_ROW) {
		if (a->out->n == cap) {
			cap = cap ? 2 * cap : 8;
			struct db_checkpoint *items = realloc(a->out->items, cap * sizeof *items);
			if (!items)
				return DB_FAIL(err, DB_ERROR, "list checkpoints: out of memory");
			a->out->items = items;
		}
		struct db_checkpoint *ck = &a->out->items[a->out->n];
		memset(ck, 0, sizeof *ck);
		int oom = 0;
		ck->step = sqlite3_column_int64(st, 0);
		ck->path = db_column_strdup(st, 1, &oom);
		ck->bytes = sqlite3_column_int64(st, 2);
		const char *h = (const char *)sqlite3_column_text(st, 3);
		snprintf(ck->sha256, sizeof ck->sha256, "%s", h ? h : "");
		ck->time_ms = sqlite3_column_int64(st, 4);
		a->out->n++;
		if (oom || !h)
			return DB_FAIL(err, DB_ERROR, "list checkpoints: out of memory");
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_checkpoints_list(struct db *db, int64_t job, const char *owner,
                        struct db_checkpoint_list *out, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct list_arg a = { job, owner, out };
	int rc = db_read(db, list_fn, &a, err);
	if (rc)
		db_checkpoint_list_release(out);
	return rc;
}

void db_checkpoint_list_release(struct db_checkpoint_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++)
		free(list->items[i].path);
	free(list->items);
	memset(list, 0, sizeof *list);
}
