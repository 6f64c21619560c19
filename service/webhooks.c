/* service/webhooks.c - the webhook sender; see webhooks.h. */
#include "webhooks.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "api/buf.h"
#include "api/jobs_common.h"
#include "api/sweeps_common.h"
#include "clock.h"
#include "db/jobs.h"
#include "db/sweeps.h"
#include "db/webhooks.h"
#include "log.h"
#include "webhook_tls.h"

#define SENDERS 4              /* threads; one attempt in flight per user at a time */
#define IDLE_MS 60000          /* with nothing pending, look again this often anyway */
#define HEAD_MAX 8192          /* the answer's bytes read for its status line */

/* One sender thread. */
struct sender {
	struct svc_webhooks *w;
	pthread_t thread;
	int started;
	int efd;                   /* eventfd: wakes this thread (new rows, stop) */
	char *owner;               /* whose delivery is in flight here (under w->lock); NULL */
};

struct svc_webhooks {
	struct svc_webhooks_config cfg;
	char user_agent[64];
	struct api_webhooks_hooks hooks;
	struct svc_webhook_tls *tls;   /* https:// targets: the trusted certificates */
	atomic_int stopping;
	pthread_mutex_t lock;      /* the senders' owners; taking a due row */
	struct sender senders[SENDERS];
};

static void wake_one(int efd)
{
	uint64_t one = 1;
	ssize_t n = write(efd, &one, sizeof one);
	(void)n;   /* EAGAIN: the counter is set already */
}

void svc_webhooks_wake(struct svc_webhooks *w)
{
	if (!w)
		return;
	for (int i = 0; i < SENDERS; i++)
		if (w->senders[i].efd >= 0)
			wake_one(w->senders[i].efd);
}

static void drain_wake(int efd)
{
	uint64_t v;
	ssize_t n = read(efd, &v, sizeof v);
	(void)n;
}

static int check_url(void *arg, const char *url, char *err, size_t errlen)
{
	struct svc_webhooks *w = arg;
	struct svc_webhook_url u;
	struct sockaddr_storage addr;
	socklen_t len;
	char why[512];
	if (svc_webhook_url_parse(url, &u, err, errlen) != 0)
		return -1;
	if (svc_webhook_resolve(&u, &w->cfg.allow, &addr, &len, why, sizeof why) != 0) {
		svc_msgf(err, errlen, "url: %s", why);
		return -1;
	}
	return 0;
}

/* ---- one attempt ------------------------------------------------------------- */

/* Waits for events on fd (or the stop signal) until deadline (monotonic ms).
 * 1 ready, 0 timed out, -1 stopping. */
static int wait_fd(struct sender *s, int fd, short events, int64_t deadline)
{
	for (;;) {
		if (atomic_load(&s->w->stopping))
			return -1;
		int64_t left = deadline - svc_mono_ms();
		if (left <= 0)
			return 0;
		struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = s->efd, .events = POLLIN } };
		int n = poll(p, 2, (int)(left > 1000 ? 1000 : left));
		if (n < 0 && errno != EINTR)
			return 1;   /* let the next call on fd report it */
		if (n > 0 && (p[1].revents & POLLIN))
			drain_wake(s->efd);   /* new rows: the other senders take them */
		if (n > 0 && p[0].revents)
			return 1;
	}
}

enum { SENT_OK = 0, SENT_FAILED = -1, SENT_STOPPED = -2 };

/* One connection to a target: the socket, and TLS over it for https. */
struct conn {
	int fd;
	struct svc_tls_conn *tls;      /* NULL: plain http */
};

/* send(2) or TLS: bytes (> 0), a SVC_TLS_WANT_*, or SVC_TLS_ERROR with err. */
static ssize_t conn_send(struct conn *c, const char *buf, size_t len, char *err, size_t errlen)
{
	if (c->tls)
		return svc_tls_send(c->tls, buf, len, err, errlen);
	ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return SVC_TLS_WANT_WRITE;
	svc_msgf(err, errlen, "%s", n < 0 ? strerror(errno) : "nothing sent");
	return SVC_TLS_ERROR;
}

