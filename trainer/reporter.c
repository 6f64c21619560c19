/* trainer/reporter.c - posts metrics and the result to larchd from a
 * background thread; see reporter.h. The configuration and the retry policy
 * come first; the thread and libcurl are under LARCH_HAVE_CURL (the only
 * #ifdef), with no-op stand-ins when larch-train is built without libcurl. */
#include "reporter.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

/* ---- configuration ------------------------------------------------------- */

/* The characters a job id may have: it goes into a URL path unescaped. */
static int valid_job_id(const char *id)
{
	if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
		return 0;
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
			return 0;
	return 1;
}

/* Visible ASCII only: no space, CR or LF can reach a header or a URL. */
static int visible_ascii(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f)
			return 0;
	return 1;
}

int trn_reporter_config_env(struct trn_reporter_config *cfg, struct trn_err *err)
{
	static const char *const names[] = { "LARCH_SERVER_URL", "LARCH_JOB_ID",
	                                     "LARCH_JOB_TOKEN" };
	const char *val[3];
	int n_set = 0;
	for (int i = 0; i < 3; i++)
		n_set += (val[i] = trn_env_str(names[i])) != NULL;
	if (n_set == 0)
		return 0;
	if (n_set < 3) {
		char missing[96] = "";
		for (int i = 0; i < 3; i++)
			if (!val[i])
				snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
				         "%s%s", missing[0] ? ", " : "", names[i]);
		return trn_err_set(err, "LARCH_SERVER_URL, LARCH_JOB_ID and LARCH_JOB_TOKEN: set all "
		                   "three to report to larchd, or none (missing %s)", missing);
	}
	const char *url = val[0], *id = val[1], *token = val[2];
	size_t url_len = strlen(url);
	while (url_len > 0 && url[url_len - 1] == '/')
		url_len--;
	if ((strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
	    !visible_ascii(url) || url_len >= TRN_REPORT_URL_MAX)
		return trn_err_set(err, "LARCH_SERVER_URL: must be an http:// or https:// URL of at most "
		                   "%d characters without spaces (got \"%.80s\")",
		                   TRN_REPORT_URL_MAX - 1, url);
	if (strlen(id) > TRN_REPORT_ID_MAX || !valid_job_id(id))
		return trn_err_set(err, "LARCH_JOB_ID: must be 1 to %d letters, digits, '-', '_' or '.' "
		                   "(got \"%.80s\")", TRN_REPORT_ID_MAX, id);
	if (strlen(token) > TRN_REPORT_TOKEN_MAX || !visible_ascii(token))
		return trn_err_set(err, "LARCH_JOB_TOKEN: must be at most %d visible ASCII characters",
		                   TRN_REPORT_TOKEN_MAX);

	cfg->flush_s = TRN_REPORT_FLUSH_S;
	const char *flush = trn_env_str("LARCH_REPORT_FLUSH_S");
	if (flush) {
		char *end;
		errno = 0;
		double s = strtod(flush, &end);
		if (errno || *end || end == flush || !(s >= 0 && s <= 3600))
			return trn_err_set(err, "LARCH_REPORT_FLUSH_S: must be a number of seconds in "
			                   "[0, 3600] (got \"%.40s\")", flush);
		cfg->flush_s = s;
	}
	const char *ca = trn_env_str("LARCH_CA");
	if (ca && strlen(ca) >= sizeof cfg->ca_file)
		return trn_err_set(err, "LARCH_CA: must be a file name of at most %d characters",
		                   TRN_REPORT_CA_MAX - 1);
	snprintf(cfg->ca_file, sizeof cfg->ca_file, "%s", ca ? ca : "");
	snprintf(cfg->metrics_url, sizeof cfg->metrics_url, "%.*s/v1/jobs/%s/metrics",
	         (int)url_len, url, id);
	snprintf(cfg->result_url, sizeof cfg->result_url, "%.*s/v1/jobs/%s/result",
	         (int)url_len, url, id);
	snprintf(cfg->auth_header, sizeof cfg->auth_header, "Authorization: Bearer %s", token);
	return 1;
}

