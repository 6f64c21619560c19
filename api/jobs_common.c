/* api/jobs_common.c - the job object, ids, scopes, db errors and query
 * parameters of the job endpoints; see jobs_common.h. */
#include "jobs_common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/sweeps.h"
#include "labels.h"
#include "reply.h"

void api_time_format(int64_t ms, char out[32])
{
	if (ms <= 0) {
		out[0] = '\0';
		return;
	}
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	if (tm.tm_year + 1900 > 9999) {
		out[0] = '\0';             /* not a time we wrote */
		return;
	}
	/* YYYY-MM-DDTHH:MM:SS.mmmZ by hand (a list page formats hundreds) */
	int field[7] = { tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, (int)(ms % 1000) };
	static const char width[7] = { 4, 2, 2, 2, 2, 2, 3 }, after[] = "--T::.Z";
	char *p = out;
	for (int i = 0; i < 7; i++) {
		for (int d = width[i] - 1, v = field[i]; d >= 0; d--, v /= 10)
			p[d] = (char)('0' + v % 10);
		p += width[i];
		*p++ = after[i];
	}
	*p = '\0';
}

void api_buf_json_time(struct api_buf *b, int64_t ms)
{
	char text[32];
	api_time_format(ms, text);
	if (text[0])
		api_buf_json_str(b, text);
	else
		api_buf_adds(b, "null");
}

void api_job_write(struct api_buf *b, const struct db_job *job)
{
	api_buf_object_head(b, 'j', job->id, job->name, job->owner);
	api_buf_adds(b, ",\"run_as\":");     /* null: larchd's own user (run_as service) */
	api_buf_json_str(b, job->unix_user);
	api_buf_adds(b, ",\"state\":\"");
	api_buf_adds(b, db_state_name(job->state));
	api_buf_adds(b, "\",\"executor\":");
	api_buf_json_str(b, job->executor);
	api_buf_adds(b, ",\"slurm_job_id\":");
	api_buf_json_str(b, job->slurm_job_id);
	/* the spec's or an admin's, then the one Slurm put it in once known */
	api_buf_adds(b, ",\"partition\":");
	api_buf_json_str(b, job->partition);
	api_buf_adds(b, ",\"node_list\":");   /* Slurm's NodeList; null: none yet, or local */
	api_buf_json_str(b, job->node_list);
	api_buf_adds(b, ",\"priority\":");
	api_buf_json_int(b, job->priority);
	api_buf_adds(b, ",\"attempt\":");
	api_buf_json_int(b, job->attempt);
	api_buf_adds(b, ",\"created_at\":");
	api_buf_json_time(b, job->submit_ms);
	api_buf_adds(b, ",\"started_at\":");
	api_buf_json_time(b, job->start_ms);
	api_buf_adds(b, ",\"ended_at\":");
	api_buf_json_time(b, job->end_ms);
	api_buf_adds(b, ",\"exit_code\":");
	if (job->has_exit_code)
		api_buf_json_int(b, job->exit_code);
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"reason\":");
	api_buf_json_str(b, job->reason);
	/* the spec was stored as the validator's canonical JSON (the database
	 * checks json_valid): it goes in as it is */
	api_buf_adds(b, ",\"spec\":");
	api_buf_adds(b, job->spec && *job->spec ? job->spec : "null");
	if (job->sweep > 0) {        /* a sweep's child (db/sweeps.h) */
		api_buf_adds(b, ",\"sweep\":");
		api_buf_json_id(b, 's', job->sweep);
		api_buf_adds(b, ",\"sweep_index\":");
		api_buf_json_int(b, job->sweep_index);
		api_buf_adds(b, ",\"params\":");
		api_buf_adds(b, job->params && *job->params ? job->params : "{}");
	} else {
		api_buf_adds(b, ",\"sweep\":null");
	}
	api_buf_adds(b, ",\"labels\":");
	api_buf_adds(b, job->labels && *job->labels ? job->labels : "{}");
	api_buf_adds(b, ",\"progress\":{\"step\":");
	api_buf_json_int(b, job->progress_step);
	api_buf_adds(b, ",\"total_steps\":");
	if (job->progress_total > 0)
		api_buf_json_int(b, job->progress_total);
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"train/loss\":");
	api_buf_json_num(b, job->last_loss);
	api_buf_adds(b, "}}");
}

