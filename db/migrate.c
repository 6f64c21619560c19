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

	/* 7: usage accounting (db/usage.h). usage_jobs holds each finished job's
	 * usage once: local jobs' from their own rows (the trigger jobs_usage,
	 * when a job of the local executor that ran gets its end time), Slurm
	 * jobs' from Slurm's accounting (sacct, added by larchd's reader). Each
	 * job is spread over the UTC hours it ran, as the CPU and GPU
	 * milliseconds of each hour (the job itself counted in the hour it
	 * ended), into usage_hours and, the same summed by day, usage_days, by
	 * usage_keys' id of its (source, user, account, partition): a query reads
	 * whole days from usage_days and only the hours at its two ends, with
	 * integer keys. A job longer than usage_hour_offsets has hours (a year)
	 * gives its first hour all the time before. */
	"CREATE TABLE usage_jobs (\n"
	"	source TEXT NOT NULL CHECK (source IN ('local', 'slurm')),\n"
	"	key TEXT NOT NULL,\n"                      /* local: the job id; slurm: id@submit@start */
	"	user TEXT NOT NULL,\n"                     /* local: the owner; slurm: the Unix user */
	"	account TEXT NOT NULL,\n"                  /* '' for none */
	"	partition TEXT NOT NULL,\n"
	"	start_ms INTEGER NOT NULL CHECK (start_ms >= 0),\n"
	"	end_ms INTEGER NOT NULL CHECK (end_ms >= start_ms),\n"
	"	cpus INTEGER NOT NULL CHECK (cpus >= 0),\n"
	"	gpus INTEGER NOT NULL CHECK (gpus >= 0),\n"
	"	PRIMARY KEY (source, key)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TABLE usage_keys (\n"
	"	id INTEGER PRIMARY KEY,\n"
	"	source TEXT NOT NULL,\n"
	"	user TEXT NOT NULL,\n"
	"	account TEXT NOT NULL,\n"
	"	partition TEXT NOT NULL,\n"
	"	UNIQUE (source, user, account, partition)\n"
	") STRICT;\n"
	"CREATE TABLE usage_hours (\n"
	"	hour INTEGER NOT NULL,\n"                  /* hours since the epoch (UTC) */
	"	key INTEGER NOT NULL,\n"                   /* usage_keys.id */
	"	cpu_ms INTEGER NOT NULL,\n"
	"	gpu_ms INTEGER NOT NULL,\n"
	"	jobs INTEGER NOT NULL,\n"
	"	PRIMARY KEY (hour, key)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TABLE usage_days (\n"
	"	day INTEGER NOT NULL,\n"                   /* days since the epoch (UTC) */
	"	key INTEGER NOT NULL,\n"
	"	cpu_ms INTEGER NOT NULL,\n"
	"	gpu_ms INTEGER NOT NULL,\n"
	"	jobs INTEGER NOT NULL,\n"
	"	PRIMARY KEY (day, key)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TABLE usage_polls (\n"             /* how far each source has been read */
	"	source TEXT PRIMARY KEY NOT NULL,\n"
	"	polled_to INTEGER NOT NULL\n"
	") STRICT;\n"
	"CREATE TABLE usage_hour_offsets (n INTEGER PRIMARY KEY) STRICT;\n"
	"WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n < 8783)\n"
	"	INSERT INTO usage_hour_offsets SELECT n FROM k;\n"
	"CREATE TRIGGER usage_jobs_hours AFTER INSERT ON usage_jobs BEGIN\n"
	"	INSERT OR IGNORE INTO usage_keys (source, user, account, partition)\n"
	"		VALUES (new.source, new.user, new.account, new.partition);\n"
	"	INSERT INTO usage_hours (hour, key, cpu_ms, gpu_ms, jobs)\n"
	"	SELECT h, (SELECT id FROM usage_keys WHERE source = new.source AND user = new.user\n"
	"			AND account = new.account AND partition = new.partition),\n"
	"		new.cpus * ms, new.gpus * ms, h = h1\n"
	"	FROM (SELECT h0 + n AS h, h1, min(new.end_ms, (h0 + n + 1) * 3600000) -\n"
	"			CASE WHEN n = 0 THEN new.start_ms ELSE (h0 + n) * 3600000 END AS ms\n"
	"		FROM (SELECT max(new.start_ms / 3600000, h1 - 8783) AS h0, h1\n"
	"			FROM (SELECT max(new.start_ms / 3600000, (new.end_ms - 1) / 3600000) AS h1)),\n"
	"		usage_hour_offsets WHERE n <= h1 - h0)\n"
	"	WHERE true\n"
	"	ON CONFLICT DO UPDATE SET cpu_ms = cpu_ms + excluded.cpu_ms,\n"
	"		gpu_ms = gpu_ms + excluded.gpu_ms, jobs = jobs + excluded.jobs;\n"
	"	INSERT INTO usage_days (day, key, cpu_ms, gpu_ms, jobs)\n"
	"	SELECT h / 24, (SELECT id FROM usage_keys WHERE source = new.source AND user = new.user\n"
	"			AND account = new.account AND partition = new.partition),\n"
	"		new.cpus * sum(ms), new.gpus * sum(ms), sum(h = h1)\n"
	"	FROM (SELECT h0 + n AS h, h1, min(new.end_ms, (h0 + n + 1) * 3600000) -\n"
	"			CASE WHEN n = 0 THEN new.start_ms ELSE (h0 + n) * 3600000 END AS ms\n"
	"		FROM (SELECT max(new.start_ms / 3600000, h1 - 8783) AS h0, h1\n"
	"			FROM (SELECT max(new.start_ms / 3600000, (new.end_ms - 1) / 3600000) AS h1)),\n"
	"		usage_hour_offsets WHERE n <= h1 - h0)\n"
	"	WHERE true GROUP BY h / 24\n"
	"	ON CONFLICT DO UPDATE SET cpu_ms = cpu_ms + excluded.cpu_ms,\n"
	"		gpu_ms = gpu_ms + excluded.gpu_ms, jobs = jobs + excluded.jobs;\n"
	"END;\n"
	"CREATE TRIGGER jobs_usage AFTER UPDATE OF end_time ON jobs\n"
	"	WHEN old.end_time IS NULL AND new.end_time IS NOT NULL AND new.executor = 'local'\n"
	"	AND new.start_time IS NOT NULL BEGIN\n"
	"	INSERT OR IGNORE INTO usage_jobs (source, key, user, account, partition, start_ms,\n"
	"		end_ms, cpus, gpus)\n"
	"	VALUES ('local', printf('j-%06d', new.id), new.owner,\n"
	"		coalesce(json_extract(new.spec, '$.resources.account'), ''),\n"
	"		coalesce(new.partition, ''), new.start_time, max(new.start_time, new.end_time),\n"
	"		coalesce(json_extract(new.spec, '$.resources.cpus_per_task'), 1) *\n"
	"		coalesce(json_extract(new.spec, '$.parallel.ranks'), 1),\n"
	"		coalesce(json_extract(new.spec, '$.resources.gpus_per_node'), 0) *\n"
	"		coalesce(json_extract(new.spec, '$.resources.nodes'), 1));\n"
	"END;\n",

	/* 8: sweeps (a parent over ordinary child jobs) and labels. A child
	 * is a job with sweep set, its index in the sweep and the axis values
	 * it was made with (params); labels are a JSON object of strings on
	 * jobs and sweeps. The target and early-stop rule are columns so that
	 * the sweep's summary is one query. */
	"CREATE TABLE sweeps (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
	"	owner TEXT NOT NULL REFERENCES users(name),\n"
	"	name TEXT NOT NULL,\n"
	"	definition TEXT NOT NULL CHECK (json_valid(definition)),\n"
	"	method TEXT NOT NULL CHECK (method IN ('grid', 'random')),\n"
	"	max_parallel INTEGER NOT NULL CHECK (max_parallel >= 0),\n"   /* 0: no limit */
	"	target_metric TEXT,\n"
	"	target_value REAL,\n"
	"	target_mode TEXT CHECK (target_mode IN ('max', 'min')),\n"
	"	early_stop_after INTEGER,\n"              /* median rule after this step; NULL: none */
	"	labels TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(labels)),\n"
	"	submit_time INTEGER NOT NULL\n"
	") STRICT;\n"
	"CREATE INDEX sweeps_owner ON sweeps (owner, id);\n"
	"ALTER TABLE jobs ADD COLUMN sweep INTEGER REFERENCES sweeps(id);\n"
	"ALTER TABLE jobs ADD COLUMN sweep_index INTEGER;\n"
	"ALTER TABLE jobs ADD COLUMN params TEXT CHECK (params IS NULL OR json_valid(params));\n"
	"ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(labels));\n"
	"CREATE INDEX jobs_sweep ON jobs (sweep, sweep_index) WHERE sweep IS NOT NULL;\n",

	/* 9: webhooks (db/webhooks.h). A hook is a user's URL, the event types
	 * it wants (a JSON array) and its secret. The outbox is written by the
	 * trigger job_events_webhooks in the transaction of the job event
	 * itself: one webhook_events row per event some hook wants (a job's
	 * change of state as job.<state in lower case>; sweep.completed when
	 * the last child of a sweep ends), and one pending webhook_deliveries
	 * row per hook that wants it. The body is fixed at the first attempt
	 * (webhook_events.body), so every attempt sends the same bytes. */
	"CREATE TABLE webhooks (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
	"	owner TEXT NOT NULL REFERENCES users(name),\n"
	"	url TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),\n"
	"	events TEXT NOT NULL CHECK (json_valid(events) AND json_type(events) = 'array'),\n"
	"	secret TEXT NOT NULL CHECK (length(secret) BETWEEN 1 AND 256),\n"
	"	created INTEGER NOT NULL\n"
	") STRICT;\n"
	"CREATE INDEX webhooks_owner ON webhooks (owner, id);\n"
	"CREATE TABLE webhook_events (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"   /* the event id receivers dedup by */
	"	type TEXT NOT NULL,\n"
	"	job INTEGER NOT NULL REFERENCES jobs(id),\n"   /* sweep.completed: the last child */
	"	seq INTEGER NOT NULL,\n"                   /* the job_events row */
	"	sweep INTEGER REFERENCES sweeps(id),\n"    /* sweep.completed only */
	"	time INTEGER NOT NULL,\n"
	"	body TEXT CHECK (body IS NULL OR json_valid(body))\n"
	") STRICT;\n"
	"CREATE UNIQUE INDEX webhook_events_job ON webhook_events (job, seq, type);\n"
	"CREATE UNIQUE INDEX webhook_events_sweep ON webhook_events (sweep)\n"
	"	WHERE type = 'sweep.completed';\n"
	"CREATE TABLE webhook_deliveries (\n"
	"	id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
	"	hook INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,\n"
	"	event INTEGER NOT NULL REFERENCES webhook_events(id),\n"
	"	state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered',\n"
	"		'failed')),\n"
	"	attempts INTEGER NOT NULL DEFAULT 0,\n"
	"	next_attempt INTEGER NOT NULL,\n"
	"	created INTEGER NOT NULL,\n"
	"	UNIQUE (hook, event)\n"
	") STRICT;\n"
	"CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt)\n"
	"	WHERE state = 'pending';\n"
	"CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (hook, id);\n"
	"CREATE TABLE webhook_attempts (\n"
	"	delivery INTEGER NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,\n"
	"	n INTEGER NOT NULL,\n"
	"	time INTEGER NOT NULL,\n"
	"	status INTEGER,\n"                         /* the HTTP status; NULL: no answer */
	"	error TEXT,\n"                             /* NULL: a 2xx */
	"	duration_ms INTEGER NOT NULL,\n"
	"	PRIMARY KEY (delivery, n)\n"
	") STRICT, WITHOUT ROWID;\n"
	"CREATE TRIGGER job_events_webhooks AFTER INSERT ON job_events\n"
	"	WHEN new.from_state IS NOT new.to_state AND new.to_state != 'PENDING'\n"
	"	AND EXISTS (SELECT 1 FROM webhooks WHERE owner = (SELECT owner FROM jobs\n"
	"		WHERE id = new.job)) BEGIN\n"
	"	INSERT INTO webhook_events (type, job, seq, time)\n"
	"	SELECT 'job.' || lower(new.to_state), new.job, new.seq, new.time\n"
	"	WHERE EXISTS (SELECT 1 FROM webhooks AS w, json_each(w.events) AS e\n"
	"		WHERE w.owner = (SELECT owner FROM jobs WHERE id = new.job)\n"
	"		AND e.value = 'job.' || lower(new.to_state));\n"
	"	INSERT OR IGNORE INTO webhook_events (type, job, seq, sweep, time)\n"
	"	SELECT 'sweep.completed', new.job, new.seq, j.sweep, new.time FROM jobs AS j\n"
	"	WHERE j.id = new.job AND j.sweep IS NOT NULL\n"
	"	AND new.to_state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT')\n"
	"	AND NOT EXISTS (SELECT 1 FROM jobs AS c WHERE c.sweep = j.sweep AND c.id != new.job\n"
	"		AND c.state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT'))\n"
	"	AND EXISTS (SELECT 1 FROM webhooks AS w, json_each(w.events) AS e\n"
	"		WHERE w.owner = j.owner AND e.value = 'sweep.completed');\n"
	"	INSERT OR IGNORE INTO webhook_deliveries (hook, event, next_attempt, created)\n"
	"	SELECT w.id, ev.id, new.time, new.time FROM webhook_events AS ev, webhooks AS w\n"
	"	WHERE ev.job = new.job AND ev.seq = new.seq\n"
	"	AND w.owner = (SELECT owner FROM jobs WHERE id = new.job)\n"
	"	AND EXISTS (SELECT 1 FROM json_each(w.events) AS e WHERE e.value = ev.type);\n"
	"END;\n",

	/* 10: the client address of each audit entry (api_request.client: the
	 * peer, or what a trusted proxy said); NULL for older entries */
	"ALTER TABLE audit ADD COLUMN client TEXT CHECK (client IS NULL OR length(client) <= 64);\n",

	/* 11: the nodes Slurm gave a job (its NodeList, "node[1-2]"), as the
	 * executor last saw them; NULL: none yet, or the local executor */
	"ALTER TABLE jobs ADD COLUMN node_list TEXT CHECK (node_list IS NULL OR length(node_list) <= 255);\n",
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
		return 0;     /* another process got there h0 */
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
