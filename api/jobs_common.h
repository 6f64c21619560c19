/* api/jobs_common.h - what the job endpoints (api/jobs_*.c) share: the job
 * object of docs/api.md, the {id} of the path, whose jobs a principal sees,
 * database errors as replies, and query parameters.
 *
 * The ..._or_reply helpers follow one convention (redis's
 * lookupKeyReadOrReply): they return 0 when the handler may go on, or reply
 * themselves (the request's one reply), store the MHD result in *ret and
 * return -1, so that a handler reads
 *
 *   if (api_job_id_or_reply(req, &id, &ret))
 *           return ret;
 */
#ifndef LARCH_API_JOBS_COMMON_H
#define LARCH_API_JOBS_COMMON_H

#include <stdint.h>

#include "buf.h"
#include "db/jobs.h"
#include "request.h"

/* Writes the job object (docs/api.md, "The job object"): the stored spec is
 * embedded as the JSON text it is; times are RFC 3339 UTC with
 * milliseconds. */
void api_job_write(struct api_buf *b, const struct db_job *job);

/* "2026-11-22T23:01:02.123Z" for ms since the epoch into out (room for 32
 * bytes), or "" for 0. */
void api_time_format(int64_t ms, char out[32]);
/* The same as a JSON value: the string, or null for 0. */
void api_buf_json_time(struct api_buf *b, int64_t ms);

/* The path's {id} as a job number; a value that is not a job id as the
 * server writes it ("j-" and at least 6 digits, no extra leading zeros:
 * one job, one URL) is answered 404, as a job that does not exist. */
int api_job_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret);
/* The same for any prefixed id (db_id_parse): 404 "no <noun> <text>". */
int api_id_or_reply(struct api_request *req, char prefix, const char *noun, int64_t *id,
                    enum MHD_Result *ret);

/* The prefixed id as a JSON string ("j-000123"). */
void api_buf_json_id(struct api_buf *b, char prefix, int64_t id);
/* The head every resource object starts with: {"id":..,"name":..,"owner":..
 * (the caller adds the rest and the closing brace). */
void api_buf_object_head(struct api_buf *b, char prefix, int64_t id, const char *name,
                         const char *owner);

/* Whose jobs the principal may see: NULL (everyone's) for admins and job
 * tokens (the router has bound those to their job already), else the user. */
const char *api_owner_scope(const struct api_request *req);

/* 400 bad_json for a body api_body_json could not parse: "body: " and
 * jansson's message, detail {"line", "column"}. */
enum MHD_Result api_reply_bad_json(struct api_request *req, const json_error_t *jerr);

/* The request's database, or a 503 when the service has none. */
int api_db_or_reply(struct api_request *req, struct db **db, enum MHD_Result *ret);

/* The start of every /v1/jobs/{id}/... handler: the database
 * (api_db_or_reply), the job id (api_job_id_or_reply) and no query
 * parameter outside allowed (api_query_known_or_reply). */
int api_job_request_or_reply(struct api_request *req, const char *const *allowed,
                             struct db **db, int64_t *id, enum MHD_Result *ret);
/* The same for any resource of prefixed ids (api_id_or_reply). */
int api_id_request_or_reply(struct api_request *req, char prefix, const char *noun,
                            const char *const *allowed, struct db **db, int64_t *id,
                            enum MHD_Result *ret);

/* The start of a POST to a collection (/v1/jobs, /v1/sweeps,
 * /v1/webhooks): the database (api_db_or_reply) and no query parameter. */
int api_post_request_or_reply(struct api_request *req, struct db **db, enum MHD_Result *ret);
/* The request's body parsed (api_body_json; the caller owns it), or NULL
 * with the 400 api_reply_bad_json replied. */
json_t *api_body_or_reply(struct api_request *req, enum MHD_Result *ret);

/* The labels of a PATCH body (api/labels.h) as the new string to store
 * (free it), or NULL with the 400 naming the field at fault replied. */
char *api_labels_or_reply(struct api_request *req, const json_t *labels, enum MHD_Result *ret);

/* Replies a failed db call: not_found 404, conflict/illegal/stale 409,
 * invalid 400, busy 503 (Retry-After), anything else 500. */
enum MHD_Result api_reply_db_error(struct api_request *req, int rc, const struct db_err *err);

/* Keyset-paged lists (GET /v1/jobs, /v1/sweeps). A list call's error: a
 * cursor the db refused (DB_INVALID) is 400 bad cursor, the rest as
 * api_reply_db_error. */
enum MHD_Result api_reply_list_error(struct api_request *req, int rc, const struct db_err *err);
/* Closes a page's array and object: ],"next_cursor":"..."} (no
 * next_cursor on the last page, next_cursor ""). */
void api_buf_list_end(struct api_buf *b, const char *next_cursor);

/* Reads the job and replies it (status 200 or 201): the answer of the job
 * endpoints that change a job. */
enum MHD_Result api_reply_job(struct api_request *req, unsigned status, int64_t id);

/* Query parameters. Each refuses (400 bad_request, detail {"parameter":
 * name}) a value that is malformed or out of range. */

/* Refuses any parameter not in allowed (a NULL-terminated list), and one
 * given twice unless its entry ends in '*' ("name*": repeatable). */
int api_query_known_or_reply(struct api_request *req, const char *const *allowed,
                             enum MHD_Result *ret);
/* A decimal integer in [lo, hi]; *out = def when the parameter is absent. */
int api_query_int_or_reply(struct api_request *req, const char *name, int64_t lo, int64_t hi,
                           int64_t def, int64_t *out, enum MHD_Result *ret);

/* A bad request naming the parameter (detail {"parameter": name}). */
enum MHD_Result api_reply_bad_param(struct api_request *req, const char *name, const char *fmt,
                                    ...) __attribute__((format(printf, 3, 4)));

#endif
