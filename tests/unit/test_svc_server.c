/* tests/unit/test_svc_server.c - service/server.c driven over HTTP by
 * libcurl, on a free port, with a route table of test-only endpoints (they
 * are compiled into this test, never into larchd): tokens and roles
 * (401/403), bodies (400/413/415), the query string, ETag/304, replies
 * that name a bad byte, keep-alive after errors, concurrent clients, the
 * connection guard (head deadline, per-address cap: raw sockets from other
 * loopback addresses), and a graceful stop that lets an in-flight request
 * finish. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/reply.h"
#include "api/stats.h"
#include "check.h"
#include "service/log.h"
#include "service/server.h"

#define BODY_LIMIT 4096

/* ---- the test endpoints ------------------------------------------------ */

static json_t *query_object(const struct api_request *req)
{
	json_t *q = json_object();
	for (size_t i = 0; i < req->n_query; i++)
		json_object_set_new(q, req->query[i].name, json_string(req->query[i].value));
	return q;
}

static enum MHD_Result h_open(struct api_request *req)
{
	return api_reply_json(req, 200, json_pack("{s:s,s:o}", "route", "open",
	                                          "query", query_object(req)));
}

static enum MHD_Result h_whoami(struct api_request *req)
{
	return api_reply_json(req, 200, json_pack("{s:s,s:s}", "user", req->principal.user,
	                                          "role", api_role_name(req->principal.role)));
}

static enum MHD_Result h_report(struct api_request *req)
{
	return api_reply_json(req, 200, json_pack("{s:s}", "job", api_param(req, "id")));
}

static enum MHD_Result h_echo(struct api_request *req)
{
	json_error_t err;
	json_t *body = api_body_json(req, &err);
	if (!body)
		return api_reply_error(req, 400, API_ERR_BAD_JSON, "%s", err.text);
	return api_reply_json(req, 200, json_pack("{s:o}", "body", body));
}

static enum MHD_Result h_slow(struct api_request *req)
{
	usleep(400 * 1000);
	return api_reply_json(req, 200, json_pack("{s:b}", "slow", 1));
}

static enum MHD_Result h_silent(struct api_request *req)
{
	return MHD_YES;                 /* the bug the server must catch */
}

static enum MHD_Result h_utf8(struct api_request *req)
{
	return api_reply_error(req, 400, API_ERR_BAD_REQUEST, "name \"%s\" is bad", "a\xff\xc3" "b");
}

static enum MHD_Result h_etag(struct api_request *req)
{
	return api_reply_json(req, 200, json_pack("{s:i}", "v", 1));
}

static enum MHD_Result h_created(struct api_request *req)
{
	api_reply_header(req, "Location", "/t/things/1");
	return api_reply_json(req, 201, json_pack("{s:i}", "id", 1));
}

static const struct api_route routes[] = {
	{ .method = "GET", .path = "/t/open", .handler = h_open, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/t/user", .handler = h_whoami, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/t/admin", .handler = h_whoami, .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/t/jobs/{id}/report", .handler = h_report,
	  .role = API_ROLE_JOB },
	{ .method = "POST", .path = "/t/echo", .handler = h_echo, .role = API_ROLE_NONE },
	{ .method = "POST", .path = "/t/user-echo", .handler = h_echo, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/t/slow", .handler = h_slow, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/t/silent", .handler = h_silent, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/t/utf8", .handler = h_utf8, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/t/etag", .handler = h_etag, .role = API_ROLE_NONE },
	{ .method = "POST", .path = "/t/created", .handler = h_created, .role = API_ROLE_NONE },
};

/* Tokens: 64 x 'a' is alice (user), 'b' root (admin), 'c' the job token of
 * j-000001, 'd' makes the lookup fail; anything else is unknown. */
