/* service/webhook_tls.c - TLS for https:// webhook targets; see webhook_tls.h. */
#include "webhook_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct svc_webhook_tls {
	gnutls_certificate_credentials_t cred;
};

struct svc_tls_conn {
	gnutls_session_t session;
	char host[256];
};

struct svc_webhook_tls *svc_webhook_tls_new(const char *ca_file, char *err, size_t errlen)
{
	struct svc_webhook_tls *t = calloc(1, sizeof *t);
	if (!t) {
		svc_msgf(err, errlen, "webhooks: out of memory");
		return NULL;
	}
	int rc = gnutls_certificate_allocate_credentials(&t->cred);
	if (rc < 0) {
		svc_msgf(err, errlen, "webhooks: tls credentials: %s", gnutls_strerror(rc));
		free(t);
		return NULL;
	}
	/* none found is no error of ours: webhook_ca may be all there is */
	rc = gnutls_certificate_set_x509_system_trust(t->cred);
	if (rc <= 0 && !(ca_file && *ca_file))
		svc_log(SVC_LOG_WARN, "webhooks: no trusted certificates in the system store (%s): "
		        "https:// deliveries will fail unless webhook_ca is set",
		        rc < 0 ? gnutls_strerror(rc) : "empty");
	if (ca_file && *ca_file) {
		/* GnuTLS says only "error in file" for an unreadable one */
		if (access(ca_file, R_OK) != 0) {
			svc_msgf(err, errlen, "webhook_ca %s: %s", ca_file, strerror(errno));
			goto fail;
		}
		rc = gnutls_certificate_set_x509_trust_file(t->cred, ca_file, GNUTLS_X509_FMT_PEM);
		if (rc <= 0) {
			svc_msgf(err, errlen, "webhook_ca %s: %s", ca_file,
			         rc < 0 ? gnutls_strerror(rc) : "no PEM certificate in it");
			goto fail;
		}
	}
	return t;
fail:
	gnutls_certificate_free_credentials(t->cred);
	free(t);
	return NULL;
}

void svc_webhook_tls_free(struct svc_webhook_tls *t)
{
	if (!t)
		return;
	gnutls_certificate_free_credentials(t->cred);
	free(t);
}

