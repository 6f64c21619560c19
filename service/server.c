/* service/server.c - the request lifecycle on libmicrohttpd; see server.h.
 *
 * MHD calls on_access several times per request: first when the headers
 * are in (we allocate the request, check it and may answer at once), then
 * once per piece of body, then a last time with no data (we run the
 * handler). on_completed runs once for every request on_access saw, however
 * it ended: it logs the request and frees it.
 */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/reply.h"
#include "api/stats.h"
#include "log.h"
#include "server_conns.h"

/* files larchd keeps open besides its connections (the database, logs,
 * job files, pipes): the open-file limit must have room for both */
#define FILES_RESERVED 256

struct svc_server {
	struct MHD_Daemon *mhd;
	char mhd_error[256];             /* MHD's last message while it starts */
	atomic_int starting;
	int listen_fd;                   /* ours until MHD_start_daemon takes it */
	MHD_socket quiesced_fd;          /* handed back by MHD_quiesce_daemon; closed after stop */
	struct svc_server_config cfg;
	struct svc_conns *conns;         /* head deadlines, per-address caps */
	unsigned port;
	char address[64];
	atomic_int draining;
	atomic_uint in_flight;
	atomic_uint deferred;            /* parked requests (api_defer), not yet resumed and run */
};

struct svc_request {
	struct api_request api;          /* what the handler sees */
	struct svc_server *srv;
	struct timespec start;
	size_t body_cap;                 /* bytes allocated for api.body */
	uint64_t declared;               /* Content-Length, 0 when absent */
	int has_body;
	int begun;                       /* request_begin ran */
	int bad_query;
	int refused;                     /* answered before the body: drop what comes */
};

/* MHD must not percent-decode: a %00 would cut the path short and %2F would
 * become a separator. api_path_parse and api_query_add decode, and refuse
 * what must not reach a handler. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
	return strlen(s);
}

/* Is a Content-Type application/json, with at most a utf-8 charset? */
static int json_content_type(const char *value)
{
	static const char json[] = "application/json";
	if (!value)
		return 0;
	while (*value == ' ' || *value == '\t')
		value++;
	if (strncasecmp(value, json, sizeof json - 1) != 0)
		return 0;
	const char *p = value + sizeof json - 1;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			return 1;
		if (*p != ';')
			return 0;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		const char *end = strchr(p, ';');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len >= 8 && strncasecmp(p, "charset=", 8) == 0) {
			const char *v = p + 8;
			size_t vlen = len - 8;
			if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"')
				v++, vlen -= 2;
			if (!((vlen == 5 && strncasecmp(v, "utf-8", 5) == 0) ||
			      (vlen == 4 && strncasecmp(v, "utf8", 4) == 0)))
				return 0;
		}
		p += len;
		while (*p && *p != ';')
			p++;
	}
}

static enum MHD_Result add_query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
	struct svc_request *r = cls;
	if (api_query_add(&r->api, key, value) != 0) {
		r->bad_query = 1;
		return MHD_NO;
	}
	return MHD_YES;
}

/* The request's headers of interest and whether it has a body. */
static void request_headers(struct svc_request *r)
{
	struct api_request *req = &r->api;
	struct MHD_Connection *conn = req->conn;
	req->content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                MHD_HTTP_HEADER_CONTENT_TYPE);
	req->authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                 MHD_HTTP_HEADER_AUTHORIZATION);
	req->if_none_match = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                 MHD_HTTP_HEADER_IF_NONE_MATCH);
	req->idempotency_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                   "Idempotency-Key");
	const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *encoding = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                   MHD_HTTP_HEADER_TRANSFER_ENCODING);
	r->declared = length ? strtoull(length, NULL, 10) : 0;
	r->has_body = r->declared > 0 || (encoding && strcasestr(encoding, "chunked"));
}

/* The checks, in the order server.h lists them. A request with a body is
 * checked on the first call, before its body is read (and a reply then ends
 * the connection, as MHD will not read past it); one without is checked on
 * the last, so that an error reply keeps the connection alive. Returns
 * MHD_YES to go on, or the result of the reply. */
