/* db/audit.h - the audit log: every admin action, who did it, when, to
 * what, with which arguments and how it ended.
 *
 * Append-only (triggers refuse UPDATE and DELETE), one row per action,
 * failed ones included (their status and error message). Entries are listed
 * newest first, a page at a time, with an opaque cursor as db_jobs_list
 * has; filters by actor, action and target use their own indexes.
 *
 * Ownership: inputs are borrowed for the call; a list owns its strings,
 * released with db_audit_list_release (which accepts a zeroed list).
 */
#ifndef LARCH_DB_AUDIT_H
#define LARCH_DB_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "db/jobs.h"   /* DB_LIST_MAX, DB_CURSOR_MAX */

#define DB_AUDIT_NAME_MAX 64      /* actor, action: 1..64 bytes */
#define DB_AUDIT_TARGET_MAX 512   /* target: 1..512 bytes */
#define DB_AUDIT_TEXT_MAX 4096    /* args (JSON text) and message: at most this many bytes */
#define DB_AUDIT_CLIENT_MAX 64    /* client: at most this many bytes */

struct db_audit_new {
	const char *actor;       /* required: the admin's user name */
	const char *action;      /* required: "node.drain", "job.hold", ... */
	const char *target;      /* required: "nodes/n1", "jobs/j-000123" */
	const char *args;        /* the arguments as JSON text, or NULL */
	int status;              /* required: the HTTP status the action was answered with */
	const char *message;     /* what happened or why it failed; may be NULL */
	const char *client;      /* the client's address ("10.0.0.7"); may be NULL */
	int64_t time_ms;         /* 0 = now */
};

/* Appends an entry. *id (may be NULL) gets its id. DB_INVALID for a missing
 * or over-long field, args that are not JSON, or a status outside 100..599. */
int db_audit_insert(struct db *db, const struct db_audit_new *e, int64_t *id,
                    struct db_err *err);

struct db_audit_entry {
	int64_t id, time_ms;
	char *actor, *action, *target;
	char *args;              /* JSON text, or NULL */
	int status;
	char *message;           /* NULL if none */
	char *client;            /* NULL if not recorded */
};

struct db_audit_filter {
	const char *actor;       /* NULL = any; else exact */
	const char *action;
	const char *target;
	int limit;               /* 1..DB_LIST_MAX; 0 = 50 */
	const char *cursor;      /* NULL/"" = first page; else a next_cursor from before */
};

struct db_audit_list {
	struct db_audit_entry *entries;   /* owned, n of them, newest first */
	size_t n;
	char next_cursor[DB_CURSOR_MAX];  /* "" on the last page */
};

/* One page, newest first; pages never repeat or skip an entry, whatever is
 * appended meanwhile. A cursor that is not one of ours (a job list's
 * included) is DB_INVALID. */
int db_audit_list(struct db *db, const struct db_audit_filter *f, struct db_audit_list *out,
                  struct db_err *err);
void db_audit_list_release(struct db_audit_list *list);

#endif
