/* service/auth_db.h - the API's bearer tokens, backed by the database.
 *
 * svc_auth_lookup is larchd's struct api_ctx.auth_lookup (api/auth.h): the
 * token's SHA-256 is looked up in db/tokens.h (constant-time compare there),
 * its last use recorded (at most once a minute), and the db role mapped to
 * the API's: admin -> API_ROLE_ADMIN, user -> API_ROLE_USER, job ->
 * API_ROLE_JOB with the job's id ("j-000123"). Unknown, malformed or revoked
 * tokens are API_AUTH_UNKNOWN (401); a database that fails or stays locked is
 * API_AUTH_FAILED (api/auth.h has no "busy" answer yet: 500).
 *
 * Admin and user principals are cached for a few seconds (a lookup is a
 * database transaction; pollers repeat their token). A revoke must call
 * svc_auth_tokens_changed, which rewrites the stamp in
 * STATE_DIR/tokens.changed; every lookup compares that stamp (the file is
 * mapped: a memory load), so the next request after a revoke is answered
 * from the database. Job tokens are not cached.
 *
 * svc_admin_token_ensure makes the first admin token on larchd's first start.
 */
#ifndef LARCH_SERVICE_AUTH_DB_H
#define LARCH_SERVICE_AUTH_DB_H

#include <stddef.h>

#include "api/request.h"

struct db;

#define SVC_ADMIN_USER "admin"
#define SVC_TOKENS_STAMP "tokens.changed"

struct svc_auth;

/* The lookup's state over db (borrowed) for the state dir's stamp file.
 * NULL when out of memory. */
struct svc_auth *svc_auth_new(struct db *db, const char *state_dir);
void svc_auth_free(struct svc_auth *auth);

/* api_auth_lookup_fn; cls is a struct svc_auth *. Safe on many threads at once. */
int svc_auth_lookup(void *cls, const char *token, struct api_principal *who);

/* Tells every larchd on state_dir that tokens were revoked (rewrites the
 * stamp file). 0, or -1 with err filled. */
int svc_auth_tokens_changed(const char *state_dir, char *err, size_t errlen);

/* On the first start (STATE_DIR/admin.token missing and no live admin token
 * in the database): creates a token for user "admin" with the admin role and
 * writes it to STATE_DIR/admin.token (mode 0600; a temporary file, fsync,
 * rename, so the file is whole or absent). Later starts change nothing, even
 * when the file was removed: `larchd token create --role admin` makes
 * another. path gets the file's path; *created is 1 when it was made now.
 * Returns 0, or -1 with err filled (nothing is left behind: a token whose
 * file could not be written is revoked). */
int svc_admin_token_ensure(struct db *db, const char *state_dir, char *path, size_t pathlen,
                           int *created, char *err, size_t errlen);

#endif
