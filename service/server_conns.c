/* service/server_conns.c - head deadlines and per-address caps for the
 * HTTP server's connections; see server_conns.h.
 *
 * One lock guards the list of connections, the table of per-address counts
 * and the counters for the next log line. MHD's threads take it once when a
 * connection opens or closes and once at each request's begin and end; the
 * reaper takes it once per tick (a quarter of header_timeout, within 0.1 to
 * 1 s) to walk the list.
 */
#include "server_conns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/stats.h"
#include "clock.h"
#include "log.h"
#include "webhook_target.h"

#define LOG_EVERY_MS 10000            /* at most one warning per 10 s */

/* A client address: IPv4 as ::ffff:a.b.c.d, IPv6 whole. */
struct ip_key {
	unsigned char b[16];
};

/* Open connections from one counted address; freed when none is left. */
struct ip_count {
	struct ip_count *next;            /* in its bucket */
	struct ip_key key;
	unsigned n;
};

struct svc_conn {
	struct svc_conn *prev, *next;     /* in g->conns */
	MHD_socket fd;                    /* MHD's: shut down, never closed, here */
	struct ip_count *ip;              /* its address's count; NULL when not counted */
	struct ip_key key;
	int has_key;
	int64_t since_ms;                 /* the next head's deadline counts from here */
	int in_request;                   /* a head is in and its request not completed */
	int line_in;                      /* the next request's first line is in */
	int served;                       /* a request completed on it */
	int dropped;                      /* shut down here */
};

struct svc_conns {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t reaper;
	int stopping;
	int64_t header_ms;                /* 0: no deadline */
	unsigned per_ip;                  /* 0: no cap */
	const struct svc_allow_list *trusted; /* proxies exempt from the cap; may be NULL */
	unsigned header_timeout;
	struct svc_conn *conns;
	struct ip_count **buckets;
	size_t mask;                      /* buckets - 1 (a power of two) */
	uint64_t seed;
	/* since the last warning */
	unsigned long long slow, refused;
	struct ip_key slow_key, refused_key;
	int64_t logged_ms;
};


/* ---- addresses ------------------------------------------------------------ */