static enum MHD_Result request_begin(struct svc_server *srv, struct svc_request *r)
{
	struct api_request *req = &r->api;
	struct MHD_Connection *conn = req->conn;
	uint64_t declared = r->declared;
	r->begun = 1;
	if (atomic_load(&srv->draining)) {
		r->refused = 1;
		api_reply_header(req, MHD_HTTP_HEADER_CONNECTION, "close");
		api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "1");
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "shutting down");
	}
	if (declared > srv->cfg.body_limit) {
		r->refused = 1;
		api_reply_header(req, MHD_HTTP_HEADER_CONNECTION, "close");
		return api_reply_error_detail(req, 413, API_ERR_TOO_LARGE,
		                              json_pack("{s:I}", "limit", (json_int_t)srv->cfg.body_limit),
		                              "body: %llu bytes is over the limit of %zu",
		                              (unsigned long long)declared, srv->cfg.body_limit);
	}
	if (r->has_body && !json_content_type(req->content_type)) {
		r->refused = 1;
		api_reply_header(req, MHD_HTTP_HEADER_CONNECTION, "close");
		return api_reply_error(req, 415, API_ERR_UNSUPPORTED_MEDIA_TYPE,
		                       "body: content type must be application/json (got %s)",
		                       req->content_type ? req->content_type : "none");
	}

	struct api_match m;
	if (api_path_parse(&req->path, req->raw_path) != 0)
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "no such path");
	switch (api_route_match(srv->cfg.routes, srv->cfg.n_routes, req->method, &req->path, &m)) {
	case 0:
		break;
	case 405:
		api_reply_header(req, MHD_HTTP_HEADER_ALLOW, m.allow);
		return api_reply_error_detail(req, 405, API_ERR_METHOD_NOT_ALLOWED,
		                              json_pack("{s:s}", "allow", m.allow),
		                              "method %s is not allowed here (allowed: %s)",
		                              req->method, m.allow);
	default:
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "no such path");
	}
	req->route = m.route;
	req->n_params = m.n_params;
	memcpy(req->params, m.params, m.n_params * sizeof m.params[0]);

	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_query_arg, r);
	if (r->bad_query)
		return api_reply_error(req, 400, API_ERR_BAD_REQUEST,
		                       "malformed query string (bad escape, NUL or more than %d "
		                       "arguments)", API_QUERY_MAX);

	enum MHD_Result ret;
	if (api_authenticate(req, &ret) != 0)
		return ret;
	if (declared > 0) {
		req->body = malloc((size_t)declared + 1);
		if (!req->body)
			return MHD_NO;
		r->body_cap = (size_t)declared + 1;
	}
	return MHD_YES;
}

/* One piece of the body. */
static enum MHD_Result request_data(struct svc_server *srv, struct svc_request *r,
                                    const char *data, size_t size)
{
	struct api_request *req = &r->api;
	if (r->refused || req->replied)
		return MHD_YES;                 /* answered already: drop it */
	if (srv->cfg.request_timeout) {
		/* a body trickled in (each piece resets the idle timeout): cut it
		 * off. libmicrohttpd takes no reply in the middle of a body, so the
		 * connection is closed; the log says 408. */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long long ms = (now.tv_sec - r->start.tv_sec) * 1000LL +
		               (now.tv_nsec - r->start.tv_nsec) / 1000000;
		if (ms >= srv->cfg.request_timeout * 1000LL) {
			r->refused = 1;
			req->status = 408;
			return MHD_NO;
		}
	}
	if (size > srv->cfg.body_limit - req->body_len) {
		r->refused = 1;
		api_reply_header(req, MHD_HTTP_HEADER_CONNECTION, "close");
		enum MHD_Result ret = api_reply_error_detail(
			req, 413, API_ERR_TOO_LARGE,
			json_pack("{s:I}", "limit", (json_int_t)srv->cfg.body_limit),
			"body: over the limit of %zu bytes", srv->cfg.body_limit);
		/* MHD may refuse a reply in the middle of a body: then close */
		if (ret != MHD_YES)
			req->status = 413;
		return ret;
	}
	if (req->body_len + size + 1 > r->body_cap) {
		size_t cap = r->body_cap ? r->body_cap : 4096;
		while (cap < req->body_len + size + 1)
			cap *= 2;
		if (cap > srv->cfg.body_limit + 1)
			cap = srv->cfg.body_limit + 1;
		char *body = realloc(req->body, cap);
		if (!body)
			return MHD_NO;
		req->body = body;
		r->body_cap = cap;
	}
	memcpy(req->body + req->body_len, data, size);
	req->body_len += size;
	req->body[req->body_len] = '\0';
	return MHD_YES;
}