static int lookup(void *cls, const char *token, struct api_principal *who)
{
	const char *hex = token + 3;
	for (int i = 1; i < API_TOKEN_HEX; i++)
		if (hex[i] != hex[0])
			return API_AUTH_UNKNOWN;
	switch (hex[0]) {
	case 'a': *who = (struct api_principal){ .role = API_ROLE_USER, .user = "alice" }; break;
	case 'b': *who = (struct api_principal){ .role = API_ROLE_ADMIN, .user = "root" }; break;
	case 'c': *who = (struct api_principal){ .role = API_ROLE_JOB, .user = "alice",
	                                         .job = "j-000001" }; break;
	case 'd': return API_AUTH_FAILED;
	default: return API_AUTH_UNKNOWN;
	}
	return API_AUTH_OK;
}

static struct api_ctx ctx = { .auth_lookup = lookup };
static struct svc_server *srv;
static unsigned port;

/* ---- a small client ---------------------------------------------------- */

struct resp {
	CURLcode rc;
	long status;
	char body[1 << 16];
	size_t len;
	char headers[1 << 13];
	size_t hlen;
	long connects;                  /* new connections this request made */
};

static size_t on_body(char *p, size_t size, size_t n, void *cls)
{
	struct resp *r = cls;
	size_t len = size * n;
	if (r->len + len >= sizeof r->body)
		len = sizeof r->body - r->len - 1;
	memcpy(r->body + r->len, p, len);
	r->len += len;
	r->body[r->len] = '\0';
	return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *cls)
{
	struct resp *r = cls;
	size_t len = size * n;
	if (r->hlen + len >= sizeof r->headers)
		len = sizeof r->headers - r->hlen - 1;
	memcpy(r->headers + r->hlen, p, len);
	r->hlen += len;
	r->headers[r->hlen] = '\0';
	return size * n;
}

/* A chunked upload of n bytes of '{' (read callback). */
struct upload {
	size_t left;
};

static size_t on_read(char *p, size_t size, size_t n, void *cls)
{
	struct upload *u = cls;
	size_t len = size * n < u->left ? size * n : u->left;
	memset(p, ' ', len);
	u->left -= len;
	return len;
}

/* One request. h: a handle to reuse (keep-alive), or NULL for a fresh one.
 * headers: NULL-terminated, may be NULL. body: NULL for none; chunked > 0
 * uploads that many bytes chunked instead. */
static void http(CURL *h, const char *method, const char *path, const char *const *headers,
                 const char *body, size_t chunked, struct resp *r)
{
	CURL *own = h ? NULL : curl_easy_init();
	if (!h)
		h = own;
	memset(r, 0, sizeof *r);
	char url[4096 + 64];
	snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
	struct curl_slist *list = NULL;
	for (const char *const *hd = headers; hd && *hd; hd++)
		list = curl_slist_append(list, *hd);
	struct upload up = { chunked };
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_NOBODY, strcmp(method, "HEAD") == 0 ? 1L : 0L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
	if (chunked) {
		list = curl_slist_append(list, "Transfer-Encoding: chunked");
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &up);
	} else if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	list = curl_slist_append(list, "Expect:");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
	r->rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &r->connects);
	curl_slist_free_all(list);
	if (own)
		curl_easy_cleanup(own);
}

static void get(const char *path, const char *token_char, struct resp *r)
{
	char auth[128];
	const char *headers[2] = { NULL, NULL };
	if (token_char) {
		snprintf(auth, sizeof auth, "Authorization: Bearer lt_%s", "");
		size_t n = strlen(auth);
		memset(auth + n, token_char[0], API_TOKEN_HEX);
		auth[n + API_TOKEN_HEX] = '\0';
		headers[0] = auth;
	}
	http(NULL, "GET", path, headers, NULL, 0, r);
}