/* recv(2) or TLS: bytes (> 0), 0 when closed, a WANT, or SVC_TLS_ERROR. */
static ssize_t conn_recv(struct conn *c, char *buf, size_t len, char *err, size_t errlen)
{
	if (c->tls)
		return svc_tls_recv(c->tls, buf, len, err, errlen);
	ssize_t n = recv(c->fd, buf, len, 0);
	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return SVC_TLS_WANT_READ;
	svc_msgf(err, errlen, "%s", strerror(errno));
	return SVC_TLS_ERROR;
}

/* After a WANT: waits for the socket until deadline, as wait_fd. */
static int wait_conn(struct sender *s, struct conn *c, ssize_t want, int64_t deadline)
{
	return wait_fd(s, c->fd, want == SVC_TLS_WANT_WRITE ? POLLOUT : POLLIN, deadline);
}

/* POSTs body to d's URL. SENT_OK with *status a 2xx; SENT_FAILED with err
 * (and *status when there was an answer); SENT_STOPPED when larchd stops. */
static int post(struct sender *s, const struct db_webhook_due *d, const char *body,
                int *status, char *err, size_t errlen)
{
	struct svc_webhooks *w = s->w;
	*status = 0;
	struct svc_webhook_url u;
	struct sockaddr_storage addr;
	socklen_t alen = 0;
	if (svc_webhook_url_parse(d->url, &u, err, errlen) != 0 ||
	    svc_webhook_resolve(&u, &w->cfg.allow, &addr, &alen, err, errlen) != 0)
		return SENT_FAILED;
	char where[INET6_ADDRSTRLEN + 16] = "?", host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
	getnameinfo((struct sockaddr *)&addr, alen, host, sizeof host, port, sizeof port,
	            NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(where, sizeof where, addr.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);

	/* the signature and the request head */
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned mac_len = 0;
	size_t body_len = strlen(body);
	if (!HMAC(EVP_sha256(), d->secret, (int)strlen(d->secret), (const unsigned char *)body,
	          body_len, mac, &mac_len)) {
		svc_msgf(err, errlen, "hmac failed");
		return SENT_FAILED;
	}
	char hex[2 * EVP_MAX_MD_SIZE + 1];
	for (unsigned i = 0; i < mac_len; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	char head[4096];
	int hl = snprintf(head, sizeof head,
	                  "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n"
	                  "Content-Type: application/json\r\nContent-Length: %zu\r\n"
	                  "X-Larch-Event: %s\r\nX-Larch-Delivery: d-%06lld\r\n"
	                  "X-Larch-Signature-256: sha256=%s\r\nConnection: close\r\n\r\n",
	                  u.path, u.host_header, w->user_agent, body_len, d->type,
	                  (long long)d->delivery, hex);
	if (hl < 0 || (size_t)hl >= sizeof head) {
		svc_msgf(err, errlen, "url: too long");
		return SENT_FAILED;
	}

	int64_t start = svc_mono_ms();
	int64_t deadline = start + w->cfg.timeout_ms;
	int64_t connect_deadline = start + w->cfg.connect_timeout_ms;
	if (connect_deadline > deadline)
		connect_deadline = deadline;
	struct conn c = { .fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	                               0) };
	if (c.fd < 0) {
		svc_msgf(err, errlen, "socket: %s", strerror(errno));
		return SENT_FAILED;
	}
	int rc = SENT_FAILED;
	char why[384];
	ssize_t n;
	if (connect(c.fd, (struct sockaddr *)&addr, alen) != 0 && errno != EINPROGRESS) {
		svc_msgf(err, errlen, "connect to %s: %s", where, strerror(errno));
		goto out;
	}
	int r = wait_fd(s, c.fd, POLLOUT, connect_deadline);
	if (r < 0) {
		rc = SENT_STOPPED;
		goto out;
	}
	if (r == 0) {
		svc_msgf(err, errlen, "connect to %s: timed out after %u ms", where,
		         (unsigned)(connect_deadline - start));
		goto out;
	}
	int soerr = 0;
	socklen_t sl = sizeof soerr;
	if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
		svc_msgf(err, errlen, "connect to %s: %s", where, strerror(soerr ? soerr : errno));
		goto out;
	}
	/* https: the handshake, to the address just connected to, with the
	 * URL's host for SNI and the certificate's check */
	if (u.tls) {
		if (!(c.tls = svc_tls_conn_new(w->tls, c.fd, u.host, why, sizeof why))) {
			svc_msgf(err, errlen, "%s: %s", where, why);
			goto out;
		}
		while ((n = svc_tls_handshake(c.tls, why, sizeof why)) != 0) {
			if (n == SVC_TLS_ERROR) {
				svc_msgf(err, errlen, "%s: %s", where, why);
				goto out;
			}
			if ((r = wait_conn(s, &c, n, deadline)) <= 0) {
				rc = r < 0 ? SENT_STOPPED : SENT_FAILED;
				if (r == 0)
					svc_msgf(err, errlen, "tls handshake with %s: timed out after %u ms",
					         where, w->cfg.timeout_ms);
				goto out;
			}
		}
	}
	/* the request */
	const char *parts[2] = { head, body };
	size_t lens[2] = { (size_t)hl, body_len };
	for (int p = 0; p < 2; p++) {
		size_t off = 0;
		while (off < lens[p]) {
			n = conn_send(&c, parts[p] + off, lens[p] - off, why, sizeof why);
			if (n > 0) {
				off += (size_t)n;
				continue;
			}
			if (n == SVC_TLS_ERROR) {
				svc_msgf(err, errlen, "send to %s: %s", where, why);
				goto out;
			}
			if ((r = wait_conn(s, &c, n, deadline)) <= 0) {
				rc = r < 0 ? SENT_STOPPED : SENT_FAILED;
				if (r == 0)
					svc_msgf(err, errlen, "send to %s: timed out after %u ms", where,
					         w->cfg.timeout_ms);
				goto out;
			}
		}
	}
	/* the answer's status line */
	char ans[HEAD_MAX + 1];
	size_t got = 0;
	for (;;) {
		ans[got] = '\0';
		char *eol = strstr(ans, "\r\n");
		if (eol || got == HEAD_MAX)
			break;
		n = conn_recv(&c, ans + got, HEAD_MAX - got, why, sizeof why);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == 0) {
			svc_msgf(err, errlen, "%s closed the connection without an answer", where);
			goto out;
		}
		if (n == SVC_TLS_ERROR) {
			svc_msgf(err, errlen, "receive from %s: %s", where, why);
			goto out;
		}
		if ((r = wait_conn(s, &c, n, deadline)) <= 0) {
			rc = r < 0 ? SENT_STOPPED : SENT_FAILED;
			if (r == 0)
				svc_msgf(err, errlen, "no answer from %s within %u ms", where,
				         w->cfg.timeout_ms);
			goto out;
		}
	}
	int code = 0;
	char minor;
	if (sscanf(ans, "HTTP/1.%c %3d", &minor, &code) != 2 || code < 100 || code > 599) {
		svc_msgf(err, errlen, "%s answered something other than HTTP/1.x", where);
		goto out;
	}
	*status = code;
	if (code >= 200 && code < 300)
		rc = SENT_OK;
	else if (code >= 300 && code < 400)
		svc_msgf(err, errlen, "HTTP %d: redirects are not followed", code);
	else
		svc_msgf(err, errlen, "HTTP %d", code);
