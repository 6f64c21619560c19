/* service/cli/http.c - requests to larchd and what their failures mean (http.h). */
#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

#define MAX_BODY (64u << 20)    /* larger answers are not larchd's */
#define ATTEMPTS 4              /* one try and three retries */
#define MAX_RETRY_AFTER_S 10.0

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct cli_buf *b = arg;
	if (b->len + n > MAX_BODY)
		return 0;       /* CURLE_WRITE_ERROR */
	cli_buf_add(b, p, n);
	return n;
}

struct headers_seen {
	char etag[256];
	double retry_after;     /* -1: none */
};

/* Keeps ETag and Retry-After from the answer's header lines. */
static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct headers_seen *hs = arg;
	size_t len = n;
	while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
		len--;
	if (len > 5 && strncasecmp(p, "HTTP/", 5) == 0) {     /* a new answer (after 100) */
		hs->etag[0] = '\0';
		hs->retry_after = -1;
	} else if (len > 5 && strncasecmp(p, "ETag:", 5) == 0) {
		size_t i = 5;
		while (i < len && p[i] == ' ')
			i++;
		if (len - i < sizeof hs->etag) {
			memcpy(hs->etag, p + i, len - i);
			hs->etag[len - i] = '\0';
		}
	} else if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
		char tmp[32];
		size_t m = len - 12 < sizeof tmp - 1 ? len - 12 : sizeof tmp - 1;
		memcpy(tmp, p + 12, m);
		tmp[m] = '\0';
		char *end;
		double v = strtod(tmp, &end);
		if (end != tmp && v >= 0)
			hs->retry_after = v;
	}
	return n;
}

int cli_http_open(struct cli_http *h, const char *base, const char *token)
{
	size_t len = strlen(base);
	while (len > 0 && base[len - 1] == '/')
		len--;
	int ok = (strncmp(base, "http://", 7) == 0 && len > 7) ||
	         (strncmp(base, "https://", 8) == 0 && len > 8);
	for (size_t i = 0; ok && i < len; i++)
		ok = base[i] > ' ' && base[i] != 0x7f;
	if (!ok) {
		char *shown = cli_inert(base);
		fprintf(stderr, "larch: the server URL \"%s\" is not an http:// or https:// URL\n",
		        shown);
		free(shown);
		return CLI_USAGE;
	}
	h->base = strndup(base, len);
	if (token) {
		struct cli_buf b = { 0 };
		cli_buf_addf(&b, "Authorization: Bearer %s", token);
		h->auth = b.data;
	}
	h->connect_timeout_ms = 5000;
	h->timeout_ms = 30000;
	h->curl = curl_easy_init();
	if (!h->base || !h->curl) {
		fputs("larch: cannot start libcurl\n", stderr);
		return CLI_UNREACHABLE;
	}
	return CLI_OK;
}

void cli_http_close(struct cli_http *h)
{
	if (h->curl)
		curl_easy_cleanup(h->curl);
	free(h->base);
	free(h->auth);
	free(h->token_source);
	free(h->config_path);
	free(h->ca_file);
	free(h->ca_source);
	*h = (struct cli_http){ 0 };
}

void cli_reply_release(struct cli_reply *r)
{
	cli_buf_release(&r->body);
	json_decref(r->json);
	*r = (struct cli_reply){ 0 };
}

void cli_http_escape(struct cli_buf *b, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~')
			cli_buf_add(b, p, 1);
		else
			cli_buf_addf(b, "%%%02X", *p);
	}
}

void cli_http_param(struct cli_buf *b, const char *key, const char *value)
{
	if (!value)
		return;
	cli_buf_adds(b, strchr(cli_buf_str(b), '?') ? "&" : "?");
	cli_buf_adds(b, key);
	cli_buf_adds(b, "=");
	cli_http_escape(b, value);
}

/* Transport failures: printed, CLI_UNREACHABLE. */
void cli_http_prepare(struct cli_http *h, const char *url, struct curl_slist *hdr)
{
	CURL *c = h->curl;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "larch/" LARCH_VERSION);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, h->connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
	if (h->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
	h->errbuf[0] = '\0';
}