/* The value of a response header (case-insensitive name), or "". */
static const char *header(const struct resp *r, const char *name)
{
	static char value[512];
	value[0] = '\0';
	size_t len = strlen(name);
	for (const char *line = r->headers; *line; ) {
		const char *end = strstr(line, "\r\n");
		if (!end)
			break;
		if ((size_t)(end - line) > len && strncasecmp(line, name, len) == 0 && line[len] == ':') {
			const char *v = line + len + 1;
			while (*v == ' ')
				v++;
			snprintf(value, sizeof value, "%.*s", (int)(end - v), v);
			return value;
		}
		line = end + 2;
	}
	return value;
}

/* The error code of an error body, or "" when it is not one. */
static const char *error_code(const struct resp *r)
{
	static char code[64];
	code[0] = '\0';
	json_t *j = json_loads(r->body, 0, NULL);
	const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
	json_t *detail = json_object_get(json_object_get(j, "error"), "detail");
	const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	if (c && msg && detail)         /* all three keys, always */
		snprintf(code, sizeof code, "%s", c);
	json_decref(j);
	return code;
}

#define CHECK_STATUS(r, want) \
	CHECK_MSG((r).rc == CURLE_OK && (r).status == (want), "status %ld (curl %d) want %d: %s", \
	          (r).status, (int)(r).rc, (want), (r).body)

/* ---- tests ------------------------------------------------------------- */

static void test_open_route_and_query(void)
{
	struct resp r;
	get("/t/open?limit=5&name=a%20b+c&flag", NULL, &r);
	CHECK_STATUS(r, 200);
	CHECK(strstr(header(&r, "Content-Type"), "application/json") != NULL);
	CHECK(strstr(r.body, "\"limit\":\"5\"") && strstr(r.body, "\"name\":\"a b c\"") &&
	      strstr(r.body, "\"flag\":\"\""));
	CHECK(header(&r, "ETag")[0] == '"');

	http(NULL, "HEAD", "/t/open", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 200);
	CHECK_INT_EQ(r.len, 0);

	get("/t/open?x=%00", NULL, &r);
	CHECK_STATUS(r, 400);
	CHECK_STR_EQ(error_code(&r), "bad_request");
	get("/t/open?x=%zz", NULL, &r);
	CHECK_STATUS(r, 400);
	char many[512] = "/t/open?";
	for (int i = 0; i <= API_QUERY_MAX; i++)
		strcat(many, "k=v&");
	get(many, NULL, &r);
	CHECK_STATUS(r, 400);
}

static void test_not_found_and_method(void)
{
	struct resp r;
	const char *missing[] = { "/", "/t", "/t/open/", "/t/nope", "/t/jobs/..%2F..%2Fetc/report",
	                          "/t/open%00", "/t/jobs/%2e%2e/report" };
	for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
		get(missing[i], NULL, &r);
		CHECK_MSG(r.status == 404, "GET %s: %ld", missing[i], r.status);
		CHECK_STR_EQ(error_code(&r), "not_found");
	}
	http(NULL, "DELETE", "/t/open", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 405);
	CHECK_STR_EQ(header(&r, "Allow"), "GET, HEAD");
	CHECK_STR_EQ(error_code(&r), "method_not_allowed");
	const char *json[] = { "Content-Type: application/json", NULL };
	http(NULL, "PUT", "/t/jobs/j-1/report", json, "{}", 0, &r);
	CHECK_STATUS(r, 405);
	CHECK_STR_EQ(header(&r, "Allow"), "POST");
}

/* Error replies to requests without a body keep the connection. */
static void test_keep_alive_after_errors(void)
{
	CURL *h = curl_easy_init();
	struct resp r;
	http(h, "GET", "/t/open", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 200);
	const char *paths[] = { "/t/nope", "/t/user", "/t/open" };
	const long want[] = { 404, 401, 200 };
	for (int i = 0; i < 3; i++) {
		http(h, "GET", paths[i], NULL, NULL, 0, &r);
		CHECK_MSG(r.status == want[i], "GET %s: %ld", paths[i], r.status);
		CHECK_MSG(r.connects == 0, "GET %s opened a new connection", paths[i]);
	}
	curl_easy_cleanup(h);
}

