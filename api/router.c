/* api/router.c - path parsing and route matching; see router.h. */
#include "router.h"

#include <stdio.h>
#include <string.h>

static int segment_ok(const char *s, size_t len)
{
	if (len == 0 || len > API_SEGMENT_MAX || (len == 1 && s[0] == '.'))
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f || c == '/')
			return 0;
		if (c == '.' && i + 1 < len && s[i + 1] == '.')
			return 0;
	}
	return 1;
}

int api_path_parse(struct api_path *path, const char *raw)
{
	path->n = 0;
	size_t raw_len = raw ? strlen(raw) : 0;
	if (raw_len == 0 || raw[0] != '/' || raw_len > API_PATH_MAX)
		return -1;
	if (raw_len == 1)
		return 0;                       /* "/": no segments */
	char *out = path->buf;
	size_t room = sizeof path->buf;
	const char *p = raw + 1;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (path->n == API_SEGMENTS_MAX)
			return -1;
		/* decoding never grows a segment; room covers the decoded copy */
		long dec = api_unescape(p, len, out, room, 0);
		if (dec < 0 || !segment_ok(out, (size_t)dec))
			return -1;
		path->seg[path->n++] = out;
		out += dec + 1;
		room -= (size_t)dec + 1;
		if (!slash)
			return 0;
		p = slash + 1;
	}
}

/* The pattern's segments, one at a time: *s points at the next one. */
static int next_pattern_segment(const char **s, const char **seg, size_t *len)
{
	if (**s != '/')
		return 0;
	*seg = *s + 1;
	const char *end = strchr(*seg, '/');
	*len = end ? (size_t)(end - *seg) : strlen(*seg);
	*s = *seg + *len;
	return 1;
}

static int is_param(const char *seg, size_t len)
{
	return len >= 3 && seg[0] == '{' && seg[len - 1] == '}';
}

/* Does pattern match path? Fills m->params when it does. */
static int pattern_match(const char *pattern, const struct api_path *path, struct api_match *m)
{
	const char *s = pattern, *seg;
	size_t len, i = 0, n_params = 0;
	m->n_params = 0;
	if (strcmp(pattern, "/") == 0)
		return path->n == 0;
	while (next_pattern_segment(&s, &seg, &len)) {
		if (i == path->n)
			return 0;
		if (is_param(seg, len)) {
			if (n_params == API_PARAMS_MAX)
				return 0;
			m->params[n_params].name = seg + 1;
			m->params[n_params].name_len = len - 2;
			m->params[n_params].value = path->seg[i];
			n_params++;
		} else if (strlen(path->seg[i]) != len || memcmp(path->seg[i], seg, len) != 0) {
			return 0;
		}
		i++;
	}
	if (i != path->n)
		return 0;
	m->n_params = n_params;
	return 1;
}

static int method_matches(const char *route_method, const char *method)
{
	return strcmp(route_method, method) == 0 ||
	       (strcmp(method, "HEAD") == 0 && strcmp(route_method, "GET") == 0);
}

/* Appends method to the comma-separated list unless it is there already. */
static void allow_add(char *allow, const char *method)
{
	size_t mlen = strlen(method);
	for (const char *p = allow; *p; ) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == mlen && memcmp(p, method, len) == 0)
			return;
		p = end ? end + 2 : p + len;
	}
	size_t used = strlen(allow);
	if (used + mlen + 3 > API_ALLOW_MAX)
		return;
	if (used)
		memcpy(allow + used, ", ", 2), used += 2;
	memcpy(allow + used, method, mlen + 1);
}

unsigned api_route_match(const struct api_route *routes, size_t n, const char *method,
                         const struct api_path *path, struct api_match *m)
{
	m->route = NULL;
	m->allow[0] = '\0';
	m->n_params = 0;
	int path_known = 0;
	for (size_t r = 0; r < n; r++) {
		struct api_match tmp;
		if (!pattern_match(routes[r].path, path, &tmp))
			continue;
		if (method_matches(routes[r].method, method)) {
			m->route = &routes[r];
			m->n_params = tmp.n_params;
			memcpy(m->params, tmp.params, tmp.n_params * sizeof tmp.params[0]);
			m->allow[0] = '\0';
			return m->status = 0;
		}
		path_known = 1;
		allow_add(m->allow, routes[r].method);
		if (strcmp(routes[r].method, "GET") == 0)
			allow_add(m->allow, "HEAD");
	}
	return m->status = path_known ? 405 : 404;
}

int api_routes_check(const struct api_route *routes, size_t n, char *err, size_t err_size)
{
	for (size_t r = 0; r < n; r++) {
		const struct api_route *rt = &routes[r];
		const char *s = rt->path, *seg;
		size_t len, params = 0;
		if (!rt->method || !rt->path || !rt->handler) {
			snprintf(err, err_size, "route %zu: method, path and handler are required", r);
			return -1;
		}
		if (rt->path[0] != '/') {
			snprintf(err, err_size, "route %s %s: not absolute", rt->method, rt->path);
			return -1;
		}
		while (strcmp(rt->path, "/") != 0 && next_pattern_segment(&s, &seg, &len)) {
			int braces = memchr(seg, '{', len) || memchr(seg, '}', len);
			if (len == 0 || (braces && !is_param(seg, len)) ||
			    (is_param(seg, len) && (memchr(seg + 1, '{', len - 2) ||
			                            memchr(seg + 1, '}', len - 2)))) {
				snprintf(err, err_size, "route %s %s: bad segment \"%.*s\"", rt->method,
				         rt->path, (int)len, seg);
				return -1;
			}
			if (is_param(seg, len) && ++params > API_PARAMS_MAX) {
				snprintf(err, err_size, "route %s %s: more than %d parameters", rt->method,
				         rt->path, API_PARAMS_MAX);
				return -1;
			}
		}
		for (size_t q = 0; q < r; q++)
			if (strcmp(routes[q].method, rt->method) == 0 &&
			    strcmp(routes[q].path, rt->path) == 0) {
				snprintf(err, err_size, "route %s %s: listed twice", rt->method, rt->path);
				return -1;
			}
	}
	return 0;
}
