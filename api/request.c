/* api/request.c - accessors of struct api_request; see request.h. */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const role_names[] = {
	[API_ROLE_NONE] = "none",
	[API_ROLE_JOB] = "job",
	[API_ROLE_USER] = "user",
	[API_ROLE_ADMIN] = "admin",
};

const char *api_role_name(enum api_role role)
{
	if ((unsigned)role < sizeof role_names / sizeof role_names[0])
		return role_names[role];
	return "?";
}

int api_role_parse(const char *name, enum api_role *role)
{
	for (size_t i = 0; i < sizeof role_names / sizeof role_names[0]; i++)
		if (name && strcmp(name, role_names[i]) == 0) {
			*role = (enum api_role)i;
			return 0;
		}
	return -1;
}

const char *api_param(const struct api_request *req, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; i < req->n_params; i++)
		if (req->params[i].name_len == len && memcmp(req->params[i].name, name, len) == 0)
			return req->params[i].value;
	return NULL;
}

const char *api_query(const struct api_request *req, const char *name)
{
	for (size_t i = 0; i < req->n_query; i++)
		if (strcmp(req->query[i].name, name) == 0)
			return req->query[i].value;
	return NULL;
}

const char *api_header(const struct api_request *req, const char *name)
{
	if (!req->conn)
		return NULL;
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

json_t *api_body_json(const struct api_request *req, json_error_t *err)
{
	if (!req->body || req->body_len == 0) {
		memset(err, 0, sizeof *err);
		snprintf(err->text, sizeof err->text, "body: empty");
		return NULL;
	}
	/* any JSON value: a valid body of the wrong shape is the handler's to
	 * refuse (invalid_spec, bad_request), not malformed JSON */
	return json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, err);
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long api_unescape(const char *src, size_t src_len, char *dst, size_t dst_size, int plus_space)
{
	size_t o = 0;
	for (size_t i = 0; i < src_len; i++) {
		char c = src[i];
		if (c == '%') {
			if (i + 2 >= src_len)
				return -1;
			int hi = hex_value(src[i + 1]);
			int lo = hex_value(src[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+' && plus_space) {
			c = ' ';
		}
		if (c == '\0' || o + 1 >= dst_size)
			return -1;
		dst[o++] = c;
	}
	if (o >= dst_size)
		return -1;
	dst[o] = '\0';
	return (long)o;
}

static char *unescape_dup(const char *raw)
{
	size_t len = strlen(raw);
	char *out = malloc(len + 1);
	if (out && api_unescape(raw, len, out, len + 1, 1) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

int api_query_add(struct api_request *req, const char *raw_name, const char *raw_value)
{
	if (req->n_query >= API_QUERY_MAX)
		return -1;
	char *name = unescape_dup(raw_name);
	char *value = unescape_dup(raw_value ? raw_value : "");
	if (!name || !value) {
		free(name);
		free(value);
		return -1;
	}
	req->query[req->n_query].name = name;
	req->query[req->n_query].value = value;
	req->n_query++;
	return 0;
}

enum MHD_Result api_defer(struct api_request *req, api_handler_fn then)
{
	req->then = then;
	if (req->deferred)
		atomic_fetch_add(req->deferred, 1);
	if (req->conn)
		MHD_suspend_connection(req->conn);
	return MHD_YES;
}

void api_resume(struct api_request *req)
{
	if (req->conn)
		MHD_resume_connection(req->conn);
}

void api_request_release(struct api_request *req)
{
	for (size_t i = 0; i < req->n_query; i++) {
		free(req->query[i].name);
		free(req->query[i].value);
	}
	req->n_query = 0;
	for (size_t i = 0; i < req->n_reply_headers; i++) {
		free(req->reply_headers[i].name);
		free(req->reply_headers[i].value);
	}
	req->n_reply_headers = 0;
	free(req->body);
	req->body = NULL;
	req->body_len = 0;
	if (req->state && req->state_free)
		req->state_free(req->state);
	req->state = NULL;
	req->state_free = NULL;
}
