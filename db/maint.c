/* db/maint.c - `larchd db check` and `larchd db backup`. */
#include "db/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- check ------------------------------------------------------------------ */

struct report {
	char *text;       /* owned */
	size_t len, cap;
	int problems;
	char first[256];
};

static int report_add(struct report *r, const char *line)
{
	if (!r->problems++)
		snprintf(r->first, sizeof r->first, "%s", line);
	size_t n = strlen(line);
	if (r->len + n + 2 > r->cap) {
		size_t cap = (r->len + n + 2) * 2;
		char *t = realloc(r->text, cap);
		if (!t)
			return -1;
		r->text = t;
		r->cap = cap;
	}
	memcpy(r->text + r->len, line, n);
	r->len += n;
	r->text[r->len++] = '\n';
	r->text[r->len] = '\0';
	return 0;
}

static const char sql_integrity[] = "PRAGMA integrity_check";
static const char sql_fk[] = "PRAGMA foreign_key_check";

static int check_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct report *r = arg;
	r->len = 0;
	r->problems = 0;
	if (r->text)
		r->text[0] = '\0';
	sqlite3_stmt *st = DB_STMT(c, sql_integrity, "integrity_check", err);
	if (!st)
		return DB_ERROR;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "integrity_check", err)) == SQLITE_ROW) {
		const char *line = (const char *)sqlite3_column_text(st, 0);
		if (line && strcmp(line, "ok") != 0 && report_add(r, line))
			return DB_FAIL(err, DB_ERROR, "check: out of memory");
	}
	if (rc != SQLITE_DONE)
		return DB_ERROR;
	st = DB_STMT(c, sql_fk, "foreign_key_check", err);
	if (!st)
		return DB_ERROR;
	while ((rc = DB_SQL(c, sqlite3_step(st), "foreign_key_check", err)) == SQLITE_ROW) {
		char line[512], row[32] = "";
		if (sqlite3_column_type(st, 1) != SQLITE_NULL)    /* NULL: a WITHOUT ROWID table */
			snprintf(row, sizeof row, " %lld", (long long)sqlite3_column_int64(st, 1));
		snprintf(line, sizeof line, "foreign key: a %s row%s refers to a missing %s row",
		         (const char *)sqlite3_column_text(st, 0), row,
		         (const char *)sqlite3_column_text(st, 2));
		if (report_add(r, line))
			return DB_FAIL(err, DB_ERROR, "check: out of memory");
	}
	return rc == SQLITE_DONE ? 0 : DB_ERROR;
}

int db_check(struct db *db, char **report, struct db_err *err)
{
	struct report r = { 0 };
	if (report)
		*report = NULL;
	int rc = db_read(db, check_fn, &r, err);
	if (!rc && r.problems)
		rc = DB_FAIL(err, DB_CORRUPT, "check: %d problem%s: %s", r.problems,
		             r.problems == 1 ? "" : "s", r.first);
	if (report && rc != DB_ERROR && rc != DB_BUSY) {
		*report = r.text ? r.text : strdup("");
		if (!*report)
			rc = DB_FAIL(err, DB_ERROR, "check: out of memory");
		return rc;
	}
	free(r.text);
	return rc;
}

/* ---- backup ----------------------------------------------------------------- */

static int fsync_dir_of(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -1;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
	free(copy);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

static int copy_pages(struct db *db, sqlite3 *dst, sqlite3 *src, struct db_err *err)
{
	sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
	if (!b)
		return DB_FAIL(err, DB_ERROR, "backup: %s", sqlite3_errmsg(dst));
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	int rc;
	for (;;) {
		rc = sqlite3_backup_step(b, 1024);
		if (rc == SQLITE_DONE)
			break;
		if (rc == SQLITE_OK)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && ms < db->opts.busy_deadline_ms) {
			nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
			continue;
		}
		break;
	}
	sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE)
		return db_err_set_(err, (rc & 0xff) == SQLITE_BUSY ? DB_BUSY : DB_ERROR, rc, __FILE__,
		                   __LINE__, "backup: %s", sqlite3_errstr(rc));
	rc = sqlite3_errcode(dst);
	if (rc != SQLITE_OK)
		return db_err_set_(err, DB_ERROR, rc, __FILE__, __LINE__, "backup: %s",
		                   sqlite3_errmsg(dst));
	return 0;
}

int db_backup(struct db *db, const char *dst, struct db_err *err)
{
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", dst) >= sizeof tmp)
		return DB_FAIL(err, DB_INVALID, "backup: path too long");
	unlink(tmp);
	if (db_file_private(tmp, 1, err))   /* the copy, its journal and dst: 0600 */
		return DB_ERROR;
	struct db_conn *src = db_conn_open(db, 1, err);
	if (!src) {
		unlink(tmp);
		return DB_ERROR;
	}
	sqlite3 *out = NULL;
	int rc = sqlite3_open_v2(tmp, &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		rc = db_err_set_(err, DB_ERROR, rc, __FILE__, __LINE__, "backup: open %s: %s", tmp,
		                 out ? sqlite3_errmsg(out) : sqlite3_errstr(rc));
		goto done;
	}
	sqlite3_exec(out, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
	rc = copy_pages(db, out, src->h, err);
	if (rc)
		goto done;
	/* the copy must be a whole database before it replaces dst */
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(out, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW ||
	    strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
		rc = DB_FAIL(err, DB_ERROR, "backup: the copy in %s fails quick_check", tmp);
	sqlite3_finalize(st);
done:
	if (out && sqlite3_close(out) != SQLITE_OK && !rc)
		rc = DB_FAIL(err, DB_ERROR, "backup: close %s", tmp);
	db_conn_close(src);
	if (!rc && rename(tmp, dst) != 0)
		rc = DB_FAIL(err, DB_ERROR, "backup: rename %s: %s", tmp, strerror(errno));
	if (!rc && fsync_dir_of(dst) != 0)
		rc = DB_FAIL(err, DB_ERROR, "backup: fsync the folder of %s: %s", dst, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}
