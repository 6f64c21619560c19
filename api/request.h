/* api/request.h - what an endpoint handler is handed: struct api_request.
 *
 * The server (service/server.c) fills a request from libmicrohttpd's
 * callbacks, matches it against a route table (api/router.h), authenticates
 * it (api/auth.h) and accumulates its body; then it calls the route's
 * handler once, on an MHD thread, with the whole request in hand. The
 * handler reads parse -> authorize -> one db transaction -> reply -> free
 * and ends every path in exactly one api_reply_* call (api/reply.h), whose
 * result it returns.
 *
 * A handler that starts work which finishes on another thread (a submit
 * waiting for the database's group commit) does not block its MHD thread,
 * which serves many connections: it parks the request with api_defer and
 * returns; whoever finishes the work calls api_resume, and the server then
 * runs the continuation the handler named, on an MHD thread, which replies.
 * The one-reply rule holds across both halves: the handler replies or
 * defers, never both; the continuation always replies.
 *
 * Ownership: the server owns the request and everything in it; it is freed
 * in MHD's request-completed callback. Strings handed out by the accessors
 * below are borrowed and live as long as the request.
 */
#ifndef LARCH_API_REQUEST_H
#define LARCH_API_REQUEST_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>

#define API_PATH_MAX 1024      /* raw path bytes; longer paths are 404 */
#define API_SEGMENT_MAX 128    /* decoded bytes of one path segment; longer is 404 */
#define API_SEGMENTS_MAX 16
#define API_PARAMS_MAX 4
#define API_QUERY_MAX 16       /* query arguments kept; more is 400 */
#define API_HEADERS_MAX 4      /* extra reply headers (Location, Retry-After, ...) */
#define API_USER_MAX 65        /* user names: 1..64 bytes and the NUL */
#define API_JOB_ID_MAX 32      /* job ids ("j-000123") and the NUL */

/* Roles, weakest first. A route names the role it requires (api/auth.h
 * says which principals satisfy it); API_ROLE_NONE routes need no token. */
enum api_role {
	API_ROLE_NONE = 0,
	API_ROLE_JOB,          /* a per-job token: metrics and results of its job */
	API_ROLE_USER,         /* a user: their own jobs */
	API_ROLE_ADMIN,        /* everything */
};

/* "none", "job", "user", "admin" (static string). */
const char *api_role_name(enum api_role role);
/* Parses a role name; returns 0, or -1 for anything else. */
int api_role_parse(const char *name, enum api_role *role);

/* Who sent the request, as the token lookup found it. */
struct api_principal {
	enum api_role role;               /* API_ROLE_NONE: not authenticated */
	char user[API_USER_MAX];          /* the token's user ("" for none) */
	char job[API_JOB_ID_MAX];         /* API_ROLE_JOB: the job the token is for */
};

struct api_request;
struct api_route;
typedef enum MHD_Result (*api_handler_fn)(struct api_request *req);

/* What a service hands to every request: the token lookup (api/auth.h)
 * and its own state for the handlers (db, executors). Owned by the service;
 * must outlive the server. The lookup is called on MHD threads, concurrently:
 * it fills *who and returns an enum api_auth_status (api/auth.h). */
typedef int (*api_auth_lookup_fn)(void *cls, const char *token,
                                  struct api_principal *who);
struct db;
struct api_jobs_hooks;
struct api_sweeps_hooks;
struct api_webhooks_hooks;
struct api_admin_hooks;
struct api_acct_hooks;
struct api_job_cache;
struct api_changes;
struct api_static;

struct api_ctx {
	api_auth_lookup_fn auth_lookup;   /* NULL: every token is unknown (401) */
	void *auth_cls;
	struct db *db;                    /* the job store (db/db.h); NULL in tests without one */
	const struct api_jobs_hooks *jobs;/* the service's side of the job endpoints */
	const struct api_sweeps_hooks *sweeps; /* ... and of the sweep endpoints; NULL: defaults */
	const struct api_admin_hooks *admin; /* ... and of the admin endpoints (api/admin_hooks.h);
	                                        NULL: they answer 503 */
	const struct api_acct_hooks *acct;/* ... and of accounting (api/acct_hooks.h); NULL: no
	                                     Slurm accounting, usage from the database only */
	const struct api_webhooks_hooks *webhooks; /* ... and of webhooks (api/webhooks_hooks.h);
	                                               NULL: POST /v1/webhooks answers 503 */
	struct api_job_cache *job_cache;  /* GET /v1/jobs/{id} answers (api/job_cache.h); may be NULL */
	struct api_changes *changes;      /* GET /v1/events' feed (api/changes.h); NULL: 503 */
	const struct api_static *dashboard; /* GET / and /ui/... (api/static.h); NULL: 404 */
	void *svc;                        /* the service's state, for handlers */
};

