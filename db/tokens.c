/* db/tokens.c - users and hashed bearer tokens. */
#include "db/tokens.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "db/internal.h"
#include "db/jobs.h"

static const char *const role_names[] = { "admin", "user", "job" };

const char *db_role_name(enum db_role r)
{
	return (int)r >= 0 && r <= DB_ROLE_JOB ? role_names[r] : NULL;
}

int db_role_parse(const char *s)
{
	for (int i = 0; s && i <= DB_ROLE_JOB; i++)
		if (strcmp(s, role_names[i]) == 0)
			return i;
	return -1;
}

static int name_ok(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	return n >= 1 && n <= DB_NAME_MAX;
}

/* ---- users ------------------------------------------------------------------ */

static const char sql_user_put[] =
	"INSERT INTO users (name, role, created) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING";
static const char sql_user_role[] = "SELECT role FROM users WHERE name = ?1";

static int ensure_user(struct db_conn *c, const char *name, enum db_role role, int64_t now,
                       struct db_err *err)
{
	sqlite3_stmt *st = DB_STMT(c, sql_user_put, "create user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, name);
	db_bind_text(st, 2, role_names[role]);
	sqlite3_bind_int64(st, 3, now);
	if (DB_STEP_DONE(c, st, "create user", err))
		return DB_RC(err);
	st = DB_STMT(c, sql_user_role, "create user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, name);
	if (DB_SQL(c, sqlite3_step(st), "create user", err) != SQLITE_ROW)
		return DB_RC(err);
	const char *have = (const char *)sqlite3_column_text(st, 0);
	if (!have)
		return DB_FAIL(err, DB_ERROR, "create user: out of memory");
	if (strcmp(have, role_names[role]) != 0)
		return DB_FAIL(err, DB_CONFLICT, "user \"%s\" exists with role %s, not %s", name, have,
		               role_names[role]);
	return 0;
}

struct user_arg {
	const char *name;
	enum db_role role;
	int64_t now;
};

static int user_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct user_arg *a = arg;
	return ensure_user(c, a->name, a->role, a->now, err);
}

int db_users_ensure(struct db *db, const char *name, enum db_role role, struct db_err *err)
{
	if (!name_ok(name))
		return DB_FAIL(err, DB_INVALID, "create user: name must be 1 to %d bytes", DB_NAME_MAX);
	if (role != DB_ROLE_ADMIN && role != DB_ROLE_USER)
		return DB_FAIL(err, DB_INVALID, "create user: role must be admin or user");
	struct user_arg a = { name, role, db_now_ms() };
	return db_txn(db, user_fn, &a, err);
}

int db_unix_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n < 1 || n > DB_UNIX_NAME_MAX || s[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '.' || ch == '_' || ch == '-'))
			return 0;
	}
	return strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static const char sql_user_get[] =
	"SELECT name, role, coalesce(unix_user, ''), created FROM users WHERE name = ?1";
static const char sql_user_set_unix[] = "UPDATE users SET unix_user = ?2 WHERE name = ?1";

struct user_get_arg {
	const char *name;
	struct db_user *out;
};

static int user_get_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct user_get_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_user_get, "get user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->name);
	int rc = DB_SQL(c, sqlite3_step(st), "get user", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "no user \"%s\"", a->name);
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	memset(a->out, 0, sizeof *a->out);
	snprintf(a->out->name, sizeof a->out->name, "%s", (const char *)sqlite3_column_text(st, 0));
	int role = db_role_parse((const char *)sqlite3_column_text(st, 1));
	a->out->role = role < 0 ? DB_ROLE_USER : (enum db_role)role;
	snprintf(a->out->unix_user, sizeof a->out->unix_user, "%s",
	         (const char *)sqlite3_column_text(st, 2));
	a->out->created_ms = sqlite3_column_int64(st, 3);
	return 0;
}

int db_users_get(struct db *db, const char *name, struct db_user *out, struct db_err *err)
{
	if (!name_ok(name))
		return DB_FAIL(err, DB_NOT_FOUND, "no user with that name");
	struct user_get_arg a = { name, out };
	return db_read(db, user_get_fn, &a, err);
}

struct set_unix_arg {
	const char *name, *unix_user;
};

