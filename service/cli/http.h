/* service/cli/http.h - larch's one HTTP connection to larchd (libcurl).
 *
 * One easy handle per run, reused (keep-alive), with a connect timeout and a
 * whole-request timeout. Requests that may be repeated (GETs, and a submit
 * with its Idempotency-Key) are retried with backoff when the connection
 * broke or larchd answered 429/502/503/504; others only when nothing reached
 * larchd (a 503 while it stops, a 429). Transport failures are printed here
 * ("larch: cannot reach larchd at URL: connection refused (is larchd
 * running?)") and come back as CLI_UNREACHABLE; HTTP answers of any status
 * come back to the caller, which hands the ones it cannot use to
 * cli_http_fail for the message and exit status.
 */
#ifndef LARCH_CLI_HTTP_H
#define LARCH_CLI_HTTP_H

#include <curl/curl.h>
#include <jansson.h>

#include "output.h"

struct cli_http {
	CURL *curl;
	char *base;                  /* "http://host:port", no trailing '/'; owned */
	char *auth;                  /* "Authorization: Bearer ..." or NULL; owned */
	char *token_source;          /* where the token came from, for the 401 message; owned */
	char *config_path;           /* the config file's path, for messages; owned */
	char *ca_file;               /* CA certificates for https (CURLOPT_CAINFO), or NULL:
	                                the system's store; owned */
	char *ca_source;             /* where ca_file came from ("LARCH_CA"); owned */
	long connect_timeout_ms, timeout_ms;
	char errbuf[CURL_ERROR_SIZE];
};

struct cli_request {
	const char *method;          /* "GET", "POST" or "PATCH" */
	const char *path;            /* "/v1/jobs?..." already escaped (cli_http_path) */
	const char *body;            /* JSON text, or NULL for none */
	size_t body_len;
	const char *idempotency_key; /* sent as Idempotency-Key; makes a POST repeatable */
	const char *if_none_match;   /* an ETag: a 304 comes back when nothing changed */
};

struct cli_reply {
	long status;
	struct cli_buf body;
	json_t *json;                /* the body when it is JSON, else NULL; owned */
	char etag[256];              /* "" when none */
};

/* Opens h for base (borrowed) and token (may be NULL; borrowed): CLI_OK, or
 * CLI_USAGE after printing why (a URL that is not http:// or https://). */
int cli_http_open(struct cli_http *h, const char *base, const char *token);
/* Frees what h owns; a zeroed h is fine. */
void cli_http_close(struct cli_http *h);
void cli_reply_release(struct cli_reply *r);

/* Resets h's handle for a request to url with the headers hdr (both
 * borrowed until it is performed): the protocols, the user agent, the
 * connect timeout and h->errbuf (cleared), what every request of the CLI
 * sets; the caller adds its method, timeouts and callbacks. */
void cli_http_prepare(struct cli_http *h, const char *url, struct curl_slist *hdr);

/* Sends rq and fills out (released first) with the answer, of any status.
 * Returns CLI_OK, or CLI_UNREACHABLE after printing the transport error. */
int cli_http_send(struct cli_http *h, const struct cli_request *rq, struct cli_reply *out);

/* Prints what an unwanted answer means (the server's message made inert)
 * and returns the exit status (CLI_REFUSED). job: the id the request was
 * about, for "job j-000123 not found"; NULL when none. */
int cli_http_fail(const struct cli_http *h, const struct cli_reply *r, const char *job);

/* A 2xx answer's JSON object: CLI_OK with *out taken from r (a new
 * reference, r->json left NULL); any other answer goes to cli_http_fail and
 * its exit status comes back. */
int cli_http_take_object(const struct cli_http *h, struct cli_reply *r, const char *job,
                         json_t **out);
/* GET path, wanting a 2xx with a JSON object (as cli_http_take_object). */
int cli_http_get_json(struct cli_http *h, const char *path, const char *job, json_t **out);

/* Appends s percent-encoded (RFC 3986 unreserved characters kept). */
void cli_http_escape(struct cli_buf *b, const char *s);
/* Appends "?key=value" or "&key=value" (value escaped) to a path in b;
 * nothing when value is NULL. */
void cli_http_param(struct cli_buf *b, const char *key, const char *value);

/* GETs a keyset-paged list: path (with its filters and limit) and then, with
 * all, the pages after it by their next_cursor. The items under key of every
 * page are appended to items; *page is the last page (to be released),
 * *cursor the next page's cursor when there is one not fetched (to be
 * freed), else NULL. A page without the key's array is CLI_REFUSED. */
int cli_http_get_list(struct cli_http *h, const char *path, const char *key, int all,
                      json_t *items, json_t **page, char **cursor);

#endif
