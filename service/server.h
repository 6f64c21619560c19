/* service/server.h - larchd's HTTP server: libmicrohttpd around a route table.
 *
 * The daemon runs MHD's internal poll() loop in a pool of threads (all
 * accepting on the one listening socket; not epoll, whose quiescing races
 * in libmicrohttpd 0.9.75: server.c). A connection from an address that has
 * max_connections_per_ip open already is refused, and one that sends no
 * whole request head within header_timeout of connecting (or of its
 * previous request's end) is closed (server_conns.h: libmicrohttpd's own
 * idle timeout restarts at every byte, so it cannot stop a trickle). At
 * start the soft limit on open files is raised to fit max_connections.
 * For each request the server, in this order:
 *   - while shutting down: 503 overloaded, Connection: close;
 *   - a body (Content-Length > 0 or chunked) must be application/json (a
 *     charset parameter, if any, utf-8): else 415; a Content-Length over the
 *     body limit: 413 at once, before any of the body is read;
 *   - the path (api_path_parse) and the route table: 404, or 405 with Allow;
 *   - the query string: 400 when it is malformed;
 *   - the token for routes with a role (api/auth.h): 401, 403;
 *   - the body, accumulated up to the limit (a chunked body that passes it:
 *     413 and the connection is closed);
 *   - the handler, once, with the whole request; a handler that parks the
 *     request (api_defer in api/request.h) frees its MHD thread for other
 *     connections, and its continuation runs, on an MHD thread, once the
 *     work it waits for calls api_resume.
 * With a certificate and key the server speaks only TLS (libmicrohttpd's
 * GnuTLS): a plain-HTTP request on the port fails its handshake and the
 * connection is closed.
 * Each request has a client address (api_request.client): the socket's
 * peer, or, when the peer is one of trusted_proxies, the right-most
 * address of its X-Forwarded-For that is not (a proxy appends the address
 * it got the request from, so everything left of the first untrusted hop
 * may be forged). From anyone else the header is ignored. The cap per
 * address applies to socket peers (it is checked at accept, before any
 * header): trusted proxies are exempt from it, as loopback is.
 * Every request is logged in one line (method, path, status, microseconds, client)
 * and counted for GET /metrics (api/stats.h) when it completes, and its
 * state freed then (the request-completed callback). Requests between their first callback and completion are "in
 * flight"; svc_server_quiesce + waiting for svc_server_in_flight to reach 0
 * is a graceful stop.
 */
#ifndef LARCH_SERVICE_SERVER_H
#define LARCH_SERVICE_SERVER_H

#include <stddef.h>
#include <sys/socket.h>

#include "api/router.h"
#include "webhook_target.h"   /* struct svc_allow_list */

struct svc_server_config {
	const struct sockaddr *addr;     /* where to listen (port 0: any free port) */
	socklen_t addr_len;
	unsigned threads;                /* MHD threads (a poll loop each); 0 means 1 */
	unsigned max_connections;        /* 0: MHD's default */
	unsigned max_connections_per_ip; /* open from one address (127.0.0.1 and ::1
	                                    aside); 0: no cap */
	unsigned connection_timeout;     /* seconds a connection may idle; 0: never */
	unsigned header_timeout;         /* seconds from connecting, or from the end of
	                                    the previous request, to a whole request
	                                    head (else closed); 0: none */
	unsigned request_timeout;        /* seconds from a request's start to its whole
	                                    body (else 408, connection closed); 0: none */
	size_t body_limit;               /* bytes */
	const struct api_route *routes;  /* borrowed; must outlive the server */
	size_t n_routes;
	const struct api_ctx *ctx;       /* borrowed; must outlive the server */
	const char *tls_cert_pem;        /* HTTPS with this certificate (chain) and key, */
	const char *tls_key_pem;         /* PEM text, borrowed for the server's life;
	                                    both NULL: plain HTTP */
	const char *tls_source;          /* where they came from, for errors
	                                    ("tls_cert a.pem, tls_key b.pem") */
	const struct svc_allow_list *trusted_proxies; /* whose X-Forwarded-For counts; borrowed
	                                    for the server's life; NULL: nobody's */
};

struct svc_server;

/* Binds, listens and starts the daemon. Returns a new server (free with
 * svc_server_free), or NULL with a message in err ("127.0.0.1:8080:
 * Address already in use"). */
struct svc_server *svc_server_start(const struct svc_server_config *cfg, char *err,
                                    size_t err_size);

/* The port it listens on (the one picked when cfg asked for port 0). */
unsigned svc_server_port(const struct svc_server *srv);
/* "127.0.0.1:8080" or "[::1]:8080" (static storage of srv). */
const char *svc_server_address(const struct svc_server *srv);

/* Stops accepting connections: closes the listening socket; requests that
 * arrive on open connections get 503 with Connection: close. In-flight
 * requests go on. */
void svc_server_quiesce(struct svc_server *srv);
/* Requests received and not yet completed. */
unsigned svc_server_in_flight(const struct svc_server *srv);

/* Stops the daemon (cutting off whatever is still in flight: their
 * completion callbacks run) and frees srv. Parked requests are first let
 * finish (MHD may not stop with one suspended): so the work they wait for
 * (the database's writer) must still be running. Accepts NULL. */
void svc_server_free(struct svc_server *srv);

#endif
