/* db/usage.c - usage accounting: adding Slurm's jobs, reading the day and
 * hour totals; see usage.h. The tables and the triggers that spread a job over
 * its hours (and add the local executor's jobs) are schema version 6
 * (db/migrate.c). */
#include "db/usage.h"

#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

static const char *const source_names[] = { [DB_USAGE_LOCAL] = "local",
	                                        [DB_USAGE_SLURM] = "slurm" };

const char *db_usage_source_name(enum db_usage_source s)
{
	return s == DB_USAGE_SLURM ? source_names[DB_USAGE_SLURM] : source_names[DB_USAGE_LOCAL];
}

/* ---- add ------------------------------------------------------------------- */

static const char sql_add[] =
	"INSERT OR IGNORE INTO usage_jobs (source, key, user, account, partition, start_ms,\n"
	"	end_ms, cpus, gpus) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
static const char sql_mark[] =
	"INSERT INTO usage_polls (source, polled_to) VALUES (?1, ?2)\n"
	"ON CONFLICT (source) DO UPDATE SET polled_to = excluded.polled_to";
static const char sql_polled[] = "SELECT polled_to FROM usage_polls WHERE source = ?1";

struct add_arg {
	const char *source;
	const struct db_usage_job *jobs;
	size_t n;
	int64_t polled_to;
	size_t added;
};

static int add_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct add_arg *a = arg;
	a->added = 0;
	for (size_t i = 0; i < a->n; i++) {
		const struct db_usage_job *j = &a->jobs[i];
		sqlite3_stmt *st = DB_STMT(c, sql_add, "add usage", err);
		if (!st)
			return DB_ERROR;
		db_bind_text(st, 1, a->source);
		db_bind_text(st, 2, j->key);
		db_bind_text(st, 3, j->user);
		db_bind_text(st, 4, j->account ? j->account : "");
		db_bind_text(st, 5, j->partition ? j->partition : "");
		sqlite3_bind_int64(st, 6, j->start_ms);
		sqlite3_bind_int64(st, 7, j->end_ms);
		sqlite3_bind_int64(st, 8, j->cpus);
		sqlite3_bind_int64(st, 9, j->gpus);
		if (DB_STEP_DONE(c, st, "add usage", err))
			return DB_RC(err);
		a->added += (size_t)sqlite3_changes(c->h) > 0;
	}
	if (a->polled_to > 0) {
		sqlite3_stmt *st = DB_STMT(c, sql_mark, "add usage: mark", err);
		if (!st)
			return DB_ERROR;
		db_bind_text(st, 1, a->source);
		sqlite3_bind_int64(st, 2, a->polled_to);
		if (DB_STEP_DONE(c, st, "add usage: mark", err))
			return DB_RC(err);
	}
	return 0;
}

static int bad_name(const char *s, int required)
{
	if (!s || !*s)
		return required;
	return strlen(s) > DB_USAGE_NAME_MAX;
}

int db_usage_add(struct db *db, enum db_usage_source source, const struct db_usage_job *jobs,
                 size_t n, int64_t polled_to_ms, size_t *added, struct db_err *err)
{
	if (added)
		*added = 0;
	for (size_t i = 0; i < n; i++) {
		const struct db_usage_job *j = &jobs[i];
		if (!j->key || !*j->key || strlen(j->key) > DB_USAGE_KEY_MAX ||
		    bad_name(j->user, 1) || bad_name(j->account, 0) || bad_name(j->partition, 0))
			return DB_FAIL(err, DB_INVALID, "add usage: job %zu: a key and user of 1 to %d "
			               "bytes, account and partition of at most %d", i,
			               DB_USAGE_KEY_MAX, DB_USAGE_NAME_MAX);
		if (j->start_ms < 0 || j->end_ms < j->start_ms || j->cpus < 0 || j->gpus < 0)
			return DB_FAIL(err, DB_INVALID, "add usage: job %s: times out of order or "
			               "negative counts", j->key);
	}
	struct add_arg a = { db_usage_source_name(source), jobs, n, polled_to_ms, 0 };
	int rc = n || polled_to_ms > 0 ? db_txn(db, add_fn, &a, err) : 0;
	if (rc == 0 && added)
		*added = a.added;
	return rc;
}

struct polled_arg {
	const char *source;
	int64_t ms;
};

static int polled_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct polled_arg *a = arg;
	a->ms = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_polled, "usage polled", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->source);
	int rc = DB_SQL(c, sqlite3_step(st), "usage polled", err);
	if (rc == SQLITE_ROW)
		a->ms = sqlite3_column_int64(st, 0);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_usage_polled(struct db *db, enum db_usage_source source, int64_t *ms,
                    struct db_err *err)
{
	struct polled_arg a = { db_usage_source_name(source), 0 };
	int rc = db_read(db, polled_fn, &a, err);
	*ms = rc ? 0 : a.ms;
	return rc;
}

/* ---- query ----------------------------------------------------------------- */

/* Whole days [?6, ?7) from usage_days, the hours [?1, ?2) and [?8, ?9)
 * around them from usage_hours (each a range of the primary key's first
 * column: only the rows of the range are read), added up by integer key
 * (and day with ?5) before the keys are joined; ?3 and ?4: the local and
 * Slurm users (both NULL: everyone); ?10, ?11, ?12: keep user, account,
 * partition apart (else "", added together). */
