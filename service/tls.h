/* service/tls.h - the certificate and key larchd serves HTTPS with
 * (tls_cert, tls_key), read once at start for libmicrohttpd's GnuTLS
 * (server.h takes them as PEM text), and the CA file jobs trust it with
 * (job_ca).
 *
 * The key file must be a regular file that others cannot read or write
 * (mode o-rwx): like ssh with a private key, larchd refuses one that is,
 * rather than serve with a secret that may have leaked. Its group may read
 * it (root:larchd 0640 is a usual install). GnuTLS checks the PEM itself
 * when the server starts. A new certificate takes a restart (SIGHUP does
 * not reread the files).
 */
#ifndef LARCH_SERVICE_TLS_H
#define LARCH_SERVICE_TLS_H

#include <stddef.h>

#define SVC_TLS_FILE_MAX (1u << 20)   /* a PEM file of more bytes is refused */

/* Reads a PEM file: the key's (is_key: the permission check above) or the
 * certificate's. Returns a new NUL-terminated string (free it), or NULL
 * with err naming the setting and the file ("tls_key /etc/larch/key.pem:
 * permissions 0644 are too open ..."). */
char *svc_tls_read(const char *path, int is_key, char *err, size_t err_size);

/* The CA file jobs verify larchd's certificate with (LARCH_CA): job_ca when
 * set, which must hold a PEM certificate and, when others_read (jobs run as
 * their owners), be readable by every user (o+r, o+x on the directories
 * above it); else cert_path when cert_pem (tls_cert's text, NULL for plain
 * HTTP) starts with a self-signed certificate, which nothing else could
 * vouch for (note says so when others cannot read it); else none: the
 * nodes' system CA store. Returns 1 with the path in out, 0 for none, or
 * -1 with err naming job_ca. All strings borrowed. */
int svc_tls_job_ca(const char *job_ca, const char *cert_path, const char *cert_pem,
                   int others_read, char *out, size_t out_size, char *note, size_t note_size,
                   char *err, size_t err_size);

#endif
