/* db/sweeps.c - sweeps and labels; see sweeps.h. */
#include "db/sweeps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

/* ---- ids ---------------------------------------------------------------------- */

void db_sweep_id_format(int64_t id, char out[DB_SWEEP_ID_MAX])
{
	db_id_format('s', id, out, DB_SWEEP_ID_MAX);
}

int db_sweep_id_parse(const char *s, int64_t *id)
{
	return db_id_parse('s', s, id);
}

/* ---- submit ------------------------------------------------------------------- */

static const char sql_user[] = "SELECT 1 FROM users WHERE name = ?1";
static const char sql_insert_sweep[] =
	"INSERT INTO sweeps (owner, name, definition, method, max_parallel, target_metric,\n"
	"	target_value, target_mode, early_stop_after, labels, submit_time)\n"
	"	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, coalesce(?10, '{}'), ?11)";
static const char sql_insert_child[] =
	"INSERT INTO jobs (owner, name, spec, state, executor, partition, submit_time, unix_user,\n"
	"	sweep, sweep_index, params, labels)\n"
	"	VALUES (?1, ?2, ?3, 'PENDING', ?4, ?5, ?6, ?7, ?8, ?9, ?10, coalesce(?11, '{}'))";

struct submit_arg {
	const struct db_sweep_new *in;
	int64_t now, id;
};

static int submit_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct submit_arg *a = arg;
	const struct db_sweep_new *in = a->in;
	sqlite3_stmt *st = DB_STMT(c, sql_user, "submit sweep: read user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	int rc = DB_SQL(c, sqlite3_step(st), "submit sweep: read user", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_INVALID, "submit sweep: no user \"%s\"", in->owner);
	if (rc != SQLITE_ROW)
		return DB_RC(err);

	if (!(st = DB_STMT(c, sql_insert_sweep, "submit sweep: insert sweep", err)))
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	db_bind_text(st, 2, in->name);
	db_bind_text(st, 3, in->definition);
	db_bind_text(st, 4, in->method);
	sqlite3_bind_int(st, 5, in->max_parallel);
	db_bind_text(st, 6, in->target_metric);
	if (in->target_metric) {
		sqlite3_bind_double(st, 7, in->target_value);
		db_bind_text(st, 8, in->target_mode);
	}
	if (in->early_stop_after > 0)
		sqlite3_bind_int64(st, 9, in->early_stop_after);
	db_bind_text(st, 10, in->labels);
	sqlite3_bind_int64(st, 11, a->now);
	if (DB_STEP_DONE(c, st, "submit sweep: insert sweep", err))
		return DB_RC(err);
	a->id = sqlite3_last_insert_rowid(c->h);

	char reason[64];
	char sid[DB_SWEEP_ID_MAX];
	db_sweep_id_format(a->id, sid);
	snprintf(reason, sizeof reason, "submitted (sweep %s)", sid);
	for (size_t i = 0; i < in->n; i++) {
		const struct db_sweep_child_new *ch = &in->children[i];
		if (!(st = DB_STMT(c, sql_insert_child, "submit sweep: insert child", err)))
			return DB_ERROR;
		db_bind_text(st, 1, in->owner);
		db_bind_text(st, 2, ch->name);
		db_bind_text(st, 3, ch->spec);
		db_bind_text(st, 4, in->executor ? in->executor : "local");
		db_bind_text(st, 5, ch->partition);
		sqlite3_bind_int64(st, 6, a->now);
		db_bind_text(st, 7, in->unix_user);
		sqlite3_bind_int64(st, 8, a->id);
		sqlite3_bind_int64(st, 9, (int64_t)i);
		db_bind_text(st, 10, ch->params);
		db_bind_text(st, 11, in->labels);
		if (DB_STEP_DONE(c, st, "submit sweep: insert child", err))
			return DB_RC(err);
		int64_t job = sqlite3_last_insert_rowid(c->h);
		if (db_job_event_insert(c, job, a->now, NULL, "PENDING", in->owner, reason, err))
			return DB_RC(err);
	}
	return 0;
}