struct svc_tls_conn *svc_tls_conn_new(struct svc_webhook_tls *t, int fd, const char *host,
                                      char *err, size_t errlen)
{
	struct svc_tls_conn *c = calloc(1, sizeof *c);
	if (!c) {
		svc_msgf(err, errlen, "tls: out of memory");
		return NULL;
	}
	snprintf(c->host, sizeof c->host, "%s", host);
	int rc = gnutls_init(&c->session, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
	if (rc < 0) {
		svc_msgf(err, errlen, "tls: %s", gnutls_strerror(rc));
		free(c);
		return NULL;
	}
	/* SNI names a host, never an address (RFC 6066) */
	unsigned char ip[16];
	int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	if ((rc = gnutls_set_default_priority(c->session)) < 0 ||
	    (rc = gnutls_credentials_set(c->session, GNUTLS_CRD_CERTIFICATE, t->cred)) < 0 ||
	    (!is_ip && (rc = gnutls_server_name_set(c->session, GNUTLS_NAME_DNS, host,
	                                            strlen(host))) < 0)) {
		svc_msgf(err, errlen, "tls: %s", gnutls_strerror(rc));
		svc_tls_conn_free(c);
		return NULL;
	}
	/* the chain to a trusted certificate, and host (a name or an address) in it */
	gnutls_session_set_verify_cert(c->session, c->host, 0);
	gnutls_transport_set_int(c->session, fd);
	return c;
}

void svc_tls_conn_free(struct svc_tls_conn *c)
{
	if (!c)
		return;
	gnutls_deinit(c->session);
	free(c);
}

/* Why the certificate was refused, from GnuTLS's verification status. */
static void verify_error(struct svc_tls_conn *c, char *err, size_t errlen)
{
	unsigned st = gnutls_session_get_verify_cert_status(c->session);
	static const struct { unsigned flag; const char *why; } reasons[] = {
		{ GNUTLS_CERT_SIGNER_NOT_FOUND, "its issuer is not trusted (not in the system's "
		  "certificates or webhook_ca)" },
		{ GNUTLS_CERT_SIGNER_NOT_CA, "its issuer is not a CA" },
		{ GNUTLS_CERT_EXPIRED, "it has expired" },
		{ GNUTLS_CERT_NOT_ACTIVATED, "it is not valid yet" },
		{ GNUTLS_CERT_REVOKED, "it is revoked" },
		{ GNUTLS_CERT_SIGNATURE_FAILURE, "its signature does not verify" },
		{ GNUTLS_CERT_INSECURE_ALGORITHM, "it is signed with an insecure algorithm" },
		{ GNUTLS_CERT_SIGNER_CONSTRAINTS_FAILURE, "its issuer's constraints forbid it" },
		{ GNUTLS_CERT_PURPOSE_MISMATCH, "it is not for TLS servers" },
	};
	char why[384] = "";
	size_t n = 0;
	if (st & GNUTLS_CERT_UNEXPECTED_OWNER)
		n += (size_t)snprintf(why, sizeof why, "it does not name %s", c->host);
	for (size_t i = 0; i < sizeof reasons / sizeof reasons[0] && n < sizeof why; i++)
		if (st & reasons[i].flag)
			n += (size_t)snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "",
			                      reasons[i].why);
	if (!why[0]) {
		gnutls_datum_t text = { 0 };
		if (gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &text, 0) == 0) {
			snprintf(why, sizeof why, "%s", (const char *)text.data);
			gnutls_free(text.data);
		} else {
			snprintf(why, sizeof why, "status 0x%x", st);
		}
	}
	svc_msgf(err, errlen, "tls: the certificate of %s is not accepted: %s", c->host, why);
}

/* A GnuTLS result of a non-blocking call: a WANT, or an error into err. */
static int want_or_error(struct svc_tls_conn *c, int rc, const char *what, char *err,
                         size_t errlen)
{
	if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
		return gnutls_record_get_direction(c->session) ? SVC_TLS_WANT_WRITE : SVC_TLS_WANT_READ;
	int sys = errno;
	if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
		verify_error(c, err, errlen);
		return SVC_TLS_ERROR;
	}
	/* GnuTLS's sentences lose their period; a socket's error says which */
	char text[160];
	snprintf(text, sizeof text, "%s", gnutls_strerror(rc));
	size_t n = strlen(text);
	if (n && text[n - 1] == '.')
		text[n - 1] = '\0';
	if ((rc == GNUTLS_E_PULL_ERROR || rc == GNUTLS_E_PUSH_ERROR) && sys)
		svc_msgf(err, errlen, "tls %s: %s (%s)", what, text, strerror(sys));
	else
		svc_msgf(err, errlen, "tls %s: %s", what, text);
	return SVC_TLS_ERROR;
}

int svc_tls_handshake(struct svc_tls_conn *c, char *err, size_t errlen)
{
	int rc;
	do
		rc = gnutls_handshake(c->session);
	while (rc < 0 && rc != GNUTLS_E_AGAIN && !gnutls_error_is_fatal(rc));
	return rc == 0 ? 0 : want_or_error(c, rc, "handshake", err, errlen);
}

ssize_t svc_tls_send(struct svc_tls_conn *c, const void *buf, size_t len, char *err,
                     size_t errlen)
{
	ssize_t n = gnutls_record_send(c->session, buf, len);
	return n >= 0 ? n : want_or_error(c, (int)n, "send", err, errlen);
}

ssize_t svc_tls_recv(struct svc_tls_conn *c, void *buf, size_t len, char *err, size_t errlen)
{
	ssize_t n = gnutls_record_recv(c->session, buf, len);
	if (n == GNUTLS_E_PREMATURE_TERMINATION)
		return 0;   /* closed without close_notify: the same to a reader of one line */
	return n >= 0 ? n : want_or_error(c, (int)n, "receive", err, errlen);
}
