/* api/admin_common.c - state, audit entries, bodies and hook calls of the
 * admin endpoints; see admin_common.h. */
#include "admin_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "jobs_common.h"

static void admin_req_free(void *p)
{
	struct admin_req *s = p;
	free(s->args);
	free(s->call.body);
	free(s);
}

struct admin_req *admin_begin(struct api_request *req, const char *action, const char *kind,
                              const char *param)
{
	struct admin_req *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->action = action;
	if (kind)
		snprintf(s->target, sizeof s->target, "%s/%s", kind, param ? param : "");
	s->call.by = req->principal.user;
	req->state = s;
	req->state_free = admin_req_free;
	return s;
}

/* The audit entry of the request's action; a failure to write it is not
 * the client's business (see admin_common.h). */
static void audit(struct api_request *req, unsigned status, const char *message)
{
	struct admin_req *s = req->state;
	if (!s || !s->action || !req->ctx || !req->ctx->db)
		return;
	char msg[DB_AUDIT_TEXT_MAX + 1];
	snprintf(msg, sizeof msg, "%s", message ? message : "");
	struct db_audit_new e = {
		.actor = req->principal.user[0] ? req->principal.user : "?",
		.action = s->action,
		.target = s->target[0] ? s->target : "-",
		.args = s->args,
		.status = (int)status,
		.message = msg[0] ? msg : NULL,
		.client = req->client[0] ? req->client : NULL,
	};
	db_audit_insert(req->ctx->db, &e, NULL, NULL);
}

static enum MHD_Result fail_v(struct api_request *req, unsigned status, enum api_error code,
                              json_t *detail, const char *fmt, va_list ap)
{
	char message[1024];
	vsnprintf(message, sizeof message, fmt, ap);
	audit(req, status, message);
	if (status == 503)
		api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "5");
	return api_reply_error_detail(req, status, code, detail, "%s", message);
}

enum MHD_Result admin_fail(struct api_request *req, unsigned status, enum api_error code,
                           json_t *detail, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result ret = fail_v(req, status, code, detail, fmt, ap);
	va_end(ap);
	return ret;
}

enum MHD_Result admin_fail_db(struct api_request *req, int rc, const struct db_err *err)
{
	const char *text = err && err->code ? err->text : "database error";
	if (strncmp(text, "db: ", 4) == 0)
		text += 4;
	switch (rc) {
	case DB_NOT_FOUND:
		return admin_fail(req, 404, API_ERR_NOT_FOUND, NULL, "%s", text);
	case DB_CONFLICT:
	case DB_ILLEGAL:
	case DB_STALE:
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL, "%s", text);
	case DB_INVALID:
		return admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "%s", text);
	case DB_BUSY:
		return admin_fail(req, 503, API_ERR_UNAVAILABLE, NULL, "%s", text);
	default:
		return admin_fail(req, 500, API_ERR_INTERNAL, NULL, "%s", text);
	}
}

enum MHD_Result admin_fail_call(struct api_request *req)
{
	struct admin_req *s = req->state;
	const char *msg = s->call.message[0] ? s->call.message : "failed";
	switch (s->call.status) {
	case 400:
		return admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "%s", msg);
	case 404:
		return admin_fail(req, 404, API_ERR_NOT_FOUND, NULL, "%s", msg);
	case 409:
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL, "%s", msg);
	case 503:
		return admin_fail(req, 503, API_ERR_UNAVAILABLE, NULL, "%s", msg);
	default:
		return admin_fail(req, 500, API_ERR_INTERNAL, NULL, "%s", msg);
	}
}

enum MHD_Result admin_ok_job(struct api_request *req, int64_t id, const char *fmt, ...)
{
	char message[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	audit(req, 200, message);
	return api_reply_job(req, 200, id);
}

enum MHD_Result admin_ok_body(struct api_request *req)
{
	struct admin_req *s = req->state;
	if (!s->call.body)
		return admin_fail(req, 500, API_ERR_INTERNAL, NULL, "the service gave no answer");
	audit(req, 200, s->call.message);
	struct api_buf b;
	api_buf_init(&b, strlen(s->call.body) + 1);
	api_buf_adds(&b, s->call.body);
	return api_reply_buf(req, 200, NULL, &b);
}

int admin_body_or_reply(struct api_request *req, json_t **out, enum MHD_Result *ret)
{
	struct admin_req *s = req->state;
	*out = NULL;
	if (!req->body_len)
		return 0;
	json_error_t jerr;
	json_t *body = api_body_json(req, &jerr);
	if (!body) {
		const char *text = strncmp(jerr.text, "body: ", 6) == 0 ? jerr.text + 6 : jerr.text;
		*ret = admin_fail(req, 400, API_ERR_BAD_JSON,
		                  json_pack("{s:i,s:i}", "line", jerr.line, "column", jerr.column),
		                  "body: %s", text);
		return -1;
	}
	if (!json_is_object(body)) {
		json_decref(body);
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "body: must be a JSON object");
		return -1;
	}
	char *text = json_dumps(body, JSON_COMPACT);
	if (text && strlen(text) <= DB_AUDIT_TEXT_MAX)
		s->args = text;
	else
		free(text);          /* too long to keep: the entry has no args */
	*out = body;
	return 0;
}