/* The whole request is in: run the handler, or, for a request it parked
 * (api_defer) that is back (api_resume), the continuation it named. */
static enum MHD_Result request_run(struct svc_request *r)
{
	struct api_request *req = &r->api;
	if (req->replied)
		return MHD_YES;
	api_handler_fn run = req->route->handler;
	if (req->then) {
		run = req->then;
		req->then = NULL;
		atomic_fetch_sub(&r->srv->deferred, 1);
	}
	enum MHD_Result ret = run(req);
	if (req->then) {
		if (!req->replied)
			return MHD_YES;         /* parked: MHD calls again once it is resumed */
		svc_log(SVC_LOG_ERROR, "bug: %s %s: the handler replied and deferred", req->method,
		        req->route->path);
	}
	if (!req->replied) {
		svc_log(SVC_LOG_ERROR, "bug: %s %s: the handler returned without a reply",
		        req->method, req->route->path);
		ret = api_reply_error(req, 500, API_ERR_INTERNAL, "the handler did not reply");
	}
	return ret;
}

/* One address of an X-Forwarded-For list ("10.0.0.7", "10.0.0.7:5000",
 * "::1", "[::1]:5000") into sa. 0, or -1 when it is none of those. */
static int forwarded_address(const char *s, size_t len, struct sockaddr_storage *sa)
{
	char text[INET6_ADDRSTRLEN + 8];
	while (len && (*s == ' ' || *s == '\t'))
		s++, len--;
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len == 0 || len >= sizeof text)
		return -1;
	memcpy(text, s, len);
	text[len] = '\0';
	char *host = text;
	if (host[0] == '[') {
		char *close = strchr(host, ']');
		if (!close || (close[1] && close[1] != ':'))
			return -1;
		*close = '\0';
		host++;
	} else {
		char *colon = strchr(host, ':');
		if (colon && !strchr(colon + 1, ':'))
			*colon = '\0';             /* a.b.c.d:port */
	}
	memset(sa, 0, sizeof *sa);
	struct sockaddr_in *in = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
	if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		return 0;
	}
	return -1;
}

static void address_text(const struct sockaddr *sa, char *out, size_t out_size)
{
	out[0] = '\0';
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
		          (socklen_t)out_size);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
		          (socklen_t)out_size);
}

#define FORWARDED_MAX 16   /* X-Forwarded-For headers of one request looked at */

struct forwarded {
	const char *value[FORWARDED_MAX];
	size_t n;
};

static enum MHD_Result add_forwarded(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
	struct forwarded *f = cls;
	if (strcasecmp(key, "X-Forwarded-For") == 0 && value) {
		if (f->n == FORWARDED_MAX)       /* keep the last ones: they are read first */
			memmove(f->value, f->value + 1, (FORWARDED_MAX - 1) * sizeof f->value[0]);
		else
			f->n++;
		f->value[f->n - 1] = value;
	}
	return MHD_YES;
}

/* req->client (server.h): the peer, or from a trusted proxy the right-most
 * address of X-Forwarded-For (every such header, in order) that is not a
 * trusted proxy; the left-most when all are; the last trusted one when an
 * entry is not an address (nothing left of it can be believed). */