int db_sweeps_submit(struct db *db, const struct db_sweep_new *in, int64_t *id,
                     struct db_err *err)
{
	*id = 0;
	if (!in->owner || !*in->owner || !in->name || !*in->name || !in->definition ||
	    !in->method || !in->children || in->n == 0)
		return DB_FAIL(err, DB_INVALID, "submit sweep: owner, name, definition, method and "
		               "children are required");
	for (size_t i = 0; i < in->n; i++)
		if (!in->children[i].name || !in->children[i].spec || !in->children[i].params)
			return DB_FAIL(err, DB_INVALID, "submit sweep: child %zu: name, spec and params "
			               "are required", i);
	if (in->target_metric && (!in->target_mode || !isfinite(in->target_value)))
		return DB_FAIL(err, DB_INVALID, "submit sweep: a target needs a mode and a finite value");
	struct submit_arg a = { .in = in, .now = in->time_ms ? in->time_ms : db_now_ms() };
	int rc = db_txn(db, submit_fn, &a, err);
	if (!rc)
		*id = a.id;
	return rc;
}

/* ---- reading a sweep ---------------------------------------------------------- */

#define SWEEP_COLUMNS "id, owner, name, definition, method, max_parallel, target_metric, " \
	"target_value, target_mode, early_stop_after, labels, submit_time"

void db_sweep_release(struct db_sweep *s)
{
	if (!s)
		return;
	free(s->owner);
	free(s->name);
	free(s->definition);
	free(s->method);
	free(s->labels);
	free(s->target_metric);
	free(s->target_mode);
	memset(s, 0, sizeof *s);
}

static int read_sweep_row(sqlite3_stmt *st, struct db_sweep *s, struct db_err *err)
{
	int oom = 0;
	memset(s, 0, sizeof *s);
	s->id = sqlite3_column_int64(st, 0);
	s->owner = db_column_strdup(st, 1, &oom);
	s->name = db_column_strdup(st, 2, &oom);
	s->definition = db_column_strdup(st, 3, &oom);
	s->method = db_column_strdup(st, 4, &oom);
	s->max_parallel = sqlite3_column_int(st, 5);
	s->target_metric = db_column_strdup(st, 6, &oom);
	s->target_value = sqlite3_column_double(st, 7);
	s->target_mode = db_column_strdup(st, 8, &oom);
	s->early_stop_after = sqlite3_column_int64(st, 9);
	s->labels = db_column_strdup(st, 10, &oom);
	s->submit_ms = sqlite3_column_int64(st, 11);
	if (oom) {
		db_sweep_release(s);
		return DB_FAIL(err, DB_ERROR, "read sweep: out of memory");
	}
	return 0;
}

static const char sql_counts[] =
	"SELECT state, count(*), sum(reason IS 'early-stopped') FROM jobs WHERE sweep = ?1 "
	"GROUP BY state";