void api_buf_json_id(struct api_buf *b, char prefix, int64_t id)
{
	char text[DB_ID_MAX];
	db_id_format(prefix, id, text, sizeof text);
	api_buf_json_str(b, text);
}

void api_buf_object_head(struct api_buf *b, char prefix, int64_t id, const char *name,
                         const char *owner)
{
	api_buf_adds(b, "{\"id\":");
	api_buf_json_id(b, prefix, id);
	api_buf_adds(b, ",\"name\":");
	api_buf_json_str(b, name);
	api_buf_adds(b, ",\"owner\":");
	api_buf_json_str(b, owner);
}

int api_id_or_reply(struct api_request *req, char prefix, const char *noun, int64_t *id,
                    enum MHD_Result *ret)
{
	const char *text = api_param(req, "id");
	char canonical[DB_ID_MAX];
	if (text && db_id_parse(prefix, text, id) == 0) {
		db_id_format(prefix, *id, canonical, sizeof canonical);
		if (strcmp(text, canonical) == 0)
			return 0;
	}
	*ret = api_reply_error(req, 404, API_ERR_NOT_FOUND, "no %s %s", noun, text ? text : "");
	return -1;
}

int api_job_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret)
{
	return api_id_or_reply(req, 'j', "job", id, ret);
}

enum MHD_Result api_reply_bad_json(struct api_request *req, const json_error_t *jerr)
{
	/* api_body_json's own messages say "body: " already */
	const char *text = strncmp(jerr->text, "body: ", 6) == 0 ? jerr->text + 6 : jerr->text;
	return api_reply_error_detail(req, 400, API_ERR_BAD_JSON,
	                              json_pack("{s:i,s:i}", "line", jerr->line, "column",
	                                        jerr->column),
	                              "body: %s", text);
}

const char *api_owner_scope(const struct api_request *req)
{
	return req->principal.role == API_ROLE_USER ? req->principal.user : NULL;
}

int api_db_or_reply(struct api_request *req, struct db **db, enum MHD_Result *ret)
{
	*db = req->ctx ? req->ctx->db : NULL;
	if (*db)
		return 0;
	api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	*ret = api_reply_error(req, 503, API_ERR_UNAVAILABLE, "no job store");
	return -1;
}

int api_id_request_or_reply(struct api_request *req, char prefix, const char *noun,
                            const char *const *allowed, struct db **db, int64_t *id,
                            enum MHD_Result *ret)
{
	return api_db_or_reply(req, db, ret) || api_id_or_reply(req, prefix, noun, id, ret) ||
	       api_query_known_or_reply(req, allowed, ret) ? -1 : 0;
}

int api_post_request_or_reply(struct api_request *req, struct db **db, enum MHD_Result *ret)
{
	static const char *const none[] = { NULL };
	return api_db_or_reply(req, db, ret) || api_query_known_or_reply(req, none, ret) ? -1 : 0;
}

json_t *api_body_or_reply(struct api_request *req, enum MHD_Result *ret)
{
	json_error_t jerr;
	json_t *body = api_body_json(req, &jerr);
	if (!body)
		*ret = api_reply_bad_json(req, &jerr);
	return body;
}

int api_job_request_or_reply(struct api_request *req, const char *const *allowed,
                             struct db **db, int64_t *id, enum MHD_Result *ret)
{
	return api_id_request_or_reply(req, 'j', "job", allowed, db, id, ret);
}

char *api_labels_or_reply(struct api_request *req, const json_t *labels, enum MHD_Result *ret)
{
	char bad[160], why[512];
	char *text = api_labels_json(labels, "labels", bad, sizeof bad, why, sizeof why);
	if (!text)
		*ret = api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
		                              json_pack("{s:s}", "field", bad), "%s", why);
	return text;
}