static int transport_error(struct cli_http *h, CURLcode rc)
{
	long os_errno = 0;
	curl_easy_getinfo(h->curl, CURLINFO_OS_ERRNO, &os_errno);
	char why[CURL_ERROR_SIZE + 1400];
	if (rc == CURLE_COULDNT_CONNECT && os_errno == ECONNREFUSED)
		snprintf(why, sizeof why, "connection refused (is larchd running?)");
	else if (rc == CURLE_COULDNT_CONNECT && os_errno)
		snprintf(why, sizeof why, "%s", strerror((int)os_errno));
	else if (rc == CURLE_COULDNT_RESOLVE_HOST)
		snprintf(why, sizeof why, "cannot resolve the host name");
	else if (rc == CURLE_OPERATION_TIMEDOUT)
		snprintf(why, sizeof why, "no answer in time (%s)", h->errbuf);
	else if (rc == CURLE_PEER_FAILED_VERIFICATION && h->ca_file)
		snprintf(why, sizeof why, "its TLS certificate does not verify against the CA file "
		         "%.1024s (%s): %s", h->ca_file, h->ca_source, h->errbuf);
	else if (rc == CURLE_PEER_FAILED_VERIFICATION)
		snprintf(why, sizeof why, "its TLS certificate does not verify against the system's "
		         "CA store (set LARCH_CA to larchd's CA file): %s", h->errbuf);
	else if (rc == CURLE_SSL_CACERT_BADFILE)
		snprintf(why, sizeof why, "the CA file %.1024s (%s) cannot be used: %s", h->ca_file,
		         h->ca_source, h->errbuf);
	else if (rc == CURLE_SSL_CONNECT_ERROR)
		snprintf(why, sizeof why, "TLS handshake failed (is it an https port?): %s",
		         h->errbuf);
	else if (rc == CURLE_WRITE_ERROR)
		snprintf(why, sizeof why, "the answer is larger than %u MiB", MAX_BODY >> 20);
	else
		snprintf(why, sizeof why, "%s", h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
	fprintf(stderr, "larch: cannot reach larchd at %s: %s\n", h->base, why);
	return CLI_UNREACHABLE;
}

/* May the request go again after this outcome? Repeatable requests (GET, a
 * POST with an Idempotency-Key) after any broken exchange; the others only
 * when larchd said it did nothing (429, 503). */
static int should_retry(const struct cli_request *rq, CURLcode rc, long status)
{
	int repeatable = strcmp(rq->method, "GET") == 0 || rq->idempotency_key;
	if (rc == CURLE_OK)
		return status == 429 || status == 503 ||
		       (repeatable && (status == 502 || status == 504));
	return repeatable && (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR ||
	                      rc == CURLE_GOT_NOTHING || rc == CURLE_PARTIAL_FILE);
}

static CURLcode perform(struct cli_http *h, const struct cli_request *rq, struct cli_reply *out,
                        struct headers_seen *hs)
{
	CURL *c = h->curl;
	struct cli_buf url = { 0 };
	cli_buf_addf(&url, "%s%s", h->base, rq->path);
	struct curl_slist *hdr = NULL;
	struct cli_buf line = { 0 };
	hdr = curl_slist_append(hdr, "Accept: application/json");
	hdr = curl_slist_append(hdr, "Expect:");
	if (h->auth)
		hdr = curl_slist_append(hdr, h->auth);
	if (rq->body)
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
	if (rq->idempotency_key) {
		cli_buf_addf(&line, "Idempotency-Key: %s", rq->idempotency_key);
		hdr = curl_slist_append(hdr, cli_buf_str(&line));
	}
	if (rq->if_none_match) {
		cli_buf_clear(&line);
		cli_buf_addf(&line, "If-None-Match: %s", rq->if_none_match);
		hdr = curl_slist_append(hdr, cli_buf_str(&line));
	}

	cli_http_prepare(h, cli_buf_str(&url), hdr);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &out->body);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, hs);
	if (strcmp(rq->method, "POST") == 0 || strcmp(rq->method, "PATCH") == 0) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		if (strcmp(rq->method, "PATCH") == 0)
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PATCH");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)(rq->body ? rq->body_len : 0));
	} else {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	}
	CURLcode rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	curl_slist_free_all(hdr);
	cli_buf_release(&line);
	cli_buf_release(&url);
	return rc;
}

int cli_http_send(struct cli_http *h, const struct cli_request *rq, struct cli_reply *out)
{
	double backoff = 0.5;
	for (int attempt = 1; ; attempt++) {
		cli_reply_release(out);
		struct headers_seen hs = { .retry_after = -1 };
		CURLcode rc = perform(h, rq, out, &hs);
		if (attempt < ATTEMPTS && should_retry(rq, rc, out->status)) {
			double wait = backoff * (0.75 + 0.5 * drand48());
			if (hs.retry_after >= 0)
				wait = hs.retry_after < MAX_RETRY_AFTER_S ? hs.retry_after : MAX_RETRY_AFTER_S;
			cli_sleep(wait);
			backoff *= 2;
			continue;
		}
		if (rc != CURLE_OK)
			return transport_error(h, rc);
		snprintf(out->etag, sizeof out->etag, "%s", hs.etag);
		if (out->body.len > 0)
			out->json = json_loadb(out->body.data, out->body.len, JSON_ALLOW_NUL, NULL);
		return CLI_OK;
	}
}

