/* tests/unit/test_api_router.c - api/router.c: path checks, matching with
 * parameters, 404 and 405 with the Allow list, table checks; and the
 * request accessors of api/request.c that the router fills. */
#include <stdio.h>
#include <string.h>

#include "api/routes.h"
#include "api/router.h"
#include "check.h"

static enum MHD_Result h_dummy(struct api_request *req)
{
	return MHD_YES;
}

static enum MHD_Result h_other(struct api_request *req)
{
	return MHD_NO;
}

static const struct api_route table[] = {
	{ .method = "GET", .path = "/healthz", .handler = h_dummy, .role = API_ROLE_NONE },
	{ .method = "GET", .path = "/v1/jobs", .handler = h_dummy, .role = API_ROLE_USER },
	{ .method = "POST", .path = "/v1/jobs", .handler = h_dummy, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/stats", .handler = h_other, .role = API_ROLE_ADMIN },
	{ .method = "GET", .path = "/v1/jobs/{id}", .handler = h_dummy, .role = API_ROLE_USER },
	{ .method = "PATCH", .path = "/v1/jobs/{id}", .handler = h_dummy, .role = API_ROLE_ADMIN },
	{ .method = "POST", .path = "/v1/jobs/{id}/cancel", .handler = h_dummy, .role = API_ROLE_USER },
	{ .method = "GET", .path = "/v1/jobs/{id}/metrics", .handler = h_dummy, .role = API_ROLE_USER },
	{ .method = "POST", .path = "/v1/jobs/{id}/metrics", .handler = h_other, .role = API_ROLE_JOB },
	{ .method = "POST", .path = "/v1/nodes/{name}/ranks/{rank}", .handler = h_dummy,
	  .role = API_ROLE_ADMIN },
};
#define N_TABLE (sizeof table / sizeof table[0])

static int parses(const char *raw)
{
	struct api_path p;
	return api_path_parse(&p, raw) == 0;
}

static void test_path_parse(void)
{
	struct api_path p;
	CHECK_INT_EQ(api_path_parse(&p, "/"), 0);
	CHECK_INT_EQ(p.n, 0);
	CHECK_INT_EQ(api_path_parse(&p, "/v1/jobs/j-000123"), 0);
	CHECK_INT_EQ(p.n, 3);
	CHECK_STR_EQ(p.seg[0], "v1");
	CHECK_STR_EQ(p.seg[2], "j-000123");
	/* escapes are decoded; '+' is not a space in a path */
	CHECK_INT_EQ(api_path_parse(&p, "/v1/a%41%2d+b"), 0);
	CHECK_STR_EQ(p.seg[1], "aA-+b");

	const char *refused[] = {
		"", "healthz", "//", "/healthz/", "/v1//jobs", "/v1/jobs/..", "/v1/jobs/.",
		"/v1/jobs/a..b", "/v1/jobs/%2e%2e", "/v1/jobs/%2E.", "/v1/jobs/a%00b", "/v1/jobs/%00",
		"/v1/jobs/a%2Fb", "/v1/jobs/a%2fb", "/v1/jobs/a%zz", "/v1/jobs/a%4", "/v1/jobs/a%",
		"/v1/jobs/%0a", "/v1/jobs/a%7Fb", "/v1/jobs/a\tb", "/v1/jobs/a\x01",
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
		CHECK_MSG(!parses(refused[i]), "path \"%s\" should be refused", refused[i]);
	CHECK(!parses(NULL));
}

static void test_path_limits(void)
{
	char raw[API_PATH_MAX + 64];
	/* a segment of exactly API_SEGMENT_MAX bytes is fine, one more is not */
	strcpy(raw, "/v1/jobs/");
	memset(raw + 9, 'x', API_SEGMENT_MAX);
	raw[9 + API_SEGMENT_MAX] = '\0';
	CHECK(parses(raw));
	raw[9 + API_SEGMENT_MAX] = 'x';
	raw[10 + API_SEGMENT_MAX] = '\0';
	CHECK(!parses(raw));
	/* escapes count decoded: 128 x "%41" is 128 bytes */
	strcpy(raw, "/j/");
	for (int i = 0; i < API_SEGMENT_MAX; i++)
		strcat(raw, "%41");
	CHECK(strlen(raw) > API_SEGMENT_MAX);
	CHECK(parses(raw));

	/* API_SEGMENTS_MAX segments, then one more */
	raw[0] = '\0';
	for (int i = 0; i < API_SEGMENTS_MAX; i++)
		strcat(raw, "/s");
	CHECK(parses(raw));
	strcat(raw, "/s");
	CHECK(!parses(raw));

	/* the whole path: API_PATH_MAX bytes at most */
	raw[0] = '\0';
	while (strlen(raw) + 101 <= API_PATH_MAX) {
		strcat(raw, "/");
		size_t len = strlen(raw);
		memset(raw + len, 'b', 100);
		raw[len + 100] = '\0';
	}
	CHECK(parses(raw));
	size_t len = strlen(raw);
	strcat(raw, "/");
	memset(raw + len + 1, 'c', API_PATH_MAX - len);
	raw[API_PATH_MAX + 1] = '\0';
	CHECK(strlen(raw) == API_PATH_MAX + 1);
	CHECK(!parses(raw));

	/* a 10k-character id */
	static char huge[10100];
	strcpy(huge, "/v1/jobs/");
	memset(huge + 9, '1', 10000);
	huge[10009] = '\0';
	CHECK(!parses(huge));
}

/* Parameters point into the parsed path: it is static here so that they
 * outlive the call. */
static unsigned match(const char *method, const char *raw, struct api_match *m)
{
	static struct api_path p;
	if (api_path_parse(&p, raw) != 0)
		return 404;
	return api_route_match(table, N_TABLE, method, &p, m);
}

static void test_match(void)
{
	struct api_match m;
	CHECK_INT_EQ(match("GET", "/healthz", &m), 0);
	CHECK(m.route == &table[0]);
	CHECK_INT_EQ(m.n_params, 0);

	CHECK_INT_EQ(match("GET", "/v1/jobs/j-000123", &m), 0);
	CHECK(m.route == &table[4]);
	CHECK_INT_EQ(m.n_params, 1);
	CHECK(m.params[0].name_len == 2 && memcmp(m.params[0].name, "id", 2) == 0);
	CHECK_STR_EQ(m.params[0].value, "j-000123");

	/* HEAD is answered by the GET route */
	CHECK_INT_EQ(match("HEAD", "/v1/jobs/j-1", &m), 0);
	CHECK(m.route == &table[4]);
	/* a literal route listed first wins over the parameter */
	CHECK_INT_EQ(match("GET", "/v1/jobs/stats", &m), 0);
	CHECK(m.route == &table[3]);
	/* but the parameter route still serves other methods on that path */
	CHECK_INT_EQ(match("PATCH", "/v1/jobs/stats", &m), 0);
	CHECK(m.route == &table[5]);

	CHECK_INT_EQ(match("POST", "/v1/jobs/j-9/cancel", &m), 0);
	CHECK(m.route == &table[6]);
	CHECK_STR_EQ(m.params[0].value, "j-9");
	CHECK_INT_EQ(match("POST", "/v1/jobs/j-9/metrics", &m), 0);
	CHECK(m.route == &table[8]);

	CHECK_INT_EQ(match("POST", "/v1/nodes/n1/ranks/3", &m), 0);
	CHECK(m.route == &table[9]);
	CHECK_INT_EQ(m.n_params, 2);
	CHECK_STR_EQ(m.params[0].value, "n1");
	CHECK_STR_EQ(m.params[1].value, "3");
	CHECK(m.params[1].name_len == 4 && memcmp(m.params[1].name, "rank", 4) == 0);
}

/* The root route: no parameters, even when the match before it had some
 * (a stale count copied garbage once) */
static void test_root(void)
{
	static const struct api_route root[] = {
		{ .method = "GET", .path = "/", .handler = h_dummy, .role = API_ROLE_NONE },
		{ .method = "GET", .path = "/ui/{file}", .handler = h_dummy, .role = API_ROLE_NONE },
	};
	static struct api_path p;
	struct api_match m;
	memset(&m, 0x5a, sizeof m);
	CHECK_INT_EQ(api_path_parse(&p, "/"), 0);
	CHECK_INT_EQ(api_route_match(root, 2, "GET", &p, &m), 0);
	CHECK(m.route == &root[0]);
	CHECK_INT_EQ(m.n_params, 0);
	CHECK_INT_EQ(api_path_parse(&p, "/ui/app.js"), 0);
	CHECK_INT_EQ(api_route_match(root, 2, "GET", &p, &m), 0);
	CHECK(m.route == &root[1]);
	CHECK_STR_EQ(m.params[0].value, "app.js");
	CHECK_INT_EQ(api_path_parse(&p, "/ui"), 0);
	CHECK_INT_EQ(api_route_match(root, 2, "GET", &p, &m), 404);
	CHECK_INT_EQ(api_route_match(root, 2, "POST", &p, &m), 404);
	CHECK_INT_EQ(api_path_parse(&p, "/"), 0);
	CHECK_INT_EQ(api_route_match(root, 2, "POST", &p, &m), 405);
	CHECK_STR_EQ(m.allow, "GET, HEAD");
	CHECK_INT_EQ(api_routes_check(root, 2, (char[128]){ 0 }, 128), 0);
}

static void test_not_found_and_allow(void)
{
	struct api_match m;
	const char *unknown[] = { "/", "/v1", "/v1/job", "/v1/jobs/j-1/cancel/x", "/healthz/x",
	                          "/v2/jobs", "/HEALTHZ", "/v1/nodes/n1/ranks" };
	for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
		CHECK_MSG(match("GET", unknown[i], &m) == 404, "GET %s: want 404", unknown[i]);
		CHECK(m.route == NULL);
	}

	CHECK_INT_EQ(match("DELETE", "/v1/jobs/j-1", &m), 405);
	CHECK(m.route == NULL);
	CHECK_STR_EQ(m.allow, "GET, HEAD, PATCH");
	CHECK_INT_EQ(match("PUT", "/v1/jobs", &m), 405);
	CHECK_STR_EQ(m.allow, "GET, HEAD, POST");
	CHECK_INT_EQ(match("GET", "/v1/jobs/j-1/cancel", &m), 405);
	CHECK_STR_EQ(m.allow, "POST");
	CHECK_INT_EQ(match("HEAD", "/v1/jobs/j-1/cancel", &m), 405);
	CHECK_INT_EQ(match("DELETE", "/v1/jobs/j-1/metrics", &m), 405);
	CHECK_STR_EQ(m.allow, "GET, HEAD, POST");
	CHECK_INT_EQ(match("POST", "/healthz", &m), 405);
	CHECK_STR_EQ(m.allow, "GET, HEAD");
	/* stats is GET (literal) plus PATCH (through {id}) */
	CHECK_INT_EQ(match("DELETE", "/v1/jobs/stats", &m), 405);
	CHECK_STR_EQ(m.allow, "GET, HEAD, PATCH");
	/* methods are case-sensitive (RFC 9110) */
	CHECK_INT_EQ(match("get", "/healthz", &m), 405);
}

static void test_routes_check(void)
{
	char err[256];
	CHECK_INT_EQ(api_routes_check(table, N_TABLE, err, sizeof err), 0);
	/* larchd's own table */
	CHECK_MSG(api_routes_check(api_routes, api_routes_count, err, sizeof err) == 0, "%s", err);

	struct api_route bad[2] = {
		{ .method = "GET", .path = "/a", .handler = h_dummy },
		{ .method = "GET", .path = "/a", .handler = h_dummy },
	};
	CHECK_INT_EQ(api_routes_check(bad, 2, err, sizeof err), -1);
	CHECK(strstr(err, "listed twice") != NULL);

	const char *bad_paths[] = { "a/b", "/a//b", "/a/{", "/a/{x}y", "/a/x{y}", "/a/{}", "/{a{b}}",
	                            "/{a}/{b}/{c}/{d}/{e}" };
	for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++) {
		bad[0].path = bad_paths[i];
		CHECK_MSG(api_routes_check(bad, 1, err, sizeof err) == -1, "pattern %s accepted",
		          bad_paths[i]);
	}
	bad[0].path = "/a";
	bad[0].handler = NULL;
	CHECK_INT_EQ(api_routes_check(bad, 1, err, sizeof err), -1);
}

