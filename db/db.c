/* db/db.c - open and close, connections, the statement cache, errors. */
#include "db/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ----------------------------------------------------------------- */

void db_err_clear(struct db_err *err)
{
	if (err)
		memset(err, 0, sizeof *err);
}

const char *db_code_name(int code)
{
	switch (code) {
	case DB_OK: return "ok";
	case DB_ERROR: return "error";
	case DB_NOT_FOUND: return "not_found";
	case DB_CONFLICT: return "conflict";
	case DB_ILLEGAL: return "illegal_transition";
	case DB_STALE: return "stale_state";
	case DB_INVALID: return "invalid";
	case DB_BUSY: return "busy";
	case DB_CORRUPT: return "corrupt";
	}
	return "unknown";
}

int db_err_set_(struct db_err *err, int code, int sqlite_rc, const char *file, int line,
                const char *fmt, ...)
{
	if (!err || err->code)
		return code;
	err->code = code;
	err->sqlite_rc = sqlite_rc;
	err->file = file;
	err->line = line;
	memcpy(err->text, "db: ", 4);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->text + 4, sizeof err->text - 4, fmt, ap);
	va_end(ap);
	return code;
}

int db_sql_check_(struct db_conn *c, int rc, const char *what, struct db_err *err,
                  const char *file, int line)
{
	if (DB_SQL_OK(rc))
		return rc;
	const char *msg = sqlite3_errstr(rc);
	if (c && c->h && (sqlite3_errcode(c->h) & 0xff) == (rc & 0xff))
		msg = sqlite3_errmsg(c->h);
	int prim = rc & 0xff;
	/* a constraint failure is bad input (a CHECK, a NOT NULL): the caller's to fix */
	int code = prim == SQLITE_BUSY || prim == SQLITE_LOCKED ? DB_BUSY
	         : prim == SQLITE_CONSTRAINT ? DB_INVALID : DB_ERROR;
	db_err_set_(err, code, rc, file, line, "%s: %s", what, msg);
	return rc;
}

/* ---- statements ------------------------------------------------------------- */