/* ---- retry policy -------------------------------------------------------- */

enum trn_post_outcome trn_reporter_http_outcome(long status)
{
	if (status >= 200 && status < 300)
		return TRN_POST_OK;
	/* 408 and 429 ask us to come back; a 5xx is larchd's passing trouble.
	 * Anything else (401 revoked token, 404 job gone, 400, 413, a redirect)
	 * will not change by asking again. */
	if (status == 408 || status == 429 || (status >= 500 && status < 600))
		return TRN_POST_RETRY;
	return TRN_POST_GIVE_UP;
}

double trn_reporter_backoff(int attempt, double u)
{
	double d = attempt < 5 ? (double)(1 << attempt) : 30.0;   /* 1, 2, 4, 8, 16, 30 s */
	return d * (0.5 + 0.5 * u);
}

#ifdef LARCH_HAVE_CURL
/* ---- the posting thread -------------------------------------------------- */

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "rng.h"

#define LINGER_S 0.5                   /* a partial batch waits at most this long */
#define CONNECT_TIMEOUT_MS 2000L
#define POST_TIMEOUT_MS 10000L
#define RESULT_MIN_S 2.0               /* the result's one try when the flush used the deadline */
#define JOIN_SLACK_S 3.0               /* past that, finish stops waiting for the thread */

struct trn_reporter {
	struct trn_reporter_config cfg;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;           /* to the thread: a full batch, or the end */
	pthread_cond_t finished;       /* from the thread: done is set */

	/* under lock */
	struct trn_mqueue q;
	int closing;                   /* finish has been called */
	double deadline;               /* with closing: when the flush gives up (monotonic) */
	char *result;                  /* with closing: result.json to post last */
	int dead;                      /* a post was refused for good: post nothing more */
	int done;                      /* the thread has finished */
	long refused;                  /* points the queue refused (bad name) */
	long unsent;                   /* points taken but never accepted by larchd */
	int result_posted;

	/* the producer's own */
	int warned_full, warned_name;

	/* readable by curl's progress callback at any time */
	atomic_llong abort_at_ms;      /* 0, or when an in-flight post must stop (monotonic ms) */

	/* the thread's own */
	CURL *curl;
	struct curl_slist *headers;
	char errbuf[CURL_ERROR_SIZE];
	char no_proxy[1024];
	char reply[160];               /* the start of the last answer, for messages */
	size_t reply_len;
	struct trn_mpoint *batch;
	char *body;
	size_t body_cap;
	int failures;                  /* posts failed in a row */
	int outage_logged;             /* this run of failures has been reported */
	double last_outage_log;        /* when the last one was (monotonic s; 0 = never) */
	struct trn_rng rng;            /* backoff jitter */
};

static struct timespec to_timespec(double t)
{
	struct timespec ts;
	ts.tv_sec = (time_t)t;
	ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_nsec = 999999999L;
	return ts;
}

/* Waits on cond until the monotonic time t; returns ETIMEDOUT or 0. */
static int wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, double t)
{
	struct timespec ts = to_timespec(t);
	return pthread_cond_timedwait(cond, lock, &ts);
}

static int progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
	struct trn_reporter *rp = arg;
	long long at = atomic_load(&rp->abort_at_ms);
	return at && (long long)(trn_now() * 1000) >= at;
}

static size_t keep_reply(char *data, size_t size, size_t n, void *arg)
{
	struct trn_reporter *rp = arg;
	size_t len = size * n, room = sizeof rp->reply - 1 - rp->reply_len;
	size_t k = len < room ? len : room;
	memcpy(rp->reply + rp->reply_len, data, k);
	rp->reply_len += k;
	rp->reply[rp->reply_len] = '\0';
	return len;
}

