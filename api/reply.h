/* api/reply.h - the one way a request is answered.
 *
 * Every handler path ends in exactly one of api_reply_json, api_reply_error,
 * api_reply_error_detail or api_reply_static, and returns what it returned
 * (MHD_NO closes the connection: out of memory, or MHD refused the reply).
 * A second reply to the same request is a bug: it is logged, asserted in
 * debug builds, and not sent.
 *
 * Errors have one shape, {"error": {"code": "...", "message": "...",
 * "detail": {...} | null}}, and one table of codes (enum api_error, with the
 * status and the string each maps to, as docs/api.md lists them). Messages
 * are printf-formatted, lower case, naming the thing; bytes that are not
 * UTF-8 (from a client's input) are replaced by '?'.
 *
 * 2xx replies to GET and HEAD carry an ETag (a hash of the body) and
 * Cache-Control: no-cache; when the request's If-None-Match names that tag
 * the reply becomes a 304 with no body.
 */
#ifndef LARCH_API_REPLY_H
#define LARCH_API_REPLY_H

#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>

#include "request.h"

enum api_error {
	API_ERR_BAD_JSON,               /* 400 malformed JSON */
	API_ERR_INVALID_SPEC,           /* 400 the spec fails validation */
	API_ERR_BAD_REQUEST,            /* 400 bad query parameter or header */
	API_ERR_UNAUTHORIZED,           /* 401 no token, unknown or revoked token */
	API_ERR_FORBIDDEN,              /* 403 role not allowed */
	API_ERR_NOT_FOUND,              /* 404 unknown route or job */
	API_ERR_METHOD_NOT_ALLOWED,     /* 405 known path, other method */
	API_ERR_CONFLICT,               /* 409 illegal state transition, reused key */
	API_ERR_RANGE,                  /* 416 Range past the end of a file */
	API_ERR_TOO_LARGE,              /* 413 body over the limit */
	API_ERR_UNSUPPORTED_MEDIA_TYPE, /* 415 body not JSON */
	API_ERR_INFEASIBLE,             /* 422 valid spec that cannot run here */
	API_ERR_OVERLOADED,             /* 429 queue full */
	API_ERR_UNAVAILABLE,            /* 503 "overloaded": shutting down, db locked */
	API_ERR_INTERNAL,               /* 500 a server fault (db I/O, out of memory) */
	API_ERR_COUNT
};

struct api_error_info {
	const char *code;               /* "not_found" */
	unsigned status;                /* 404 */
};

/* The table entry of code (NULL past the end). */
const struct api_error_info *api_error_info(enum api_error code);

/* Replies status with body serialised (compact). Steals the reference to
 * body; a NULL body (a failed json_pack) becomes a 500 internal error. */
enum MHD_Result api_reply_json(struct api_request *req, unsigned status, json_t *body);

struct api_buf;
/* Replies status with the bytes of body (api/buf.h: JSON written by hand, or
 * text of content_type; NULL means application/json), taking them over: body
 * is left empty. A body that ran out of memory becomes a 500. */
enum MHD_Result api_reply_buf(struct api_request *req, unsigned status, const char *content_type,
                              struct api_buf *body);

/* Replies an error of the table. status must be code's status (it is there
 * for the reader of the call; a mismatch is a bug, asserted in debug). */
enum MHD_Result api_reply_error(struct api_request *req, unsigned status, enum api_error code,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same with a detail object ({"field": "batch.global"}); steals detail
 * (NULL gives "detail": null). */
enum MHD_Result api_reply_error_detail(struct api_request *req, unsigned status,
                                       enum api_error code, json_t *detail,
                                       const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Replies len bytes of static data (never freed or copied: string
 * literals, embedded files) with content_type. etag may be NULL (computed
 * here) or a tag computed once by api_etag. */
enum MHD_Result api_reply_static(struct api_request *req, unsigned status,
                                 const char *content_type, const void *data, size_t len,
                                 const char *etag);

/* Replies status with resp, a response the handler built (a file
 * streamed by a content reader), taking it over; content_type and etag
 * may be NULL. No 304 here: the handler decides that itself. */
enum MHD_Result api_reply_response(struct api_request *req, unsigned status,
                                   const char *content_type, const char *etag,
                                   struct MHD_Response *resp);

/* Adds a header to the reply that follows (Location, Retry-After, Allow,
 * WWW-Authenticate); both strings are copied. Returns 0, or -1 when there
 * is no room (API_HEADERS_MAX) or memory. */
int api_reply_header(struct api_request *req, const char *name, const char *value);

#define API_ETAG_SIZE 20   /* "\"" 16 hex digits "\"" NUL */

/* The strong entity tag of a body: a 64-bit hash of it, quoted (16 hex
 * digits). The same bytes give the same tag on every build and run. */
void api_etag(const void *data, size_t len, char etag[API_ETAG_SIZE]);
/* Does an If-None-Match header value (a list of tags, weak or strong, or
 * "*") match etag? Weak comparison, as RFC 9110 says for If-None-Match. */
int api_etag_match(const char *if_none_match, const char *etag);

#endif