static int set_unix_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct set_unix_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_user_set_unix, "map user", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->name);
	db_bind_text(st, 2, a->unix_user);
	if (DB_STEP_DONE(c, st, "map user", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0)
		return DB_FAIL(err, DB_NOT_FOUND, "no user \"%s\"", a->name);
	return 0;
}

int db_users_set_unix(struct db *db, const char *name, const char *unix_user,
                      struct db_err *err)
{
	if (!name_ok(name))
		return DB_FAIL(err, DB_NOT_FOUND, "no user with that name");
	if (unix_user && !db_unix_name_ok(unix_user))
		return DB_FAIL(err, DB_INVALID, "unix user: must be 1 to %d characters of A-Z a-z "
		               "0-9 . _ - not starting with -", DB_UNIX_NAME_MAX);
	struct set_unix_arg a = { name, unix_user };
	return db_txn(db, set_unix_fn, &a, err);
}

int db_users_unix(struct db *db, const char *name, char *out, struct db_err *err)
{
	struct db_user u;
	int rc = db_users_get(db, name, &u, err);
	if (rc)
		return rc;
	const char *unix_user = u.unix_user[0] ? u.unix_user : u.name;
	if (!db_unix_name_ok(unix_user))
		return DB_FAIL(err, DB_INVALID, "user \"%s\" is not a Unix user name and is mapped to "
		               "none (larchd token create --user NAME --unix-user UNIX maps it)", name);
	memcpy(out, unix_user, strlen(unix_user) + 1);   /* db_unix_name_ok: fits */
	return 0;
}

/* ---- secrets ---------------------------------------------------------------- */

static int token_hash(const char *token, unsigned char md[32], struct db_err *err)
{
	unsigned int n = 0;
	if (!EVP_Digest(token, strlen(token), md, &n, EVP_sha256(), NULL) || n != 32)
		return DB_FAIL(err, DB_ERROR, "token: sha256 failed");
	return 0;
}

static int token_new(char out[DB_TOKEN_LEN + 1], struct db_err *err)
{
	unsigned char r[32];
	size_t got = 0;
	while (got < sizeof r) {
		ssize_t k = getrandom(r + got, sizeof r - got, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return DB_FAIL(err, DB_ERROR, "create token: getrandom: %s", strerror(errno));
		got += (size_t)k;
	}
	static const char hex[] = "0123456789abcdef";
	memcpy(out, "lt_", 3);
	for (size_t i = 0; i < sizeof r; i++) {
		out[3 + 2 * i] = hex[r[i] >> 4];
		out[3 + 2 * i + 1] = hex[r[i] & 15];
	}
	out[DB_TOKEN_LEN] = '\0';
	return 0;
}

static int token_well_formed(const char *t)
{
	return t && strlen(t) == DB_TOKEN_LEN && memcmp(t, "lt_", 3) == 0 &&
	       strspn(t + 3, "0123456789abcdef") == 64;
}

/* ---- create ----------------------------------------------------------------- */

static const char sql_job_owner[] = "SELECT owner, state FROM jobs WHERE id = ?1";
static const char sql_token_put[] =
	"INSERT INTO tokens (user, role, job, hash, created) VALUES (?1, ?2, ?3, ?4, ?5)";

struct create_arg {
	const char *user;
	enum db_role role;
	int64_t job, now;
	unsigned char hash[32];
	struct db_token info;
};

static int create_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct create_arg *a = arg;
	memset(&a->info, 0, sizeof a->info);
	sqlite3_stmt *st;
	if (a->role == DB_ROLE_JOB) {
		st = DB_STMT(c, sql_job_owner, "create token", err);
		if (!st)
			return DB_ERROR;
		sqlite3_bind_int64(st, 1, a->job);
		int rc = DB_SQL(c, sqlite3_step(st), "create token", err);
		char sid[DB_JOB_ID_MAX];
		db_job_id_format(a->job, sid);
		if (rc == SQLITE_DONE)
			return DB_FAIL(err, DB_NOT_FOUND, "create token: no job %s", sid);
		if (rc != SQLITE_ROW)
			return DB_RC(err);
		const char *owner = (const char *)sqlite3_column_text(st, 0);
		int state = db_state_parse((const char *)sqlite3_column_text(st, 1));
		if (!owner || state < 0)
			return DB_FAIL(err, DB_ERROR, "create token: read job %s failed", sid);
		if (db_state_final((enum db_state)state))
			return DB_FAIL(err, DB_INVALID, "create token: job %s has ended", sid);
		if (a->user && strcmp(a->user, owner) != 0)
			return DB_FAIL(err, DB_INVALID, "create token: job %s belongs to another user", sid);
		snprintf(a->info.user, sizeof a->info.user, "%s", owner);
	} else {
		if (ensure_user(c, a->user, a->role, a->now, err))
			return DB_RC(err);
		snprintf(a->info.user, sizeof a->info.user, "%s", a->user);
	}
	st = DB_STMT(c, sql_token_put, "create token", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->info.user);
	db_bind_text(st, 2, role_names[a->role]);
	if (a->role == DB_ROLE_JOB)
		sqlite3_bind_int64(st, 3, a->job);
	sqlite3_bind_blob(st, 4, a->hash, 32, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, a->now);
	if (DB_STEP_DONE(c, st, "create token", err))
		return DB_RC(err);
	a->info.id = sqlite3_last_insert_rowid(c->h);
	a->info.role = a->role;
	a->info.job = a->role == DB_ROLE_JOB ? a->job : 0;
	a->info.created_ms = a->now;
	return 0;
}