static void test_auth(void)
{
	struct resp r;
	get("/t/user", NULL, &r);
	CHECK_STATUS(r, 401);
	CHECK_STR_EQ(error_code(&r), "unauthorized");
	CHECK(strncmp(header(&r, "WWW-Authenticate"), "Bearer", 6) == 0);

	const char *malformed[] = { "Authorization: Basic YWxpY2U6cHc=", "Authorization: Bearer",
	                            "Authorization: Bearer lt_abc", "Authorization: lt_" };
	for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
		const char *hd[] = { malformed[i], NULL };
		http(NULL, "GET", "/t/user", hd, NULL, 0, &r);
		CHECK_MSG(r.status == 401, "%s: %ld", malformed[i], r.status);
		CHECK(strstr(header(&r, "WWW-Authenticate"), "invalid_token") || i == 3);
	}
	get("/t/user", "e", &r);                /* well-formed, unknown */
	CHECK_STATUS(r, 401);
	CHECK(strstr(r.body, "unknown or revoked") != NULL);
	get("/t/user", "d", &r);                /* the lookup fails */
	CHECK_STATUS(r, 500);
	CHECK_STR_EQ(error_code(&r), "internal");

	get("/t/user", "a", &r);
	CHECK_STATUS(r, 200);
	CHECK(strstr(r.body, "\"user\":\"alice\"") && strstr(r.body, "\"role\":\"user\""));
	get("/t/user", "b", &r);
	CHECK_STATUS(r, 200);
	get("/t/user", "c", &r);                /* a job token is no user */
	CHECK_STATUS(r, 403);
	CHECK_STR_EQ(error_code(&r), "forbidden");
	get("/t/admin", "a", &r);
	CHECK_STATUS(r, 403);
	get("/t/admin", "b", &r);
	CHECK_STATUS(r, 200);

	char auth[128];
	snprintf(auth, sizeof auth, "Authorization: Bearer lt_");
	memset(auth + strlen(auth), 'c', API_TOKEN_HEX);
	auth[25 + API_TOKEN_HEX] = '\0';
	const char *job_hd[] = { auth, NULL };
	http(NULL, "POST", "/t/jobs/j-000001/report", job_hd, NULL, 0, &r);
	CHECK_STATUS(r, 200);
	CHECK(strstr(r.body, "\"job\":\"j-000001\"") != NULL);
	http(NULL, "POST", "/t/jobs/j-000002/report", job_hd, NULL, 0, &r);
	CHECK_STATUS(r, 403);
	CHECK(strstr(r.body, "its own job") != NULL);
	memset(auth + 25, 'a', API_TOKEN_HEX);  /* a user on a job route */
	http(NULL, "POST", "/t/jobs/j-000001/report", job_hd, NULL, 0, &r);
	CHECK_STATUS(r, 403);
	memset(auth + 25, 'b', API_TOKEN_HEX);  /* admin may */
	http(NULL, "POST", "/t/jobs/j-000001/report", job_hd, NULL, 0, &r);
	CHECK_STATUS(r, 200);

	/* the token is checked before the body is read */
	const char *no_token[] = { "Content-Type: application/json", NULL };
	http(NULL, "POST", "/t/user-echo", no_token, "{\"a\":1}", 0, &r);
	CHECK_STATUS(r, 401);
}

