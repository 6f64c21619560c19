/* api/auth.c - bearer token parsing and role checks; see auth.h. */
#include "auth.h"

#include <string.h>
#include <strings.h>

#include "reply.h"
#include "router.h"

int api_bearer_token(const char *value, char token[API_TOKEN_LEN + 1])
{
	if (!value || strncasecmp(value, "Bearer ", 7) != 0)
		return -1;
	const char *p = value + 7;
	while (*p == ' ')
		p++;
	if (strncmp(p, API_TOKEN_PREFIX, 3) != 0)
		return -1;
	for (size_t i = 3; i < API_TOKEN_LEN; i++) {
		char c = p[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -1;
	}
	if (p[API_TOKEN_LEN] != '\0')
		return -1;
	memcpy(token, p, API_TOKEN_LEN);
	token[API_TOKEN_LEN] = '\0';
	return 0;
}

int api_role_allows(enum api_role role, const struct api_principal *who, const char *job_id)
{
	switch (role) {
	case API_ROLE_NONE:
		return 1;
	case API_ROLE_JOB:
		return who->role == API_ROLE_ADMIN ||
		       (who->role == API_ROLE_JOB && job_id && strcmp(who->job, job_id) == 0);
	case API_ROLE_USER:
		return who->role == API_ROLE_ADMIN || who->role == API_ROLE_USER;
	case API_ROLE_ADMIN:
		return who->role == API_ROLE_ADMIN;
	}
	return 0;
}

static int unauthorized(struct api_request *req, enum MHD_Result *ret, const char *challenge,
                        const char *message)
{
	api_reply_header(req, MHD_HTTP_HEADER_WWW_AUTHENTICATE, challenge);
	*ret = api_reply_error(req, 401, API_ERR_UNAUTHORIZED, "%s", message);
	return -1;
}

int api_authenticate(struct api_request *req, enum MHD_Result *ret)
{
	memset(&req->principal, 0, sizeof req->principal);
	if (!req->route || req->route->role == API_ROLE_NONE)
		return 0;
	if (!req->authorization)
		return unauthorized(req, ret, "Bearer realm=\"larch\"",
		                    "missing bearer token (Authorization: Bearer lt_...)");
	char token[API_TOKEN_LEN + 1];
	if (api_bearer_token(req->authorization, token) != 0)
		return unauthorized(req, ret, "Bearer realm=\"larch\", error=\"invalid_token\"",
		                    "malformed authorization header: expected \"Bearer lt_\" and "
		                    "64 lowercase hex digits");
	struct api_principal who = { 0 };
	const struct api_ctx *ctx = req->ctx;
	int status = ctx && ctx->auth_lookup ? ctx->auth_lookup(ctx->auth_cls, token, &who)
	                                     : API_AUTH_UNKNOWN;
	explicit_bzero(token, sizeof token);
	if (status == API_AUTH_FAILED) {
		*ret = api_reply_error(req, 500, API_ERR_INTERNAL, "token lookup failed");
		return -1;
	}
	if (status != API_AUTH_OK || who.role == API_ROLE_NONE)
		return unauthorized(req, ret, "Bearer realm=\"larch\", error=\"invalid_token\"",
		                    "unknown or revoked token");
	if (!api_role_allows(req->route->role, &who, api_param(req, "id"))) {
		if (who.role == API_ROLE_JOB)
			*ret = api_reply_error(req, 403, API_ERR_FORBIDDEN,
			                       "a job token may only report for its own job");
		else
			*ret = api_reply_error(req, 403, API_ERR_FORBIDDEN, "this needs the %s role",
			                       api_role_name(req->route->role));
		return -1;
	}
	req->principal = who;
	return 0;
}