out:
	svc_tls_conn_free(c.tls);
	close(c.fd);
	return rc;
}

/* ---- the body ---------------------------------------------------------------- */

/* The event's body as it is sent (a new string), fixed in the database at
 * its first attempt; NULL when it cannot be made now. */
static char *event_body(struct svc_webhooks *w, const struct db_webhook_due *d)
{
	if (d->body)
		return strdup(d->body);
	struct api_buf b;
	api_buf_init(&b, 4096);
	api_buf_printf(&b, "{\"id\":\"ev-%06lld\",\"type\":", (long long)d->event);
	api_buf_json_str(&b, d->type);
	api_buf_adds(&b, ",\"time\":");
	api_buf_json_time(&b, d->event_ms);
	struct db_err err = { 0 };
	int rc;
	if (d->sweep) {
		struct db_sweep s;
		struct db_sweep_child *children = NULL;
		size_t n = 0;
		if ((rc = db_sweeps_get(w->cfg.db, d->sweep, NULL, &s, &children, &n, &err)) == 0) {
			api_buf_adds(&b, ",\"sweep\":");
			api_sweep_write(&b, &s, NULL, 0);
			db_sweep_children_free(children, n);
			db_sweep_release(&s);
		}
	} else {
		struct db_job job;
		if ((rc = db_jobs_get(w->cfg.db, d->job, NULL, &job, &err)) == 0) {
			api_buf_adds(&b, ",\"job\":");
			api_job_write(&b, &job);
			db_job_release(&job);
		}
	}
	api_buf_addc(&b, '}');
	if (rc || b.oom) {
		svc_log(SVC_LOG_ERROR, "webhook event ev-%06lld: %s", (long long)d->event,
		        rc ? err.text : "out of memory");
		api_buf_release(&b);
		return NULL;
	}
	char *stored = NULL;
	db_err_clear(&err);
	if (db_webhooks_set_body(w->cfg.db, d->event, b.data, &stored, &err) != 0)
		svc_log(SVC_LOG_ERROR, "webhook event ev-%06lld: %s", (long long)d->event, err.text);
	api_buf_release(&b);
	return stored;
}

