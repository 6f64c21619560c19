/* api/stats.h - request counters for GET /metrics (Prometheus).
 *
 * Requests by method, route and status, and a latency histogram by method
 * and route: larch_http_requests_total and
 * larch_http_request_duration_seconds. One process-wide set (Prometheus
 * clients keep a default registry the same way), lock-free: the server
 * records each request as it completes (service/server.c); GET /metrics
 * writes them out. A route is a row of larchd's table (api/routes.c);
 * requests that matched none of its rows (404, 405, requests refused before
 * routing, or another table's routes in tests) count as route "other".
 * The server's connections are counted too: accepted, open, and those it
 * dropped before they sent a request (service/server_conns.h), by reason:
 * larch_http_connections_total, larch_http_connections_open and
 * larch_http_connections_dropped_total.
 */
#ifndef LARCH_API_STATS_H
#define LARCH_API_STATS_H

#include "buf.h"
#include "router.h"

/* Counts one completed request; route may be NULL. seconds from its first
 * byte to its completion. status 0 (no reply was sent) counts as "none". */
void api_stats_record(const struct api_route *route, const char *method, unsigned status,
                      double seconds);

/* What the server does with a connection, for the counters above. */
enum api_conn_event {
	API_CONN_OPENED,                 /* accepted and given a slot */
	API_CONN_CLOSED,                 /* a connection that was opened is gone */
	API_CONN_HEADER_TIMEOUT,         /* closed: no whole request head in time */
	API_CONN_IDLE_TIMEOUT,           /* closed: kept alive, no new request in time */
	API_CONN_PER_IP_REFUSED,         /* refused: too many open from its address */
	API_CONN_EVENTS
};

/* Counts one event (lock-free, any thread). */
void api_stats_connection(enum api_conn_event event);

/* Appends the counters and histograms in Prometheus text format 0.0.4. */
void api_stats_write(struct api_buf *b);

#endif
