/* tests/unit/test_reporter.c - trainer/reporter.c and reporter_queue.c: the
 * queue (order, wrap-around, dropping the oldest, names), the JSON body (the
 * same text as metrics.jsonl), the environment, the retry policy, and a
 * reporter's life against a port that refuses connections. The posting
 * itself is tested against a real server in tests/integration/test_reporter.py. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "trainer/report.h"
#include "trainer/reporter.h"

static void test_queue_order_wrap_and_drop(void)
{
	struct trn_mqueue q;
	CHECK(trn_mqueue_init(&q, 5) == 0);
	CHECK_INT_EQ(q.cap, 8);
	struct trn_mpoint out[16];
	for (long s = 0; s < 5; s++)
		CHECK_INT_EQ(trn_mqueue_push(&q, s, 100.0 + (double)s, "train/loss", 0.5), 0);
	CHECK_INT_EQ(trn_mqueue_take(&q, out, 3), 3);
	CHECK(out[0].step == 0 && out[2].step == 2 && out[1].time == 101.0);
	/* 2 left; 6 more fill the 8 slots across the end of the ring */
	for (long s = 5; s < 11; s++)
		CHECK_INT_EQ(trn_mqueue_push(&q, s, 0, "train/loss", 0), 0);
	CHECK_INT_EQ(trn_mqueue_count(&q), 8);
	/* full: each push drops the oldest unsent point */
	CHECK_INT_EQ(trn_mqueue_push(&q, 11, 0, "train/loss", 0), 1);
	CHECK_INT_EQ(trn_mqueue_push(&q, 12, 0, "train/loss", 0), 1);
	CHECK_INT_EQ(q.dropped, 2);
	CHECK_INT_EQ(trn_mqueue_take(&q, out, 16), 8);
	for (int i = 0; i < 8; i++)
		CHECK_MSG(out[i].step == 5 + i, "out[%d].step = %ld, want %d", i, out[i].step, 5 + i);
	CHECK_INT_EQ(trn_mqueue_take(&q, out, 16), 0);

	CHECK_INT_EQ(trn_mqueue_push(&q, 13, 0, "x", 0), 0);
	CHECK_INT_EQ(trn_mqueue_clear(&q), 1);
	CHECK_INT_EQ(trn_mqueue_count(&q), 0);
	trn_mqueue_release(&q);
}