static sqlite3_stmt *prepare(struct db_conn *c, const char *sql, const char *what,
                             struct db_err *err, const char *file, int line)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v3(c->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
	if (rc != SQLITE_OK) {
		db_sql_check_(c, rc == SQLITE_DONE ? SQLITE_ERROR : rc, what, err, file, line);
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

sqlite3_stmt *db_stmt_(struct db_conn *c, const char *sql, const char *what, struct db_err *err,
                       const char *file, int line)
{
	for (int i = 0; i < c->n_slots; i++) {
		if (c->slots[i].sql == sql) {
			sqlite3_stmt *st = c->slots[i].st;
			sqlite3_reset(st);
			sqlite3_clear_bindings(st);
			return st;
		}
	}
	if (c->n_slots == c->cap_slots) {
		int cap = c->cap_slots ? 2 * c->cap_slots : 32;
		struct db_stmt_slot *s = realloc(c->slots, sizeof *s * (size_t)cap);
		if (!s) {
			db_err_set_(err, DB_ERROR, SQLITE_NOMEM, file, line, "%s: out of memory", what);
			return NULL;
		}
		c->slots = s;
		c->cap_slots = cap;
	}
	sqlite3_stmt *st = prepare(c, sql, what, err, file, line);
	if (!st)
		return NULL;
	c->slots[c->n_slots++] = (struct db_stmt_slot){ .sql = sql, .st = st };
	return st;
}

int db_bind_text(sqlite3_stmt *st, int i, const char *s)
{
	return s ? sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

char *db_column_strdup(sqlite3_stmt *st, int i, int *oom)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	if (!s) {
		/* NULL column, or sqlite could not allocate the text conversion */
		if (sqlite3_column_type(st, i) != SQLITE_NULL)
			*oom = 1;
		return NULL;
	}
	size_t n = (size_t)sqlite3_column_bytes(st, i);
	char *d = malloc(n + 1);
	if (!d) {
		*oom = 1;
		return NULL;
	}
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

int db_step_done_(struct db_conn *c, sqlite3_stmt *st, const char *what, struct db_err *err,
                  const char *file, int line)
{
	int rc = db_sql_check_(c, sqlite3_step(st), what, err, file, line);
	if (rc == SQLITE_DONE)
		return 0;
	if (rc == SQLITE_ROW)
		return db_err_set_(err, DB_ERROR, 0, file, line, "%s: returned a row", what);
	return DB_RC(err);
}

/* ---- connections ------------------------------------------------------------ */

void db_conn_close(struct db_conn *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_slots; i++)
		sqlite3_finalize(c->slots[i].st);
	sqlite3_finalize(c->begin);
	sqlite3_finalize(c->begin_immediate);
	sqlite3_finalize(c->commit);
	free(c->chg);
	sqlite3_finalize(c->rollback);
	free(c->slots);
	sqlite3_close(c->h);    /* every statement is finalized: never SQLITE_BUSY */
	free(c);
}

static int exec(struct db_conn *c, const char *sql, const char *what, struct db_err *err)
{
	int rc = sqlite3_exec(c->h, sql, NULL, NULL, NULL);
	return DB_SQL(c, rc, what, err) == SQLITE_OK ? 0 : DB_RC(err);
}

struct db_conn *db_conn_open(struct db *db, int reader, struct db_err *err)
{
	struct db_conn *c = calloc(1, sizeof *c);
	if (!c) {
		DB_FAIL(err, DB_ERROR, "open %s: out of memory", db->path);
		return NULL;
	}
	int flags = SQLITE_OPEN_NOMUTEX;   /* one thread at a time uses a connection */
	if (db->opts.readonly)
		flags |= SQLITE_OPEN_READONLY;
	else
		flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
	int rc = sqlite3_open_v2(db->path, &c->h, flags, NULL);
	if (rc != SQLITE_OK) {
		char what[300];
		snprintf(what, sizeof what, "open %s", db->path);
		DB_SQL(c, rc, what, err);
		db_conn_close(c);
		return NULL;
	}
	sqlite3_extended_result_codes(c->h, 1);
	/* our runners retry busy; SQLite must not sleep on its own */
	sqlite3_busy_timeout(c->h, 0);
	if (exec(c, "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;", "pragmas", err))
		goto fail;
	if (reader && exec(c, "PRAGMA query_only = ON;", "pragma query_only", err))
		goto fail;
	/* after a burst, checkpoints cut the WAL back to 64 MiB */
	if (!reader && exec(c, "PRAGMA journal_size_limit = 67108864;", "pragma journal_size_limit",
	                    err))
		goto fail;
	c->begin = prepare(c, "BEGIN", "prepare begin", err, __FILE__, __LINE__);
	c->begin_immediate = prepare(c, "BEGIN IMMEDIATE", "prepare begin", err, __FILE__, __LINE__);
	c->commit = prepare(c, "COMMIT", "prepare commit", err, __FILE__, __LINE__);
	c->rollback = prepare(c, "ROLLBACK", "prepare rollback", err, __FILE__, __LINE__);
	if (!c->begin || !c->begin_immediate || !c->commit || !c->rollback)
		goto fail;
	return c;
fail:
	db_conn_close(c);
	return NULL;
}

int db_file_private(const char *path, int create, struct db_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd < 0) {
		if (errno == ENOENT && !create)
			return 0;
		return DB_FAIL(err, DB_ERROR, "open %s: %s", path, strerror(errno));
	}
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0)
		rc = DB_FAIL(err, DB_ERROR, "stat %s: %s", path, strerror(errno));
	else if ((st.st_mode & 077) && fchmod(fd, st.st_mode & 0700 & ~0100) != 0)
		rc = DB_FAIL(err, DB_ERROR, "%s: mode %04o lets other users read it, and chmod 0600 "
		             "failed: %s", path, (unsigned)(st.st_mode & 07777), strerror(errno));
	close(fd);
	return rc;
}