int admin_no_body_or_reply(struct api_request *req, enum MHD_Result *ret)
{
	json_t *body;
	if (admin_body_or_reply(req, &body, ret))
		return -1;
	size_t n = body ? json_object_size(body) : 0;
	json_decref(body);
	if (n) {
		*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, NULL, "body: must be empty or {}");
		return -1;
	}
	return 0;
}

int admin_job_or_reply(struct api_request *req, int64_t *id, struct db_job *job,
                       enum MHD_Result *ret)
{
	const char *text = api_param(req, "id");
	char canonical[DB_JOB_ID_MAX];
	if (!text || db_job_id_parse(text, id) != 0 ||
	    (db_job_id_format(*id, canonical), strcmp(text, canonical) != 0)) {
		*ret = admin_fail(req, 404, API_ERR_NOT_FOUND, NULL, "no job %s", text ? text : "");
		return -1;
	}
	if (!req->ctx->db) {
		*ret = admin_fail(req, 503, API_ERR_UNAVAILABLE, NULL, "no job store");
		return -1;
	}
	struct db_err err = { 0 };
	int rc = db_jobs_get(req->ctx->db, *id, NULL, job, &err);
	if (rc) {
		*ret = admin_fail_db(req, rc, &err);
		return -1;
	}
	return 0;
}

int admin_known_fields_or_reply(struct api_request *req, json_t *obj,
                                const char *const *allowed, enum MHD_Result *ret)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		size_t k = 0;
		while (allowed[k] && strcmp(allowed[k], key) != 0)
			k++;
		if (!allowed[k]) {
			*ret = admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "field", key),
			                  "%s: unknown field", key);
			return -1;
		}
	}
	return 0;
}

int admin_hooks_or_reply(struct api_request *req, const struct api_admin_hooks **hooks,
                         enum MHD_Result *ret)
{
	*hooks = req->ctx ? req->ctx->admin : NULL;
	if (*hooks && (*hooks)->executor)
		return 0;
	*ret = admin_fail(req, 503, API_ERR_UNAVAILABLE, NULL, "no executor to ask");
	return -1;
}

int admin_node_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > ADMIN_NODE_MAX || name[0] == '-')
		return 0;
	for (const char *p = name; *p; p++) {
		char c = *p;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-' || c == '[' || c == ']' || c == ','))
			return 0;
	}
	return 1;
}

int admin_partition_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
		return 0;
	for (const char *p = s; *p; p++) {
		char c = *p;
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

/* "HH:MM:SS" or "D-HH:MM:SS" -> seconds, or -1. */
static long parse_hms(const char *s)
{
	long d = 0, h, m, sec;
	int n = 0;
	if (strchr(s, '-')) {
		if (sscanf(s, "%3ld-%2ld:%2ld:%2ld%n", &d, &h, &m, &sec, &n) != 4 || h > 23)
			return -1;
	} else if (sscanf(s, "%4ld:%2ld:%2ld%n", &h, &m, &sec, &n) != 3) {
		return -1;
	}
	if (s[n] || d < 0 || h < 0 || m < 0 || m > 59 || sec < 0 || sec > 59 || !(s[0] >= '0' &&
	    s[0] <= '9'))
		return -1;
	for (const char *p = s; *p; p++)
		if (!(*p >= '0' && *p <= '9') && *p != ':' && *p != '-')
			return -1;
	return ((d * 24 + h) * 60 + m) * 60 + sec;
}

long admin_duration_s(const json_t *v, long max_s)
{
	long secs = -1;
	if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= max_s / 60)
		secs = (long)json_integer_value(v) * 60;
	else if (json_is_string(v))
		secs = parse_hms(json_string_value(v));
	return secs < 0 || secs > max_s ? -1 : secs;
}

static void call_done(void *done_arg)
{
	api_resume(done_arg);
}

enum MHD_Result admin_call(struct api_request *req,
                           void (*fn)(void *, struct api_admin_call *, api_admin_done_fn, void *),
                           api_handler_fn then)
{
	struct admin_req *s = req->state;
	enum MHD_Result ret = api_defer(req, then);
	fn(req->ctx->admin->arg, &s->call, call_done, req);
	return ret;
}

void admin_call_job(struct admin_req *s, const struct db_job *job)
{
	snprintf(s->slurm_id, sizeof s->slurm_id, "%s", job->slurm_job_id ? job->slurm_job_id : "");
	snprintf(s->unix_user, sizeof s->unix_user, "%s", job->unix_user ? job->unix_user : "");
	s->call.slurm_job_id = s->slurm_id;
	s->call.job_id = job->id;
	s->call.sweep = job->sweep;
	s->call.sweep_index = job->sweep_index;
	s->call.unix_user = s->unix_user;
}