/* The server's error message made inert, or a piece of a body that is not
 * the error shape; a new string. */
static char *server_message(const struct cli_reply *r, const char **code)
{
	json_t *err = json_object_get(r->json, "error");
	const char *msg = json_string_value(json_object_get(err, "message"));
	*code = json_string_value(json_object_get(err, "code"));
	if (msg)
		return cli_inert(msg);
	struct cli_buf b = { 0 };
	if (r->body.len == 0)
		cli_buf_adds(&b, "no message");
	else
		cli_buf_add_inert(&b, r->body.data, r->body.len, 200);
	return b.data;
}

int cli_http_fail(const struct cli_http *h, const struct cli_reply *r, const char *job)
{
	const char *code = NULL;
	char *msg = server_message(r, &code);
	char *jobshown = job ? cli_inert(job) : NULL;
	char status[64];
	snprintf(status, sizeof status, "%ld%s%s", r->status, code ? " " : "", code ? code : "");
	const char *config = h->config_path ? h->config_path : "~/.config/larch/config";
	long s = r->status;

	if (s == 400 && code && strcmp(code, "invalid_spec") == 0)
		fprintf(stderr, "larch: the spec was refused: %s\n", msg);
	else if (s == 401 && !h->auth)
		fprintf(stderr, "larch: larchd wants a token (401): set LARCH_TOKEN, pass --token-file "
		        "FILE or put \"token = ...\" in %s\n", config);
	else if (s == 401)
		fprintf(stderr, "larch: the token was refused (401): set LARCH_TOKEN, pass "
		        "--token-file FILE or put \"token = ...\" in %s (this one came from %s)\n",
		        config, h->token_source ? h->token_source : "?");
	else if (s == 403)
		fprintf(stderr, "larch: not allowed (403): %s\n", msg);
	else if (s == 404 && job)
		fprintf(stderr, "larch: job %s not found\n", jobshown);
	else if (s == 409 && job)
		fprintf(stderr, "larch: job %s: %s (409)\n", jobshown, msg);
	else if (s == 429 || s == 503)
		fprintf(stderr, "larch: larchd is busy (%s): %s; try again later\n", status, msg);
	else if (s >= 500)
		fprintf(stderr, "larch: larchd failed (%s): %s\n", status, msg);
	else if (s >= 400)
		fprintf(stderr, "larch: larchd refused the request (%s): %s\n", status, msg);
	else
		fprintf(stderr, "larch: unexpected answer from larchd at %s (HTTP %ld): %s\n",
		        h->base, s, msg);
	free(msg);
	free(jobshown);
	return CLI_REFUSED;
}

int cli_http_take_object(const struct cli_http *h, struct cli_reply *r, const char *job,
                         json_t **out)
{
	if (r->status < 200 || r->status > 299)
		return cli_http_fail(h, r, job);
	if (!json_is_object(r->json)) {
		fprintf(stderr, "larch: unexpected answer from larchd at %s: HTTP %ld without a "
		        "JSON object\n", h->base, r->status);
		return CLI_REFUSED;
	}
	*out = r->json;
	r->json = NULL;
	return CLI_OK;
}

int cli_http_get_json(struct cli_http *h, const char *path, const char *job, json_t **out)
{
	struct cli_request rq = { .method = "GET", .path = path };
	struct cli_reply r = { 0 };
	int rc = cli_http_send(h, &rq, &r);
	if (rc == CLI_OK)
		rc = cli_http_take_object(h, &r, job, out);
	cli_reply_release(&r);
	return rc;
}

int cli_http_get_list(struct cli_http *h, const char *path, const char *key, int all,
                      json_t *items, json_t **page, char **cursor)
{
	int rc;
	*page = NULL;
	*cursor = NULL;
	do {
		struct cli_buf p = { 0 };
		cli_buf_adds(&p, path);
		cli_http_param(&p, "cursor", *cursor);
		json_decref(*page);
		*page = NULL;
		rc = cli_http_get_json(h, cli_buf_str(&p), NULL, page);
		cli_buf_release(&p);
		free(*cursor);
		*cursor = NULL;
		if (rc != CLI_OK)
			break;
		json_t *list = json_object_get(*page, key);
		if (!json_is_array(list)) {
			fprintf(stderr, "larch: larchd's answer to %s has no \"%s\" array\n", path, key);
			rc = CLI_REFUSED;
			break;
		}
		json_array_extend(items, list);
		const char *next = json_string_value(json_object_get(*page, "next_cursor"));
		*cursor = next ? strdup(next) : NULL;
	} while (all && *cursor);
	return rc;
}