int db_tokens_create(struct db *db, const char *user, enum db_role role, int64_t job,
                     char token_out[DB_TOKEN_LEN + 1], struct db_token *info, struct db_err *err)
{
	token_out[0] = '\0';
	if (info)
		memset(info, 0, sizeof *info);
	if (!db_role_name(role))
		return DB_FAIL(err, DB_INVALID, "create token: no such role");
	if (role == DB_ROLE_JOB ? (job <= 0 || (user && !name_ok(user))) : (job != 0 || !name_ok(user)))
		return DB_FAIL(err, DB_INVALID, role == DB_ROLE_JOB
		               ? "create token: a job token needs a job"
		               : "create token: needs a user name of 1 to 64 bytes and no job");
	char secret[DB_TOKEN_LEN + 1];
	struct create_arg a = { .user = user, .role = role, .job = job, .now = db_now_ms() };
	if (token_new(secret, err) || token_hash(secret, a.hash, err))
		return DB_RC(err);
	int rc = db_txn(db, create_fn, &a, err);
	if (!rc) {
		memcpy(token_out, secret, sizeof secret);
		if (info)
			*info = a.info;
	}
	OPENSSL_cleanse(secret, sizeof secret);
	return rc;
}

/* ---- lookup, touch, revoke, list ---------------------------------------------- */

#define TOKEN_COLUMNS "id, user, role, job, created, revoked_at, last_used"
static const char sql_lookup[] = "SELECT " TOKEN_COLUMNS ", hash FROM tokens WHERE hash = ?1";

static int read_token(sqlite3_stmt *st, struct db_token *t, struct db_err *err)
{
	memset(t, 0, sizeof *t);
	const char *user = (const char *)sqlite3_column_text(st, 1);
	int role = db_role_parse((const char *)sqlite3_column_text(st, 2));
	if (!user || role < 0)
		return DB_FAIL(err, DB_ERROR, "read token: out of memory");
	t->id = sqlite3_column_int64(st, 0);
	snprintf(t->user, sizeof t->user, "%s", user);
	t->role = (enum db_role)role;
	t->job = sqlite3_column_int64(st, 3);
	t->created_ms = sqlite3_column_int64(st, 4);
	t->revoked_ms = sqlite3_column_int64(st, 5);
	t->last_used_ms = sqlite3_column_int64(st, 6);
	return 0;
}

struct lookup_arg {
	unsigned char hash[32];
	struct db_token *out;
};

static int lookup_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct lookup_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_lookup, "look up token", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_blob(st, 1, a->hash, 32, SQLITE_STATIC);
	int rc = DB_SQL(c, sqlite3_step(st), "look up token", err);
	if (rc == SQLITE_DONE)
		return DB_FAIL(err, DB_NOT_FOUND, "unknown token");
	if (rc != SQLITE_ROW)
		return DB_RC(err);
	const void *stored = sqlite3_column_blob(st, 7);
	if (!stored || sqlite3_column_bytes(st, 7) != 32 || CRYPTO_memcmp(stored, a->hash, 32) != 0)
		return DB_FAIL(err, DB_NOT_FOUND, "unknown token");
	if (read_token(st, a->out, err))
		return DB_RC(err);
	if (a->out->revoked_ms)
		return DB_FAIL(err, DB_NOT_FOUND, "token %lld is revoked", (long long)a->out->id);
	return 0;
}

