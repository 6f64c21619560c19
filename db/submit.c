/* db/submit.c - submits: idempotency keys and group commit.
 *
 * Every 201 must be committed before it is sent, and a commit costs an fsync
 * (synchronous=FULL). So HTTP threads do not commit their own submits: they
 * queue them and sleep; one writer thread takes everything queued, runs it in
 * one transaction (one fsync for the lot) and wakes each caller with its own
 * result. While it commits, the next group gathers. Each submit runs inside a
 * savepoint, so one that fails (unknown owner, key conflict, an error half
 * way) leaves no row behind and does not fail its neighbours; if the commit
 * itself fails, every submit of the group gets that error.
 *
 * A caller that must not block (an HTTP thread serving many connections)
 * uses db_jobs_submit_async: its submit is queued the same way, and the
 * writer calls it back once the group has committed instead of waking it.
 */
#include "db/jobs.h"

#include <stdlib.h>
#include <string.h>

#include "db/internal.h"
#include "db/jobs_internal.h"

struct req {
	const struct db_job_new *in;   /* borrowed from the caller until it is answered */
	int64_t now;
	char hash[65];                 /* request hash: given or SHA-256 of the spec */
	int rc;                        /* results, final once done is set */
	struct db_submit out;
	struct db_err err;
	int done;
	pthread_cond_t cond;           /* signalled under the group lock when done */
	db_submit_done_fn done_fn;     /* async: called by the writer instead (then r is heap) */
	void *done_arg;
	struct req *next;
};

struct db_group {
	struct db *db;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;           /* the writer waits here for work */
	struct req *head, **tail;      /* the queue */
	int stop;
	uint64_t groups, submits;      /* committed groups and submits in them */
	int64_t last_now;              /* the newest submit time handed out */
};

/* ---- one submit, inside a transaction ---------------------------------------- */

static const char sql_idem_get[] =
	"SELECT request_hash, job FROM idempotency WHERE owner = ?1 AND key = ?2";
static const char sql_user[] = "SELECT 1 FROM users WHERE name = ?1";
static const char sql_insert[] =
	"INSERT INTO jobs (owner, name, spec, state, executor, partition, priority, submit_time,\n"
	"	created_by, unix_user, progress_total, labels) VALUES (?1, ?2, ?3, 'PENDING', ?4, ?5, ?6,\n"
	"	?7, ?8, ?9, ?10, coalesce(?11, '{}'))";
static const char sql_idem_put[] =
	"INSERT INTO idempotency (owner, key, request_hash, job, created) VALUES (?1, ?2, ?3, ?4, ?5)";

static int submit_one(struct db_conn *c, struct req *r, struct db_err *err)
{
	const struct db_job_new *in = r->in;
	memset(&r->out, 0, sizeof r->out);
	sqlite3_stmt *st;
	int rc;
	if (in->idem_key) {
		st = DB_STMT(c, sql_idem_get, "submit: read idempotency key", err);
		if (!st)
			return DB_ERROR;
		db_bind_text(st, 1, in->owner);
		db_bind_text(st, 2, in->idem_key);
		rc = DB_SQL(c, sqlite3_step(st), "submit: read idempotency key", err);
		if (rc == SQLITE_ROW) {
			const char *h = (const char *)sqlite3_column_text(st, 0);
			int64_t job = sqlite3_column_int64(st, 1);
			if (!h)
				return DB_FAIL(err, DB_ERROR, "submit: read idempotency key: out of memory");
			if (strcmp(h, r->hash) != 0) {
				char sid[DB_JOB_ID_MAX];
				db_job_id_format(job, sid);
				return DB_FAIL(err, DB_CONFLICT, "submit: Idempotency-Key \"%s\" was used for "
				               "another request (job %s)", in->idem_key, sid);
			}
			r->out.id = job;
			r->out.existed = 1;
			return 0;
		}
		if (rc != SQLITE_DONE)
			return DB_RC(err);
	}
	st = DB_STMT(c, sql_user, "submit: read user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	rc = DB_SQL(c, sqlite3_step(st), "submit: read user", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_INVALID, "submit: no user \"%s\"", in->owner);
	if (rc != SQLITE_ROW)
		return DB_RC(err);

	st = DB_STMT(c, sql_insert, "submit: insert job", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, in->owner);
	db_bind_text(st, 2, in->name);
	db_bind_text(st, 3, in->spec);
	db_bind_text(st, 4, in->executor ? in->executor : "local");
	db_bind_text(st, 5, in->partition);
	sqlite3_bind_int64(st, 6, in->priority);
	sqlite3_bind_int64(st, 7, r->now);
	db_bind_text(st, 8, in->idem_key);
	db_bind_text(st, 9, in->unix_user);
	sqlite3_bind_int64(st, 10, in->total_steps > 0 ? in->total_steps : 0);
	db_bind_text(st, 11, in->labels);
	if (DB_STEP_DONE(c, st, "submit: insert job", err))
		return DB_RC(err);
	int64_t id = sqlite3_last_insert_rowid(c->h);
	if (db_job_event_insert(c, id, r->now, NULL, "PENDING", in->owner, "submitted", err))
		return DB_RC(err);
	if (in->idem_key) {
		st = DB_STMT(c, sql_idem_put, "submit: insert idempotency key", err);
		if (!st)
			return DB_ERROR;
		db_bind_text(st, 1, in->owner);
		db_bind_text(st, 2, in->idem_key);
		db_bind_text(st, 3, r->hash);
		sqlite3_bind_int64(st, 4, id);
		sqlite3_bind_int64(st, 5, r->now);
		if (DB_STEP_DONE(c, st, "submit: insert idempotency key", err))
			return DB_RC(err);
	}
	r->out.id = id;
	return 0;
}