/* The db's message without its "db: " prefix: the client needs no layer names. */
static const char *db_message(const struct db_err *err)
{
	const char *text = err && err->code ? err->text : "database error";
	return strncmp(text, "db: ", 4) == 0 ? text + 4 : text;
}

enum MHD_Result api_reply_db_error(struct api_request *req, int rc, const struct db_err *err)
{
	const char *msg = db_message(err);
	switch (rc) {
	case DB_NOT_FOUND:
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s", msg);
	case DB_CONFLICT:
	case DB_ILLEGAL:
	case DB_STALE:
		return api_reply_error(req, 409, API_ERR_CONFLICT, "%s", msg);
	case DB_INVALID:
		return api_reply_error(req, 400, API_ERR_BAD_REQUEST, "%s", msg);
	case DB_BUSY:
		api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "1");
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "%s", msg);
	default:
		return api_reply_error(req, 500, API_ERR_INTERNAL, "%s", msg);
	}
}

enum MHD_Result api_reply_list_error(struct api_request *req, int rc, const struct db_err *err)
{
	if (rc == DB_INVALID)
		return api_reply_bad_param(req, "cursor", "cursor: not a cursor from this server");
	return api_reply_db_error(req, rc, err);
}

void api_buf_list_end(struct api_buf *b, const char *next_cursor)
{
	api_buf_addc(b, ']');
	if (next_cursor[0]) {
		api_buf_adds(b, ",\"next_cursor\":");
		api_buf_json_str(b, next_cursor);
	}
	api_buf_addc(b, '}');
}

enum MHD_Result api_reply_job(struct api_request *req, unsigned status, int64_t id)
{
	struct db_job job;
	struct db_err err = { 0 };
	int rc = db_jobs_get(req->ctx->db, id, NULL, &job, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 2048);
	api_job_write(&b, &job);
	db_job_release(&job);
	return api_reply_buf(req, status, NULL, &b);
}

enum MHD_Result api_reply_bad_param(struct api_request *req, const char *name, const char *fmt,
                                    ...)
{
	char message[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(message, sizeof message, fmt, ap);
	va_end(ap);
	return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
	                              json_pack("{s:s}", "parameter", name), "%s", message);
}

int api_query_known_or_reply(struct api_request *req, const char *const *allowed,
                             enum MHD_Result *ret)
{
	for (size_t i = 0; i < req->n_query; i++) {
		const char *name = req->query[i].name;
		size_t len = strlen(name), k = 0;
		while (allowed[k] && !(strncmp(allowed[k], name, len) == 0 &&
		                       (allowed[k][len] == '\0' || strcmp(allowed[k] + len, "*") == 0)))
			k++;
		if (!allowed[k] || strchr(name, '*')) {
			*ret = api_reply_bad_param(req, name, "unknown query parameter \"%s\"", name);
			return -1;
		}
		if (allowed[k][len] == '*')
			continue;
		for (size_t j = 0; j < i; j++)
			if (strcmp(req->query[j].name, name) == 0) {
				*ret = api_reply_bad_param(req, name, "%s: given more than once", name);
				return -1;
			}
	}
	return 0;
}

int api_query_int_or_reply(struct api_request *req, const char *name, int64_t lo, int64_t hi,
                           int64_t def, int64_t *out, enum MHD_Result *ret)
{
	const char *text = api_query(req, name);
	if (!text) {
		*out = def;
		return 0;
	}
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	int digits = text[0] == '-' ? text[1] >= '0' && text[1] <= '9' : text[0] >= '0' && text[0] <= '9';
	if (!digits || *end || errno == ERANGE) {
		*ret = api_reply_bad_param(req, name, "%s: must be an integer (got \"%s\")", name, text);
		return -1;
	}
	if (v < lo || v > hi) {
		*ret = api_reply_bad_param(req, name, "%s: must be %lld to %lld (got %lld)", name,
		                           (long long)lo, (long long)hi, v);
		return -1;
	}
	*out = v;
	return 0;
}
