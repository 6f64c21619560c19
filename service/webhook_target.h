/* service/webhook_target.h - where a webhook may point: its URL, and the
 * webhook_allow setting that keeps users from making larchd call addresses
 * they could not reach themselves (the cluster's internal services).
 *
 * http:// and https:// URLs (webhook_tls.h verifies an https target's
 * certificate against the URL's host name). The host is resolved once per
 * attempt; every address it resolves to must be
 * allowed, and the sender connects to one of exactly those addresses, so a
 * name that resolves elsewhere a moment later (DNS rebinding) changes
 * nothing. webhook_allow is a comma-separated list of
 *   loopback     127.0.0.0/8 and ::1 (the default)
 *   ADDR[/BITS]  an IPv4 or IPv6 address or network (10.1.2.0/24, fd00::/8)
 *   any          every address (only where every address is safe to call)
 */
#ifndef LARCH_SVC_WEBHOOK_TARGET_H
#define LARCH_SVC_WEBHOOK_TARGET_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#define SVC_ALLOW_MAX 32

struct svc_allow_net {
	int family;                      /* AF_INET or AF_INET6; 0: any address */
	unsigned char addr[16];
	int bits;
};

struct svc_allow_list {
	int n;
	struct svc_allow_net net[SVC_ALLOW_MAX];
};

/* Parses a list of networks (webhook_allow, trusted_proxies) into out. 0,
 * or -1 with err naming the bad entry (the caller names the setting). */
int svc_allow_parse(const char *text, struct svc_allow_list *out, char *err, size_t errlen);
/* 1 if addr is in one of the list's networks. */
int svc_allow_has(const struct svc_allow_list *allow, const struct sockaddr *addr);

struct svc_webhook_url {
	int tls;                         /* https:// */
	char host[256];                  /* without brackets for IPv6 */
	char port[8];                    /* "80" (https: "443") when the URL names none */
	char host_header[272];           /* host[:port] as the Host header sends it */
	char path[2048];                 /* "/" when the URL has none; with the query */
};

/* Splits an http:// or https:// URL. 0, or -1 with err ("must start with
 * http:// or https://", "port must be 1 to 65535", ...). */
int svc_webhook_url_parse(const char *url, struct svc_webhook_url *out, char *err,
                          size_t errlen);

/* Resolves u's host (getaddrinfo: may block on DNS) and checks every
 * address against allow. 0 with the first address in *addr, or -1 with err
 * ("resolve HOST: ...", "HOST resolves to 10.0.0.1, which webhook_allow does
 * not allow"). */
int svc_webhook_resolve(const struct svc_webhook_url *u, const struct svc_allow_list *allow,
                        struct sockaddr_storage *addr, socklen_t *addr_len, char *err,
                        size_t errlen);

#endif