/* libcurl errors that no retry will cure: the URL or TLS setup is wrong. */
static int curl_error_is_final(CURLcode rc)
{
	switch (rc) {
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_NOT_BUILT_IN:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
		return 1;
	default:
		return 0;
	}
}

/* What went wrong below HTTP, for the log: TLS failures say which CA
 * store was asked. */
static void transport_error(struct trn_reporter *rp, CURLcode rc, char *what, size_t what_len)
{
	const char *ca = rp->cfg.ca_file;
	const char *lib = rp->errbuf[0] ? rp->errbuf : curl_easy_strerror(rc);
	if (rc == CURLE_PEER_FAILED_VERIFICATION && ca[0])
		snprintf(what, what_len, "larchd's TLS certificate does not verify against the CA "
		         "file %.512s (LARCH_CA): %s", ca, lib);
	else if (rc == CURLE_PEER_FAILED_VERIFICATION)
		snprintf(what, what_len, "larchd's TLS certificate does not verify against the "
		         "system's CA store (larchd's job_ca sets LARCH_CA for jobs): %s", lib);
	else if (rc == CURLE_SSL_CACERT_BADFILE)
		snprintf(what, what_len, "the CA file %.512s (LARCH_CA) cannot be used: %s", ca, lib);
	else
		snprintf(what, what_len, "%s", lib);
}

/* One POST of body to url. Fills what (for messages) and, for a 429/503
 * with Retry-After, *retry_after; returns what to do next. */