int db_tokens_lookup(struct db *db, const char *token, struct db_token *out, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	if (!token_well_formed(token))
		return DB_FAIL(err, DB_NOT_FOUND, "malformed token");
	struct lookup_arg a = { .out = out };
	if (token_hash(token, a.hash, err))
		return DB_RC(err);
	int rc = db_read(db, lookup_fn, &a, err);
	if (rc)
		memset(out, 0, sizeof *out);
	return rc;
}

static const char sql_touch[] =
	"UPDATE tokens SET last_used = ?2 WHERE id = ?1 AND (last_used IS NULL OR last_used < ?2)";

struct touch_arg {
	int64_t id, now;
};

static int touch_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct touch_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_touch, "touch token", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	sqlite3_bind_int64(st, 2, a->now);
	return DB_STEP_DONE(c, st, "touch token", err);
}

int db_tokens_touch(struct db *db, const struct db_token *t, int64_t now_ms, struct db_err *err)
{
	struct touch_arg a = { t->id, now_ms ? now_ms : db_now_ms() };
	if (t->last_used_ms && a.now - t->last_used_ms < DB_TOKEN_TOUCH_MS)
		return 0;
	return db_txn(db, touch_fn, &a, err);
}

static const char sql_revoke[] =
	"UPDATE tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1";

static int revoke_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct touch_arg *a = arg;
	sqlite3_stmt *st = DB_STMT(c, sql_revoke, "revoke token", err);
	if (!st)
		return DB_ERROR;
	sqlite3_bind_int64(st, 1, a->id);
	sqlite3_bind_int64(st, 2, a->now);
	if (DB_STEP_DONE(c, st, "revoke token", err))
		return DB_RC(err);
	if (sqlite3_changes(c->h) == 0)
		return DB_FAIL(err, DB_NOT_FOUND, "revoke token: no token %lld", (long long)a->id);
	return 0;
}

int db_tokens_revoke(struct db *db, int64_t id, int64_t time_ms, struct db_err *err)
{
	struct touch_arg a = { id, time_ms ? time_ms : db_now_ms() };
	return db_txn(db, revoke_fn, &a, err);
}

static const char sql_list[] =
	"SELECT " TOKEN_COLUMNS " FROM tokens WHERE ?1 IS NULL OR user = ?1 ORDER BY id";

struct list_arg {
	const char *user;
	struct db_token_list *out;
};

static int list_fn(struct db_conn *c, void *arg, struct db_err *err)
{
	struct list_arg *a = arg;
	db_token_list_release(a->out);
	sqlite3_stmt *st = DB_STMT(c, sql_list, "list tokens", err);
	if (!st)
		return DB_ERROR;
	db_bind_text(st, 1, a->user);
	size_t cap = 0;
	int rc;
	while ((rc = DB_SQL(c, sqlite3_step(st), "list tokens", err)) == SQLITE_ROW) {
		if (a->out->n == cap) {
			cap = cap ? 2 * cap : 16;
			struct db_token *items = realloc(a->out->items, cap * sizeof *items);
			if (!items)
				return DB_FAIL(err, DB_ERROR, "list tokens: out of memory");
			a->out->items = items;
		}
		if (read_token(st, &a->out->items[a->out->n], err))
			return DB_RC(err);
		a->out->n++;
	}
	return rc == SQLITE_DONE ? 0 : DB_RC(err);
}

int db_tokens_list(struct db *db, const char *user, struct db_token_list *out, struct db_err *err)
{
	memset(out, 0, sizeof *out);
	struct list_arg a = { user, out };
	int rc = db_read(db, list_fn, &a, err);
	if (rc)
		db_token_list_release(out);
	return rc;
}

void db_token_list_release(struct db_token_list *list)
{
	if (!list)
		return;
	free(list->items);
	memset(list, 0, sizeof *list);
}
