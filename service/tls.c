/* service/tls.c - reading tls_cert and tls_key; see tls.h. */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* svc_tls_read for the setting what. */
static char *read_pem(const char *what, const char *path, int is_key, char *err,
                      size_t err_size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(err, err_size, "%s %s: %s", what, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	char *text = NULL;
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, err_size, "%s %s: not a regular file", what, path);
	} else if (is_key && (st.st_mode & 0007)) {
		snprintf(err, err_size, "%s %s: permissions %04o are too open: others may read or "
		         "change the private key (chmod 600 %s, or 640 with larchd's group)", what,
		         path, (unsigned)(st.st_mode & 07777), path);
	} else if (st.st_size == 0 || (size_t)st.st_size > SVC_TLS_FILE_MAX) {
		snprintf(err, err_size, "%s %s: %s", what, path,
		         st.st_size ? "larger than 1 MiB: not a PEM file" : "empty");
	} else if (!(text = malloc((size_t)st.st_size + 1))) {
		snprintf(err, err_size, "%s %s: out of memory", what, path);
	} else {
		size_t got = 0, want = (size_t)st.st_size;
		while (got < want) {
			ssize_t n = read(fd, text + got, want - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				snprintf(err, err_size, "%s %s: %s", what, path,
				         n < 0 ? strerror(errno) : "changed while read");
				free(text);
				text = NULL;
				break;
			}
			got += (size_t)n;
		}
		if (text) {
			text[got] = '\0';
			if (!strstr(text, "-----BEGIN ")) {
				snprintf(err, err_size, "%s %s: not a PEM file (no -----BEGIN line)", what,
				         path);
				free(text);
				text = NULL;
			}
		}
	}
	close(fd);
	return text;
}

char *svc_tls_read(const char *path, int is_key, char *err, size_t err_size)
{
	return read_pem(is_key ? "tls_key" : "tls_cert", path, is_key, err, err_size);
}

/* The certificates in pem: a new list of *n (gnutls_x509_crt_deinit each,
 * gnutls_free the list), or NULL. */
static gnutls_x509_crt_t *parse_certs(const char *pem, unsigned *n)
{
	gnutls_datum_t data = { .data = (unsigned char *)pem, .size = (unsigned)strlen(pem) };
	gnutls_x509_crt_t *crts = NULL;
	*n = 0;
	if (gnutls_x509_crt_list_import2(&crts, n, &data, GNUTLS_X509_FMT_PEM, 0) < 0 || *n == 0)
		return NULL;
	return crts;
}

static void free_certs(gnutls_x509_crt_t *crts, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		gnutls_x509_crt_deinit(crts[i]);
	gnutls_free(crts);
}

/* Whether every user may read path: o+r on it, o+x on each directory above
 * it. 1, or 0 with why filled. */
static int others_can_read(const char *path, char *why, size_t why_size)
{
	char buf[PATH_MAX];
	struct stat st;
	if (!realpath(path, buf) || stat(buf, &st) != 0) {
		snprintf(why, why_size, "%s", strerror(errno));
		return 0;
	}
	if (!(st.st_mode & S_IROTH)) {
		snprintf(why, why_size, "its mode %04o keeps other users out (a certificate is no "
		         "secret: chmod 644)", (unsigned)(st.st_mode & 07777));
		return 0;
	}
	for (char *slash = strrchr(buf, '/'); slash && slash != buf; slash = strrchr(buf, '/')) {
		*slash = '\0';
		if (stat(buf, &st) == 0 && !(st.st_mode & S_IXOTH)) {
			snprintf(why, why_size, "%s above it is closed to other users (mode %04o: "
			         "chmod o+x)", buf, (unsigned)(st.st_mode & 07777));
			return 0;
		}
	}
	return 1;
}

/* path made absolute into out (jobs start in their own directories): 1, or
 * -1 with err. */
static int absolute(const char *path, char *out, size_t out_size, char *err, size_t err_size)
{
	char buf[PATH_MAX];
	if (!realpath(path, buf) || strlen(buf) >= out_size) {
		snprintf(err, err_size, "%s: %s", path, strerror(errno ? errno : ENAMETOOLONG));
		return -1;
	}
	snprintf(out, out_size, "%s", buf);
	return 1;
}

int svc_tls_job_ca(const char *job_ca, const char *cert_path, const char *cert_pem,
                   int others_read, char *out, size_t out_size, char *note, size_t note_size,
                   char *err, size_t err_size)
{
	out[0] = note[0] = '\0';
	char why[PATH_MAX + 128];
	unsigned n;
	gnutls_x509_crt_t *crts;
	if (job_ca) {
		char *pem = read_pem("job_ca", job_ca, 0, err, err_size);
		if (!pem)
			return -1;
		crts = parse_certs(pem, &n);
		free(pem);
		if (!crts) {
			snprintf(err, err_size, "job_ca %s: no PEM certificate GnuTLS can read in it",
			         job_ca);
			return -1;
		}
		free_certs(crts, n);
		if (others_read && !others_can_read(job_ca, why, sizeof why)) {
			snprintf(err, err_size, "job_ca %s: jobs run as their owners and cannot read it: "
			         "%s", job_ca, why);
			return -1;
		}
		return absolute(job_ca, out, out_size, err, err_size);
	}
	if (!cert_pem || !(crts = parse_certs(cert_pem, &n)))
		return 0;   /* plain HTTP; or GnuTLS refuses tls_cert when the server starts */
	int self_signed = gnutls_x509_crt_check_issuer(crts[0], crts[0]) == 1;
	free_certs(crts, n);
	if (!self_signed)
		return 0;
	if (absolute(cert_path, out, out_size, err, err_size) < 0)
		return -1;
	if (others_read && !others_can_read(cert_path, why, sizeof why))
		snprintf(note, note_size, "tls_cert %s is self-signed, so jobs get it as their CA "
		         "file (LARCH_CA), but they run as their owners and cannot read it: %s; until "
		         "then their posts to larchd fail (set job_ca, or make it readable)",
		         cert_path, why);
	return 1;
}