static enum trn_post_outcome post(struct trn_reporter *rp, const char *url, const char *body,
                                  size_t len, double *retry_after, char *what, size_t what_len)
{
	CURL *c = rp->curl;
	long timeout = POST_TIMEOUT_MS;
	long long at = atomic_load(&rp->abort_at_ms);
	if (at) {
		long long left = at - (long long)(trn_now() * 1000);
		timeout = left < 1 ? 1 : left < timeout ? (long)left : timeout;
	}
	rp->errbuf[0] = '\0';
	rp->reply_len = 0;
	rp->reply[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout);
	CURLcode rc = curl_easy_perform(c);
	*retry_after = 0;
	if (rc != CURLE_OK) {
		transport_error(rp, rc, what, what_len);
		return curl_error_is_final(rc) ? TRN_POST_GIVE_UP : TRN_POST_RETRY;
	}
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	enum trn_post_outcome out = trn_reporter_http_outcome(status);
	if (out == TRN_POST_RETRY) {
		curl_off_t ra = 0;
		if (curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
			*retry_after = (double)ra;
	}
	for (size_t i = 0; i < rp->reply_len; i++)        /* one plain line in our log */
		if ((unsigned char)rp->reply[i] < 0x20 || rp->reply[i] == 0x7f)
			rp->reply[i] = ' ';
	snprintf(what, what_len, "HTTP %ld%s%s", status, rp->reply_len ? ": " : "", rp->reply);
	return out;
}

/* Sleeps d seconds, or until the flush deadline if that comes first; the
 * start of the final flush ends the sleep early (one more try before the
 * deadline). Returns 0 when the deadline has come: stop retrying. */
static int pause_for(struct trn_reporter *rp, double d)
{
	pthread_mutex_lock(&rp->lock);
	double until = trn_now() + d;
	int ok = 1, was_closing = rp->closing;
	for (;;) {
		double t = trn_now();
		if (rp->closing && t >= rp->deadline) {
			ok = 0;
			break;
		}
		if (t >= until || rp->closing != was_closing)
			break;
		wait_until(&rp->wake, &rp->lock, rp->closing && rp->deadline < until ? rp->deadline
		                                                                      : until);
	}
	pthread_mutex_unlock(&rp->lock);
	return ok;
}

static int past_deadline(struct trn_reporter *rp)
{
	pthread_mutex_lock(&rp->lock);
	int past = rp->closing && trn_now() >= rp->deadline;
	pthread_mutex_unlock(&rp->lock);
	return past;
}

/* Posts body to url until it is accepted, refused for good, or the flush
 * deadline passes (when min_try, one try even past it). Returns the outcome
 * of the last try: TRN_POST_RETRY means it was never accepted. */
static enum trn_post_outcome post_retrying(struct trn_reporter *rp, const char *url,
                                           const char *body, size_t len, int min_try)
{
	char what[1536];
	for (int attempt = 0;; attempt++) {
		if (!(min_try && attempt == 0) && past_deadline(rp))
			return TRN_POST_RETRY;
		double retry_after;
		enum trn_post_outcome out = post(rp, url, body, len, &retry_after, what, sizeof what);
		if (out == TRN_POST_OK) {
			if (rp->failures > 0 && rp->outage_logged)
				fprintf(stderr, "larch-train: report: larchd accepts posts again after %d "
				        "failed %s\n", rp->failures, rp->failures == 1 ? "try" : "tries");
			rp->failures = 0;
			return out;
		}
		if (out == TRN_POST_GIVE_UP) {
			fprintf(stderr, "larch-train: report: POST %s: %s; posting nothing more to larchd "
			        "(metrics.jsonl and result.json keep everything)\n", url, what);
			return out;
		}
		/* one line per outage, and at most one a minute for a flapping larchd */
		if (rp->failures++ == 0) {
			double t = trn_now();
			rp->outage_logged = rp->last_outage_log == 0 || t - rp->last_outage_log >= 60;
			if (rp->outage_logged) {
				rp->last_outage_log = t;
				fprintf(stderr, "larch-train: report: POST %s: %s; retrying with backoff "
				        "(metrics.jsonl keeps every point)\n", url, what);
			}
		}
		double d = fmax(trn_reporter_backoff(attempt, trn_rng_uniform(&rp->rng)),
		                fmin(retry_after, 30.0));
		if (!pause_for(rp, d))
			return TRN_POST_RETRY;
	}
}

/* Posts the n points in rp->batch; they count as unsent unless larchd takes them. */
static void post_batch(struct trn_reporter *rp, size_t n)
{
	long len = trn_mqueue_format(&rp->q, rp->batch, n, &rp->body, &rp->body_cap);
	enum trn_post_outcome out = TRN_POST_RETRY;
	if (len < 0)
		fprintf(stderr, "larch-train: report: out of memory for a batch of %zu points\n", n);
	else
		out = post_retrying(rp, rp->cfg.metrics_url, rp->body, (size_t)len, 0);
	pthread_mutex_lock(&rp->lock);
	if (out != TRN_POST_OK)
		rp->unsent += (long)n;
	if (out == TRN_POST_GIVE_UP) {
		rp->dead = 1;
		rp->unsent += (long)trn_mqueue_clear(&rp->q);
	}
	pthread_mutex_unlock(&rp->lock);
}

static void *reporter_main(void *arg)
{
	struct trn_reporter *rp = arg;
	pthread_mutex_lock(&rp->lock);
	for (;;) {
		if (!rp->closing && !rp->dead && trn_mqueue_count(&rp->q) < TRN_REPORT_BATCH)
			wait_until(&rp->wake, &rp->lock, trn_now() + LINGER_S);
		if (rp->dead)
			break;
		size_t n = trn_mqueue_take(&rp->q, rp->batch, TRN_REPORT_BATCH);
		if (n == 0) {
			if (rp->closing)
				break;
			continue;
		}
		pthread_mutex_unlock(&rp->lock);
		post_batch(rp, n);
		pthread_mutex_lock(&rp->lock);
	}
	/* closing, or dead (then the queue is empty and no result is posted) */
	char *result = rp->dead ? NULL : rp->result;
	if (result) {
		/* the result gets one try of its own even when the flush used up the
		 * deadline (retries only until the deadline) */
		double at = fmax(rp->deadline, trn_now() + RESULT_MIN_S);
		atomic_store(&rp->abort_at_ms, (long long)(at * 1000));
	}
	pthread_mutex_unlock(&rp->lock);
	int posted = result &&
		post_retrying(rp, rp->cfg.result_url, result, strlen(result), 1) == TRN_POST_OK;
	pthread_mutex_lock(&rp->lock);
	rp->result_posted = posted;
	rp->done = 1;
	pthread_cond_signal(&rp->finished);
	pthread_mutex_unlock(&rp->lock);
	return NULL;
}

static int init_sync(struct trn_reporter *rp)
{
	pthread_condattr_t attr;
	if (pthread_condattr_init(&attr) != 0)
		return -1;
	int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	if (rc == 0 && (rc = pthread_cond_init(&rp->wake, &attr)) == 0 &&
	    (rc = pthread_cond_init(&rp->finished, &attr)) != 0)
		pthread_cond_destroy(&rp->wake);
	pthread_condattr_destroy(&attr);
	if (rc == 0 && (rc = pthread_mutex_init(&rp->lock, NULL)) != 0) {
		pthread_cond_destroy(&rp->wake);
		pthread_cond_destroy(&rp->finished);
	}
	return rc == 0 ? 0 : -1;
}

static int init_curl(struct trn_reporter *rp)
{
	CURL *c = rp->curl = curl_easy_init();
	if (!c)
		return -1;
	struct curl_slist *h = NULL, *next;
	const char *lines[] = { rp->cfg.auth_header, "Content-Type: application/json",
	                        "Expect:" /* no 100-continue round trip */ };
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		if (!(next = curl_slist_append(h, lines[i]))) {
			curl_slist_free_all(h);
			return -1;
		}
		h = next;
	}
	rp->headers = h;
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);                  /* we are a thread */
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "larch-train");
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, rp->errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_reply);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, rp);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, rp);
	/* a user's http_proxy must not carry a job's posts to a larchd on this
	 * machine; NO_PROXY still adds hosts of its own */
	const char *np = trn_env_str("no_proxy") ? trn_env_str("no_proxy") : trn_env_str("NO_PROXY");
	snprintf(rp->no_proxy, sizeof rp->no_proxy, "localhost,127.0.0.1,::1%s%.900s",
	         np ? "," : "", np ? np : "");
	curl_easy_setopt(c, CURLOPT_NOPROXY, rp->no_proxy);
	if (rp->cfg.ca_file[0])
		curl_easy_setopt(c, CURLOPT_CAINFO, rp->cfg.ca_file);
	return 0;
}