static int read_counts(struct db_conn *c, struct db_sweep *s, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_counts, "sweep counts", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, s->id);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "sweep counts", err)) == SQLITE_ROW) {
		int state = db_state_parse((const char *)sqlite3_column_text(st, 0));
		int64_t n = sqlite3_column_int64(st, 1);
		if (state >= 0)
			s->counts[state] = n;
		s->n_children += n;
		if (state == DB_STATE_CANCELLED)
			s->early_stopped = sqlite3_column_int64(st, 2);
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

static const char sql_get[] =
	"SELECT " SWEEP_COLUMNS " FROM sweeps WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";

static int fetch(struct db_conn *c, int64_t id, const char *owner, struct db_sweep *out,
                 struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_get, "get sweep", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	db_bind_text(st, 2, owner);
	if (db_step_row(c, st, "get sweep", "sweep", 's', id, err))
		return DB_RC(err);
	return read_sweep_row(st, out, err);
}

/* Each child, its target metric's best value and the first point at the
 * target (?2 the metric, NULL: none; ?3 'max' or 'min'; ?4 the value). Each
 * subquery is a range of the metrics primary key (job, name, step). */
static const char sql_children[] =
	"SELECT j.id, j.sweep_index, j.params, j.state, j.reason, j.start_time, j.end_time,\n"
	"	j.progress_step, json_extract(j.spec, '$.batch.global'),\n"
	"	CASE WHEN ?3 = 'min'\n"
	"		THEN (SELECT min(value) FROM metrics m WHERE m.job = j.id AND m.name = ?2)\n"
	"		ELSE (SELECT max(value) FROM metrics m WHERE m.job = j.id AND m.name = ?2) END,\n"
	"	(SELECT step FROM metrics m WHERE m.job = j.id AND m.name = ?2 AND\n"
	"		(CASE WHEN ?3 = 'min' THEN value <= ?4 ELSE value >= ?4 END) ORDER BY step LIMIT 1),\n"
	"	(SELECT time FROM metrics m WHERE m.job = j.id AND m.name = ?2 AND\n"
	"		(CASE WHEN ?3 = 'min' THEN value <= ?4 ELSE value >= ?4 END) ORDER BY step LIMIT 1),\n"
	"	j.slurm_job_id, j.attempt\n"
	"FROM jobs j WHERE j.sweep = ?1 ORDER BY j.sweep_index";

void db_sweep_children_free(struct db_sweep_child *children, size_t n)
{
	if (!children)
		return;
	for (size_t i = 0; i < n; i++) {
		free(children[i].params);
		free(children[i].reason);
		free(children[i].slurm_job_id);
	}
	free(children);
}

struct get_arg {
	int64_t id;
	const char *owner;
	struct db_sweep *out;
	struct db_sweep_child **children;
	size_t *n;
};

static int read_children(struct db_conn *c, struct get_arg *a, struct db_err *err)
{
	const struct db_sweep *s = a->out;
	sqlite3_stmt *st = DB_STMT(c, sql_children, "sweep children", err);
	if (!st)
		return DB_ERROR;
	size_t cap = s->n_children > 0 ? (size_t)s->n_children : 1;
	struct db_sweep_child *ch = calloc(cap, sizeof *ch);
	if (!ch)
		return DB_FAIL(err, DB_ERROR, "sweep children: out of memory");
	*a->children = ch;
	*a->n = 0;
	sqlite3_bind_int64(st, 1, s->id);
	db_bind_text(st, 2, s->target_metric);
	db_bind_text(st, 3, s->target_mode ? s->target_mode : "max");
	sqlite3_bind_double(st, 4, s->target_value);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "sweep children", err)) == SQLITE_ROW) {
		if (*a->n == cap) {
			struct db_sweep_child *g = realloc(ch, 2 * cap * sizeof *g);
			if (!g)
				return DB_FAIL(err, DB_ERROR, "sweep children: out of memory");
			memset(g + cap, 0, cap * sizeof *g);
			cap *= 2;
			*a->children = ch = g;
		}
		struct db_sweep_child *x = &ch[(*a->n)++];
		int oom = 0;
		x->job = sqlite3_column_int64(st, 0);
		x->index = sqlite3_column_int64(st, 1);
		x->params = db_column_strdup(st, 2, &oom);
		x->state = (enum db_state)db_state_parse((const char *)sqlite3_column_text(st, 3));
		x->reason = db_column_strdup(st, 4, &oom);
		x->start_ms = sqlite3_column_int64(st, 5);
		x->end_ms = sqlite3_column_int64(st, 6);
		x->progress_step = sqlite3_column_int64(st, 7);
		x->has_batch = sqlite3_column_type(st, 8) == SQLITE_INTEGER;
		x->batch_global = sqlite3_column_int64(st, 8);
		x->has_best = sqlite3_column_type(st, 9) != SQLITE_NULL;
		x->best = sqlite3_column_double(st, 9);
		x->has_target = sqlite3_column_type(st, 10) != SQLITE_NULL;
		x->target_step = sqlite3_column_int64(st, 10);
		x->target_time_ms = sqlite3_column_int64(st, 11);
		x->slurm_job_id = db_column_strdup(st, 12, &oom);
		x->attempt = sqlite3_column_int64(st, 13);
		if (oom)
			return DB_FAIL(err, DB_ERROR, "sweep children: out of memory");
		if ((int)x->state < 0)
			return DB_FAIL(err, DB_ERROR, "sweep children: unknown state in the database");
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

static int get_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct get_arg *a = arg;
	db_sweep_release(a->out);
	if (a->children) {
		db_sweep_children_free(*a->children, *a->n);
		*a->children = NULL;
		*a->n = 0;
	}
	int rc = fetch(c, a->id, a->owner, a->out, err);
	if (!rc)
		rc = read_counts(c, a->out, err);
	if (!rc && a->children)
		rc = read_children(c, a, err);
	return rc;
}

