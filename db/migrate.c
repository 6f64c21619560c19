/* db/migrate.c - the schema as an ordered list of migration steps.
 *
 * schema_version holds one row per applied step. db_open applies the missing
 * steps, each in its own write transaction (so a crash leaves the database at
 * a whole version), re-reading the version inside the transaction so that two
 * processes opening an old file at once apply each step once. Steps are never
 * edited once released: a change is a new step at the end. A step that must
 * rebuild a table (foreign keys off, copy, rename) needs its own runner; none
 * does yet.
 */
#include "db/internal.h"

#include <stdio.h>
#include <string.h>

static const char *const migrations[] = {
	/* 1: users, tokens, jobs, their event log, idempotency keys */
	"CREATE TABLE users (\n"
	"	name TEXT PRIMARY KEY NOT NULL CHECK (length(name) BETWEEN 1 AND 64),\n"
	"	role TEXT NOT NULL CHECK (role IN ('admin', 'user')),\n"
	"	created INTEGER NOT NULL\n"
	") STRICT;\n"
	"CREATE TABLE jobs (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"   /* never reused */
	"	owner TEXT NOT NULL REFERENCES users(name),\n"
	"	name TEXT NOT NULL,\n"
	"	spec TEXT NOT NULL CHECK (json_valid(spec)),\n"
	"	state TEXT NOT NULL CHECK (state IN ('PENDING', 'QUEUED', 'RUNNING', 'COMPLETED',\n"
	"		'FAILED', 'CANCELLED', 'TIMEOUT', 'HELD', 'REQUEUED', 'PREEMPTED')),\n"
	"	executor TEXT NOT NULL DEFAULT 'local',\n"
	"	slurm_job_id TEXT,\n"
	"	priority INTEGER NOT NULL DEFAULT 0,\n"
	"	partition TEXT,\n"
	"	attempt INTEGER NOT NULL DEFAULT 1,\n"
	"	submit_time INTEGER NOT NULL,\n"
	"	start_time INTEGER,\n"
	"	end_time INTEGER,\n"
	"	exit_code INTEGER,\n"
	"	reason TEXT,\n"
	"	created_by TEXT\n"                         /* the Idempotency-Key, if any */
	") STRICT;\n"
	"CREATE INDEX jobs_owner ON jobs (owner, id);\n"
	"CREATE INDEX jobs_state ON jobs (state, id);\n"
	"CREATE TABLE job_events (\n"
	"	job INTEGER NOT NULL REFERENCES jobs(id),\n"
	"	seq INTEGER NOT NULL,\n"
	"	time INTEGER NOT NULL,\n"
	"	from_state TEXT,\n"
	"	to_state TEXT NOT NULL,\n"
	"	by TEXT NOT NULL,\n"
	"	reason TEXT,\n"
	"	PRIMARY KEY (job, seq)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TRIGGER job_events_no_update BEFORE UPDATE ON job_events\n"
	"	BEGIN SELECT RAISE(ABORT, 'job_events is append-only'); END;\n"
	"CREATE TRIGGER job_events_no_delete BEFORE DELETE ON job_events\n"
	"	BEGIN SELECT RAISE(ABORT, 'job_events is append-only'); END;\n"
	"CREATE TABLE idempotency (\n"
	"	owner TEXT NOT NULL,\n"
	"	key TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 128),\n"
	"	request_hash TEXT NOT NULL,\n"
	"	job INTEGER NOT NULL REFERENCES jobs(id),\n"
	"	created INTEGER NOT NULL,\n"
	"	PRIMARY KEY (owner, key)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TABLE tokens (\n"
	"	id INTEGER PRIMARY KEY,\n"
	"	user TEXT NOT NULL REFERENCES users(name),\n"
	"	role TEXT NOT NULL CHECK (role IN ('admin', 'user', 'job')),\n"
	"	job INTEGER REFERENCES jobs(id),\n"
	"	hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),\n"   /* SHA-256 of the token */
	"	created INTEGER NOT NULL,\n"
	"	revoked_at INTEGER,\n"
	"	last_used INTEGER,\n"
	"	CHECK ((role = 'job') = (job IS NOT NULL))\n"
	") STRICT;\n"
	"CREATE INDEX tokens_user ON tokens (user);\n"
	"CREATE INDEX tokens_job ON tokens (job) WHERE job IS NOT NULL;\n",

	/* 2: what running jobs report: metrics and checkpoints */
	"CREATE TABLE metrics (\n"
	"	job INTEGER NOT NULL REFERENCES jobs(id),\n"
	"	name TEXT NOT NULL,\n"
	"	step INTEGER NOT NULL,\n"
	"	value REAL,\n"                             /* NULL: non-finite */
	"	time INTEGER NOT NULL,\n"
	"	PRIMARY KEY (job, name, step)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TABLE checkpoints (\n"
	"	job INTEGER NOT NULL REFERENCES jobs(id),\n"
	"	step INTEGER NOT NULL,\n"
	"	path TEXT NOT NULL,\n"
	"	bytes INTEGER NOT NULL,\n"
	"	sha256 TEXT NOT NULL,\n"
	"	time INTEGER NOT NULL,\n"
	"	PRIMARY KEY (job, step)\n"
	") STRICT, WITHOUT ROWID;\n",

	/* 3: progress on the job row (cheap to show in lists), filter by name */
	"ALTER TABLE jobs ADD COLUMN progress_step INTEGER NOT NULL DEFAULT 0;\n"
	"ALTER TABLE jobs ADD COLUMN progress_total INTEGER NOT NULL DEFAULT 0;\n"
	"ALTER TABLE jobs ADD COLUMN last_loss REAL;\n"
	"CREATE INDEX jobs_name ON jobs (name, id);\n",

	/* 4: the audit log of admin actions (db/audit.h), append-only */
	"CREATE TABLE audit (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"   /* never reused: the cursor */
	"	time INTEGER NOT NULL,\n"
	"	actor TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 64),\n"
	"	action TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 64),\n"
	"	target TEXT NOT NULL CHECK (length(target) BETWEEN 1 AND 512),\n"
	"	args TEXT CHECK (args IS NULL OR json_valid(args)),\n"
	"	status INTEGER NOT NULL CHECK (status BETWEEN 100 AND 599),\n"
	"	message TEXT\n"
	") STRICT;\n"
	"CREATE INDEX audit_actor ON audit (actor, id);\n"
	"CREATE INDEX audit_action ON audit (action, id);\n"
	"CREATE INDEX audit_target ON audit (target, id);\n"
	"CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit\n"
	"	BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;\n"
	"CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit\n"
	"	BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;\n",

	/* 5: min/max rollups of every series over aligned step chunks of a few
	 * widths, kept by db_metrics_insert with every new point (db/metrics.c),
	 * so that a downsampled read costs about max_points rows, not the whole
	 * series. Bucket = floor(step / width). Ties keep the lower step. */
	"CREATE TABLE metric_rollup_widths (width INTEGER PRIMARY KEY CHECK (width > 0)) STRICT;\n"
	"INSERT INTO metric_rollup_widths VALUES (16), (128), (1024), (8192), (65536), (524288);\n"
	"CREATE TABLE metric_rollups (\n"
	"	job INTEGER NOT NULL,\n"
	"	name TEXT NOT NULL,\n"
	"	width INTEGER NOT NULL,\n"
	"	bucket INTEGER NOT NULL,\n"
	"	first_step INTEGER NOT NULL,\n"            /* every point, nulls too */
	"	min_step INTEGER,\n"                       /* NULL: the chunk holds only nulls */
	"	min_value REAL,\n"
	"	max_step INTEGER,\n"
	"	max_value REAL,\n"
	"	PRIMARY KEY (job, name, width, bucket)\n"
	") STRICT, WITHOUT ROWID;\n"
	/* the points stored before this version */
	"INSERT INTO metric_rollups (job, name, width, bucket, first_step)\n"
	"	SELECT job, name, width, bucket, min(step) FROM (\n"
	"		SELECT job, name, width, step, CASE WHEN step >= 0 THEN step / width\n"
	"		       ELSE (step + 1) / width - 1 END AS bucket\n"
	"		FROM metrics, metric_rollup_widths)\n"
	"	GROUP BY job, name, width, bucket;\n"
	"UPDATE metric_rollups AS r SET (min_step, min_value) = (SELECT step, value FROM metrics AS m\n"
	"	WHERE m.job = r.job AND m.name = r.name AND m.value IS NOT NULL\n"
	"	AND m.step BETWEEN r.bucket * r.width AND r.bucket * r.width + r.width - 1\n"
	"	ORDER BY m.value, m.step LIMIT 1);\n"
	"UPDATE metric_rollups AS r SET (max_step, max_value) = (SELECT step, value FROM metrics AS m\n"
	"	WHERE m.job = r.job AND m.name = r.name AND m.value IS NOT NULL\n"
	"	AND m.step BETWEEN r.bucket * r.width AND r.bucket * r.width + r.width - 1\n"
	"	ORDER BY m.value DESC, m.step LIMIT 1);\n",

	/* 6: identity. A larch user runs jobs as a Unix user (users.unix_user,
	 * NULL: the Unix user of the same name); a job records the Unix user it
	 * was checked for at submit and runs as (jobs.unix_user, NULL: larchd's
	 * own user, run_as service) */
	"ALTER TABLE users ADD COLUMN unix_user TEXT CHECK (unix_user IS NULL OR\n"
	"	length(unix_user) BETWEEN 1 AND 32);\n"
	"ALTER TABLE jobs ADD COLUMN unix_user TEXT;\n",
};

