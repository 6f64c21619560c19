/* api/stats.c - request counters and latency histograms; see stats.h. */
#include "stats.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "routes.h"

#define ROUTES_MAX 48                   /* rows of api_routes, and "other" */
#define OTHER_METHODS 8                 /* "other": GET, HEAD, POST, ... */

/* The statuses larchd answers with; anything else counts as "other". */
static const unsigned statuses[] = {
	0, 200, 201, 204, 304, 400, 401, 403, 404, 405, 409, 413, 414, 415, 422, 429, 431, 500, 503,
};
#define N_STATUS (sizeof statuses / sizeof statuses[0] + 1)

/* Upper bounds of the latency buckets, seconds (+Inf is the count). */
static const double bounds[] = {
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
#define N_BOUNDS (sizeof bounds / sizeof bounds[0])

static const char *const other_methods[OTHER_METHODS] = {
	"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other",
};

struct series {
	atomic_uint_fast64_t by_status[N_STATUS];
	atomic_uint_fast64_t buckets[N_BOUNDS];   /* not cumulative; summed when written */
	atomic_uint_fast64_t count, sum_ns;
};

/* one per route of the table; then "other" per method */
static struct series table[ROUTES_MAX + OTHER_METHODS];

static atomic_uint_fast64_t conn_events[API_CONN_EVENTS];

static size_t status_index(unsigned status)
{
	for (size_t i = 0; i < N_STATUS - 1; i++)
		if (statuses[i] == status)
			return i;
	return N_STATUS - 1;
}

static size_t other_index(const char *method)
{
	for (size_t i = 0; i < OTHER_METHODS - 1; i++)
		if (method && strcmp(method, other_methods[i]) == 0)
			return i;
	return OTHER_METHODS - 1;
}

void api_stats_record(const struct api_route *route, const char *method, unsigned status,
                      double seconds)
{
	size_t r;
	if (route && route >= api_routes && route < api_routes + api_routes_count &&
	    (size_t)(route - api_routes) < ROUTES_MAX)
		r = (size_t)(route - api_routes);
	else
		r = ROUTES_MAX + other_index(method);
	struct series *s = &table[r];
	atomic_fetch_add_explicit(&s->by_status[status_index(status)], 1, memory_order_relaxed);
	size_t b = 0;
	while (b < N_BOUNDS && seconds > bounds[b])
		b++;
	if (b < N_BOUNDS)
		atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
	uint64_t ns = seconds > 0 ? (uint64_t)(seconds * 1e9) : 0;
	atomic_fetch_add_explicit(&s->sum_ns, ns, memory_order_relaxed);
}

void api_stats_connection(enum api_conn_event event)
{
	if ((unsigned)event < API_CONN_EVENTS)
		atomic_fetch_add_explicit(&conn_events[event], 1, memory_order_relaxed);
}

static uint64_t get(atomic_uint_fast64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

/* The labels of row r: method="GET",route="/v1/jobs/{id}" */
static void labels(struct api_buf *b, size_t r)
{
	const char *method, *route;
	if (r < ROUTES_MAX) {
		method = api_routes[r].method;
		route = api_routes[r].path;
	} else {
		method = other_methods[r - ROUTES_MAX];
		route = "other";
	}
	api_buf_printf(b, "method=\"%s\",route=\"%s\"", method, route);
}

static int row_used(size_t r)
{
	return r < ROUTES_MAX ? r < api_routes_count : get(&table[r].count) > 0;
}

static void write_connections(struct api_buf *b)
{
	uint64_t opened = get(&conn_events[API_CONN_OPENED]);
	uint64_t closed = get(&conn_events[API_CONN_CLOSED]);
	api_buf_printf(b, "# HELP larch_http_connections_total Connections accepted.\n"
	                  "# TYPE larch_http_connections_total counter\n"
	                  "larch_http_connections_total %llu\n"
	                  "# HELP larch_http_connections_open Connections open now.\n"
	                  "# TYPE larch_http_connections_open gauge\n"
	                  "larch_http_connections_open %llu\n",
	               (unsigned long long)opened,
	               (unsigned long long)(opened > closed ? opened - closed : 0));
	api_buf_printf(b, "# HELP larch_http_connections_dropped_total Connections closed or "
	                  "refused while no request was in, by reason: header_timeout (no whole request head within "
	                  "header_timeout of connecting), idle (kept alive, no new request within "
	                  "header_timeout), per_ip_limit (refused: max_connections_per_ip open "
	                  "from its address).\n"
	                  "# TYPE larch_http_connections_dropped_total counter\n"
	                  "larch_http_connections_dropped_total{reason=\"header_timeout\"} %llu\n"
	                  "larch_http_connections_dropped_total{reason=\"idle\"} %llu\n"
	                  "larch_http_connections_dropped_total{reason=\"per_ip_limit\"} %llu\n",
	               (unsigned long long)get(&conn_events[API_CONN_HEADER_TIMEOUT]),
	               (unsigned long long)get(&conn_events[API_CONN_IDLE_TIMEOUT]),
	               (unsigned long long)get(&conn_events[API_CONN_PER_IP_REFUSED]));
}

void api_stats_write(struct api_buf *b)
{
	size_t rows = ROUTES_MAX + OTHER_METHODS;
	api_buf_adds(b, "# HELP larch_http_requests_total HTTP requests answered, by route and "
	                "status.\n# TYPE larch_http_requests_total counter\n");
	for (size_t r = 0; r < rows; r++) {
		if (!row_used(r))
			continue;
		for (size_t k = 0; k < N_STATUS; k++) {
			uint64_t n = get(&table[r].by_status[k]);
			if (!n)
				continue;
			api_buf_adds(b, "larch_http_requests_total{");
			labels(b, r);
			if (k == N_STATUS - 1)
				api_buf_adds(b, ",status=\"other\"}");
			else if (statuses[k] == 0)
				api_buf_adds(b, ",status=\"none\"}");
			else
				api_buf_printf(b, ",status=\"%u\"}", statuses[k]);
			api_buf_printf(b, " %llu\n", (unsigned long long)n);
		}
	}
	api_buf_adds(b, "# HELP larch_http_request_duration_seconds Time from a request's first "
	                "byte to its completion, by route.\n"
	                "# TYPE larch_http_request_duration_seconds histogram\n");
	for (size_t r = 0; r < rows; r++) {
		if (!row_used(r))
			continue;
		uint64_t cum = 0;
		for (size_t k = 0; k < N_BOUNDS; k++) {
			cum += get(&table[r].buckets[k]);
			api_buf_adds(b, "larch_http_request_duration_seconds_bucket{");
			labels(b, r);
			api_buf_printf(b, ",le=\"%g\"} %llu\n", bounds[k], (unsigned long long)cum);
		}
		uint64_t count = get(&table[r].count);
		api_buf_adds(b, "larch_http_request_duration_seconds_bucket{");
		labels(b, r);
		api_buf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)count);
		api_buf_adds(b, "larch_http_request_duration_seconds_sum{");
		labels(b, r);
		api_buf_printf(b, "} %.9f\n", (double)get(&table[r].sum_ns) * 1e-9);
		api_buf_adds(b, "larch_http_request_duration_seconds_count{");
		labels(b, r);
		api_buf_printf(b, "} %llu\n", (unsigned long long)count);
	}
	write_connections(b);
}
