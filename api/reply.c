/* api/reply.c - replies, the error table and ETags; see reply.h. */
#include "reply.h"

#include "buf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one table of error codes (docs/api.md, "Errors"). */
static const struct api_error_info error_table[API_ERR_COUNT] = {
	[API_ERR_BAD_JSON] = { .code = "bad_json", .status = 400 },
	[API_ERR_INVALID_SPEC] = { .code = "invalid_spec", .status = 400 },
	[API_ERR_BAD_REQUEST] = { .code = "bad_request", .status = 400 },
	[API_ERR_UNAUTHORIZED] = { .code = "unauthorized", .status = 401 },
	[API_ERR_FORBIDDEN] = { .code = "forbidden", .status = 403 },
	[API_ERR_NOT_FOUND] = { .code = "not_found", .status = 404 },
	[API_ERR_METHOD_NOT_ALLOWED] = { .code = "method_not_allowed", .status = 405 },
	[API_ERR_CONFLICT] = { .code = "conflict", .status = 409 },
	[API_ERR_RANGE] = { .code = "range_not_satisfiable", .status = 416 },
	[API_ERR_TOO_LARGE] = { .code = "too_large", .status = 413 },
	[API_ERR_UNSUPPORTED_MEDIA_TYPE] = { .code = "unsupported_media_type", .status = 415 },
	[API_ERR_INFEASIBLE] = { .code = "infeasible", .status = 422 },
	[API_ERR_OVERLOADED] = { .code = "overloaded", .status = 429 },
	[API_ERR_UNAVAILABLE] = { .code = "overloaded", .status = 503 },
	[API_ERR_INTERNAL] = { .code = "internal", .status = 500 },
};

const struct api_error_info *api_error_info(enum api_error code)
{
	if ((unsigned)code >= API_ERR_COUNT)
		return NULL;
	return &error_table[code];
}

/* FNV-1a over 8-byte words (8 times fewer multiplies than bytewise: list
 * bodies are tens of KiB), the tail bytewise, then murmur3's finaliser so
 * that every input bit reaches every output bit. */
void api_etag(const void *data, size_t len, char etag[API_ETAG_SIZE])
{
	const unsigned char *p = data;
	const uint64_t prime = 0x100000001b3ULL;
	uint64_t h = 0xcbf29ce484222325ULL ^ len;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * prime;
	}
	for (; i < len; i++)
		h = (h ^ p[i]) * prime;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	snprintf(etag, API_ETAG_SIZE, "\"%016llx\"", (unsigned long long)h);
}

/* The opaque part of one tag (W/ and quotes stripped) at *s; advances *s
 * past it and a following comma. Returns 0 when there is none left. */
static int next_tag(const char **s, const char **tag, size_t *len)
{
	const char *p = *s;
	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	if (!*p)
		return 0;
	if (p[0] == 'W' && p[1] == '/')
		p += 2;
	const char *start = p;
	if (*p == '"') {
		const char *end = strchr(p + 1, '"');
		if (!end)
			return 0;
		*tag = p + 1;
		*len = (size_t)(end - p - 1);
		p = end + 1;
	} else {
		while (*p && *p != ',' && *p != ' ' && *p != '\t')
			p++;
		*tag = start;
		*len = (size_t)(p - start);
	}
	*s = p;
	return 1;
}

int api_etag_match(const char *if_none_match, const char *etag)
{
	if (!if_none_match || !etag)
		return 0;
	const char *want = etag, *s = etag, *tag;
	size_t want_len, len;
	if (!next_tag(&s, &want, &want_len))
		return 0;
	s = if_none_match;
	while (next_tag(&s, &tag, &len)) {
		if (len == 1 && tag[0] == '*')
			return 1;
		if (len == want_len && memcmp(tag, want, len) == 0)
			return 1;
	}
	return 0;
}

int api_reply_header(struct api_request *req, const char *name, const char *value)
{
	if (req->n_reply_headers >= API_HEADERS_MAX)
		return -1;
	char *n = strdup(name), *v = strdup(value);
	if (!n || !v) {
		free(n);
		free(v);
		return -1;
	}
	req->reply_headers[req->n_reply_headers].name = n;
	req->reply_headers[req->n_reply_headers].value = v;
	req->n_reply_headers++;
	return 0;
}

static int is_get(const struct api_request *req)
{
	return req->method && (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0);
}

/* Claims the request's one reply; 0 when it was claimed already (a bug). */
static int claim(struct api_request *req, unsigned status)
{
	if (req->replied) {
		fprintf(stderr, "larchd: bug: second reply (%u) to %s %s after %u\n", status,
		        req->method ? req->method : "?", req->raw_path ? req->raw_path : "?",
		        req->status);
		assert(!"a request was answered twice");
		return 0;
	}
	req->replied = 1;
	return 1;
}

/* Adds the headers every reply gets, queues it and drops our reference. */
static enum MHD_Result queue(struct api_request *req, unsigned status, struct MHD_Response *resp,
                             const char *content_type, const char *etag)
{
	if (!resp)
		return MHD_NO;
	int ok = MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") == MHD_YES;
	if (content_type)
		ok &= MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) == MHD_YES;
	if (req->no_store)
		ok &= MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store") == MHD_YES;
	else if (etag) {
		ok &= MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag) == MHD_YES;
		ok &= MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") == MHD_YES;
	}
	for (size_t i = 0; i < req->n_reply_headers; i++)
		ok &= MHD_add_response_header(resp, req->reply_headers[i].name,
		                              req->reply_headers[i].value) == MHD_YES;
	enum MHD_Result ret = MHD_NO;
	if (ok && req->conn)
		ret = MHD_queue_response(req->conn, status, resp);
	else if (ok)
		ret = MHD_YES;                  /* unit tests reply without a connection */
	MHD_destroy_response(resp);
	if (ret == MHD_YES)
		req->status = status;
	return ret;
}