static void test_queue_names(void)
{
	struct trn_mqueue q;
	CHECK(trn_mqueue_init(&q, 1024) == 0);
	const char *order[] = { "train/loss", "train/lr", "train/grad_norm", "train/lr",
	                        "val/loss", "train/loss" };
	for (int i = 0; i < 6; i++)
		trn_mqueue_push(&q, i, 0, order[i], 0);
	struct trn_mpoint out[6];
	trn_mqueue_take(&q, out, 6);
	CHECK_INT_EQ(q.n_names, 4);
	for (int i = 0; i < 6; i++)
		CHECK_STR_EQ(q.names[out[i].name], order[i]);
	CHECK(out[1].name == out[3].name && out[0].name == out[5].name);

	/* a copy: the caller's buffer may change afterwards */
	char buf[32] = "eval/custom";
	trn_mqueue_push(&q, 7, 0, buf, 0);
	strcpy(buf, "overwritten");
	trn_mqueue_take(&q, out, 1);
	CHECK_STR_EQ(q.names[out[0].name], "eval/custom");

	char long_name[TRN_MQ_NAME_MAX + 2];
	memset(long_name, 'a', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	CHECK_INT_EQ(trn_mqueue_push(&q, 8, 0, long_name, 0), -1);
	long_name[TRN_MQ_NAME_MAX] = '\0';                 /* exactly the limit */
	CHECK_INT_EQ(trn_mqueue_push(&q, 8, 0, long_name, 0), 0);
	int refused = 0;
	for (int i = 0; i < TRN_MQ_NAMES + 10; i++) {
		char name[16];
		snprintf(name, sizeof name, "m/%d", i);
		refused += trn_mqueue_push(&q, 9, 0, name, 0) < 0;
	}
	CHECK_INT_EQ(q.n_names, TRN_MQ_NAMES);
	CHECK_INT_EQ(refused, 6 + 10);                     /* 6 names were there already */
	CHECK_INT_EQ(trn_mqueue_push(&q, 10, 0, "train/lr", 0), 0);  /* known names still go */
	trn_mqueue_release(&q);
}

static void test_format(void)
{
	struct trn_mqueue q;
	CHECK(trn_mqueue_init(&q, 8) == 0);
	trn_mqueue_push(&q, 120, 1763851234.512, "train/loss", 0.4312);
	trn_mqueue_push(&q, 121, 1763851234.6, "a\"b\\c\n", NAN);
	trn_mqueue_push(&q, 122, 1.0, "x", -INFINITY);
	struct trn_mpoint pts[3];
	trn_mqueue_take(&q, pts, 3);
	char *buf = NULL;
	size_t cap = 0;
	long len = trn_mqueue_format(&q, pts, 3, &buf, &cap);
	const char *want =
		"{\"metrics\":[{\"step\":120,\"time\":1763851234.512,\"name\":\"train/loss\",\"value\":0.4312},"
		"{\"step\":121,\"time\":1763851234.600,\"name\":\"a\\\"b\\\\c\\u000a\",\"value\":null},"
		"{\"step\":122,\"time\":1.000,\"name\":\"x\",\"value\":null}]}";
	CHECK_STR_EQ(buf, want);
	CHECK_INT_EQ(len, strlen(want));
	CHECK_INT_EQ(trn_mqueue_format(&q, pts, 0, &buf, &cap), strlen("{\"metrics\":[]}"));
	CHECK_STR_EQ(buf, "{\"metrics\":[]}");
	free(buf);
	trn_mqueue_release(&q);

	/* a full batch grows the buffer from nothing */
	CHECK(trn_mqueue_init(&q, TRN_REPORT_BATCH) == 0);
	for (long s = 0; s < TRN_REPORT_BATCH; s++)
		trn_mqueue_push(&q, s, 1763851234.0 + (double)s, "train/grad_norm", 1.0 / (double)(s + 1));
	struct trn_mpoint *many = malloc(TRN_REPORT_BATCH * sizeof *many);
	CHECK_INT_EQ(trn_mqueue_take(&q, many, TRN_REPORT_BATCH), TRN_REPORT_BATCH);
	buf = NULL;
	cap = 0;
	len = trn_mqueue_format(&q, many, TRN_REPORT_BATCH, &buf, &cap);
	CHECK(len > 0 && (size_t)len < cap && strlen(buf) == (size_t)len);
	CHECK(strstr(buf, "{\"step\":999,\"time\":1763852233.000,\"name\":\"train/grad_norm\","
	                  "\"value\":0.001}]}") != NULL);
	free(buf);
	free(many);
	trn_mqueue_release(&q);
}

/* What report.c writes to metrics.jsonl and what the reporter posts are
 * the same text, point for point. */
static void test_format_matches_metrics_jsonl(void)
{
	const char *dir = check_tmpdir("reporter");
	struct trn_report rep = { 0 };
	struct trn_err err = { 0 };
	CHECK(trn_report_open(&rep, dir, -1, &err) == 0);
	const double values[] = { 0.4312, 1e-12, -3.25e7, NAN, INFINITY, 2.0 / 3.0 };
	for (int i = 0; i < 6; i++)
		trn_report_metric(&rep, 10 + i, "train/loss", values[i]);
	trn_report_close(&rep);

	char path[4200];
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (!f)
		return;
	struct trn_mqueue q;
	CHECK(trn_mqueue_init(&q, 8) == 0);
	char line[256], *buf = NULL;
	size_t cap = 0;
	for (int i = 0; i < 6 && fgets(line, sizeof line, f); i++) {
		double t = 0;
		CHECK(sscanf(line, "{\"step\":%*d,\"time\":%lf,", &t) == 1);
		trn_mqueue_push(&q, 10 + i, t, "train/loss", values[i]);
		struct trn_mpoint p;
		trn_mqueue_take(&q, &p, 1);
		trn_mqueue_format(&q, &p, 1, &buf, &cap);
		line[strcspn(line, "\n")] = '\0';
		/* the body is {"metrics":[LINE]} */
		size_t n = strlen(buf);
		CHECK(n > 14 && strncmp(buf + 12, line, n - 14) == 0 && strlen(line) == n - 14);
	}
	fclose(f);
	free(buf);
	trn_mqueue_release(&q);
}

static void unset_report_env(void)
{
	unsetenv("LARCH_SERVER_URL");
	unsetenv("LARCH_JOB_ID");
	unsetenv("LARCH_JOB_TOKEN");
	unsetenv("LARCH_REPORT_FLUSH_S");
	unsetenv("LARCH_CA");
}

/* The error trn_reporter_config_env gives for url, id, token and flush
 * (NULL = unset); "" when it accepts them, "none" when it sees no request. */
static const char *config_error(const char *url, const char *id, const char *token,
                                const char *flush, struct trn_reporter_config *cfg)
{
	static struct trn_err err;
	unset_report_env();
	if (url)
		setenv("LARCH_SERVER_URL", url, 1);
	if (id)
		setenv("LARCH_JOB_ID", id, 1);
	if (token)
		setenv("LARCH_JOB_TOKEN", token, 1);
	if (flush)
		setenv("LARCH_REPORT_FLUSH_S", flush, 1);
	trn_err_clear(&err);
	int rc = trn_reporter_config_env(cfg, &err);
	unset_report_env();
	CHECK((rc < 0) == err.set);
	return rc < 0 ? err.text : rc == 0 ? "none" : "";
}

static void test_config_from_env(void)
{
	struct trn_reporter_config cfg;
	CHECK_STR_EQ(config_error(NULL, NULL, NULL, NULL, &cfg), "none");
	CHECK_STR_EQ(config_error("", "", "", "5", &cfg), "none");     /* empty counts as unset */
	CHECK_STR_EQ(config_error("http://larchd:8080//", "j-000001", "tok", NULL, &cfg), "");
	CHECK_STR_EQ(cfg.metrics_url, "http://larchd:8080/v1/jobs/j-000001/metrics");
	CHECK_STR_EQ(cfg.result_url, "http://larchd:8080/v1/jobs/j-000001/result");
	CHECK_STR_EQ(cfg.auth_header, "Authorization: Bearer tok");
	CHECK(cfg.flush_s == TRN_REPORT_FLUSH_S);
	CHECK_STR_EQ(config_error("https://h/base", "j.1_x", "t", "0.25", &cfg), "");
	CHECK_STR_EQ(cfg.metrics_url, "https://h/base/v1/jobs/j.1_x/metrics");
	CHECK(cfg.flush_s == 0.25);

	CHECK_STR_EQ(config_error("http://h", NULL, NULL, NULL, &cfg),
	             "LARCH_SERVER_URL, LARCH_JOB_ID and LARCH_JOB_TOKEN: set all three to report "
	             "to larchd, or none (missing LARCH_JOB_ID, LARCH_JOB_TOKEN)");
	CHECK(strstr(config_error(NULL, "j", "t", NULL, &cfg), "(missing LARCH_SERVER_URL)"));
	CHECK(strstr(config_error("http://h", "j", "", NULL, &cfg), "(missing LARCH_JOB_TOKEN)"));
	CHECK(strstr(config_error("ftp://h", "j", "t", NULL, &cfg),
	             "LARCH_SERVER_URL: must be an http:// or https:// URL"));
	CHECK(strstr(config_error("http://h /x", "j", "t", NULL, &cfg), "LARCH_SERVER_URL:"));
	CHECK(strstr(config_error("http://h", "a/b", "t", NULL, &cfg), "LARCH_JOB_ID: must be"));
	CHECK(strstr(config_error("http://h", "..", "t", NULL, &cfg), "LARCH_JOB_ID: must be"));
	CHECK(strstr(config_error("http://h", "j", "a\r\nX-Evil: 1", NULL, &cfg),
	             "LARCH_JOB_TOKEN: must be"));
	CHECK(strstr(config_error("http://h", "j", "t", "-1", &cfg), "LARCH_REPORT_FLUSH_S: must be"));
	CHECK(strstr(config_error("http://h", "j", "t", "nan", &cfg), "LARCH_REPORT_FLUSH_S:"));
	CHECK(strstr(config_error("http://h", "j", "t", "10s", &cfg), "LARCH_REPORT_FLUSH_S:"));
}

/* LARCH_CA: the CA file handed to libcurl, "" (the system's store) unset. */
static void test_config_ca_file(void)
{
	struct trn_reporter_config cfg;
	CHECK_STR_EQ(config_error("https://h", "j", "t", NULL, &cfg), "");
	CHECK_STR_EQ(cfg.ca_file, "");
	struct trn_err err = { 0 };
	setenv("LARCH_SERVER_URL", "https://h", 1);
	setenv("LARCH_JOB_ID", "j", 1);
	setenv("LARCH_JOB_TOKEN", "t", 1);
	setenv("LARCH_CA", "/etc/larch/tls/ca.pem", 1);
	CHECK_INT_EQ(trn_reporter_config_env(&cfg, &err), 1);
	CHECK_STR_EQ(cfg.ca_file, "/etc/larch/tls/ca.pem");
	char *path = malloc(TRN_REPORT_CA_MAX + 1);
	memset(path, 'a', TRN_REPORT_CA_MAX);
	path[TRN_REPORT_CA_MAX] = '\0';
	setenv("LARCH_CA", path, 1);
	CHECK_INT_EQ(trn_reporter_config_env(&cfg, &err), -1);
	CHECK(strstr(err.text, "LARCH_CA: must be a file name of at most") != NULL);
	free(path);
	unset_report_env();
}

static void test_retry_policy(void)
{
	static const struct { long status; enum trn_post_outcome want; } cases[] = {
		{ 200, TRN_POST_OK }, { 204, TRN_POST_OK }, { 408, TRN_POST_RETRY },
		{ 429, TRN_POST_RETRY }, { 500, TRN_POST_RETRY }, { 503, TRN_POST_RETRY },
		{ 400, TRN_POST_GIVE_UP }, { 401, TRN_POST_GIVE_UP }, { 403, TRN_POST_GIVE_UP },
		{ 404, TRN_POST_GIVE_UP }, { 409, TRN_POST_GIVE_UP }, { 413, TRN_POST_GIVE_UP },
		{ 301, TRN_POST_GIVE_UP }, { 0, TRN_POST_GIVE_UP },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		CHECK_MSG(trn_reporter_http_outcome(cases[i].status) == cases[i].want, "status %ld",
		          cases[i].status);

	CHECK(trn_reporter_backoff(0, 0.0) == 0.5);
	CHECK(trn_reporter_backoff(0, 0.999) < 1.0);
	CHECK(trn_reporter_backoff(1, 0.0) == 1.0 && trn_reporter_backoff(3, 0.0) == 4.0);
	double prev_max = 0;
	for (int a = 0; a < 100; a++) {
		double lo = trn_reporter_backoff(a, 0.0), hi = trn_reporter_backoff(a, 0.999999);
		CHECK_MSG(lo >= 0.5 && hi < 30.0 && hi >= prev_max, "attempt %d: [%g, %g]", a, lo, hi);
		prev_max = hi;
	}
	CHECK(trn_reporter_backoff(1000000, 0.5) == 22.5);
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A reporter whose server refuses every connection (a bound socket that
 * does not listen): more points than the queue holds, then the end. It must
 * keep to its deadline and free everything (the ASan build checks). */
static void test_life_against_a_refusing_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
	      getsockname(s, (struct sockaddr *)&a, &alen) == 0);
	struct trn_reporter_config cfg = { .flush_s = 0.3 };
	snprintf(cfg.metrics_url, sizeof cfg.metrics_url, "http://127.0.0.1:%d/v1/jobs/j/metrics",
	         ntohs(a.sin_port));
	snprintf(cfg.result_url, sizeof cfg.result_url, "http://127.0.0.1:%d/v1/jobs/j/result",
	         ntohs(a.sin_port));
	snprintf(cfg.auth_header, sizeof cfg.auth_header, "Authorization: Bearer t");

	struct trn_reporter *rp = trn_reporter_start(&cfg);
	for (long i = 0; i < TRN_REPORT_QUEUE + 5000; i++)
		trn_reporter_metric(rp, i / 3, 1.0, i % 3 ? "train/lr" : "train/loss", 0.5);
	double t0 = mono();
	trn_reporter_finish(rp, "{\"status\": \"completed\"}\n");
	double took = mono() - t0;
	CHECK_MSG(took < cfg.flush_s + 5.0, "finish took %.1fs with a %.1fs deadline", took,
	          cfg.flush_s);
	trn_reporter_finish(NULL, NULL);
	trn_reporter_metric(NULL, 0, 0, "x", 0);
	close(s);
}

int main(void)
{
	CHECK_RUN(test_queue_order_wrap_and_drop);
	CHECK_RUN(test_queue_names);
	CHECK_RUN(test_format);
	CHECK_RUN(test_format_matches_metrics_jsonl);
	CHECK_RUN(test_config_from_env);
	CHECK_RUN(test_config_ca_file);
	CHECK_RUN(test_retry_policy);
	CHECK_RUN(test_life_against_a_refusing_port);
	return check_finish();
}