/* ---- the senders --------------------------------------------------------------- */

static void attempt(struct sender *s, const struct db_webhook_due *d)
{
	struct svc_webhooks *w = s->w;
	int64_t t0 = svc_mono_ms(), wall = svc_wall_ms();
	char err[512] = "";
	int status = 0, rc = SENT_FAILED;
	char *body = event_body(w, d);
	if (body)
		rc = post(s, d, body, &status, err, sizeof err);
	else
		svc_msgf(err, sizeof err, "the event's body could not be made (larchd's log says why)");
	free(body);
	if (rc == SENT_STOPPED)
		return;   /* still pending: sent after the next start */
	struct db_webhook_attempt a = { .time_ms = wall, .status = status,
	                                .error = rc == SENT_OK ? NULL : err,
	                                .duration_ms = svc_mono_ms() - t0 };
	int64_t next = 0;
	if (rc != SENT_OK) {
		int64_t end = d->created_ms + (int64_t)w->cfg.retry_for_s * 1000;
		int64_t delay = w->cfg.backoff_ms;
		for (int i = 0; i < d->attempts && delay < (int64_t)w->cfg.backoff_max_ms; i++)
			delay *= 2;
		if (delay > (int64_t)w->cfg.backoff_max_ms)
			delay = w->cfg.backoff_max_ms;
		int64_t now = svc_wall_ms();
		if (now < end)
			next = now + delay < end ? now + delay : end;
		svc_log(next ? SVC_LOG_INFO : SVC_LOG_WARN, "webhook wh-%06lld delivery d-%06lld "
		        "(%s) attempt %d: %s%s", (long long)d->hook, (long long)d->delivery, d->type,
		        d->attempts + 1, err, next ? "; trying again" : "; given up");
	}
	struct db_err derr = { 0 };
	if (db_webhooks_attempt(w->cfg.db, d->delivery, &a, next, &derr) != 0)
		svc_log(SVC_LOG_ERROR, "webhook delivery d-%06lld: %s", (long long)d->delivery,
		        derr.text);
}

/* The users whose deliveries are in flight, as a JSON array (a new
 * string), or NULL when there are none. Under w->lock. *oom set when it
 * cannot be made. */
static char *busy_owners(struct svc_webhooks *w, int *oom)
{
	struct api_buf b;
	api_buf_init(&b, 256);
	int any = 0;
	api_buf_addc(&b, '[');
	for (int i = 0; i < SENDERS; i++)
		if (w->senders[i].owner) {
			if (any++)
				api_buf_addc(&b, ',');
			api_buf_json_str(&b, w->senders[i].owner);
		}
	api_buf_addc(&b, ']');
	*oom = b.oom;
	char *out = any && !b.oom ? strdup(b.data) : NULL;
	if (any && !b.oom && !out)
		*oom = 1;
	api_buf_release(&b);
	return out;
}

/* A sender: takes the earliest due delivery of a user none of the others
 * is sending to, attempts it, and looks again; with nothing to take, waits
 * for a wake or the next due time. One slow or silent target holds one
 * sender, and only its owner's deliveries wait behind it. */
