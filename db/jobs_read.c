/* db/jobs_read.c - reading jobs: ids, rows, one job, lists with cursors,
 * the event log, counts by state. */
#include "db/jobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

/* ---- ids and cursors -------------------------------------------------------- */

void db_job_id_format(int64_t id, char out[DB_JOB_ID_MAX])
{
	db_id_format('j', id, out, DB_JOB_ID_MAX);
}

int db_job_id_parse(const char *s, int64_t *id)
{
	return db_id_parse('j', s, id);
}

/* ---- reading a job row ------------------------------------------------------ */

#define JOB_COLUMNS "id, owner, name, spec, state, executor, slurm_job_id, priority, partition, " \
	"attempt, submit_time, start_time, end_time, exit_code, reason, created_by, "         \
	"progress_step, progress_total, last_loss, unix_user, sweep, sweep_index, params, "  \
	"labels, (SELECT max_parallel FROM sweeps WHERE sweeps.id = jobs.sweep), node_list"

void db_job_release(struct db_job *job)
{
	if (!job)
		return;
	free(job->owner);
	free(job->name);
	free(job->spec);
	free(job->executor);
	free(job->slurm_job_id);
	free(job->partition);
	free(job->node_list);
	free(job->reason);
	free(job->idem_key);
	free(job->unix_user);
	free(job->params);
	free(job->labels);
	memset(job, 0, sizeof *job);
}

int db_job_read_row(sqlite3_stmt *st, struct db_job *j, struct db_err *err)
{
	int oom = 0;
	memset(j, 0, sizeof *j);
	j->id = sqlite3_column_int64(st, 0);
	j->owner = db_column_strdup(st, 1, &oom);
	j->name = db_column_strdup(st, 2, &oom);
	j->spec = db_column_strdup(st, 3, &oom);
	j->state = (enum db_state)db_state_parse((const char *)sqlite3_column_text(st, 4));
	j->executor = db_column_strdup(st, 5, &oom);
	j->slurm_job_id = db_column_strdup(st, 6, &oom);
	j->priority = sqlite3_column_int64(st, 7);
	j->partition = db_column_strdup(st, 8, &oom);
	j->attempt = sqlite3_column_int64(st, 9);
	j->submit_ms = sqlite3_column_int64(st, 10);
	j->start_ms = sqlite3_column_int64(st, 11);
	j->end_ms = sqlite3_column_int64(st, 12);
	j->has_exit_code = sqlite3_column_type(st, 13) != SQLITE_NULL;
	j->exit_code = sqlite3_column_int(st, 13);
	j->reason = db_column_strdup(st, 14, &oom);
	j->idem_key = db_column_strdup(st, 15, &oom);
	j->progress_step = sqlite3_column_int64(st, 16);
	j->progress_total = sqlite3_column_int64(st, 17);
	j->last_loss = sqlite3_column_type(st, 18) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 18);
	j->unix_user = db_column_strdup(st, 19, &oom);
	j->sweep = sqlite3_column_int64(st, 20);
	j->sweep_index = sqlite3_column_int64(st, 21);
	j->params = db_column_strdup(st, 22, &oom);
	j->labels = db_column_strdup(st, 23, &oom);
	j->sweep_max_parallel = sqlite3_column_int(st, 24);
	j->node_list = db_column_strdup(st, 25, &oom);
	if (oom || (int)j->state < 0) {
		db_job_release(j);
		return oom ? DB_FAIL(err, DB_ERROR, "read job: out of memory")
		           : DB_FAIL(err, DB_ERROR, "read job: unknown state in the database");
	}
	return 0;
}

static const char sql_get[] =
	"SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";

int db_job_fetch(struct db_conn *c, int64_t id, const char *owner, struct db_job *out,
                 struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_get, "get job", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	db_bind_text(st, 2, owner);
	if (db_step_row(c, st, "get job", "job", 'j', id, err))
		return DB_RC(err);
	return db_job_read_row(st, out, err);
}

struct get_arg {
	int64_t id;
	const char *owner;
	struct db_job *out;
};

static int get_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct get_arg *a = arg;
	db_job_release(a->out);
	return db_job_fetch(c, a->id, a->owner, a->out, err);
}

int db_jobs_get(struct db *db, int64_t id, const char *owner, struct db_job *out,
                struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct get_arg a = { id, owner, out };
	return db_read(db, get_fn, &a, err);
}