/* ---- one transaction per submit (no group commit) ----------------------------- */

static int single_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	return submit_one(c, arg, err);
}

/* ---- group commit ------------------------------------------------------------ */

static const char sql_savepoint[] = "SAVEPOINT submit";
static const char sql_rollback_to[] = "ROLLBACK TO submit";
static const char sql_release[] = "RELEASE submit";

static int exec_cached(struct db_conn *c, const char *sql, struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql, sql, err);
	return st ? DB_STEP_DONE(c, st, sql, err) : DB_ERROR;
}

static int retryable(const struct db_err *e)
{
	int prim = e->sqlite_rc & 0xff;
	return prim == SQLITE_BUSY || prim == SQLITE_LOCKED;
}

/* Runs every submit of the group, each in its savepoint. Fails as a whole
 * only when the transaction itself is lost (then the runner rolls back, and
 * retries on busy). */
static int group_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	for (struct req *r = arg; r; r = r->next) {
		memset(&r->err, 0, sizeof r->err);
		size_t changes = c->n_chg;   /* a submit rolled back leaves no event */
		if (exec_cached(c, sql_savepoint, err))
			return DB_RC(err);
		r->rc = submit_one(c, r, &r->err);
		if (!r->rc) {
			if (exec_cached(c, sql_release, err))
				return DB_RC(err);
			continue;
		}
		if (retryable(&r->err) || sqlite3_get_autocommit(c->h)) {
			*err = r->err;     /* the transaction is gone: the group fails */
			return r->rc;
		}
		if (exec_cached(c, sql_rollback_to, err) || exec_cached(c, sql_release, err))
			return DB_RC(err);
		c->n_chg = changes;
	}
	return 0;
}

/* Answers a finished group: async submits through their callbacks (outside
 * the lock: they may take locks of their own), then the waiting callers. */
static void answer(struct db_group *g, struct req *batch, int rc, uint64_t n)
{
	struct req *waiting = NULL, **wtail = &waiting;
	for (struct req *r = batch, *next; r; r = next) {
		next = r->next;
		if (!r->done_fn) {
			r->next = NULL;
			*wtail = r;
			wtail = &r->next;
			continue;
		}
		r->done_fn(r->done_arg, r->rc, r->rc ? NULL : &r->out, &r->err);
		free(r);
	}
	pthread_mutex_lock(&g->lock);
	if (!rc) {
		g->groups++;
		g->submits += n;
	}
	for (struct req *r = waiting, *next; r; r = next) {
		next = r->next;     /* r belongs to its caller once done is set */
		r->done = 1;
		pthread_cond_signal(&r->cond);
	}
}

static void *writer(void *arg)
{
	struct db_group *g = arg;
	pthread_mutex_lock(&g->lock);
	for (;;) {
		while (!g->head && !g->stop)
			pthread_cond_wait(&g->wake, &g->lock);
		if (!g->head)
			break;
		struct req *batch = g->head;
		g->head = NULL;
		g->tail = &g->head;
		pthread_mutex_unlock(&g->lock);

		struct db_err err = { 0 };
		int rc = db_txn(g->db, group_fn, batch, &err);
		uint64_t n = 0;
		for (struct req *r = batch; r; r = r->next, n++) {
			if (rc) {
				r->rc = rc;
				r->err = err;
				memset(&r->out, 0, sizeof r->out);
			}
		}
		answer(g, batch, rc, n);     /* returns with the lock held */
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

int db_group_start(struct db *db, struct db_err *err)
{
	struct db_group *g = calloc(1, sizeof *g);
	if (!g)
		return DB_FAIL(err, DB_ERROR, "start the writer thread: out of memory");
	g->db = db;
	g->tail = &g->head;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->wake, NULL);
	if (pthread_create(&g->thread, NULL, writer, g) != 0) {
		pthread_mutex_destroy(&g->lock);
		pthread_cond_destroy(&g->wake);
		free(g);
		return DB_FAIL(err, DB_ERROR, "start the writer thread: pthread_create failed");
	}
	db->group = g;
	return 0;
}

void db_group_stop(struct db *db)
{
	struct db_group *g = db->group;
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	g->stop = 1;     /* the writer finishes what is queued, then exits */
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->lock);
	pthread_join(g->thread, NULL);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->wake);
	free(g);
	db->group = NULL;
}