/* A path split into percent-decoded segments (api_path_parse in router.h). */
struct api_path {
	char buf[API_PATH_MAX + 1];       /* the decoded segments, each NUL-terminated */
	const char *seg[API_SEGMENTS_MAX];
	size_t n;
};

struct api_param {
	const char *name;                 /* into the route pattern, name_len bytes */
	size_t name_len;
	const char *value;                /* a decoded segment of req->path */
};

struct api_query_arg {
	char *name;                       /* decoded; owned by the request */
	char *value;                      /* decoded; "" for "?flag" */
};

struct api_header {
	char *name, *value;               /* owned by the request */
};

struct api_request {
	struct MHD_Connection *conn;      /* borrowed from MHD for the request's life */
	const struct api_ctx *ctx;
	const char *method;               /* MHD's string: "GET", "POST", ... */
	const char *raw_path;             /* as sent (no query), for the log */
	struct api_path path;
	const struct api_route *route;    /* the matched route */
	struct api_param params[API_PARAMS_MAX];
	size_t n_params;
	struct api_query_arg query[API_QUERY_MAX];
	size_t n_query;

	/* headers of interest, borrowed from MHD (NULL when absent) */
	const char *content_type;
	const char *authorization;
	const char *if_none_match;
	const char *idempotency_key;

	char *body;                       /* NUL-terminated; NULL when there was none */
	size_t body_len;

	struct api_principal principal;   /* filled before the handler for routes with a role */
	char client[64];                  /* the client's address ("10.0.0.7", "::1"): the
	                                     socket's peer, or what a trusted proxy said
	                                     (service/server.h); "" when unknown */

	/* a handler's own state, freed with the request (api_request_release):
	 * what a deferred request carries from the handler to its continuation */
	void *state;
	void (*state_free)(void *state);

	/* deferral (api_defer): the continuation the server runs once the
	 * request is resumed; NULL when the request is not parked */
	api_handler_fn then;
	atomic_uint *deferred;            /* the server's count of parked requests (may be NULL) */

	/* the reply (api/reply.c) */
	int no_store;                     /* set by the handler: no ETag, Cache-Control: no-store */
	unsigned status;                  /* the status queued; 0 until then */
	int replied;                      /* a reply was attempted (queued or not) */
	struct api_header reply_headers[API_HEADERS_MAX];
	size_t n_reply_headers;
};

/* The value of the path parameter {name}, or NULL. */
const char *api_param(const struct api_request *req, const char *name);
/* The first value of query argument name, or NULL when it is absent. */
const char *api_query(const struct api_request *req, const char *name);
/* Any request header (case-insensitive name), or NULL. */
const char *api_header(const struct api_request *req, const char *name);

/* Parses the body as one JSON value of any type (duplicate keys rejected). Returns a new
 * reference, or NULL with err filled ("body: empty" when there is none). */
json_t *api_body_json(const struct api_request *req, json_error_t *err);

/* Parks req: suspends its connection (MHD_suspend_connection) so that its
 * MHD thread serves others meanwhile, and records then, the continuation.
 * Call it from a handler, before starting the work whose completion calls
 * api_resume, and return what it returns (MHD_YES) without replying. */
enum MHD_Result api_defer(struct api_request *req, api_handler_fn then);
/* Wakes a parked request (MHD_resume_connection); any thread may call it,
 * once per api_defer. The server then calls req->then on an MHD thread.
 * req may be freed as soon as this returns: write what the continuation
 * needs into req->state before calling it, and touch req no more. */
void api_resume(struct api_request *req);

/* Adds one query argument as sent (percent-encoded; value NULL for "?flag")
 * to req->query, decoded. Returns 0, or -1 for bad percent-encoding, a NUL
 * byte, more than API_QUERY_MAX arguments or no memory. The server calls it
 * for each argument; tests may. */
int api_query_add(struct api_request *req, const char *raw_name, const char *raw_value);
/* Decodes %XX (and '+' as a space when plus_space) from src into dst, which
 * has room for dst_size bytes including the NUL. Returns the decoded length,
 * or -1 for a malformed escape, a NUL byte or no room. */
long api_unescape(const char *src, size_t src_len, char *dst, size_t dst_size, int plus_space);
/* Frees what the request owns (query, reply headers, body, state); not req
 * itself. */
void api_request_release(struct api_request *req);

#endif