static const char sql_visible[] =
	"SELECT 1 FROM jobs WHERE id = ?1 AND (?2 IS NULL OR owner = ?2)";

int db_job_visible(struct db_conn *c, int64_t id, const char *owner, const char *what,
                   struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_visible, what, err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, id);
	db_bind_text(st, 2, owner);
	return db_step_row(c, st, what, "job", 'j', id, err);
}
/* ---- lists ------------------------------------------------------------------ */

/* One SQL text per combination of filters, so that each uses its index:
 * bit 0 state, bit 1 owner, bit 2 name, bit 3 cursor, bit 4 sweep, bit 5
 * label (the last two added to the FROM ... WHERE part). */
static char list_sql[64][900];
static pthread_once_t list_once = PTHREAD_ONCE_INIT;

static void list_sql_init(void)
{
	static const char *const conds[4] = { "state = ?1", "owner = ?2", "name = ?3", "id < ?4" };
	for (int m = 0; m < 64; m++) {
		char from[600];
		snprintf(from, sizeof from, "SELECT " JOB_COLUMNS " FROM jobs%s%s%s",
		         m & 48 ? " WHERE " : "", m & 16 ? "sweep = ?6" : "",
		         (m & 48) == 48 ? " AND " : "");
		if (m & 32)
			snprintf(from + strlen(from), sizeof from - strlen(from), "EXISTS (SELECT 1 FROM "
			         "json_each(jobs.labels) WHERE key = ?7 AND value = ?8)");
		db_list_sql(list_sql[m], sizeof list_sql[m], from, conds, m & 15);
		if (m & 48) {     /* db_list_sql starts its own WHERE: join the two */
			char *w = strstr(list_sql[m] + strlen(from), " WHERE ");
			if (w)
				memcpy(w, "  AND ", 6);
		}
	}
}

struct list_arg {
	const struct db_job_filter *f;
	int64_t before;        /* 0 = first page */
	int limit;
	struct db_job_list *out;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_job_list_release(a->out);
	a->out->jobs = calloc((size_t)a->limit + 1, sizeof *a->out->jobs);
	if (!a->out->jobs)
		return DB_FAIL(err, DB_ERROR, "list jobs: out of memory");
	int m = (a->f->has_state ? 1 : 0) | (a->f->owner ? 2 : 0) | (a->f->name ? 4 : 0) |
	        (a->before ? 8 : 0) | (a->f->sweep ? 16 : 0) | (a->f->label_key ? 32 : 0);
	sqlite3_stmt *st = DB_STMT(c, list_sql[m], "list jobs", err);
	if (!st)
		return DB_ERROR;
	if (a->f->has_state)
		db_bind_text(st, 1, db_state_name(a->f->state));
	db_bind_text(st, 2, a->f->owner);
	db_bind_text(st, 3, a->f->name);
	sqlite3_bind_int64(st, 4, a->before);
	sqlite3_bind_int(st, 5, a->limit + 1);
	sqlite3_bind_int64(st, 6, a->f->sweep);
	db_bind_text(st, 7, a->f->label_key);
	db_bind_text(st, 8, a->f->label_value);
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list jobs", err)) == SQLITE_ROW) {
		if (db_job_read_row(st, &a->out->jobs[a->out->n], err))
			return DB_RC(err);
		a->out->n++;
	}
	if (rc != SQLITE_DONE)
		return DB_RC(err);
	if (a->out->n > (size_t)a->limit) {
		db_job_release(&a->out->jobs[a->limit]);
		a->out->n = (size_t)a->limit;
		db_cursor_encode(DB_CURSOR_JOBS, a->out->jobs[a->limit - 1].id, a->out->next_cursor);
	}
	return 0;
}

int db_jobs_list(struct db *db, const struct db_job_filter *f, struct db_job_list *out,
                 struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct list_arg a = { .f = f, .out = out };
	if (db_list_page("list jobs", DB_CURSOR_JOBS, f->limit, f->cursor, &a.limit, &a.before, err))
		return DB_INVALID;
	if (f->label_key && !f->label_value)
		return DB_FAIL(err, DB_INVALID, "list jobs: a label filter needs a value");
	if (f->has_state && !db_state_name(f->state))
		return DB_FAIL(err, DB_INVALID, "list jobs: no such state");
	pthread_once(&list_once, list_sql_init);
	int rc = db_read(db, list_fn, &a, err);
	if (rc)
		db_job_list_release(out);
	return rc;
}