#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int db_schema_latest(void)
{
	return N_MIGRATIONS;
}

const char *db_migration_sql(int version)
{
	return version >= 1 && version <= N_MIGRATIONS ? migrations[version - 1] : NULL;
}

static const char sql_has_table[] =
	"SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version'";
static const char sql_version[] = "SELECT coalesce(max(version), 0) FROM schema_version";
static const char sql_insert_version[] =
	"INSERT INTO schema_version (version, applied) VALUES (?1, ?2)";

static int read_version(struct db_conn *c, int *version, struct db_err *err)
{
	*version = 0;
	sqlite3_stmt *st = DB_STMT(c, sql_has_table, "read schema version", err);
	if (!st || DB_SQL(c, sqlite3_step(st), "read schema version", err) != SQLITE_ROW)
		return DB_ERROR;
	if (sqlite3_column_int(st, 0) == 0)
		return 0;
	st = DB_STMT(c, sql_version, "read schema version", err);
	if (!st || DB_SQL(c, sqlite3_step(st), "read schema version", err) != SQLITE_ROW)
		return DB_ERROR;
	*version = sqlite3_column_int(st, 0);
	return 0;
}

static int version_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	return read_version(c, arg, err);
}

int db_schema_version(struct db *db, int *version, struct db_err *err)
{
	return db_read(db, version_fn, version, err);
}

