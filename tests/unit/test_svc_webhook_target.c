/* tests/unit/test_svc_webhook_target.c - service/webhook_target.c: the
 * webhook_allow list, webhook URLs, and the resolved address's check. */
#include <arpa/inet.h>
#include <string.h>

#include "check.h"
#include "service/webhook_target.h"

static int allowed(const struct svc_allow_list *l, const char *addr)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1)
		a4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1)
		a6->sin6_family = AF_INET6;
	else
		return -1;
	return svc_allow_has(l, (struct sockaddr *)&ss);
}

static void test_allow_list(void)
{
	struct svc_allow_list l;
	char err[256];
	CHECK_INT_EQ(svc_allow_parse("loopback", &l, err, sizeof err), 0);
	CHECK_INT_EQ(allowed(&l, "127.0.0.1"), 1);
	CHECK_INT_EQ(allowed(&l, "127.255.0.9"), 1);
	CHECK_INT_EQ(allowed(&l, "::1"), 1);
	CHECK_INT_EQ(allowed(&l, "::ffff:127.0.0.1"), 1);   /* v4-mapped is the v4 address */
	CHECK_INT_EQ(allowed(&l, "::ffff:10.0.0.1"), 0);
	CHECK_INT_EQ(allowed(&l, "10.0.0.1"), 0);
	CHECK_INT_EQ(allowed(&l, "169.254.169.254"), 0);
	CHECK_INT_EQ(allowed(&l, "128.0.0.1"), 0);
	CHECK_INT_EQ(svc_allow_parse(" loopback , 10.1.2.0/23,fd00::/8 ", &l, err, sizeof err), 0);
	CHECK_INT_EQ(allowed(&l, "10.1.3.255"), 1);
	CHECK_INT_EQ(allowed(&l, "10.1.4.0"), 0);
	CHECK_INT_EQ(allowed(&l, "fd12::1"), 1);
	CHECK_INT_EQ(allowed(&l, "fe80::1"), 0);
	CHECK_INT_EQ(svc_allow_parse("", &l, err, sizeof err), 0);
	CHECK_INT_EQ(allowed(&l, "127.0.0.1"), 0);
	CHECK_INT_EQ(svc_allow_parse("any", &l, err, sizeof err), 0);
	CHECK_INT_EQ(allowed(&l, "8.8.8.8"), 1);
	CHECK_INT_EQ(svc_allow_parse("10.0.0.0/33", &l, err, sizeof err), -1);
	CHECK(strstr(err, "\"10.0.0.0/33\"") != NULL);
	CHECK_INT_EQ(svc_allow_parse("example.com", &l, err, sizeof err), -1);
	CHECK_INT_EQ(svc_allow_parse("10.0.0.0/", &l, err, sizeof err), -1);
}

static void test_urls(void)
{
	struct svc_webhook_url u;
	char err[256];
	CHECK_INT_EQ(svc_webhook_url_parse("http://127.0.0.1:8000/a/b?c=1#frag", &u, err,
	                                   sizeof err), 0);
	CHECK_STR_EQ(u.host, "127.0.0.1");
	CHECK_STR_EQ(u.port, "8000");
	CHECK_STR_EQ(u.path, "/a/b?c=1");
	CHECK_STR_EQ(u.host_header, "127.0.0.1:8000");
	CHECK_INT_EQ(svc_webhook_url_parse("HTTP://[::1]/", &u, err, sizeof err), 0);
	CHECK_STR_EQ(u.host, "::1");
	CHECK_STR_EQ(u.port, "80");
	CHECK_STR_EQ(u.host_header, "[::1]");
	CHECK_INT_EQ(svc_webhook_url_parse("http://localhost?x", &u, err, sizeof err), 0);
	CHECK_STR_EQ(u.path, "/?x");
	CHECK_INT_EQ(u.tls, 0);
	CHECK_INT_EQ(svc_webhook_url_parse("https://hooks.example.org/in", &u, err, sizeof err), 0);
	CHECK_INT_EQ(u.tls, 1);
	CHECK_STR_EQ(u.host, "hooks.example.org");
	CHECK_STR_EQ(u.port, "443");
	CHECK_STR_EQ(u.host_header, "hooks.example.org");
	CHECK_STR_EQ(u.path, "/in");
	CHECK_INT_EQ(svc_webhook_url_parse("HTTPS://[::1]:8443", &u, err, sizeof err), 0);
	CHECK_INT_EQ(u.tls, 1);
	CHECK_STR_EQ(u.port, "8443");
	CHECK_STR_EQ(u.host_header, "[::1]:8443");
	static const char *const bad[][2] = {
		{ "ftp://127.0.0.1/", "must start with http:// or https://" },
		{ "https://u:p@127.0.0.1/", "credentials" },
		{ "https://127.0.0.1:0/", "port must be" },
		{ "http://u:p@127.0.0.1/", "credentials" },
		{ "http://127.0.0.1:0/", "port must be" },
		{ "http://127.0.0.1:65536/", "port must be" },
		{ "http://127.0.0.1:8a/", "port must be" },
		{ "http:///x", "no host" },
		{ "http://a b/", "percent-encoded" },
		{ "http://127.0.0.1/\r\nX-Evil: 1", "percent-encoded" },
		{ "http://[::1/", "unclosed" },
		{ "http://ho$t/", "bad host" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK_MSG(svc_webhook_url_parse(bad[i][0], &u, err, sizeof err) == -1 &&
		          strstr(err, bad[i][1]), "%s: got \"%s\"", bad[i][0], err);
	}
}

static void test_resolve_checks_every_address(void)
{
	struct svc_allow_list l;
	char err[256];
	struct svc_webhook_url u;
	struct sockaddr_storage ss;
	socklen_t len;
	CHECK_INT_EQ(svc_allow_parse("loopback", &l, err, sizeof err), 0);
	CHECK_INT_EQ(svc_webhook_url_parse("http://127.0.0.1:9/", &u, err, sizeof err), 0);
	CHECK_INT_EQ(svc_webhook_resolve(&u, &l, &ss, &len, err, sizeof err), 0);
	CHECK_INT_EQ(ss.ss_family, AF_INET);
	CHECK_INT_EQ(svc_webhook_url_parse("http://10.9.8.7/", &u, err, sizeof err), 0);
	CHECK_INT_EQ(svc_webhook_resolve(&u, &l, &ss, &len, err, sizeof err), -1);
	CHECK(strstr(err, "10.9.8.7, which webhook_allow does not allow") != NULL);
	CHECK_INT_EQ(svc_allow_parse("10.0.0.0/8", &l, err, sizeof err), 0);
	CHECK_INT_EQ(svc_webhook_url_parse("http://localhost/", &u, err, sizeof err), 0);
	CHECK_INT_EQ(svc_webhook_resolve(&u, &l, &ss, &len, err, sizeof err), -1);
}

int main(void)
{
	CHECK_RUN(test_allow_list);
	CHECK_RUN(test_urls);
	CHECK_RUN(test_resolve_checks_every_address);
	return check_finish();
}