static int key_of(const struct sockaddr *sa, struct ip_key *k)
{
	if (!sa)
		return -1;
	memset(k, 0, sizeof *k);
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		k->b[10] = k->b[11] = 0xff;
		memcpy(k->b + 12, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(k->b, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -1;
}

static int is_v4(const struct ip_key *k)
{
	static const unsigned char prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(k->b, prefix, 12) == 0;
}

/* 127.0.0.1 or ::1, the host's own clients, or a trusted proxy (server_conns.h) */
static int exempt(const struct svc_conns *g, const struct ip_key *k)
{
	static const unsigned char v4[4] = { 127, 0, 0, 1 };
	static const struct ip_key v6 = { .b = { [15] = 1 } };
	if ((is_v4(k) && memcmp(k->b + 12, v4, 4) == 0) || memcmp(k, &v6, sizeof v6) == 0)
		return 1;
	if (!g->trusted || !g->trusted->n)
		return 0;
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6 };
	memcpy(&sa.sin6_addr, k->b, 16);     /* v4-mapped for IPv4: svc_allow_has unmaps it */
	return svc_allow_has(g->trusted, (const struct sockaddr *)&sa);
}

static void key_text(const struct ip_key *k, char *out, size_t out_size)
{
	if (is_v4(k))
		inet_ntop(AF_INET, k->b + 12, out, (socklen_t)out_size);
	else
		inet_ntop(AF_INET6, k->b, out, (socklen_t)out_size);
}

/* FNV-1a, seeded per process so that no client picks addresses that collide */
static size_t bucket_of(const struct svc_conns *g, const struct ip_key *k)
{
	uint64_t h = 14695981039346656037ULL ^ g->seed;
	for (size_t i = 0; i < sizeof k->b; i++)
		h = (h ^ k->b[i]) * 1099511628211ULL;
	return (size_t)(h ^ (h >> 32)) & g->mask;
}

/* The count of k; with create, a new one (n = 0) if it has none, or NULL
 * when out of memory. Under the lock. */
static struct ip_count *ip_find(struct svc_conns *g, const struct ip_key *k, int create)
{
	size_t b = bucket_of(g, k);
	for (struct ip_count *c = g->buckets[b]; c; c = c->next)
		if (memcmp(&c->key, k, sizeof *k) == 0)
			return c;
	if (!create)
		return NULL;
	struct ip_count *c = calloc(1, sizeof *c);
	if (c) {
		c->key = *k;
		c->next = g->buckets[b];
		g->buckets[b] = c;
	}
	return c;
}

static void ip_release(struct svc_conns *g, struct ip_count *ip)
{
	if (--ip->n)
		return;
	for (struct ip_count **p = &g->buckets[bucket_of(g, &ip->key)]; *p; p = &(*p)->next)
		if (*p == ip) {
			*p = ip->next;
			free(ip);
			return;
		}
}

/* ---- the reaper ----------------------------------------------------------- */

/* One warning for what was dropped since the last; called unlocked with
 * the counts taken under the lock. */
static void warn(const struct svc_conns *g, unsigned long long slow, const struct ip_key *slow_key,
                 unsigned long long refused, const struct ip_key *refused_key)
{
	char a[INET6_ADDRSTRLEN] = "", b[INET6_ADDRSTRLEN] = "", text[512];
	int n = 0;
	if (slow) {
		key_text(slow_key, a, sizeof a);
		n += snprintf(text + n, sizeof text - (size_t)n,
		              "%llu connections sent no whole request head within %us and were "
		              "closed (latest from %s)", slow, g->header_timeout, a);
	}
	if (refused) {
		key_text(refused_key, b, sizeof b);
		snprintf(text + n, sizeof text - (size_t)n,
		         "%s%llu connections were refused for having max_connections_per_ip (%u) "
		         "open from their address (latest %s)", n ? "; " : "", refused, g->per_ip, b);
	}
	svc_log(SVC_LOG_WARN, "http: in the last %ds, %s", LOG_EVERY_MS / 1000, text);
}

/* Shuts down the connections past their deadline. Under the lock. */
static void reap(struct svc_conns *g, int64_t now)
{
	for (struct svc_conn *c = g->conns; c; c = c->next) {
		if (c->in_request || c->dropped || now - c->since_ms < g->header_ms)
			continue;
		shutdown(c->fd, SHUT_RDWR);   /* MHD reads end of file and closes it */
		c->dropped = 1;
		if (c->served && !c->line_in) {
			api_stats_connection(API_CONN_IDLE_TIMEOUT);
			continue;
		}
		api_stats_connection(API_CONN_HEADER_TIMEOUT);
		g->slow++;
		if (c->has_key)
			g->slow_key = c->key;
	}
}

static void *reaper_main(void *arg)
{
	struct svc_conns *g = arg;
	int64_t tick = g->header_ms / 4;
	if (tick < 100)
		tick = 100;
	if (tick > 1000 || !g->header_ms)
		tick = 1000;
	pthread_mutex_lock(&g->lock);
	g->logged_ms = svc_mono_ms() - LOG_EVERY_MS;     /* the first warning at once */
	while (!g->stopping) {
		struct timespec at;
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_sec += tick / 1000;
		at.tv_nsec += (tick % 1000) * 1000000;
		if (at.tv_nsec >= 1000000000) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&g->wake, &g->lock, &at);
		if (g->stopping)
			break;
		int64_t now = svc_mono_ms();
		if (g->header_ms)
			reap(g, now);
		if (now - g->logged_ms < LOG_EVERY_MS || (!g->slow && !g->refused))
			continue;
		unsigned long long slow = g->slow, refused = g->refused;
		struct ip_key slow_key = g->slow_key, refused_key = g->refused_key;
		g->slow = g->refused = 0;
		g->logged_ms = now;
		pthread_mutex_unlock(&g->lock);
		warn(g, slow, &slow_key, refused, &refused_key);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* ---- MHD's callbacks ------------------------------------------------------ */

enum MHD_Result svc_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addr_len)
{
	struct svc_conns *g = cls;
	struct ip_key k;
	(void)addr_len;
	if (!g->per_ip || key_of(addr, &k) != 0 || exempt(g, &k))
		return MHD_YES;
	pthread_mutex_lock(&g->lock);
	struct ip_count *c = ip_find(g, &k, 0);
	int over = c && c->n >= g->per_ip;
	if (over) {
		g->refused++;
		g->refused_key = k;
	}
	pthread_mutex_unlock(&g->lock);
	if (over)
		api_stats_connection(API_CONN_PER_IP_REFUSED);
	return over ? MHD_NO : MHD_YES;
}

static void conn_started(struct svc_conns *g, struct MHD_Connection *conn, void **ctx)
{
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(
		conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_ConnectionInfo *addr = MHD_get_connection_info(
		conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct svc_conn *c = calloc(1, sizeof *c);
	if (!c || !fd) {
		/* out of memory: refuse it rather than serve it unguarded */
		if (fd)
			shutdown(fd->connect_fd, SHUT_RDWR);
		free(c);
		*ctx = NULL;
		return;
	}
	c->fd = fd->connect_fd;
	c->since_ms = svc_mono_ms();
	c->has_key = addr && key_of(addr->client_addr, &c->key) == 0;
	int over = 0;
	pthread_mutex_lock(&g->lock);
	if (g->per_ip && c->has_key && !exempt(g, &c->key)) {
		/* the accept policy let it in, but a connection from the same
		 * address on another thread may have taken the last place since */
		struct ip_count *ip = ip_find(g, &c->key, 1);
		if (!ip || ip->n >= g->per_ip) {
			over = 1;
			g->refused++;
			g->refused_key = c->key;
		} else {
			ip->n++;
			c->ip = ip;
		}
	}
	c->dropped = over;
	c->next = g->conns;
	if (g->conns)
		g->conns->prev = c;
	g->conns = c;
	pthread_mutex_unlock(&g->lock);
	*ctx = c;
	api_stats_connection(API_CONN_OPENED);
	if (over) {
		api_stats_connection(API_CONN_PER_IP_REFUSED);
		shutdown(c->fd, SHUT_RDWR);
	}
}

static void conn_closed(struct svc_conns *g, void **ctx)
{
	struct svc_conn *c = *ctx;
	if (!c)
		return;
	*ctx = NULL;
	pthread_mutex_lock(&g->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		g->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->ip)
		ip_release(g, c->ip);
	pthread_mutex_unlock(&g->lock);
	free(c);
	api_stats_connection(API_CONN_CLOSED);
}

void svc_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
	if (code == MHD_CONNECTION_NOTIFY_STARTED)
		conn_started(cls, conn, socket_context);
	else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
		conn_closed(cls, socket_context);
}

static struct svc_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *info = MHD_get_connection_info(
		conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return info ? info->socket_context : NULL;
}

void *svc_conns_request_line(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct svc_conns *g = cls;
	struct svc_conn *c = conn_of(conn);
	(void)uri;
	if (c) {
		pthread_mutex_lock(&g->lock);
		c->line_in = 1;
		pthread_mutex_unlock(&g->lock);
	}
	return NULL;
}

void svc_conns_request_begin(struct svc_conns *g, struct MHD_Connection *conn)
{
	struct svc_conn *c = conn_of(conn);
	if (!c)
		return;
	pthread_mutex_lock(&g->lock);
	c->in_request = 1;
	pthread_mutex_unlock(&g->lock);
}

void svc_conns_request_end(struct svc_conns *g, struct MHD_Connection *conn)
{
	struct svc_conn *c = conn_of(conn);
	if (!c)
		return;
	int64_t now = svc_mono_ms();
	pthread_mutex_lock(&g->lock);
	c->in_request = 0;
	c->line_in = 0;
	c->served = 1;
	c->since_ms = now;
	pthread_mutex_unlock(&g->lock);
}

/* ---- lifecycle ------------------------------------------------------------ */

struct svc_conns *svc_conns_new(unsigned header_timeout, unsigned per_ip,
                                unsigned max_connections,
                                const struct svc_allow_list *trusted, char *err,
                                size_t err_size)
{
	struct svc_conns *g = calloc(1, sizeof *g);
	size_t n = 256;
	while (n < max_connections / 2)
		n *= 2;
	if (!g || !(g->buckets = calloc(n, sizeof *g->buckets))) {
		free(g);
		snprintf(err, err_size, "out of memory");
		return NULL;
	}
	g->mask = n - 1;
	g->trusted = trusted;
	g->header_timeout = header_timeout;
	g->header_ms = (int64_t)header_timeout * 1000;
	g->per_ip = per_ip;
	if (getrandom(&g->seed, sizeof g->seed, GRND_NONBLOCK) != (ssize_t)sizeof g->seed)
		g->seed = (uint64_t)svc_mono_ms() * 0x9e3779b97f4a7c15ULL;
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->wake, &attr);
	pthread_condattr_destroy(&attr);
	int rc = pthread_create(&g->reaper, NULL, reaper_main, g);
	if (rc != 0) {
		snprintf(err, err_size, "http: the connection reaper would not start: %s",
		         strerror(rc));
		pthread_cond_destroy(&g->wake);
		pthread_mutex_destroy(&g->lock);
		free(g->buckets);
		free(g);
		return NULL;
	}
	return g;
}

void svc_conns_free(struct svc_conns *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	g->stopping = 1;
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->lock);
	pthread_join(g->reaper, NULL);
	/* MHD has stopped: every connection was closed and released */
	for (size_t b = 0; b <= g->mask; b++)
		while (g->buckets[b]) {
			struct ip_count *c = g->buckets[b];
			g->buckets[b] = c->next;
			free(c);
		}
	free(g->buckets);
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->lock);
	free(g);
}