/* ---- the entry point --------------------------------------------------------- */

/* Checks a submit's fields and fills r's time and request hash. */
static int prepare(struct req *r, const struct db_job_new *in, struct db_err *err)
{
	if (!in->owner || !*in->owner)
		return DB_FAIL(err, DB_INVALID, "submit: owner is required");
	if (!in->name || !*in->name)
		return DB_FAIL(err, DB_INVALID, "submit: name is required");
	if (!in->spec || !*in->spec)
		return DB_FAIL(err, DB_INVALID, "submit: spec is required");
	if (in->idem_key && (!*in->idem_key || strlen(in->idem_key) > 128))
		return DB_FAIL(err, DB_INVALID, "submit: Idempotency-Key must be 1 to 128 characters");
	r->in = in;
	r->now = in->time_ms ? in->time_ms : db_now_ms();
	if (in->request_hash) {
		if (strlen(in->request_hash) >= sizeof r->hash)
			return DB_FAIL(err, DB_INVALID, "submit: request hash longer than 64 characters");
		strcpy(r->hash, in->request_hash);
		return 0;
	}
	return db_sha256_hex(in->spec, strlen(in->spec), r->hash, err) ? DB_RC(err) : 0;
}

/* Puts r on the writer's queue; DB_BUSY once the database is closing. */
static int enqueue(struct db_group *g, struct req *r, struct db_err *err)
{
	if (g->stop)
		return DB_FAIL(err, DB_BUSY, "submit: the database is closing");
	/* ids follow the queue's order: stamp the submit time here, under the
	 * lock, so that a newer job never reads as submitted before an older */
	if (!r->in->time_ms) {
		int64_t now = db_now_ms();
		r->now = g->last_now = now > g->last_now ? now : g->last_now;
	}
	*g->tail = r;
	g->tail = &r->next;
	pthread_cond_signal(&g->wake);
	return 0;
}

int db_jobs_submit(struct db *db, const struct db_job_new *in, struct db_submit *out,
                   struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct req r = { 0 };
	int prc = prepare(&r, in, err);
	if (prc)
		return prc;

	struct db_group *g = db->group;
	if (!g) {
		int rc = db_txn(db, single_fn, &r, err);
		if (!rc)
			*out = r.out;
		return rc;
	}
	pthread_cond_init(&r.cond, NULL);
	pthread_mutex_lock(&g->lock);
	int rc = enqueue(g, &r, err);
	while (!rc && !r.done)
		pthread_cond_wait(&r.cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	pthread_cond_destroy(&r.cond);
	if (rc)
		return rc;
	if (r.rc) {
		if (err && !err->code)
			*err = r.err;
		return r.rc;
	}
	*out = r.out;
	return 0;
}

int db_jobs_submit_async(struct db *db, const struct db_job_new *in, db_submit_done_fn done,
                         void *arg, struct db_err *err)
{
	struct req *r = calloc(1, sizeof *r);
	if (!r)
		return DB_FAIL(err, DB_ERROR, "submit: out of memory");
	int rc = prepare(r, in, err);
	struct db_group *g = db->group;
	if (!rc && !g) {
		/* no writer thread: commit here and answer before returning */
		r->rc = db_txn(db, single_fn, r, &r->err);
		done(arg, r->rc, r->rc ? NULL : &r->out, &r->err);
		free(r);
		return 0;
	}
	if (!rc) {
		r->done_fn = done;
		r->done_arg = arg;
		pthread_mutex_lock(&g->lock);
		rc = enqueue(g, r, err);
		pthread_mutex_unlock(&g->lock);
		if (!rc)
			return 0;       /* r is the writer's now */
	}
	free(r);
	return rc;
}

void db_jobs_submit_stats(struct db *db, uint64_t *groups, uint64_t *submits)
{
	*groups = *submits = 0;
	struct db_group *g = db->group;
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	*groups = g->groups;
	*submits = g->submits;
	pthread_mutex_unlock(&g->lock);
}