static void reporter_free(struct trn_reporter *rp)
{
	curl_easy_cleanup(rp->curl);
	curl_slist_free_all(rp->headers);
	trn_mqueue_release(&rp->q);
	free(rp->batch);
	free(rp->body);
	free(rp->result);
	free(rp);
}

struct trn_reporter *trn_reporter_start(const struct trn_reporter_config *cfg)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "larch-train: report: libcurl does not initialise; metrics go to "
		        "metrics.jsonl only\n");
		return NULL;
	}
	struct trn_reporter *rp = calloc(1, sizeof *rp);
	if (!rp)
		goto oom;
	rp->cfg = *cfg;
	trn_rng_seed(&rp->rng, (uint64_t)getpid() ^ (uint64_t)(trn_now() * 1e9), 0);
	if (trn_mqueue_init(&rp->q, TRN_REPORT_QUEUE) != 0 ||
	    !(rp->batch = malloc(TRN_REPORT_BATCH * sizeof *rp->batch)) || init_curl(rp) != 0) {
		reporter_free(rp);
		goto oom;
	}
	if (init_sync(rp) != 0) {
		reporter_free(rp);
		goto oom;
	}
	/* signals are for the training thread: its handler asks for a checkpoint */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&rp->thread, NULL, reporter_main, rp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		fprintf(stderr, "larch-train: report: cannot start the reporting thread: %s; metrics "
		        "go to metrics.jsonl only\n", strerror(rc));
		pthread_mutex_destroy(&rp->lock);
		pthread_cond_destroy(&rp->wake);
		pthread_cond_destroy(&rp->finished);
		reporter_free(rp);
		curl_global_cleanup();
		return NULL;
	}
	return rp;