static const char sql_query[] =
	"SELECT k.source, CASE WHEN ?10 THEN k.user ELSE '' END AS u,\n"
	"	CASE WHEN ?11 THEN k.account ELSE '' END AS a,\n"
	"	CASE WHEN ?12 THEN k.partition ELSE '' END AS p, x.day, sum(x.cpu), sum(x.gpu),\n"
	"	sum(x.jobs)\n"
	"FROM (SELECT key, CASE WHEN ?5 THEN day ELSE 0 END AS day, sum(cpu_ms) AS cpu,\n"
	"		sum(gpu_ms) AS gpu, sum(jobs) AS jobs\n"
	"	FROM usage_days WHERE day >= ?6 AND day < ?7 GROUP BY 1, 2\n"
	"	UNION ALL\n"
	"	SELECT key, CASE WHEN ?5 THEN hour / 24 ELSE 0 END, sum(cpu_ms), sum(gpu_ms), sum(jobs)\n"
	"	FROM usage_hours WHERE hour >= ?1 AND hour < ?2 GROUP BY 1, 2\n"
	"	UNION ALL\n"
	"	SELECT key, CASE WHEN ?5 THEN hour / 24 ELSE 0 END, sum(cpu_ms), sum(gpu_ms), sum(jobs)\n"
	"	FROM usage_hours WHERE hour >= ?8 AND hour < ?9 GROUP BY 1, 2) AS x\n"
	"JOIN usage_keys AS k ON k.id = x.key\n"
	"WHERE (?3 IS NULL AND ?4 IS NULL) OR (k.source = 'local' AND k.user = ?3)\n"
	"	OR (k.source = 'slurm' AND k.user = ?4)\n"
	"GROUP BY k.source, u, a, p, x.day\n"
	"ORDER BY k.source, u, a, p, x.day";

struct query_arg {
	const struct db_usage_filter *f;
	struct db_usage_list *out;
};

static int query_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct query_arg *a = arg;
	db_usage_list_release(a->out);
	sqlite3_stmt *st = DB_STMT(c, sql_query, "usage", err);
	if (!st)
		return DB_ERROR;
	/* the whole days inside the range, and the hours before and after them */
	int64_t from = a->f->from_hour, to = a->f->to_hour;
	int64_t d0 = from >= 0 ? (from + 23) / 24 : from / 24, d1 = to >= 0 ? to / 24 : (to - 23) / 24;
	if (d0 >= d1)
		d0 = d1 = 0;                    /* no whole day: all hours */
	sqlite3_bind_int64(st, 1, from);
	sqlite3_bind_int64(st, 2, d0 < d1 ? d0 * 24 : to);
	db_bind_text(st, 3, a->f->local_user);
	db_bind_text(st, 4, a->f->slurm_user);
	sqlite3_bind_int(st, 5, a->f->by_day != 0);
	sqlite3_bind_int64(st, 6, d0);
	sqlite3_bind_int64(st, 7, d1);
	sqlite3_bind_int64(st, 8, d0 < d1 ? d1 * 24 : 0);
	sqlite3_bind_int64(st, 9, d0 < d1 ? to : 0);
	sqlite3_bind_int(st, 10, !a->f->merge_users);
	sqlite3_bind_int(st, 11, !a->f->merge_accounts);
	sqlite3_bind_int(st, 12, !a->f->merge_partitions);
	if (!a->f->local_user && a->f->slurm_user)
		db_bind_text(st, 3, "");         /* no local user matches "" (users are 1..64) */
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "usage", err)) == SQLITE_ROW) {
		if (a->out->n == cap) {
			size_t grown_cap = cap ? 2 * cap : 32;
			struct db_usage_row *grown = realloc(a->out->rows, grown_cap * sizeof *grown);
			if (!grown)
				return DB_FAIL(err, DB_ERROR, "usage: out of memory");
			a->out->rows = grown;
			cap = grown_cap;
		}
		struct db_usage_row *r = &a->out->rows[a->out->n];
		memset(r, 0, sizeof *r);
		int oom = 0;
		const unsigned char *source = sqlite3_column_text(st, 0);
		r->source = source && strcmp((const char *)source, "slurm") == 0 ? DB_USAGE_SLURM
		                                                                 : DB_USAGE_LOCAL;
		r->user = db_column_strdup(st, 1, &oom);
		r->account = db_column_strdup(st, 2, &oom);
		r->partition = db_column_strdup(st, 3, &oom);
		a->out->n++;
		if (oom || !r->user || !r->account || !r->partition)
			return DB_FAIL(err, DB_ERROR, "usage: out of memory");
		r->day = sqlite3_column_int64(st, 4);
		r->cpu_ms = sqlite3_column_int64(st, 5);
		r->gpu_ms = sqlite3_column_int64(st, 6);
		r->jobs = sqlite3_column_int64(st, 7);
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_usage_query(struct db *db, const struct db_usage_filter *f, struct db_usage_list *out,
                   struct db_err *err)
{
	memset(out, 0, sizeof *out);
	if (f->from_hour > f->to_hour)
		return DB_FAIL(err, DB_INVALID, "usage: the range ends before it begins");
	struct query_arg a = { f, out };
	int rc = db_read(db, query_fn, &a, err);
	if (rc)
		db_usage_list_release(out);
	return rc;
}

void db_usage_list_release(struct db_usage_list *list)
{
	if (!list)
		return;
	for (size_t i = 0; i < list->n; i++) {
		free(list->rows[i].user);
		free(list->rows[i].account);
		free(list->rows[i].partition);
	}
	free(list->rows);
	memset(list, 0, sizeof *list);
}