void db_job_list_release(struct db_job_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++)
		db_job_release(&list->jobs[i]);
	free(list->jobs);
	memset(list, 0, sizeof *list);
}

/* ---- events ----------------------------------------------------------------- */

static const char sql_events[] =
	"SELECT seq, time, from_state, to_state, by, reason FROM job_events WHERE job = ?1 "
	"ORDER BY seq";

struct events_arg {
	int64_t id;
	const char *owner;
	struct db_event_list *out;
};

static int events_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct events_arg *a = arg;
	db_event_list_release(a->out);
	if (db_job_visible(c, a->id, a->owner, "list events", err))
		return DB_RC(err);
	sqlite3_stmt *st = DB_STMT(c, sql_events, "list events", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list events", err)) == SQLITE_ROW) {
		if (a->out->n == cap) {
			cap = cap ? 2 * cap : 8;
			struct db_event *e = realloc(a->out->events, cap * sizeof *e);
			if (!e)
				return DB_FAIL(err, DB_ERROR, "list events: out of memory");
			a->out->events = e;
		}
		struct db_event *e = &a->out->events[a->out->n];
		int oom = 0;
		e->seq = sqlite3_column_int64(st, 0);
		e->time_ms = sqlite3_column_int64(st, 1);
		e->from = db_state_parse((const char *)sqlite3_column_text(st, 2));
		e->to = (enum db_state)db_state_parse((const char *)sqlite3_column_text(st, 3));
		e->by = db_column_strdup(st, 4, &oom);
		e->reason = db_column_strdup(st, 5, &oom);
		a->out->n++;
		if (oom)
			return DB_FAIL(err, DB_ERROR, "list events: out of memory");
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_jobs_events(struct db *db, int64_t id, const char *owner, struct db_event_list *out,
                   struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct events_arg a = { id, owner, out };
	int rc = db_read(db, events_fn, &a, err);
	if (rc)
		db_event_list_release(out);
	return rc;
}

void db_event_list_release(struct db_event_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++) {
		free(list->events[i].by);
		free(list->events[i].reason);
	}
	free(list->events);
	memset(list, 0, sizeof *list);
}

/* ---- counts ----------------------------------------------------------------- */

static const char sql_counts[] = "SELECT state, count(*) FROM jobs GROUP BY state";

static int counts_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	int64_t *counts = arg;
	memset(counts, 0, sizeof(int64_t) * DB_STATE_COUNT);
	sqlite3_stmt *st = DB_STMT(c, sql_counts, "count jobs", err);
	if (!st)
		return DB_ERROR;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "count jobs", err)) == SQLITE_ROW) {
		int s = db_state_parse((const char *)sqlite3_column_text(st, 0));
		if (s >= 0)
			counts[s] = sqlite3_column_int64(st, 1);
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_jobs_count_by_state(struct db *db, int64_t counts[DB_STATE_COUNT], struct db_err *err)
{
	return db_read(db, counts_fn, counts, err);
}

/* ---- the oldest ids in a state ---------------------------------------------- */

static const char sql_oldest[] = "SELECT id FROM jobs WHERE state = ?1 ORDER BY id LIMIT ?2";

struct oldest_arg {
	enum db_state state;
	int64_t *ids;
	size_t max, n;
};

static int oldest_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct oldest_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_oldest, "oldest jobs", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, db_state_name(a->state));
	sqlite3_bind_int64(st, 2, (sqlite3_int64)a->max);
	a->n = 0;
	int rc = SQLITE_DONE;
	while (a->n < a->max && (rc = DB_SQL(c, sqlite3_step(st), "oldest jobs", err)) == SQLITE_ROW)
		a->ids[a->n++] = sqlite3_column_int64(st, 0);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_jobs_oldest(struct db *db, enum db_state state, int64_t *ids, size_t max, size_t *n,
                   struct db_err *err)
{
	struct oldest_arg a = { state, ids, max, 0 };
	int rc = max ? db_read(db, oldest_fn, &a, err) : 0;
	*n = rc ? 0 : a.n;
	return rc;
}