static void test_bodies(void)
{
	struct resp r;
	const char *json[] = { "Content-Type: application/json", NULL };
	http(NULL, "POST", "/t/echo", json, "{\"a\": [1, 2]}", 0, &r);
	CHECK_STATUS(r, 200);
	CHECK_STR_EQ(r.body, "{\"body\":{\"a\":[1,2]}}");

	const char *utf8[] = { "Content-Type: Application/JSON; charset=\"UTF-8\"", NULL };
	http(NULL, "POST", "/t/echo", utf8, "{}", 0, &r);
	CHECK_STATUS(r, 200);

	http(NULL, "POST", "/t/echo", json, "{\"a\": ", 0, &r);
	CHECK_STATUS(r, 400);
	CHECK_STR_EQ(error_code(&r), "bad_json");
	http(NULL, "POST", "/t/echo", json, "{\"a\": 1, \"a\": 2}", 0, &r);
	CHECK_STATUS(r, 400);
	http(NULL, "POST", "/t/echo", json, "", 0, &r);
	CHECK_STATUS(r, 400);
	CHECK(strstr(r.body, "body: empty") != NULL);

	const char *bad_types[] = { "Content-Type: text/plain", "Content-Type: application/jsonx",
	                            "Content-Type: application/json; charset=latin1",
	                            "Content-Type: application/x-www-form-urlencoded", "Content-Type:" };
	for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
		const char *hd[] = { bad_types[i], NULL };
		http(NULL, "POST", "/t/echo", hd, "{}", 0, &r);
		CHECK_MSG(r.status == 415, "%s: %ld", bad_types[i], r.status);
		CHECK_STR_EQ(error_code(&r), "unsupported_media_type");
	}
}

static void test_body_limit(void)
{
	struct resp r;
	const char *json[] = { "Content-Type: application/json", NULL };
	static char big[BODY_LIMIT + 2];
	memset(big, ' ', BODY_LIMIT + 1);
	big[0] = '[';
	big[BODY_LIMIT] = ']';
	http(NULL, "POST", "/t/echo", json, big, 0, &r);
	CHECK_STATUS(r, 413);
	CHECK_STR_EQ(error_code(&r), "too_large");
	CHECK(strstr(r.body, "\"limit\":4096") != NULL);
	big[BODY_LIMIT - 1] = ']';              /* exactly the limit */
	big[BODY_LIMIT] = '\0';
	http(NULL, "POST", "/t/echo", json, big, 0, &r);
	CHECK_STATUS(r, 200);

	/* chunked: no length to refuse up front; past the limit it is a 413
	 * or, where MHD cannot reply mid-body, a closed connection */
	http(NULL, "POST", "/t/echo", json, NULL, 64 * 1024, &r);
	CHECK_MSG(r.status == 413 || r.rc != CURLE_OK, "chunked 64 KiB: %ld (curl %d)", r.status,
	          (int)r.rc);
	if (getenv("CHECK_VERBOSE"))
		fprintf(stderr, "chunked 64 KiB: status %ld curl %d\n", r.status, (int)r.rc);
	http(NULL, "POST", "/t/echo", json, NULL, 100, &r);
	CHECK_STATUS(r, 400);                   /* 100 spaces: within the limit, not JSON */
	get("/t/open", NULL, &r);
	CHECK_STATUS(r, 200);                   /* and it keeps serving */
}

static void test_reply_helpers(void)
{
	struct resp r;
	get("/t/utf8", NULL, &r);
	CHECK_STATUS(r, 400);
	CHECK(strstr(r.body, "name \\\"a??b\\\" is bad") != NULL);

	get("/t/silent", NULL, &r);
	CHECK_STATUS(r, 500);
	CHECK_STR_EQ(error_code(&r), "internal");

	http(NULL, "POST", "/t/created", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 201);
	CHECK_STR_EQ(header(&r, "Location"), "/t/things/1");
	CHECK_STR_EQ(header(&r, "ETag"), "");   /* tags are for GET */

	get("/t/etag", NULL, &r);
	CHECK_STATUS(r, 200);
	char tag[64], inm[128];
	snprintf(tag, sizeof tag, "%s", header(&r, "ETag"));
	CHECK(tag[0] == '"');
	CHECK_STR_EQ(header(&r, "Cache-Control"), "no-cache");
	snprintf(inm, sizeof inm, "If-None-Match: %s", tag);
	const char *hd[] = { inm, NULL };
	http(NULL, "GET", "/t/etag", hd, NULL, 0, &r);
	CHECK_STATUS(r, 304);
	CHECK_INT_EQ(r.len, 0);
	CHECK_STR_EQ(header(&r, "ETag"), tag);
	const char *other[] = { "If-None-Match: \"abc\"", NULL };
	http(NULL, "GET", "/t/etag", other, NULL, 0, &r);
	CHECK_STATUS(r, 200);
}