static void request_client(struct svc_server *srv, struct svc_request *r)
{
	struct api_request *req = &r->api;
	const union MHD_ConnectionInfo *info = MHD_get_connection_info(
		req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!info || !info->client_addr)
		return;
	address_text(info->client_addr, req->client, sizeof req->client);
	const struct svc_allow_list *trusted = srv->cfg.trusted_proxies;
	if (!trusted || !trusted->n || !svc_allow_has(trusted, info->client_addr))
		return;
	struct forwarded f = { .n = 0 };
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, add_forwarded, &f);
	for (size_t h = f.n; h-- > 0;) {
		const char *v = f.value[h];
		size_t end = strlen(v);
		for (;;) {
			size_t start = end;
			while (start > 0 && v[start - 1] != ',')
				start--;
			struct sockaddr_storage sa;
			if (forwarded_address(v + start, end - start, &sa) != 0)
				return;
			address_text((const struct sockaddr *)&sa, req->client, sizeof req->client);
			if (!svc_allow_has(trusted, (const struct sockaddr *)&sa))
				return;
			if (start == 0)
				break;
			end = start - 1;
		}
	}
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **req_cls)
{
	struct svc_server *srv = cls;
	struct svc_request *r = *req_cls;
	if (!r) {
		r = calloc(1, sizeof *r);
		if (!r)
			return MHD_NO;
		clock_gettime(CLOCK_MONOTONIC, &r->start);
		r->srv = srv;
		r->api.conn = conn;
		r->api.ctx = srv->cfg.ctx;
		r->api.method = method;
		r->api.raw_path = url;
		r->api.deferred = &srv->deferred;
		*req_cls = r;
		atomic_fetch_add(&srv->in_flight, 1);
		svc_conns_request_begin(srv->conns, conn);
		if (svc_log_enabled(SVC_LOG_DEBUG)) {
			char m[32], path[256];
			svc_log(SVC_LOG_DEBUG, "%s %s: headers in",
			        svc_log_sanitize_token(method, m, sizeof m),
			        svc_log_sanitize_token(url, path, sizeof path));
		}
		request_headers(r);
		request_client(srv, r);
		return r->has_body ? request_begin(srv, r) : MHD_YES;
	}
	if (*upload_data_size) {
		size_t size = *upload_data_size;
		*upload_data_size = 0;
		return request_data(srv, r, upload_data, size);
	}
	if (!r->begun) {
		enum MHD_Result ret = request_begin(srv, r);
		if (ret != MHD_YES || r->api.replied)
			return ret;
	}
	return request_run(r);
}

static const char *termination_name(enum MHD_RequestTerminationCode toe)
{
	switch (toe) {
	case MHD_REQUEST_TERMINATED_COMPLETED_OK: return NULL;
	case MHD_REQUEST_TERMINATED_WITH_ERROR: return "connection error";
	case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timed out";
	case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "cut off by shutdown";
	case MHD_REQUEST_TERMINATED_READ_ERROR: return "read error";
	case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client went away";
	}
	return "terminated";
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct svc_server *srv = cls;
	struct svc_request *r = *req_cls;
	svc_conns_request_end(srv->conns, conn);
	if (!r)
		return;                     /* its head never came in whole */
	*req_cls = NULL;
	if (r->api.then)                    /* ended while parked: it will not run */
		atomic_fetch_sub(&srv->deferred, 1);
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	long long us = (end.tv_sec - r->start.tv_sec) * 1000000LL +
	               (end.tv_nsec - r->start.tv_nsec) / 1000;
	api_stats_record(r->api.route, r->api.method, r->api.status, (double)us * 1e-6);
	if (svc_log_enabled(SVC_LOG_INFO)) {
		char method[32], path[256];
		const char *why = termination_name(toe);
		svc_log_request("%s %s %u %lldus %s%s%s",
		        svc_log_sanitize_token(r->api.method, method, sizeof method),
		        svc_log_sanitize_token(r->api.raw_path, path, sizeof path), r->api.status, us,
		        r->api.client[0] ? r->api.client : "-", why ? " " : "", why ? why : "");
	}
	api_request_release(&r->api);
	free(r);
	atomic_fetch_sub(&srv->in_flight, 1);
}

/* MHD's messages: debug lines, and while it starts, the last one is kept
 * for the error (a certificate GnuTLS cannot read) */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct svc_server *srv = cls;
	int starting = atomic_load(&srv->starting);
	if (!starting && !svc_log_enabled(SVC_LOG_DEBUG))
		return;
	char text[512];
	vsnprintf(text, sizeof text, fmt, ap);
	size_t len = strlen(text);
	while (len && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == '.'))
		text[--len] = '\0';
	if (starting) {                    /* the start of it, cut to fit */
		size_t n = strnlen(text, sizeof srv->mhd_error - 1);
		memcpy(srv->mhd_error, text, n);
		srv->mhd_error[n] = '\0';
	}
	svc_log(SVC_LOG_DEBUG, "mhd: %s", text);
}

