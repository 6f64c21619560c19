/* api/router.h - the route table and matching a request against it.
 *
 * A service describes its endpoints as a table of designated initializers:
 *
 *   static const struct api_route routes[] = {
 *           { .method = "GET", .path = "/v1/jobs/{id}", .handler = api_jobs_get,
 *             .role = API_ROLE_USER },
 *   };
 *
 * A pattern is a '/'-separated list of literal segments and {name}
 * parameters; a parameter matches exactly one non-empty segment. Routes are
 * tried in table order and the first whose pattern and method both match
 * wins, so a literal route goes before a parameter route of the same shape.
 * A GET route also answers HEAD.
 *
 * Paths are checked before matching (api_path_parse): every segment is
 * percent-decoded and a path is refused (404) when it is not absolute, is
 * longer than API_PATH_MAX or has more than API_SEGMENTS_MAX segments, has a
 * malformed escape, an empty segment ("//", a trailing '/'), a segment
 * longer than API_SEGMENT_MAX, a segment "." or one that contains "..", a '/' (from
 * %2F), a NUL (%00) or another control character. Ids never reach a handler
 * with any of those in them.
 */
#ifndef LARCH_API_ROUTER_H
#define LARCH_API_ROUTER_H

#include <stddef.h>

#include "request.h"

struct api_route {
	const char *method;       /* "GET", "POST", "PATCH", ... */
	const char *path;         /* "/v1/jobs/{id}/cancel" */
	api_handler_fn handler;
	enum api_role role;       /* the role a principal needs (api/auth.h) */
};

#define API_ALLOW_MAX 96

/* The outcome of matching: a route, or 404, or 405 with the Allow list. */
struct api_match {
	const struct api_route *route;      /* NULL when status is 404 or 405 */
	unsigned status;                    /* 0 (matched), 404 or 405 */
	char allow[API_ALLOW_MAX];          /* 405: "GET, HEAD, POST" */
	struct api_param params[API_PARAMS_MAX];
	size_t n_params;
};

/* Splits and decodes raw (the path as sent, without the query) into *path.
 * Returns 0, or -1 when the path must be refused (see above). */
int api_path_parse(struct api_path *path, const char *raw);

/* Matches method and a parsed path against routes[0..n). Fills *m; returns
 * m->status (0 when a route matched). Parameter values point into path. */
unsigned api_route_match(const struct api_route *routes, size_t n, const char *method,
                         const struct api_path *path, struct api_match *m);

/* Checks a route table for mistakes: patterns that are not absolute, empty
 * or unbalanced segments, more than API_PARAMS_MAX parameters, duplicate
 * method and pattern pairs, a missing handler. Returns 0, or -1 with a
 * message in err. Servers call it at start; the unit tests call it on
 * larchd's table. */
int api_routes_check(const struct api_route *routes, size_t n, char *err, size_t err_size);

#endif