int db_sweeps_get(struct db *db, int64_t id, const char *owner, struct db_sweep *out,
                  struct db_sweep_child **children, size_t *n, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	size_t none = 0;
	if (children) {
		*children = NULL;
		*n = 0;
	}
	struct get_arg a = { id, owner, out, children, children ? n : &none };
	int rc = db_read(db, get_fn, &a, err);
	if (rc) {
		db_sweep_release(out);
		if (children) {
			db_sweep_children_free(*children, *n);
			*children = NULL;
			*n = 0;
		}
	}
	return rc;
}

/* ---- lists -------------------------------------------------------------------- */

static const char sql_list[] =
	"SELECT " SWEEP_COLUMNS " FROM sweeps WHERE (?1 IS NULL OR owner = ?1) AND\n"
	"	(?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3";

struct list_arg {
	const char *owner;
	int64_t before;
	int limit;
	struct db_sweep_list *out;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_sweep_list_release(a->out);
	a->out->sweeps = calloc((size_t)a->limit + 1, sizeof *a->out->sweeps);
	if (!a->out->sweeps)
		return DB_FAIL(err, DB_ERROR, "list sweeps: out of memory");
	sqlite3_stmt *st = DB_STMT(c, sql_list, "list sweeps", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->owner);
	sqlite3_bind_int64(st, 2, a->before);
	sqlite3_bind_int(st, 3, a->limit + 1);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list sweeps", err)) == SQLITE_ROW) {
		if (read_sweep_row(st, &a->out->sweeps[a->out->n], err))
			return DB_RC(err);
		a->out->n++;
	}
	if (rc != SQLITE_DONE)
		return DB_RC(err);
	if (a->out->n > (size_t)a->limit) {
		db_sweep_release(&a->out->sweeps[a->limit]);
		a->out->n = (size_t)a->limit;
		db_cursor_encode(DB_CURSOR_SWEEPS, a->out->sweeps[a->limit - 1].id,
		                 a->out->next_cursor);
	}
	for (size_t i = 0; i < a->out->n; i++)
		if (read_counts(c, &a->out->sweeps[i], err))
			return DB_RC(err);
	return 0;
}

int db_sweeps_list(struct db *db, const char *owner, int limit, const char *cursor,
                   struct db_sweep_list *out, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct list_arg a = { .owner = owner, .out = out };
	if (db_list_page("list sweeps", DB_CURSOR_SWEEPS, limit, cursor, &a.limit, &a.before, err))
		return DB_INVALID;
	int rc = db_read(db, list_fn, &a, err);
	if (rc)
		db_sweep_list_release(out);
	return rc;
}

void db_sweep_list_release(struct db_sweep_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++)
		db_sweep_release(&list->sweeps[i]);
	free(list->sweeps);
	memset(list, 0, sizeof *list);
}

/* ---- labels ------------------------------------------------------------------- */

static const char sql_job_state[] =
	"SELECT state FROM jobs WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";
static const char sql_job_labels[] = "UPDATE jobs SET labels = ?2 WHERE id = ?1";
static const char sql_sweep_labels[] =
	"UPDATE sweeps SET labels = ?2 WHERE id = ?1 AND (?3 IS NULL OR owner = ?3)";
