/* service/server_conns.h - for server.c only: the HTTP server's guard over
 * its connections against clients that hold them without sending requests
 * (slowloris).
 *
 * libmicrohttpd's idle timeout restarts with every byte received, so a
 * client trickling a request head a byte at a time holds its connection for
 * as long as it likes, and a thousand such clients take every slot. The
 * guard adds two limits MHD 0.9.75 lacks:
 *   - a head deadline: a connection must deliver a whole request head
 *     (request line and headers) within header_timeout seconds of being
 *     accepted, or of the end of its previous request when kept alive; one
 *     timer thread (the reaper) shuts down the socket of each connection
 *     past its deadline, and MHD, reading end of file, closes it. A request
 *     whose head is in (from on_access's first call to its completion:
 *     its body, its handler, a parked long poll) has no deadline here
 *     (request_timeout and MHD's idle timeout bound it);
 *   - a cap on the open connections from one client address
 *     (max_connections_per_ip): MHD's accept policy callback refuses the
 *     next one, which MHD closes at once, before it is given a slot.
 *     127.0.0.1, ::1 and the trusted proxies (their clients' own
 *     addresses are in a header, read only after accept) are exempt: the host's own clients (the dashboard
 *     open on the host, the CLI, larchd's jobs, a reverse proxy) all come
 *     from there, and a local user can bind any other address of
 *     127.0.0.0/8 anyway, so a cap there would only throttle larchd's own
 *     traffic; the head deadline bounds what a local client can hold.
 *     Other loopback addresses count as distinct hosts.
 *
 * Each connection has a struct svc_conn (MHD's socket context) from MHD's
 * NOTIFY_STARTED to its NOTIFY_CLOSED, which MHD calls before it closes the
 * socket: the reaper calls shutdown() only under the guard's lock on
 * sockets still registered, so never on a descriptor MHD has closed (and
 * the system may have reused); it never calls close().
 *
 * What the guard drops is counted for GET /metrics (api/stats.h,
 * larch_http_connections_dropped_total) and logged at most once per 10 s:
 * a warning for heads that missed the deadline and for refused
 * connections, never a line per connection.
 */
#ifndef LARCH_SERVICE_SERVER_CONNS_H
#define LARCH_SERVICE_SERVER_CONNS_H

#include <microhttpd.h>
#include <sys/socket.h>

struct svc_conns;
struct svc_conn;

/* A guard: header_timeout seconds (0: no deadline), per_ip connections
 * from one address (0: no cap), max_connections the server's limit (sizes
 * the table of addresses), trusted the proxies exempt from the cap
 * (borrowed for g's life; may be NULL). Starts the reaper thread. NULL with
 * err filled on failure. */
struct svc_allow_list;
struct svc_conns *svc_conns_new(unsigned header_timeout, unsigned per_ip,
                                unsigned max_connections,
                                const struct svc_allow_list *trusted, char *err,
                                size_t err_size);
/* Stops the reaper and frees g: after MHD_stop_daemon (every connection
 * closed). Accepts NULL. */
void svc_conns_free(struct svc_conns *g);

/* MHD's callbacks, with g as their closure: the accept policy
 * (MHD_start_daemon's apc), MHD_OPTION_NOTIFY_CONNECTION and
 * MHD_OPTION_URI_LOG_CALLBACK (returns NULL: requests' contexts stay
 * server.c's). */
enum MHD_Result svc_conns_accept(void *g, const struct sockaddr *addr, socklen_t addr_len);
void svc_conns_notify(void *g, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
void *svc_conns_request_line(void *g, const char *uri, struct MHD_Connection *conn);

/* A request's head is in (on_access's first call): no deadline until it
 * completes. */
void svc_conns_request_begin(struct svc_conns *g, struct MHD_Connection *conn);
/* A request completed, however it ended (MHD's request-completed
 * callback): the next head's deadline starts now. */
void svc_conns_request_end(struct svc_conns *g, struct MHD_Connection *conn);

#endif