#define CLIENTS 6
#define REQUESTS 40

static void *client(void *arg)
{
	long *ok = arg;
	CURL *h = curl_easy_init();
	struct resp *r = malloc(sizeof *r);
	for (int i = 0; r && i < REQUESTS; i++) {
		http(h, "GET", i % 2 ? "/t/open?i=1" : "/t/nope", NULL, NULL, 0, r);
		*ok += r->rc == CURLE_OK && r->status == (i % 2 ? 200 : 404);
	}
	free(r);
	curl_easy_cleanup(h);
	return NULL;
}

static void test_concurrent_clients(void)
{
	pthread_t t[CLIENTS];
	long ok[CLIENTS] = { 0 };
	for (int i = 0; i < CLIENTS; i++)
		pthread_create(&t[i], NULL, client, &ok[i]);
	long total = 0;
	for (int i = 0; i < CLIENTS; i++) {
		pthread_join(t[i], NULL);
		total += ok[i];
	}
	CHECK_INT_EQ(total, CLIENTS * REQUESTS);
}

static void *slow_client(void *arg)
{
	get("/t/slow", NULL, arg);
	return NULL;
}

static int wait_in_flight(unsigned want, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (svc_server_in_flight(srv) == want)
			return 1;
		usleep(1000);
	}
	return 0;
}

/* Quiesce with a request in flight: it finishes; a request on an open
 * keep-alive connection gets 503 and the connection closes; new
 * connections are refused. Frees the server. */
static void test_graceful_stop(void)
{
	CURL *h = curl_easy_init();
	static struct resp r, slow;
	http(h, "GET", "/t/open", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 200);
	CHECK(wait_in_flight(0, 2000));

	pthread_t t;
	pthread_create(&t, NULL, slow_client, &slow);
	CHECK(wait_in_flight(1, 2000));
	svc_server_quiesce(srv);

	http(h, "GET", "/t/open", NULL, NULL, 0, &r);
	CHECK_STATUS(r, 503);
	CHECK_STR_EQ(error_code(&r), "overloaded");
	CHECK_STR_EQ(header(&r, "Connection"), "close");
	get("/t/open", NULL, &r);
	CHECK_MSG(r.rc == CURLE_COULDNT_CONNECT, "connect after quiesce: curl %d status %ld",
	          (int)r.rc, r.status);

	pthread_join(t, NULL);
	CHECK_STATUS(slow, 200);
	CHECK(strstr(slow.body, "\"slow\":true") != NULL);
	CHECK(wait_in_flight(0, 2000));
	curl_easy_cleanup(h);
	svc_server_free(srv);
	srv = NULL;
}