struct step {
	int target;       /* the version this step brings the file to */
	int applied;      /* out: 1 if this transaction applied it */
};

static int step_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct step *s = arg;
	s->applied = 0;
	int rc = sqlite3_exec(c->h, "CREATE TABLE IF NOT EXISTS schema_version (\n"
	                      "	version INTEGER PRIMARY KEY,\n"
	                      "	applied INTEGER NOT NULL\n"
	                      ") STRICT", NULL, NULL, NULL);
	if (DB_SQL(c, rc, "create schema_version", err) != SQLITE_OK)
		return DB_ERROR;
	int v;
	if (read_version(c, &v, err))
		return DB_ERROR;
	if (v >= s->target)
		return 0;     /* another process got there first */
	char what[64];
	snprintf(what, sizeof what, "migrate to version %d", s->target);
	rc = sqlite3_exec(c->h, migrations[s->target - 1], NULL, NULL, NULL);
	if (DB_SQL(c, rc, what, err) != SQLITE_OK)
		return DB_ERROR;
	sqlite3_stmt *st = DB_STMT(c, sql_insert_version, what, err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int(st, 1, s->target);
	sqlite3_bind_int64(st, 2, db_now_ms());
	if (DB_STEP_DONE(c, st, what, err))
		return DB_ERROR;
	s->applied = 1;
	return 0;
}

int db_migrate(struct db *db, int *applied, struct db_err *err)
{
	if (applied)
		*applied = 0;
	if (db->opts.readonly)
		return DB_FAIL(err, DB_ERROR, "migrate: the database is open read-only");
	int v;
	int rc = db_schema_version(db, &v, err);
	if (rc)
		return rc;
	if (v > N_MIGRATIONS)
		return DB_FAIL(err, DB_ERROR, "schema version %d is newer than this larchd (%d)",
		               v, N_MIGRATIONS);
	for (int target = v + 1; target <= N_MIGRATIONS; target++) {
		struct step s = { .target = target };
		rc = db_txn(db, step_fn, &s, err);
		if (rc)
			return rc;
		if (applied)
			*applied += s.applied;
	}
	return 0;
}

int db_migrate_open(struct db *db, struct db_err *err)
{
	if (!db->opts.readonly && !db->opts.no_migrate) {
		int rc = db_migrate(db, NULL, err);
		if (rc)
			return rc;
	}
	int v;
	int rc = db_schema_version(db, &v, err);
	if (rc)
		return rc;
	if (v > N_MIGRATIONS)
		return DB_FAIL(err, DB_ERROR, "schema version %d is newer than this larchd (%d)",
		               v, N_MIGRATIONS);
	if (v < N_MIGRATIONS && !db->opts.no_migrate)
		return DB_FAIL(err, DB_ERROR, "schema version %d is older than this larchd (%d) and "
		               "the database is read-only (run larchd db migrate)", v, N_MIGRATIONS);
	return 0;
}
