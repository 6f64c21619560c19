/* service/webhook_tls.h - the TLS client of https:// webhook targets,
 * through GnuTLS (the library libmicrohttpd serves HTTPS with; larchd links
 * no libcurl).
 *
 * The sender keeps one set of credentials: the system's trusted
 * certificates plus, optionally, the PEM certificates of webhook_ca (a
 * private CA). A session runs over a socket the sender has connected itself
 * to an address webhook_allow let through (webhook_target.h): the URL's host
 * name goes only into SNI (not for an IP address) and into the certificate
 * check, so no second lookup decides where the bytes go. The handshake
 * fails unless the chain ends at a trusted certificate and names the host.
 *
 * The socket is non-blocking and the caller waits: every call returns at
 * once, SVC_TLS_WANT_READ or SVC_TLS_WANT_WRITE saying what to poll for
 * before calling again with the same arguments.
 */
#ifndef LARCH_SVC_WEBHOOK_TLS_H
#define LARCH_SVC_WEBHOOK_TLS_H

#include <stddef.h>
#include <sys/types.h>

enum { SVC_TLS_ERROR = -1, SVC_TLS_WANT_READ = -2, SVC_TLS_WANT_WRITE = -3 };

struct svc_webhook_tls;

/* Loads the system's trusted certificates and those of ca_file (NULL or ""
 * for none). Returns new credentials (svc_webhook_tls_free), or NULL with
 * err naming the file ("webhook_ca FILE: no PEM certificate in it"). */
struct svc_webhook_tls *svc_webhook_tls_new(const char *ca_file, char *err, size_t errlen);
/* Accepts NULL. After every session made with it is freed. */
void svc_webhook_tls_free(struct svc_webhook_tls *t);

struct svc_tls_conn;

/* A client session on the connected socket fd (borrowed: the caller closes
 * it after svc_tls_conn_free), verifying the certificate against host.
 * NULL with err when GnuTLS cannot set one up. */
struct svc_tls_conn *svc_tls_conn_new(struct svc_webhook_tls *t, int fd, const char *host,
                                      char *err, size_t errlen);
/* Accepts NULL. Sends no close_notify: the sender reads the answer's
 * status line and hangs up. */
void svc_tls_conn_free(struct svc_tls_conn *c);

/* The handshake: 0 once done (the certificate accepted), a WANT, or
 * SVC_TLS_ERROR with err ("certificate not accepted: its issuer is not
 * trusted (...)", "the certificate does not name HOST"). */
int svc_tls_handshake(struct svc_tls_conn *c, char *err, size_t errlen);
/* Bytes sent (> 0), a WANT, or SVC_TLS_ERROR with err. */
ssize_t svc_tls_send(struct svc_tls_conn *c, const void *buf, size_t len, char *err,
                     size_t errlen);
/* Bytes received (> 0), 0 when the peer closed, a WANT, or SVC_TLS_ERROR. */
ssize_t svc_tls_recv(struct svc_tls_conn *c, void *buf, size_t len, char *err, size_t errlen);

#endif
