/* tests/bench/dash_clients.c - many simulated dashboards in one thread, for
 * bench_dashboard.py: each does what the dashboard's jobs page does (long
 * polls GET /v1/events and, on each change, GETs the job list and every
 * changed job with If-None-Match), through libcurl's multi interface.
 *
 *   dash_clients --url URL --token TOKEN [--clients 100] [--seconds 20]
 *
 * Real dashboards run in browsers on other machines; a hundred Python
 * threads on the two cores larchd has would take a core from it (requests
 * costs about a millisecond of CPU a GET), this about a twentieth of that.
 * At the end it prints one JSON line: GETs (the list and job reads, not the
 * polls), 304s, errors, polls, and the GETs' p50/p99 latency in ms.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_ETAGS 64
#define MAX_QUEUE 512

struct client {
	CURL *h;
	struct curl_slist *headers;
	char body[1 << 16];
	size_t len;
	int overflow;
	char etag_hdr[160];                /* the reply's ETag header line */
	char path[256];                    /* the request in flight */
	int is_poll;
	double started;
	/* what comes next */
	int64_t last;
	char stream[64];
	char queue[MAX_QUEUE][32];         /* job GETs still to do after a change */
	int n_queue, q_at, want_list;
	struct { char path[256], etag[160]; } etags[MAX_ETAGS];
	int n_etags;
	int done;
};

static const char *url, *token;
static double stop_at;
static double *lat;
static size_t n_lat, cap_lat;
static long gets, not_modified, errors, polls;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct client *c = arg;
	size_t len = size * n;
	if (c->len + len >= sizeof c->body) {
		c->overflow = 1;
		return len;
	}
	memcpy(c->body + c->len, p, len);
	c->len += len;
	c->body[c->len] = 0;
	return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct client *c = arg;
	size_t len = size * n;
	if (len > 5 && strncasecmp(p, "etag:", 5) == 0 && len < sizeof c->etag_hdr) {
		memcpy(c->etag_hdr, p, len);
		c->etag_hdr[len] = 0;
		c->etag_hdr[strcspn(c->etag_hdr, "\r\n")] = 0;
	}
	return len;
}

static const char *etag_of(struct client *c, const char *path)
{
	for (int i = 0; i < c->n_etags; i++)
		if (!strcmp(c->etags[i].path, path))
			return c->etags[i].etag;
	return NULL;
}

static void remember_etag(struct client *c, const char *path, const char *etag)
{
	for (int i = 0; i < c->n_etags; i++)
		if (!strcmp(c->etags[i].path, path)) {
			snprintf(c->etags[i].etag, sizeof c->etags[i].etag, "%s", etag);
			return;
		}
	if (c->n_etags < MAX_ETAGS) {
		snprintf(c->etags[c->n_etags].path, sizeof c->etags[0].path, "%s", path);
		snprintf(c->etags[c->n_etags].etag, sizeof c->etags[0].etag, "%s", etag);
		c->n_etags++;
	}
}

/* Starts the client's next request on m, or marks it done. */
static void next_request(CURLM *m, struct client *c)
{
	c->is_poll = 0;
	if (c->want_list) {
		c->want_list = 0;
		snprintf(c->path, sizeof c->path, "/v1/jobs?limit=50");
	} else if (c->q_at < c->n_queue) {
		snprintf(c->path, sizeof c->path, "/v1/jobs/%s", c->queue[c->q_at++]);
	} else {
		double left = stop_at - now_s();
		if (left <= 0) {
			c->done = 1;
			return;
		}
		int wait = left > 25 ? 25 : left < 1 ? 1 : (int)left;
		c->is_poll = 1;
		if (c->stream[0])
			snprintf(c->path, sizeof c->path, "/v1/events?after=%lld&stream=%s&timeout=%d",
			         (long long)c->last, c->stream, wait);
		else
			snprintf(c->path, sizeof c->path, "/v1/events");
	}
	char full[1024], auth[256], inm[200];
	snprintf(full, sizeof full, "%s%s", url, c->path);
	curl_slist_free_all(c->headers);
	snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
	c->headers = curl_slist_append(NULL, auth);
	const char *etag = c->is_poll ? NULL : etag_of(c, c->path);
	if (etag) {
		snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
		c->headers = curl_slist_append(c->headers, inm);
	}
	curl_easy_setopt(c->h, CURLOPT_URL, full);
	curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
	curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 60L);
	c->len = 0;
	c->overflow = 0;
	c->etag_hdr[0] = 0;
	c->started = now_s();
	curl_multi_add_handle(m, c->h);
}

