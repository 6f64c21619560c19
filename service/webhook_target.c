/* service/webhook_target.c - webhook URLs and webhook_allow; see webhook_target.h. */
#include "webhook_target.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

static int parse_net(const char *s, struct svc_allow_net *n)
{
	memset(n, 0, sizeof *n);
	if (strcmp(s, "any") == 0)
		return 0;
	char addr[64];
	const char *slash = strchr(s, '/');
	size_t len = slash ? (size_t)(slash - s) : strlen(s);
	if (len == 0 || len >= sizeof addr)
		return -1;
	memcpy(addr, s, len);
	addr[len] = '\0';
	int max;
	if (inet_pton(AF_INET, addr, n->addr) == 1) {
		n->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, addr, n->addr) == 1) {
		n->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	n->bits = max;
	if (slash) {
		char *end;
		long b = strtol(slash + 1, &end, 10);
		if (!isdigit((unsigned char)slash[1]) || *end || b < 0 || b > max)
			return -1;
		n->bits = (int)b;
	}
	return 0;
}

int svc_allow_parse(const char *text, struct svc_allow_list *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	char buf[4096];
	if (strlen(text) >= sizeof buf) {
		svc_msgf(err, errlen, "longer than %zu bytes", sizeof buf - 1);
		return -1;
	}
	snprintf(buf, sizeof buf, "%s", text);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*tok))
			tok++;
		char *end = tok + strlen(tok);
		while (end > tok && isspace((unsigned char)end[-1]))
			*--end = '\0';
		if (!*tok)
			continue;
		if (out->n + 2 > SVC_ALLOW_MAX) {
			svc_msgf(err, errlen, "more than %d entries", SVC_ALLOW_MAX - 1);
			return -1;
		}
		if (strcmp(tok, "loopback") == 0) {
			parse_net("127.0.0.0/8", &out->net[out->n++]);
			parse_net("::1", &out->net[out->n++]);
		} else if (parse_net(tok, &out->net[out->n]) == 0) {
			out->n++;
		} else {
			svc_msgf(err, errlen, "\"%s\" is not loopback, any, or an IP "
			         "address or network (ADDR/BITS)", tok);
			return -1;
		}
	}
	return 0;
}

static int in_net(const struct svc_allow_net *n, int family, const unsigned char *a)
{
	if (!n->family)
		return 1;
	if (n->family != family)
		return 0;
	int full = n->bits / 8, rest = n->bits % 8;
	if (memcmp(n->addr, a, (size_t)full) != 0)
		return 0;
	if (rest) {
		unsigned char mask = (unsigned char)(0xff << (8 - rest));
		if ((n->addr[full] & mask) != (a[full] & mask))
			return 0;
	}
	return 1;
}

int svc_allow_has(const struct svc_allow_list *allow, const struct sockaddr *addr)
{
	int family = addr->sa_family;
	unsigned char a[16];
	if (family == AF_INET) {
		memcpy(a, &((const struct sockaddr_in *)addr)->sin_addr, 4);
	} else if (family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a6)) {   /* ::ffff:10.0.0.1 is 10.0.0.1 */
			family = AF_INET;
			memcpy(a, a6->s6_addr + 12, 4);
		} else {
			memcpy(a, a6->s6_addr, 16);
		}
	} else {
		return 0;
	}
	for (int i = 0; i < allow->n; i++)
		if (in_net(&allow->net[i], family, a))
			return 1;
	return 0;
}

