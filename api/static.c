/* api/static.c - the dashboard's files; see static.h. */
#include "static.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reply.h"

const char api_static_csp[] =
	"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
	"frame-ancestors 'none'";

#define NAME_MAX_LEN 64
#define VENDOR_MAX 4

struct built_in {
	const struct api_static_file *file;
	char etag[API_ETAG_SIZE];
};

struct vendor {
	char name[NAME_MAX_LEN + 1];
	unsigned char *data;              /* owned */
	size_t len;
	char etag[API_ETAG_SIZE];
};

struct api_static {
	struct built_in *files;           /* owned array; the files are borrowed */
	size_t n;
	char *dir;                        /* owned; NULL: the built-in files */
	struct vendor vendor[VENDOR_MAX];
	size_t n_vendor;
};

static const struct {
	const char *ext, *type;
} types[] = {
	{ ".html", "text/html; charset=utf-8" },
	{ ".js", "text/javascript; charset=utf-8" },
	{ ".css", "text/css; charset=utf-8" },
	{ ".svg", "image/svg+xml" },
	{ ".png", "image/png" },
	{ ".ico", "image/x-icon" },
	{ ".json", "application/json" },
	{ ".webmanifest", "application/manifest+json" },
};

const char *api_static_type(const char *name)
{
	const char *dot = strrchr(name, '.');
	if (!dot)
		return NULL;
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return NULL;
}

int api_static_name_ok(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > NAME_MAX_LEN || name[0] == '.')
		return 0;
	for (const char *p = name; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return api_static_type(name) != NULL;
}

struct api_static *api_static_new(const struct api_static_file *files, size_t n,
                                  const char *dir)
{
	struct api_static *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	if (dir && !(s->dir = strdup(dir))) {
		free(s);
		return NULL;
	}
	if (n && !(s->files = calloc(n, sizeof *s->files))) {
		api_static_free(s);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		s->files[i].file = &files[i];
		api_etag(files[i].data, files[i].len, s->files[i].etag);
	}
	s->n = n;
	return s;
}

/* Reads a regular file of at most API_STATIC_MAX_FILE bytes, opened
 * relative to dirfd (AT_FDCWD for a path), not through a symbolic link at
 * its last component. Returns a new buffer, or NULL with errno set. */
static unsigned char *read_file(int dirfd, const char *name, size_t *len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	struct stat st;
	unsigned char *data = NULL;
	if (fstat(fd, &st) != 0)
		goto out;
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)API_STATIC_MAX_FILE) {
		errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
		goto out;
	}
	data = malloc((size_t)st.st_size + 1);
	if (!data)
		goto out;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(data);
			data = NULL;
			if (r == 0)
				errno = EIO;  /* it shrank while we read */
			goto out;
		}
		got += (size_t)r;
	}
	data[got] = '\0';
	*len = got;
out:;
	int saved = errno;
	close(fd);
	errno = saved;
	return data;
}

int api_static_add_vendor(struct api_static *s, const char *name, const char *path, char *err,
                          size_t err_size)
{
	if (s->n_vendor == VENDOR_MAX || !api_static_name_ok(name)) {
		snprintf(err, err_size, "vendor file %s: not a servable name", name);
		return -1;
	}
	struct vendor *v = &s->vendor[s->n_vendor];
	if (!(v->data = read_file(AT_FDCWD, path, &v->len))) {
		snprintf(err, err_size, "%s: %s", path,
		         errno == EFBIG ? "larger than 8 MiB" : errno == EINVAL ? "not a regular file"
		                                                           : strerror(errno));
		return -1;
	}
	snprintf(v->name, sizeof v->name, "%s", name);
	api_etag(v->data, v->len, v->etag);
	s->n_vendor++;
	return 0;
}

void api_static_free(struct api_static *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_vendor; i++)
		free(s->vendor[i].data);
	free(s->files);
	free(s->dir);
	free(s);
}

int api_static_find(const struct api_static *s, int vendor, const char *name,
                    const unsigned char **data, size_t *len, unsigned char **owned,
                    const char **etag)
{
	*owned = NULL;
	*etag = NULL;
	if (!api_static_name_ok(name))
		return -1;
	if (vendor) {
		for (size_t i = 0; i < s->n_vendor; i++)
			if (strcmp(s->vendor[i].name, name) == 0) {
				*data = s->vendor[i].data;
				*len = s->vendor[i].len;
				*etag = s->vendor[i].etag;
				return 0;
			}
		return -1;
	}
	if (s->dir) {
		int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			return -1;
		*owned = read_file(dfd, name, len);
		close(dfd);
		*data = *owned;
		return *owned ? 0 : -1;
	}
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->files[i].file->name, name) == 0) {
			*data = s->files[i].file->data;
			*len = s->files[i].file->len;
			*etag = s->files[i].etag;
			return 0;
		}
	return -1;
}