static int format_address(const struct sockaddr *sa, char *out, size_t out_size,
                          unsigned *port)
{
	char host[INET6_ADDRSTRLEN];
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
		*port = ntohs(in->sin_port);
		snprintf(out, out_size, "%s:%u", host, *port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
		*port = ntohs(in6->sin6_port);
		snprintf(out, out_size, "[%s]:%u", host, *port);
	} else {
		return -1;
	}
	return 0;
}

/* The listening socket, made here so that errors name the address. */
static int listen_on(struct svc_server *srv, char *err, size_t err_size)
{
	char want[64];
	unsigned port;
	if (format_address(srv->cfg.addr, want, sizeof want, &port) != 0) {
		snprintf(err, err_size, "listen: unsupported address family");
		return -1;
	}
	int fd = socket(srv->cfg.addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, err_size, "%s: socket: %s", want, strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (srv->cfg.addr->sa_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	struct sockaddr_storage got;
	socklen_t got_len = sizeof got;
	if (bind(fd, srv->cfg.addr, srv->cfg.addr_len) != 0 || listen(fd, 1024) != 0 ||
	    getsockname(fd, (struct sockaddr *)&got, &got_len) != 0) {
		snprintf(err, err_size, "%s: %s", want, strerror(errno));
		close(fd);
		return -1;
	}
	format_address((struct sockaddr *)&got, srv->address, sizeof srv->address, &srv->port);
	srv->listen_fd = fd;
	return 0;
}

/* Raises the soft limit on open files to fit max_connections (the hard
 * limit permitting), and says so when it cannot: past the limit, accept()
 * fails and new connections wait in the listen backlog. */
static void fit_open_files(unsigned max_connections)
{
	struct rlimit rl;
	if (!max_connections || getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	rlim_t want = (rlim_t)max_connections + FILES_RESERVED;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return;
	struct rlimit raised = { want, rl.rlim_max };
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		raised.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
		rl.rlim_cur = raised.rlim_cur;
	if (rl.rlim_cur < want)
		svc_log(SVC_LOG_WARN, "max_connections %u: the open-file limit is %llu (hard limit "
		        "%llu), room for about %llu connections; raise it (ulimit -n, LimitNOFILE=) "
		        "or lower max_connections", max_connections, (unsigned long long)rl.rlim_cur,
		        (unsigned long long)rl.rlim_max,
		        (unsigned long long)(rl.rlim_cur > FILES_RESERVED ? rl.rlim_cur - FILES_RESERVED
		                                                          : 0));
}

struct svc_server *svc_server_start(const struct svc_server_config *cfg, char *err,
                                    size_t err_size)
{
	struct svc_server *srv = calloc(1, sizeof *srv);
	if (!srv) {
		snprintf(err, err_size, "out of memory");
		return NULL;
	}
	srv->cfg = *cfg;
	srv->listen_fd = -1;
	srv->quiesced_fd = MHD_INVALID_SOCKET;
	if (api_routes_check(cfg->routes, cfg->n_routes, err, err_size) != 0 ||
	    !(srv->conns = svc_conns_new(cfg->header_timeout, cfg->max_connections_per_ip,
	                                 cfg->max_connections, cfg->trusted_proxies, err,
	                                 err_size))) {
		free(srv);
		return NULL;
	}
	if (cfg->tls_cert_pem && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
		snprintf(err, err_size, "tls: this libmicrohttpd was built without TLS support "
		         "(GnuTLS): serve plain HTTP behind a TLS proxy, or install one with it");
		svc_conns_free(srv->conns);
		free(srv);
		return NULL;
	}
	if (listen_on(srv, err, err_size) != 0) {
		svc_conns_free(srv->conns);
		free(srv);
		return NULL;
	}
	fit_open_files(cfg->max_connections);
	unsigned threads = cfg->threads ? cfg->threads : 1;
	/* poll(), not epoll: with epoll, MHD_quiesce_daemon and a polling
	 * thread can both take the listening socket out of the thread's epoll
	 * set, and the one that loses the race aborts the process ("Failed to
	 * remove listen FD from epoll set", libmicrohttpd 0.9.75, seen at a
	 * SIGTERM in CI). With poll() a quiesced thread just leaves the socket
	 * out of its next poll set. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
	                 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	struct MHD_OptionItem options[12] = {
		{ MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, srv },    /* first: MHD asks */
		{ MHD_OPTION_LISTEN_SOCKET, srv->listen_fd, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, srv },
		{ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)svc_conns_notify, srv->conns },
		{ MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)svc_conns_request_line, srv->conns },
		{ MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)keep_escaped, NULL },
		{ MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout, NULL },
	};
	size_t n = 7;
	if (cfg->max_connections)
		options[n++] = (struct MHD_OptionItem){ MHD_OPTION_CONNECTION_LIMIT,
		                                        cfg->max_connections, NULL };
	if (threads > 1)
		options[n++] = (struct MHD_OptionItem){ MHD_OPTION_THREAD_POOL_SIZE, threads, NULL };
	if (cfg->tls_cert_pem) {
		flags |= MHD_USE_TLS;
		options[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0,
		                                        (void *)cfg->tls_cert_pem };
		options[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0,
		                                        (void *)cfg->tls_key_pem };
	}
	options[n] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	atomic_store(&srv->starting, 1);
	srv->mhd = MHD_start_daemon(flags, 0, svc_conns_accept, srv->conns, on_access, srv,
	                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
	atomic_store(&srv->starting, 0);
	if (!srv->mhd) {
		if (cfg->tls_cert_pem)
			snprintf(err, err_size, "%s: GnuTLS (libmicrohttpd) refused them: %s (a PEM "
			         "certificate, or chain, and its unencrypted private key)",
			         cfg->tls_source ? cfg->tls_source : "tls_cert, tls_key",
			         srv->mhd_error[0] ? srv->mhd_error : "no reason given");
		else
			snprintf(err, err_size, "%s: libmicrohttpd would not start (threads %u)",
			         srv->address, threads);
		close(srv->listen_fd);
		svc_conns_free(srv->conns);
		free(srv);
		return NULL;
	}
	return srv;
}