/* A 2xx to GET/HEAD whose tag the client has: 304, no body. */
static int not_modified(struct api_request *req, unsigned status, const char *etag)
{
	return etag && status / 100 == 2 && api_etag_match(req->if_none_match, etag);
}

static enum MHD_Result reply_buffer(struct api_request *req, unsigned status,
                                    const char *content_type, char *data, size_t len,
                                    int owned, const char *etag_in)
{
	char etag_buf[API_ETAG_SIZE];
	const char *etag = NULL;
	if (status / 100 == 2 && is_get(req) && !req->no_store) {
		if (!etag_in) {
			api_etag(data, len, etag_buf);
			etag_in = etag_buf;
		}
		etag = etag_in;
	}
	if (not_modified(req, status, etag)) {
		if (owned)
			free(data);
		struct MHD_Response *resp =
			MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		return queue(req, MHD_HTTP_NOT_MODIFIED, resp, NULL, etag);
	}
	struct MHD_Response *resp = owned
		? MHD_create_response_from_buffer_with_free_callback(len, data, free)
		: MHD_create_response_from_buffer(len, data, MHD_RESPMEM_PERSISTENT);
	if (!resp && owned)
		free(data);
	return queue(req, status, resp, content_type, etag);
}

static enum MHD_Result reply_internal(struct api_request *req);

enum MHD_Result api_reply_json(struct api_request *req, unsigned status, json_t *body)
{
	if (!body)
		return reply_internal(req);
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return reply_internal(req);
	if (!claim(req, status)) {
		free(text);
		return MHD_NO;
	}
	return reply_buffer(req, status, "application/json", text, strlen(text), 1, NULL);
}

enum MHD_Result api_reply_buf(struct api_request *req, unsigned status, const char *content_type,
                              struct api_buf *body)
{
	if (body->oom || !body->data) {
		api_buf_release(body);
		return reply_internal(req);
	}
	char *data = body->data;
	size_t len = body->len;
	body->data = NULL;
	body->len = body->cap = 0;
	if (!claim(req, status)) {
		free(data);
		return MHD_NO;
	}
	return reply_buffer(req, status, content_type ? content_type : "application/json", data, len,
	                    1, NULL);
}

enum MHD_Result api_reply_static(struct api_request *req, unsigned status,
                                 const char *content_type, const void *data, size_t len,
                                 const char *etag)
{
	if (!claim(req, status))
		return MHD_NO;
	return reply_buffer(req, status, content_type, (char *)data, len, 0, etag);
}

/* Replaces bytes that are not well-formed UTF-8 with '?', in place. */
enum MHD_Result api_reply_response(struct api_request *req, unsigned status,
                                   const char *content_type, const char *etag,
                                   struct MHD_Response *resp)
{
	if (!claim(req, status)) {
		if (resp)
			MHD_destroy_response(resp);
		return MHD_NO;
	}
	return queue(req, status, resp, content_type, etag);
}

static void utf8_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		size_t n = *p < 0x80 ? 1 : (*p >> 5) == 0x6 ? 2 : (*p >> 4) == 0xe ? 3
		         : (*p >> 3) == 0x1e ? 4 : 0;
		size_t i = 1;
		while (i < n && (p[i] & 0xc0) == 0x80)
			i++;
		/* reject overlong forms, surrogates and code points past U+10FFFF */
		int bad = n == 0 || i < n || (n == 2 && *p < 0xc2) ||
		          (n == 3 && *p == 0xe0 && p[1] < 0xa0) ||
		          (n == 3 && *p == 0xed && p[1] >= 0xa0) ||
		          (n == 4 && *p == 0xf0 && p[1] < 0x90) ||
		          (n == 4 && (*p > 0xf4 || (*p == 0xf4 && p[1] >= 0x90)));
		if (bad) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

static enum MHD_Result reply_error_v(struct api_request *req, unsigned status,
                                     enum api_error code, json_t *detail,
                                     const char *fmt, va_list ap)
{
	const struct api_error_info *info = api_error_info(code);
	if (!info) {
		json_decref(detail);
		code = API_ERR_INTERNAL;
		info = api_error_info(code);
	}
	assert(status == info->status && "api_reply_error: status is not the code's status");
	if (status != info->status)
		status = info->status;
	char message[512];
	vsnprintf(message, sizeof message, fmt, ap);
	utf8_clean(message);
	json_t *body = json_pack("{s:{s:s,s:s,s:o?}}", "error", "code", info->code,
	                         "message", message, "detail", detail);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!claim(req, status)) {
		free(text);
		return MHD_NO;
	}
	if (!text)
		return MHD_NO;
	return reply_buffer(req, status, "application/json", text, strlen(text), 1, NULL);
}

enum MHD_Result api_reply_error(struct api_request *req, unsigned status, enum api_error code,
                                const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result ret = reply_error_v(req, status, code, NULL, fmt, ap);
	va_end(ap);
	return ret;
}

enum MHD_Result api_reply_error_detail(struct api_request *req, unsigned status,
                                       enum api_error code, json_t *detail,
                                       const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	enum MHD_Result ret = reply_error_v(req, status, code, detail, fmt, ap);
	va_end(ap);
	return ret;
}

static enum MHD_Result reply_internal(struct api_request *req)
{
	return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
}
