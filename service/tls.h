/* service/tls.h - the certificate and key larchd serves HTTPS with
 * (tls_cert, tls_key), read once at start for libmicrohttpd's GnuTLS
 * (server.h takes them as PEM text).
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

#endif