oom:
	fprintf(stderr, "larch-train: report: out of memory; metrics go to metrics.jsonl only\n");
	curl_global_cleanup();
	return NULL;
}

void trn_reporter_metric(struct trn_reporter *rp, long step, double time, const char *name,
                         double value)
{
	if (!rp)
		return;
	pthread_mutex_lock(&rp->lock);
	if (rp->dead || rp->closing) {
		rp->unsent++;
		pthread_mutex_unlock(&rp->lock);
		return;
	}
	int rc = trn_mqueue_push(&rp->q, step, time, name, value);
	if (rc < 0)
		rp->refused++;
	if (trn_mqueue_count(&rp->q) == TRN_REPORT_BATCH)
		pthread_cond_signal(&rp->wake);
	pthread_mutex_unlock(&rp->lock);
	/* outside the lock; once each */
	if (rc == 1 && !rp->warned_full++)
		fprintf(stderr, "larch-train: report: the queue is full (%d points): dropping the "
		        "oldest unsent ones, which larchd imports from metrics.jsonl at the end\n",
		        TRN_REPORT_QUEUE);
	if (rc < 0 && !rp->warned_name++)
		fprintf(stderr, "larch-train: report: metric \"%.80s\" not posted (names longer than "
		        "%d characters, or more than %d names, stay in metrics.jsonl only)\n", name,
		        TRN_MQ_NAME_MAX, TRN_MQ_NAMES);
}

void trn_reporter_finish(struct trn_reporter *rp, const char *result_json)
{
	if (!rp)
		return;
	pthread_mutex_lock(&rp->lock);
	rp->result = result_json ? strdup(result_json) : NULL;
	rp->closing = 1;
	rp->deadline = trn_now() + rp->cfg.flush_s;
	atomic_store(&rp->abort_at_ms, (long long)(rp->deadline * 1000));
	pthread_cond_signal(&rp->wake);
	/* the thread keeps to the deadline; this bounds the wait if it somehow
	 * does not (signals do not interrupt it: they only set a flag) */
	double give_up = rp->deadline + RESULT_MIN_S + JOIN_SLACK_S;
	while (!rp->done && trn_now() < give_up)
		wait_until(&rp->finished, &rp->lock, give_up);
	int done = rp->done;
	long unsent = rp->unsent + rp->refused + (long)rp->q.dropped;
	int had_result = rp->result != NULL, posted = rp->result_posted;
	pthread_mutex_unlock(&rp->lock);
	if (!done) {
		/* still in libcurl: leave it (and rp) to the process's exit */
		fprintf(stderr, "larch-train: report: larchd did not answer by the deadline; exiting "
		        "without waiting\n");
		pthread_detach(rp->thread);
		return;
	}
	pthread_join(rp->thread, NULL);
	if (unsent > 0)
		fprintf(stderr, "larch-train: report: %ld metric points were not posted; larchd "
		        "imports them from metrics.jsonl when the job ends\n", unsent);
	if (had_result && !posted)
		fprintf(stderr, "larch-train: report: result not posted; larchd reads result.json\n");
	pthread_mutex_destroy(&rp->lock);
	pthread_cond_destroy(&rp->wake);
	pthread_cond_destroy(&rp->finished);
	reporter_free(rp);
	curl_global_cleanup();
}

#else /* !LARCH_HAVE_CURL */

struct trn_reporter *trn_reporter_start(const struct trn_reporter_config *cfg)
{
	fprintf(stderr, "larch-train: report: built without libcurl: metrics go to metrics.jsonl "
	        "only (larchd imports them when the job ends)\n");
	return NULL;
}

void trn_reporter_metric(struct trn_reporter *rp, long step, double time, const char *name,
                         double value)
{
}

void trn_reporter_finish(struct trn_reporter *rp, const char *result_json)
{
}

#endif