unsigned svc_server_port(const struct svc_server *srv)
{
	return srv->port;
}

const char *svc_server_address(const struct svc_server *srv)
{
	return srv->address;
}

void svc_server_quiesce(struct svc_server *srv)
{
	atomic_store(&srv->draining, 1);
	/* MHD hands the listening socket back, but its polling threads leave it
	 * out of their poll sets only on their next turn: closing it now could
	 * hand a thread a closed descriptor (or another file's). shutdown()
	 * stops listening at once (new connections are refused) and keeps the
	 * descriptor valid; it is closed once the daemon has stopped. */
	srv->quiesced_fd = MHD_quiesce_daemon(srv->mhd);
	if (srv->quiesced_fd != MHD_INVALID_SOCKET)
		shutdown(srv->quiesced_fd, SHUT_RDWR);
}

unsigned svc_server_in_flight(const struct svc_server *srv)
{
	return atomic_load(&((struct svc_server *)srv)->in_flight);
}

/* MHD must not be stopped with a connection suspended: wait until every
 * parked request has been resumed and run. Their work always ends (the
 * database answers every queued submit, with an error if it must), so this
 * wait is short; it is logged if it is not. */
static void wait_parked(struct svc_server *srv)
{
	struct timespec pause = { 0, 1000 * 1000 };
	for (unsigned ms = 0; atomic_load(&srv->deferred) > 0; ms++) {
		if (ms == 5000)
			svc_log(SVC_LOG_WARN, "stopping: still waiting for %u parked requests",
			        atomic_load(&srv->deferred));
		nanosleep(&pause, NULL);
	}
}

void svc_server_free(struct svc_server *srv)
{
	if (!srv)
		return;
	if (srv->mhd) {
		wait_parked(srv);
		MHD_stop_daemon(srv->mhd);
	}
	svc_conns_free(srv->conns);       /* after MHD: every connection is closed */
	if (srv->quiesced_fd != MHD_INVALID_SOCKET)
		close(srv->quiesced_fd);
	free(srv);
}
