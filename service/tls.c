/* service/tls.c - reading tls_cert and tls_key; see tls.h. */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *svc_tls_read(const char *path, int is_key, char *err, size_t err_size)
{
	const char *what = is_key ? "tls_key" : "tls_cert";
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
