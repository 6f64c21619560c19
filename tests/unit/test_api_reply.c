/* tests/unit/test_api_reply.c - api/reply.c: the error table against the
 * contract in docs/api.md, ETags and If-None-Match. (The replies themselves
 * go over HTTP in test_svc_server.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/buf.h"
#include "api/jobs_common.h"
#include "api/reply.h"
#include "check.h"

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Every code of the table is in docs/api.md's error table, on a row with
 * its status. */
static void test_error_table_matches_docs(void)
{
	char path[4096];
	const char *dir = getenv("LARCH_TEST_DIR");
	snprintf(path, sizeof path, "%s/../../docs/api.md", dir ? dir : "tests/unit");
	const char *doc = read_file(path);
	CHECK_MSG(doc != NULL, "cannot read %s", path);
	if (!doc)
		return;
	for (int e = 0; e < API_ERR_COUNT; e++) {
		const struct api_error_info *info = api_error_info((enum api_error)e);
		CHECK(info && info->code && info->status >= 400 && info->status < 600);
		char code[64], status[16];
		snprintf(code, sizeof code, "`%s`", info->code);
		snprintf(status, sizeof status, "%u", info->status);
		const char *at = strstr(doc, code);
		CHECK_MSG(at != NULL, "docs/api.md does not list %s", code);
		if (!at)
			continue;
		const char *row = at;
		while (row > doc && row[-1] != '\n')
			row--;
		const char *end = strchr(at, '\n');
		char line[512];
		snprintf(line, sizeof line, "%.*s", (int)(end ? end - row : (long)strlen(row)), row);
		CHECK_MSG(strstr(line, status) != NULL, "docs/api.md: %s is not on a %s row: %s",
		          code, status, line);
	}
	CHECK(api_error_info(API_ERR_COUNT) == NULL);
	CHECK_INT_EQ(api_error_info(API_ERR_NOT_FOUND)->status, 404);
	CHECK_STR_EQ(api_error_info(API_ERR_UNAVAILABLE)->code, "overloaded");
}

static void test_etag(void)
{
	char a[API_ETAG_SIZE], b[API_ETAG_SIZE], c[API_ETAG_SIZE];
	api_etag("{\"state\":\"RUNNING\"}", 19, a);
	api_etag("{\"state\":\"RUNNING\"}", 19, b);
	api_etag("{\"state\":\"RUNNINH\"}", 19, c);
	CHECK_STR_EQ(a, b);
	CHECK(strcmp(a, c) != 0);
	CHECK_INT_EQ(strlen(a), API_ETAG_SIZE - 2);
	CHECK(a[0] == '"' && a[API_ETAG_SIZE - 3] == '"');
	/* pinned: tags must not change between builds (clients keep them) */
	api_etag("", 0, c);
	CHECK_STR_EQ(c, "\"efd01f60ba992926\"");
	/* every byte counts, in the words and in the tail */
	char buf[19];
	memcpy(buf, "0123456789abcdefXYZ", 19);
	api_etag(buf, 19, a);
	for (int i = 0; i < 19; i++) {
		buf[i] ^= 1;
		api_etag(buf, 19, b);
		CHECK_MSG(strcmp(a, b) != 0, "flipping byte %d left the tag", i);
		buf[i] ^= 1;
	}
	api_etag(buf, 18, b);
	CHECK(strcmp(a, b) != 0);
}

static void test_if_none_match(void)
{
	const char *tag = "\"0123456789abcdef\"";
	CHECK(api_etag_match("\"0123456789abcdef\"", tag));
	CHECK(api_etag_match("W/\"0123456789abcdef\"", tag));
	CHECK(api_etag_match("\"x\", \"0123456789abcdef\"", tag));
	CHECK(api_etag_match("\"x\",W/\"0123456789abcdef\" ", tag));
	CHECK(api_etag_match("*", tag));
	CHECK(!api_etag_match("\"0123456789abcdee\"", tag));
	CHECK(!api_etag_match("\"0123456789abcdef", tag));
	CHECK(!api_etag_match("", tag));
	CHECK(!api_etag_match(NULL, tag));
	CHECK(!api_etag_match("\"0123456789abcdef0\"", tag));
}

/* The hand-written time and integer formats against the C library's. */
static void test_formats(void)
{
	uint64_t x = 88172645463325252ull;          /* xorshift64: a spread of times */
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int64_t ms = 1 + (int64_t)(x % 253402300799999ull);   /* up to 9999-12-31 */
		char got[32], want[64];
		api_time_format(ms, got);
		time_t s = (time_t)(ms / 1000);
		struct tm tm;
		gmtime_r(&s, &tm);
		size_t n = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(want + n, sizeof want - n, ".%03dZ", (int)(ms % 1000));
		if (strcmp(got, want) != 0) {
			CHECK_STR_EQ(got, want);
			break;
		}
	}
	char out[32];
	api_time_format(0, out);
	CHECK_STR_EQ(out, "");
	api_time_format(253402300800000, out);        /* year 10000 */
	CHECK_STR_EQ(out, "");

	const int64_t ints[] = { 0, 7, -7, 10, 1234567890123, INT64_MAX, INT64_MIN };
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		struct api_buf b = { 0 };
		api_buf_json_int(&b, ints[i]);
		char want[32];
		snprintf(want, sizeof want, "%lld", (long long)ints[i]);
		CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
		api_buf_release(&b);
	}
}

int main(void)
{
	CHECK_RUN(test_error_table_matches_docs);
	CHECK_RUN(test_etag);
	CHECK_RUN(test_formats);
	CHECK_RUN(test_if_none_match);
	return check_finish();
}