/* ---- the connection guard (server_conns.h) over raw sockets ---------------- */

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A socket from source (another loopback address: another client) to p. */
static int connect_from(const char *source, unsigned p)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in from = { .sin_family = AF_INET };
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p),
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	inet_pton(AF_INET, source, &from.sin_addr);
	struct timeval tv = { 5, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0 ||
	    connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads one reply: its status, or 0 when the server closed (or reset) the
 * connection first. */
static int read_status(int fd)
{
	char buf[4096];
	size_t len = 0;
	while (len < sizeof buf - 1) {
		ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
		if (n <= 0)
			return 0;
		len += (size_t)n;
		buf[len] = '\0';
		const char *end = strstr(buf, "\r\n\r\n");
		if (end && buf[len - 1] == '}')
			return atoi(buf + 9);
	}
	return 0;
}

static int get_on(int fd)
{
	static const char req[] = "GET /t/open HTTP/1.1\r\nHost: x\r\n\r\n";
	if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
		return 0;
	return read_status(fd);
}

/* Has the server closed fd? Waits up to ms. */
static int closed_within(int fd, int ms)
{
	char c;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ssize_t n = recv(fd, &c, 1, 0);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A server of the test routes with a connection guard. */
static struct svc_server *start_guarded(unsigned header_timeout, unsigned per_ip)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct svc_server_config cfg = {
		.addr = (struct sockaddr *)&in, .addr_len = sizeof in, .threads = 2,
		.max_connections = 64, .max_connections_per_ip = per_ip,
		.header_timeout = header_timeout, .connection_timeout = 10,
		.body_limit = BODY_LIMIT, .routes = routes,
		.n_routes = sizeof routes / sizeof routes[0], .ctx = &ctx,
	};
	char err[256];
	struct svc_server *g = svc_server_start(&cfg, err, sizeof err);
	CHECK_MSG(g != NULL, "%s", err);
	return g;
}

/* GET /metrics's larch_http_connections_dropped_total{reason=...} */
static unsigned long long dropped(const char *reason)
{
	struct api_buf m;
	char key[128];
	api_buf_init(&m, 4096);
	api_stats_write(&m);
	snprintf(key, sizeof key, "larch_http_connections_dropped_total{reason=\"%s\"} ", reason);
	const char *at = strstr(m.data, key);
	unsigned long long n = at ? strtoull(at + strlen(key), NULL, 10) : ~0ULL;
	api_buf_release(&m);
	return n;
}

/* header_timeout 1 s: a half head is cut off after the deadline, not
 * before; a request whose head is in may take longer (its body trickles
 * past the deadline); /metrics counts the one. */
static void test_head_deadline(void)
{
	struct svc_server *g = start_guarded(1, 0);
	if (!g)
		return;
	unsigned p = svc_server_port(g);
	unsigned long long before = dropped("header_timeout");
	int half = connect_from("127.0.0.4", p);
	double t0 = mono_s();
	static const char head[] = "GET /t/open HTTP/1.1\r\nHost: x\r\n";
	CHECK(send(half, head, sizeof head - 1, MSG_NOSIGNAL) == (ssize_t)sizeof head - 1);
	int slow = connect_from("127.0.0.5", p);
	static const char post[] = "POST /t/echo HTTP/1.1\r\nHost: x\r\n"
	                           "Content-Type: application/json\r\nContent-Length: 8\r\n\r\n";
	CHECK(send(slow, post, sizeof post - 1, MSG_NOSIGNAL) == (ssize_t)sizeof post - 1);
	for (int i = 0; i < 8; i++) {          /* 1.6 s of body, one byte at a time */
		usleep(200 * 1000);
		CHECK(send(slow, &"[1,2,3 ]"[i], 1, MSG_NOSIGNAL) == 1);
	}
	CHECK_INT_EQ(read_status(slow), 200);
	CHECK(closed_within(half, 5000));
	CHECK_MSG(mono_s() - t0 >= 1.0, "closed after %.2f s, before the deadline", mono_s() - t0);
	close(half);
	close(slow);
	svc_server_free(g);
	CHECK_INT_EQ(dropped("header_timeout") - before, 1);
}

/* 2 connections per address: a third from 127.0.0.2 is closed unanswered
 * while 127.0.0.3 and 127.0.0.1 are served, and gets in once one of the two
 * closes. */
static void test_per_address_cap(void)
{
	struct svc_server *g = start_guarded(0, 2);
	if (!g)
		return;
	unsigned p = svc_server_port(g);
	unsigned long long before = dropped("per_ip_limit");
	int a = connect_from("127.0.0.2", p), b = connect_from("127.0.0.2", p);
	CHECK_INT_EQ(get_on(a), 200);
	CHECK_INT_EQ(get_on(b), 200);
	int third = connect_from("127.0.0.2", p);
	CHECK_INT_EQ(get_on(third), 0);
	close(third);
	int local[3];
	for (int i = 0; i < 3; i++) {
		local[i] = connect_from("127.0.0.1", p);
		CHECK_INT_EQ(get_on(local[i]), 200);
	}
	int other = connect_from("127.0.0.3", p);
	CHECK_INT_EQ(get_on(other), 200);
	close(other);
	CHECK_INT_EQ(get_on(b), 200);           /* still kept alive */
	close(a);
	int again = 0;
	for (int i = 0; i < 200 && again != 200; i++) {
		int fd = connect_from("127.0.0.2", p);
		again = get_on(fd);
		close(fd);
		if (again != 200)
			usleep(10 * 1000);
	}
	CHECK_INT_EQ(again, 200);
	close(b);
	for (int i = 0; i < 3; i++)
		close(local[i]);
	svc_server_free(g);
	CHECK(dropped("per_ip_limit") - before >= 1);
}

/* Log fields: bytes outside printable ASCII are %XX; in a request line's
 * fields space and '%' are too, so a path cannot forge the status after it. */
static void test_log_sanitize(void)
{
	char out[64];
	CHECK_STR_EQ(svc_log_sanitize("a b\n\x1b%", out, sizeof out), "a b%0A%1B%");
	CHECK_STR_EQ(svc_log_sanitize_token("/x 500 1us%", out, sizeof out), "/x%20500%201us%25");
	CHECK_STR_EQ(svc_log_sanitize_token("/v1/jobs/j-000001", out, sizeof out),
	             "/v1/jobs/j-000001");
	char small[12];
	CHECK_STR_EQ(svc_log_sanitize_token("/aaaaaaaaaaaaaaaa", small, sizeof small), "/aaaaaaa...");
}

static void test_start_errors(void)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct svc_server_config cfg = { .addr = (struct sockaddr *)&in, .addr_len = sizeof in,
	                                 .body_limit = BODY_LIMIT, .routes = routes,
	                                 .n_routes = sizeof routes / sizeof routes[0], .ctx = &ctx };
	char err[256];
	struct svc_server *again = svc_server_start(&cfg, err, sizeof err);
	CHECK(again == NULL);
	CHECK_MSG(strstr(err, "Address already in use") != NULL, "%s", err);

	struct api_route dup[2] = { routes[0], routes[0] };
	cfg.routes = dup;
	cfg.n_routes = 2;
	in.sin_port = 0;
	CHECK(svc_server_start(&cfg, err, sizeof err) == NULL);
	CHECK(strstr(err, "listed twice") != NULL);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	char err[256];
	svc_log_open(NULL, getenv("CHECK_VERBOSE") ? SVC_LOG_DEBUG : SVC_LOG_ERROR, err, sizeof err);
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = 0,
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct svc_server_config cfg = {
		.addr = (struct sockaddr *)&in, .addr_len = sizeof in, .threads = 2,
		.max_connections = 64, .connection_timeout = 10, .body_limit = BODY_LIMIT,
		.routes = routes, .n_routes = sizeof routes / sizeof routes[0], .ctx = &ctx,
	};
	srv = svc_server_start(&cfg, err, sizeof err);
	if (!srv) {
		fprintf(stderr, "server: %s\n", err);
		return 1;
	}
	port = svc_server_port(srv);
	CHECK(port > 0);

	CHECK_RUN(test_log_sanitize);
	CHECK_RUN(test_open_route_and_query);
	CHECK_RUN(test_not_found_and_method);
	CHECK_RUN(test_keep_alive_after_errors);
	CHECK_RUN(test_auth);
	CHECK_RUN(test_bodies);
	CHECK_RUN(test_body_limit);
	CHECK_RUN(test_reply_helpers);
	CHECK_RUN(test_concurrent_clients);
	CHECK_RUN(test_start_errors);
	CHECK_RUN(test_head_deadline);
	CHECK_RUN(test_per_address_cap);
	CHECK_RUN(test_graceful_stop);
	curl_global_cleanup();
	return check_finish();
}