static const char sql_sweep_jobs[] = "SELECT id FROM jobs WHERE sweep = ?1 ORDER BY id";

/* The int64 column 0 of every row of st into *ids (a new array, the
 * caller's to free; NULL when no rows or on an error) and *n. */
static int read_ids(struct db_conn *c, sqlite3_stmt *st, const char *what, int64_t **ids,
                    size_t *n, struct db_err *err)
{
	*ids = NULL;
	*n = 0;
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), what, err)) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *g = realloc(*ids, cap * sizeof *g);
			if (!g) {
				rc = DB_FAIL(err, DB_ERROR, "%s: out of memory", what);
				break;
			}
			*ids = g;
		}
		(*ids)[(*n)++] = sqlite3_column_int64(st, 0);
	}
	if (rc == SQLITE_DONE)
		return 0;
	free(*ids);
	*ids = NULL;
	*n = 0;
	return DB_RC(err);
}

struct labels_arg {
	int64_t id;
	const char *owner, *by, *labels;
	int64_t now;
};

/* The labels of one job and its note event. */
static int job_labels(struct db_conn *c, int64_t id, const char *owner, const char *by,
                      const char *labels, int64_t now, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_job_state, "set labels", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	db_bind_text(st, 2, owner);
	if (db_step_row(c, st, "set labels", "job", 'j', id, err))
		return DB_RC(err);
	char state[16];
	snprintf(state, sizeof state, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_reset(st);
	if (!(st = DB_STMT(c, sql_job_labels, "set labels", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	db_bind_text(st, 2, labels);
	if (DB_STEP_DONE(c, st, "set labels", err))
		return DB_RC(err);
	return db_job_event_insert(c, id, now, state, state, by, "labels changed", err)
	       ? DB_RC(err) : 0;
}

static int job_labels_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct labels_arg *a = arg;
	return job_labels(c, a->id, a->owner, a->by, a->labels, a->now, err);
}

int db_jobs_set_labels(struct db *db, int64_t id, const char *owner, const char *by,
                       const char *labels, struct db_err *err)
{
	if (!by || !*by || !labels)
		return DB_FAIL(err, DB_INVALID, "set labels: who and the labels are required");
	struct labels_arg a = { id, owner, by, labels, db_now_ms() };
	return db_txn(db, job_labels_fn, &a, err);
}

static int sweep_labels_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct labels_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_sweep_labels, "set sweep labels", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	db_bind_text(st, 2, a->labels);
	db_bind_text(st, 3, a->owner);
	if (DB_STEP_DONE(c, st, "set sweep labels", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0) {
		char sid[DB_SWEEP_ID_MAX];
		db_sweep_id_format(a->id, sid);
		return DB_FAIL(err, DB_NOT_FOUND, "no sweep %s", sid);
	}
	/* the children's ids first: the statement cache hands out one
	 * statement per text, and job_labels uses others */
	if (!(st = DB_STMT(c, sql_sweep_jobs, "set sweep labels", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	int64_t *ids;
	size_t n;
	if (read_ids(c, st, "set sweep labels", &ids, &n, err))
		return DB_RC(err);
	sqlite3_reset(st);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		rc = job_labels(c, ids[i], NULL, a->by, a->labels, a->now, err);
	free(ids);
	return rc;
}

int db_sweeps_set_labels(struct db *db, int64_t id, const char *owner, const char *by,
                         const char *labels, struct db_err *err)
{
	if (!by || !*by || !labels)
		return DB_FAIL(err, DB_INVALID, "set sweep labels: who and the labels are required");
	struct labels_arg a = { id, owner, by, labels, db_now_ms() };
	return db_txn(db, sweep_labels_fn, &a, err);
}

/* ---- cancel ------------------------------------------------------------------- */

static const char sql_owned[] =
	"SELECT 1 FROM sweeps WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";
static const char sql_waiting[] =
	"SELECT id, state FROM jobs WHERE sweep = ?1 AND state IN ('PENDING', 'HELD') ORDER BY id";
static const char sql_cancel_one[] =
	"UPDATE jobs SET state = 'CANCELLED', end_time = ?3, reason = ?4 WHERE id = ?1 AND "
	"state = ?2";

struct cancel_arg {
	int64_t id;
	const char *owner, *by, *reason;
	size_t n;
};

static int cancel_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct cancel_arg *a = arg;
	a->n = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_owned, "cancel sweep", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	db_bind_text(st, 2, a->owner);
	if (db_step_row(c, st, "cancel sweep", "sweep", 's', a->id, err))
		return DB_RC(err);
	int rc;
	if (!(st = DB_STMT(c, sql_waiting, "cancel sweep", err)))
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	struct { int64_t id; int held; } *w = NULL;
	size_t n = 0, cap = 0;
	while ((rc = DB_SQL(c, sqlite3_step(st), "cancel sweep", err)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			void *g = realloc(w, cap * sizeof *w);
			if (!g) {
				free(w);
				return DB_FAIL(err, DB_ERROR, "cancel sweep: out of memory");
			}
			w = g;
		}
		w[n].id = sqlite3_column_int64(st, 0);
		w[n].held = strcmp((const char *)sqlite3_column_text(st, 1), "HELD") == 0;
		n++;
	}
	sqlite3_reset(st);
	if (rc != SQLITE_DONE) {
		free(w);
		return DB_RC(err);
	}
	int64_t now = db_now_ms();
	for (size_t i = 0; i < n; i++) {
		const char *from = w[i].held ? "HELD" : "PENDING";
		if (!(st = DB_STMT(c, sql_cancel_one, "cancel sweep", err)) ||
		    (sqlite3_bind_int64(st, 1, w[i].id), db_bind_text(st, 2, from),
		     sqlite3_bind_int64(st, 3, now), db_bind_text(st, 4, a->reason),
		     DB_STEP_DONE(c, st, "cancel sweep", err)) ||
		    db_job_event_insert(c, w[i].id, now, from, "CANCELLED", a->by, a->reason, err)) {
			free(w);
			return DB_RC(err);
		}
	}
	free(w);
	a->n = n;
	return 0;
}

int db_sweeps_cancel_waiting(struct db *db, int64_t id, const char *owner, const char *by,
                             const char *reason, size_t *n, struct db_err *err)
{
	if (!by || !*by || !reason)
		return DB_FAIL(err, DB_INVALID, "cancel sweep: who and why are required");
	struct cancel_arg a = { id, owner, by, reason, 0 };
	int rc = db_txn(db, cancel_fn, &a, err);
	if (n)
		*n = rc ? 0 : a.n;
	return rc;
}

/* ---- early stopping ------------------------------------------------------------ */

static const char sql_candidates[] =
	"SELECT s.id FROM sweeps s WHERE s.early_stop_after IS NOT NULL AND s.target_metric IS NOT\n"
	"	NULL AND EXISTS (SELECT 1 FROM jobs j WHERE j.sweep = s.id AND j.state = 'RUNNING')\n"
	"	ORDER BY s.id";

struct ids_arg {
	int64_t *ids;
	size_t n;
};

static int candidates_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct ids_arg *a = arg;
	free(a->ids);
	sqlite3_stmt *st = DB_STMT(c, sql_candidates, "early stop sweeps", err);
	if (!st) {
		a->ids = NULL;
		a->n = 0;
		return DB_ERROR;
	}
	return read_ids(c, st, "early stop sweeps", &a->ids, &a->n, err);
}

int db_sweeps_early_stop_candidates(struct db *db, int64_t **ids, size_t *n,
                                    struct db_err *err)
{
	struct ids_arg a = { 0 };
	int rc = db_read(db, candidates_fn, &a, err);
	if (rc) {
		free(a.ids);
		a.ids = NULL;
		a.n = 0;
	}
	*ids = a.ids;
	*n = a.n;
	return rc;
}

/* Every child whose series reached at_step: its last finite value at or
 * before at_step. */
static const char sql_values_at[] =
	"SELECT j.id, m.step, m.value FROM jobs j JOIN metrics m ON m.job = j.id AND m.name = ?2\n"
	"	AND m.step = (SELECT max(step) FROM metrics x WHERE x.job = j.id AND x.name = ?2 AND\n"
	"		x.step <= ?3 AND x.value IS NOT NULL)\n"
	"	WHERE j.sweep = ?1 AND EXISTS (SELECT 1 FROM metrics y WHERE y.job = j.id AND\n"
	"		y.name = ?2 AND y.step >= ?3)";

/* A series of the children: jobs[i], steps[i] (and values[i] when
 * with_values) from the columns 0, 1 (and 2) of sql's rows. */
struct values_arg {
	const char *sql, *what;
	int with_values;
	int64_t sweep, at;
	const char *metric;
	int64_t *jobs, *steps;
	double *values;
	size_t n;
};

static void values_clear(struct values_arg *a)
{
	free(a->jobs);
	free(a->steps);
	free(a->values);
	a->jobs = a->steps = NULL;
	a->values = NULL;
	a->n = 0;
}

static int values_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct values_arg *a = arg;
	values_clear(a);
	size_t cap = 0;
	sqlite3_stmt *st = DB_STMT(c, a->sql, a->what, err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->sweep);
	db_bind_text(st, 2, a->metric);
	if (a->with_values)
		sqlite3_bind_int64(st, 3, a->at);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), a->what, err)) == SQLITE_ROW) {
		if (a->n == cap) {
			cap = cap ? 2 * cap : 16;
			int64_t *j = realloc(a->jobs, cap * sizeof *j);
			if (j)
				a->jobs = j;
			int64_t *s = realloc(a->steps, cap * sizeof *s);
			if (s)
				a->steps = s;
			double *v = a->with_values ? realloc(a->values, cap * sizeof *v) : NULL;
			if (v)
				a->values = v;
			if (!j || !s || (a->with_values && !v))
				return DB_FAIL(err, DB_ERROR, "%s: out of memory", a->what);
		}
		a->jobs[a->n] = sqlite3_column_int64(st, 0);
		a->steps[a->n] = sqlite3_column_int64(st, 1);
		if (a->with_values)
			a->values[a->n] = sqlite3_column_double(st, 2);
		a->n++;
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

static int read_values(struct db *db, struct values_arg *a, int64_t **jobs, int64_t **steps,
                       size_t *n, struct db_err *err)
{
	int rc = db_read(db, values_fn, a, err);
	if (rc)
		values_clear(a);
	*jobs = a->jobs;
	*steps = a->steps;
	*n = a->n;
	return rc;
}

int db_sweeps_values_at(struct db *db, int64_t sweep, const char *metric, int64_t at_step,
                        int64_t **jobs, int64_t **steps, double **values, size_t *n,
                        struct db_err *err)
{
	struct values_arg a = { .sql = sql_values_at, .what = "sweep values", .with_values = 1,
	                        .sweep = sweep, .at = at_step, .metric = metric };
	int rc = read_values(db, &a, jobs, steps, n, err);
	*values = a.values;
	return rc;
}

static const char sql_running_last[] =
	"SELECT j.id, (SELECT max(step) FROM metrics m WHERE m.job = j.id AND m.name = ?2) AS s\n"
	"	FROM jobs j WHERE j.sweep = ?1 AND j.state = 'RUNNING' AND s IS NOT NULL ORDER BY j.id";

int db_sweeps_running_last(struct db *db, int64_t sweep, const char *metric, int64_t **jobs,
                           int64_t **steps, size_t *n, struct db_err *err)
{
	struct values_arg a = { .sql = sql_running_last, .what = "sweep running children",
	                        .sweep = sweep, .metric = metric };
	return read_values(db, &a, jobs, steps, n, err);
}
