/* api/auth.h - who is asking: bearer tokens and roles.
 *
 * Requests carry "Authorization: Bearer lt_<64 hex digits>". For a route
 * whose role is not API_ROLE_NONE the server, before reading the body:
 *   1. parses the header (api_bearer_token): missing or malformed -> 401;
 *   2. asks the service's lookup, struct api_ctx.auth_lookup, which fills a
 *      struct api_principal from the token (later: db/tokens.h, hashed
 *      tokens); unknown or revoked -> 401;
 *   3. checks the route's role (api_role_allows): not enough -> 403.
 * The handler then finds the principal in req->principal and does what only
 * it can: ownership ("a user's own jobs", 404 for others' so ids don't leak).
 *
 * Which principals a route's role admits:
 *   API_ROLE_NONE   everyone, no token needed
 *   API_ROLE_JOB    admin, or the job token of the job named by {id}
 *   API_ROLE_USER   admin or user (never a job token)
 *   API_ROLE_ADMIN  admin
 */
#ifndef LARCH_API_AUTH_H
#define LARCH_API_AUTH_H

#include <stddef.h>

#include "request.h"

#define API_TOKEN_PREFIX "lt_"
#define API_TOKEN_HEX 64                 /* 256 random bits */
#define API_TOKEN_LEN (3 + API_TOKEN_HEX)

/* What the lookup returns: the token is known (principal filled), unknown
 * or revoked, or the lookup itself failed (a server error, 500). */
enum api_auth_status {
	API_AUTH_OK = 0,
	API_AUTH_UNKNOWN = 1,
	API_AUTH_FAILED = -1,
};

/* Extracts the token from an Authorization header value ("Bearer " is
 * case-insensitive; one or more spaces). Copies it into token (room for
 * API_TOKEN_LEN + 1 bytes) and returns 0, or returns -1 when value is NULL
 * or not "Bearer lt_" followed by exactly 64 lowercase hex digits. */
int api_bearer_token(const char *value, char token[API_TOKEN_LEN + 1]);

/* Does principal satisfy a route that needs role? job_id is the request's
 * {id} parameter (NULL when the route has none). */
int api_role_allows(enum api_role role, const struct api_principal *who, const char *job_id);

/* Steps 1-3 above for req (its route and ctx set). Returns 0 when the
 * handler may run (req->principal filled), or queues the 401/403/500 reply
 * itself and returns -1 (the reply's MHD result in *ret). */
int api_authenticate(struct api_request *req, enum MHD_Result *ret);

#endif