/* A request of c ended with HTTP status code (0: transport error). */
static void finished(struct client *c, long code)
{
	if (!c->is_poll) {
		gets++;
		if (n_lat == cap_lat) {
			cap_lat = cap_lat ? 2 * cap_lat : 4096;
			lat = realloc(lat, cap_lat * sizeof *lat);
		}
		lat[n_lat++] = now_s() - c->started;
		if (code == 304)
			not_modified++;
		else if (code != 200)
			errors++;
		if (code == 200 && c->etag_hdr[0])
			remember_etag(c, c->path, c->etag_hdr + strspn(c->etag_hdr + 5, " ") + 5);
		return;
	}
	polls++;
	if (code != 200 || c->overflow) {
		errors++;
		return;
	}
	json_t *b = json_loads(c->body, 0, NULL);
	json_t *last = json_object_get(b, "last"), *stream = json_object_get(b, "stream");
	json_t *changes = json_object_get(b, "changes");
	int first = !c->stream[0];
	if (json_is_integer(last))
		c->last = json_integer_value(last);
	if (json_is_string(stream))
		snprintf(c->stream, sizeof c->stream, "%s", json_string_value(stream));
	c->n_queue = c->q_at = 0;
	size_t i;
	json_t *ch;
	json_array_foreach(changes, i, ch) {
		const char *job = json_string_value(json_object_get(ch, "job"));
		int seen = 0;
		for (int k = 0; job && k < c->n_queue; k++)
			seen |= !strcmp(c->queue[k], job);
		if (job && !seen && c->n_queue < MAX_QUEUE)
			snprintf(c->queue[c->n_queue++], sizeof c->queue[0], "%s", job);
	}
	c->want_list = first || c->n_queue > 0 || json_is_true(json_object_get(b, "reset"));
	json_decref(b);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = 100;
	double seconds = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--url") && i + 1 < argc)
			url = argv[++i];
		else if (!strcmp(argv[i], "--token") && i + 1 < argc)
			token = argv[++i];
		else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else {
			fprintf(stderr, "usage: dash_clients --url URL --token TOKEN [--clients N] "
			        "[--seconds S]\n");
			return 2;
		}
	}
	if (!url || !token || n < 1 || n > 10000 || seconds <= 0) {
		fprintf(stderr, "dash_clients: --url and --token are required\n");
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURLM *m = curl_multi_init();
	curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)n + 1);
	struct client *cs = calloc((size_t)n, sizeof *cs);
	stop_at = now_s() + seconds;
	for (int i = 0; i < n; i++) {
		struct client *c = &cs[i];
		c->h = curl_easy_init();
		curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c->h, CURLOPT_WRITEDATA, c);
		curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c->h, CURLOPT_HEADERDATA, c);
		curl_easy_setopt(c->h, CURLOPT_PRIVATE, c);
		curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
		next_request(m, c);
	}
	int running = n;
	while (running > 0) {
		int still;
		curl_multi_perform(m, &still);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(m, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			struct client *c;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
			long code = 0;
			if (msg->data.result == CURLE_OK)
				curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
			curl_multi_remove_handle(m, c->h);
			finished(c, code);
			next_request(m, c);
			if (c->done)
				running--;
		}
		if (running > 0)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	qsort(lat, n_lat, sizeof *lat, cmp_double);
	double p50 = n_lat ? lat[(size_t)(0.50 * (double)n_lat)] * 1e3 : -1;
	double p99 = n_lat ? lat[(size_t)(0.99 * (double)n_lat)] * 1e3 : -1;
	printf("{\"gets\": %ld, \"not_modified\": %ld, \"errors\": %ld, \"polls\": %ld, "
	       "\"p50_ms\": %.3f, \"p99_ms\": %.3f}\n", gets, not_modified, errors, polls, p50, p99);
	for (int i = 0; i < n; i++) {
		curl_easy_cleanup(cs[i].h);
		curl_slist_free_all(cs[i].headers);
	}
	free(cs);
	free(lat);
	curl_multi_cleanup(m);
	curl_global_cleanup();
	return 0;
}