static void *run(void *arg)
{
	struct sender *s = arg;
	struct svc_webhooks *w = s->w;
	while (!atomic_load(&w->stopping)) {
		struct db_webhook_due *due = NULL;
		size_t n = 0;
		int64_t next = 0;
		struct db_err err = { 0 };
		int64_t wait_ms = IDLE_MS;
		int oom = 0, rc = 0;
		pthread_mutex_lock(&w->lock);
		char *skip = busy_owners(w, &oom);
		if (!oom)
			rc = db_webhooks_due(w->cfg.db, svc_wall_ms(), 1, skip, &due, &n, &next, &err);
		if (n == 1 && !(s->owner = strdup(due[0].owner)))
			oom = 1;
		pthread_mutex_unlock(&w->lock);
		free(skip);
		if (oom || rc) {
			svc_log(SVC_LOG_ERROR, "webhooks: %s", oom ? "out of memory" : err.text);
			wait_ms = 1000;
		} else if (n == 1) {
			attempt(s, &due[0]);
			pthread_mutex_lock(&w->lock);
			free(s->owner);
			s->owner = NULL;
			pthread_mutex_unlock(&w->lock);
			db_webhook_due_free(due, n);
			continue;   /* the next one */
		}
		db_webhook_due_free(due, n);
		if (next && !oom && !rc) {
			int64_t in = next - svc_wall_ms();
			wait_ms = in < 0 ? 0 : in < IDLE_MS ? in : IDLE_MS;
		}
		struct pollfd p = { .fd = s->efd, .events = POLLIN };
		if (wait_ms > 0 && poll(&p, 1, (int)wait_ms) > 0)
			drain_wake(s->efd);
	}
	return NULL;
}

/* Stops and joins the started senders, closes their eventfds. */
static void senders_stop(struct svc_webhooks *w)
{
	atomic_store(&w->stopping, 1);
	svc_webhooks_wake(w);
	for (int i = 0; i < SENDERS; i++) {
		struct sender *s = &w->senders[i];
		if (s->started)
			pthread_join(s->thread, NULL);
		if (s->efd >= 0)
			close(s->efd);
		free(s->owner);
	}
}

struct svc_webhooks *svc_webhooks_new(const struct svc_webhooks_config *cfg, char *err,
                                      size_t errlen)
{
	struct svc_webhooks *w = calloc(1, sizeof *w);
	if (!w) {
		svc_msgf(err, errlen, "webhooks: out of memory");
		return NULL;
	}
	w->cfg = *cfg;
	snprintf(w->user_agent, sizeof w->user_agent, "%s", cfg->user_agent ? cfg->user_agent
	                                                                    : "larchd");
	w->cfg.user_agent = w->user_agent;
	w->hooks = (struct api_webhooks_hooks){ .max_per_user = cfg->max_per_user,
	                                        .check_url = check_url, .arg = w };
	w->cfg.ca_file = NULL;             /* borrowed for the call only */
	if (!(w->tls = svc_webhook_tls_new(cfg->ca_file, err, errlen))) {
		free(w);
		return NULL;
	}
	pthread_mutex_init(&w->lock, NULL);
	for (int i = 0; i < SENDERS; i++) {
		w->senders[i].w = w;
		w->senders[i].efd = -1;
	}
	for (int i = 0; i < SENDERS; i++) {
		struct sender *s = &w->senders[i];
		if ((s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
			svc_msgf(err, errlen, "webhooks: eventfd: %s", strerror(errno));
			goto fail;
		}
		int rc = pthread_create(&s->thread, NULL, run, s);
		if (rc) {
			svc_msgf(err, errlen, "webhooks: thread: %s", strerror(rc));
			goto fail;
		}
		s->started = 1;
	}
	return w;
fail:
	senders_stop(w);
	pthread_mutex_destroy(&w->lock);
	svc_webhook_tls_free(w->tls);
	free(w);
	return NULL;
}

const struct api_webhooks_hooks *svc_webhooks_hooks(struct svc_webhooks *w)
{
	return &w->hooks;
}

void svc_webhooks_free(struct svc_webhooks *w)
{
	if (!w)
		return;
	senders_stop(w);
	pthread_mutex_destroy(&w->lock);
	svc_webhook_tls_free(w->tls);
	free(w);
}