int svc_webhook_url_parse(const char *url, struct svc_webhook_url *out, char *err,
                          size_t errlen)
{
	memset(out, 0, sizeof *out);
	size_t scheme_len;
	if (strncasecmp(url, "https://", 8) == 0) {
		out->tls = 1;
		scheme_len = 8;
	} else if (strncasecmp(url, "http://", 7) == 0) {
		scheme_len = 7;
	} else {
		svc_msgf(err, errlen, "url: must start with http:// or https://");
		return -1;
	}
	for (const char *p = url; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f) {
			svc_msgf(err, errlen, "url: spaces, control and non-ASCII characters must be "
			         "percent-encoded");
			return -1;
		}
	const char *auth = url + scheme_len;
	size_t alen = strcspn(auth, "/?#");
	const char *rest = auth + alen;
	if (memchr(auth, '@', alen)) {
		svc_msgf(err, errlen, "url: credentials in the URL are not supported (the secret "
		         "signs each delivery)");
		return -1;
	}
	const char *host = auth, *port = NULL;
	size_t hlen;
	if (*auth == '[') {
		const char *close = memchr(auth, ']', alen);
		if (!close) {
			svc_msgf(err, errlen, "url: unclosed [ in the host");
			return -1;
		}
		host = auth + 1;
		hlen = (size_t)(close - host);
		if (close + 1 < rest) {
			if (close[1] != ':') {
				svc_msgf(err, errlen, "url: bad host");
				return -1;
			}
			port = close + 2;
		}
	} else {
		const char *colon = memchr(auth, ':', alen);
		hlen = colon ? (size_t)(colon - auth) : alen;
		if (colon)
			port = colon + 1;
	}
	if (hlen == 0 || hlen >= sizeof out->host) {
		svc_msgf(err, errlen, "url: %s host", hlen ? "too long a" : "no");
		return -1;
	}
	memcpy(out->host, host, hlen);
	for (size_t i = 0; i < hlen; i++)
		if (!isalnum((unsigned char)host[i]) && !strchr(".-_:%", host[i])) {
			svc_msgf(err, errlen, "url: bad host");
			return -1;
		}
	if (port) {
		size_t plen = (size_t)(rest - port);
		long v = 0;
		for (size_t i = 0; i < plen; i++) {
			if (!isdigit((unsigned char)port[i]) || i >= 5) {
				plen = 0;
				break;
			}
			v = v * 10 + (port[i] - '0');
		}
		if (plen == 0 || v < 1 || v > 65535) {
			svc_msgf(err, errlen, "url: port must be 1 to 65535");
			return -1;
		}
		snprintf(out->port, sizeof out->port, "%ld", v);
	} else {
		snprintf(out->port, sizeof out->port, "%s", out->tls ? "443" : "80");
	}
	size_t plen = strcspn(rest, "#");   /* the fragment stays with the client */
	if (plen + 2 > sizeof out->path) {
		svc_msgf(err, errlen, "url: too long");
		return -1;
	}
	snprintf(out->path, sizeof out->path, "%s%.*s", *rest == '/' ? "" : "/", (int)plen, rest);
	snprintf(out->host_header, sizeof out->host_header, "%s%.*s%s%s%s",
	         strchr(out->host, ':') ? "[" : "", (int)hlen, host,
	         strchr(out->host, ':') ? "]" : "", port ? ":" : "", port ? out->port : "");
	return 0;
}

int svc_webhook_resolve(const struct svc_webhook_url *u, const struct svc_allow_list *allow,
                        struct sockaddr_storage *addr, socklen_t *addr_len, char *err,
                        size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_ADDRCONFIG }, *res = NULL;
	int rc = getaddrinfo(u->host, u->port, &hints, &res);
	if (rc == EAI_NONAME || rc == EAI_ADDRFAMILY || rc == EAI_NODATA || !res) {
		/* AI_ADDRCONFIG hides ::1 where no interface has IPv6 but loopback */
		hints.ai_flags = 0;
		if (res)
			freeaddrinfo(res);
		res = NULL;
		rc = getaddrinfo(u->host, u->port, &hints, &res);
	}
	if (rc != 0 || !res) {
		svc_msgf(err, errlen, "resolve %s: %s", u->host, rc ? gai_strerror(rc) : "no address");
		return -1;
	}
	int ok = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (!svc_allow_has(allow, ai->ai_addr)) {
			char text[INET6_ADDRSTRLEN] = "?";
			getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, NULL, 0,
			            NI_NUMERICHOST);
			svc_msgf(err, errlen, "%s resolves to %s, which webhook_allow does not allow",
			         u->host, text);
			freeaddrinfo(res);
			return -1;
		}
		if (!ok && ai->ai_addrlen <= sizeof *addr) {
			memcpy(addr, ai->ai_addr, ai->ai_addrlen);
			*addr_len = ai->ai_addrlen;
			ok = 1;
		}
	}
	freeaddrinfo(res);
	if (!ok) {
		svc_msgf(err, errlen, "resolve %s: no address", u->host);
		return -1;
	}
	return 0;
}
