/* db/tokens.h - users and bearer tokens.
 *
 * A token is "lt_" and 64 lower-case hex digits (32 bytes from getrandom).
 * It is returned once, by db_tokens_create; the database keeps only its
 * SHA-256, and a lookup compares the stored hash in constant time. Roles:
 * admin (everything), user (their own jobs), job (a per-job token that may
 * only post metrics and results for its job; revoked when the job ends).
 *
 * Ownership: inputs are borrowed; outputs are plain structs (fixed buffers),
 * except db_token_list, released with db_token_list_release.
 */
#ifndef LARCH_DB_TOKENS_H
#define LARCH_DB_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

enum db_role { DB_ROLE_ADMIN, DB_ROLE_USER, DB_ROLE_JOB };

/* "admin", "user", "job" (static); NULL out of range. */
const char *db_role_name(enum db_role r);
/* The role named s, or -1. */
int db_role_parse(const char *s);

#define DB_TOKEN_LEN 67          /* strlen("lt_") + 64 */
#define DB_NAME_MAX 64           /* user names: 1..64 bytes */
#define DB_TOKEN_TOUCH_MS 60000  /* last_used is written at most this often */

/* Creates user name with role (admin or user) if missing. DB_CONFLICT if it
 * exists with another role; DB_INVALID for a bad name or role. */
int db_users_ensure(struct db *db, const char *name, enum db_role role, struct db_err *err);

#define DB_UNIX_NAME_MAX 32     /* Unix user names: 1..32 of A-Z a-z 0-9 . _ -, not starting with - */

/* 1 if s is a Unix user name larch accepts (checked before it reaches
 * getpwnam, sacct or a log). */
int db_unix_name_ok(const char *s);

struct db_user {
	char name[DB_NAME_MAX + 1];
	enum db_role role;
	char unix_user[DB_UNIX_NAME_MAX + 1];  /* "" = the Unix user of the same name */
	int64_t created_ms;
};

/* User name; DB_NOT_FOUND if there is none. */
int db_users_get(struct db *db, const char *name, struct db_user *out, struct db_err *err);

/* Maps user name (who must exist) to Unix user unix_user (NULL: the Unix
 * user of the same name). DB_NOT_FOUND, DB_INVALID for a bad Unix name. */
int db_users_set_unix(struct db *db, const char *name, const char *unix_user,
                      struct db_err *err);

/* The Unix user that user's jobs run as into out (DB_UNIX_NAME_MAX + 1
 * bytes): the mapped one, else the user's own name when it is a valid Unix
 * name. DB_NOT_FOUND for no such user, DB_INVALID when the name is not a
 * valid Unix name and no mapping is set. */
int db_users_unix(struct db *db, const char *name, char *out, struct db_err *err);

struct db_token {
	int64_t id;
	char user[DB_NAME_MAX + 1];
	enum db_role role;
	int64_t job;                           /* job tokens: the job id; 0 otherwise */
	int64_t created_ms, revoked_ms, last_used_ms;   /* 0 = never */
};

/* A new token. role admin or user: for user (created with that role if
 * missing; job must be 0). role job: for job, a job that has not ended
 * (user may be NULL: the token belongs to the job's owner). token_out gets
 * the secret, NUL-terminated; info (may be NULL) what was stored. */
int db_tokens_create(struct db *db, const char *user, enum db_role role, int64_t job,
                     char token_out[DB_TOKEN_LEN + 1], struct db_token *info, struct db_err *err);

/* The live token whose secret is token. A malformed, unknown or revoked
 * token is DB_NOT_FOUND (err says which, and never contains the token). */
int db_tokens_lookup(struct db *db, const char *token, struct db_token *out, struct db_err *err);

/* Records that t was used at now_ms (0 = now); does nothing (no write) when
 * t->last_used_ms is less than DB_TOKEN_TOUCH_MS old. */
int db_tokens_touch(struct db *db, const struct db_token *t, int64_t now_ms, struct db_err *err);

/* Revokes token id at time_ms (0 = now). Revoking a revoked token keeps its
 * first revocation time. DB_NOT_FOUND if there is no such token. */
int db_tokens_revoke(struct db *db, int64_t id, int64_t time_ms, struct db_err *err);

struct db_token_list {
	struct db_token *items;      /* owned, by id */
	size_t n;
};

/* Every token (user NULL) or user's, revoked ones included; no secrets. */
int db_tokens_list(struct db *db, const char *user, struct db_token_list *out, struct db_err *err);
void db_token_list_release(struct db_token_list *list);

#endif