/* The database file and its WAL and shared-memory files, mode 0600. */
static int private_files(const char *path, struct db_err *err)
{
	static const char *const suffixes[] = { "-wal", "-shm" };
	if (!*path || *path == ':' || strncmp(path, "file:", 5) == 0)
		return 0;                   /* in memory, or a URI: not ours to chmod */
	int rc = db_file_private(path, 1, err);
	for (size_t i = 0; !rc && i < sizeof suffixes / sizeof suffixes[0]; i++) {
		char other[4096 + 8];
		if ((size_t)snprintf(other, sizeof other, "%s%s", path, suffixes[i]) >= sizeof other)
			return DB_FAIL(err, DB_ERROR, "open %s: path too long", path);
		rc = db_file_private(other, 0, err);
	}
	return rc;
}

/* WAL is a property of the file: set once, by the writer, outside a transaction. */
static int set_wal(struct db_conn *c, struct db_err *err)
{
	sqlite3_stmt *st = NULL;
	int rc = DB_SQL(c, sqlite3_prepare_v2(c->h, "PRAGMA journal_mode = WAL", -1, &st, NULL),
	                "set journal_mode", err);
	if (rc == SQLITE_OK)
		rc = DB_SQL(c, sqlite3_step(st), "set journal_mode", err);
	int ok = rc == SQLITE_ROW &&
	         sqlite3_stricmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
	if (rc == SQLITE_ROW && !ok)
		DB_FAIL(err, DB_ERROR, "set journal_mode: the database cannot use WAL (got %s)",
		        (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return ok ? 0 : DB_RC(err);
}

/* ---- open and close --------------------------------------------------------- */

struct db *db_open(const char *path, const struct db_options *opts, struct db_err *err)
{
	struct db *db = calloc(1, sizeof *db);
	if (!db || !(db->path = strdup(path))) {
		free(db);
		DB_FAIL(err, DB_ERROR, "open %s: out of memory", path);
		return NULL;
	}
	if (opts)
		db->opts = *opts;
	if (db->opts.busy_deadline_ms <= 0)
		db->opts.busy_deadline_ms = 5000;
	if (db->opts.max_readers <= 0)
		db->opts.max_readers = 8;
	pthread_mutex_init(&db->wlock, NULL);
	pthread_mutex_init(&db->plock, NULL);
	pthread_cond_init(&db->pcond, NULL);

	if (!db->opts.readonly && private_files(path, err))
		goto fail;
	db->wconn = db_conn_open(db, 0, err);
	if (!db->wconn)
		goto fail;
	if (!db->opts.readonly && set_wal(db->wconn, err))
		goto fail;
	if (db_migrate_open(db, err))
		goto fail;
	if (!db->opts.readonly && !db->opts.no_group_commit && db_group_start(db, err))
		goto fail;
	return db;
fail:
	db_close(db);
	return NULL;
}

int db_close(struct db *db)
{
	if (!db)
		return 0;
	db_group_stop(db);
	db_conn_close(db->wconn);
	pthread_mutex_lock(&db->plock);
	while (db->readers) {
		struct db_conn *c = db->readers;
		db->readers = c->next;
		db_conn_close(c);
		db->n_readers--;
	}
	int leaked = db->n_readers;   /* a reader still lent: a caller bug */
	pthread_mutex_unlock(&db->plock);
	pthread_mutex_destroy(&db->wlock);
	pthread_mutex_destroy(&db->plock);
	pthread_cond_destroy(&db->pcond);
	free(db->path);
	free(db);
	return leaked ? DB_ERROR : 0;
}

/* ---- small helpers ---------------------------------------------------------- */

int64_t db_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int db_sha256_hex(const void *data, size_t len, char out[65], struct db_err *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (!EVP_Digest(data, len, md, &n, EVP_sha256(), NULL) || n != 32)
		return DB_FAIL(err, DB_ERROR, "sha256: digest failed");
	static const char hex[] = "0123456789abcdef";
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
	return 0;
}