static void test_request_accessors(void)
{
	struct api_request req;
	memset(&req, 0, sizeof req);
	struct api_match m;
	CHECK_INT_EQ(match("POST", "/v1/nodes/n7/ranks/12", &m), 0);
	memcpy(req.params, m.params, sizeof m.params);
	req.n_params = m.n_params;
	CHECK_STR_EQ(api_param(&req, "name"), "n7");
	CHECK_STR_EQ(api_param(&req, "rank"), "12");
	CHECK(api_param(&req, "id") == NULL);
	CHECK(api_param(&req, "nam") == NULL);

	CHECK_INT_EQ(api_query_add(&req, "limit", "50"), 0);
	CHECK_INT_EQ(api_query_add(&req, "na%6De", "a+b%20c%2B"), 0);
	CHECK_INT_EQ(api_query_add(&req, "flag", NULL), 0);
	CHECK_STR_EQ(api_query(&req, "limit"), "50");
	CHECK_STR_EQ(api_query(&req, "name"), "a b c+");
	CHECK_STR_EQ(api_query(&req, "flag"), "");
	CHECK(api_query(&req, "cursor") == NULL);
	CHECK_INT_EQ(api_query_add(&req, "x", "a%00"), -1);
	CHECK_INT_EQ(api_query_add(&req, "x", "%g0"), -1);
	CHECK_INT_EQ(api_query_add(&req, "%", "1"), -1);
	while (req.n_query < API_QUERY_MAX)
		CHECK_INT_EQ(api_query_add(&req, "k", "v"), 0);
	CHECK_INT_EQ(api_query_add(&req, "one", "more"), -1);
	api_request_release(&req);
	CHECK_INT_EQ(req.n_query, 0);

	enum api_role role;
	CHECK_INT_EQ(api_role_parse("admin", &role), 0);
	CHECK_INT_EQ(role, API_ROLE_ADMIN);
	CHECK_INT_EQ(api_role_parse("job", &role), 0);
	CHECK_INT_EQ(role, API_ROLE_JOB);
	CHECK_INT_EQ(api_role_parse("root", &role), -1);
	CHECK_STR_EQ(api_role_name(API_ROLE_USER), "user");
}

int main(void)
{
	CHECK_RUN(test_path_parse);
	CHECK_RUN(test_path_limits);
	CHECK_RUN(test_match);
	CHECK_RUN(test_root);
	CHECK_RUN(test_not_found_and_allow);
	CHECK_RUN(test_routes_check);
	CHECK_RUN(test_request_accessors);
	return check_finish();
}
