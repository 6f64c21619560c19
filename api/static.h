/* api/static.h - the dashboard's static files (GET /, /ui/{file},
 * /vendor/{file}).
 *
 * The service hands over the files built into it (a table generated from
 * service/dashboard/ at build time), or a directory to read them from at
 * each request instead (dashboard_dir: edit, reload), and the vendored
 * libraries it found on the system (Chart.js from Debian's libjs-chart.js),
 * read once at start. Names are one path segment of [A-Za-z0-9._-], not
 * starting with '.'; the type comes from the extension, and a file of
 * another extension is not served. Every reply carries the dashboard's
 * Content-Security-Policy (no inline script or style, nothing from another
 * origin), an ETag (If-None-Match gives 304) and Cache-Control: no-cache.
 */
#ifndef LARCH_API_STATIC_H
#define LARCH_API_STATIC_H

#include <stddef.h>

/* A file built into the program (static data, never freed). */
struct api_static_file {
	const char *name;                 /* "app.js" */
	const unsigned char *data;
	size_t len;
};

struct api_static;

#define API_STATIC_MAX_FILE (8u << 20)    /* larger files are not served */

/* The Content-Security-Policy of the dashboard's replies. */
extern const char api_static_csp[];

/* A new set: files[0..n) (borrowed; must outlive the set), or, when dir is
 * not NULL, the files under dir read at each request (dir is copied).
 * Returns NULL when out of memory. */
struct api_static *api_static_new(const struct api_static_file *files, size_t n,
                                  const char *dir);
/* Adds a vendored file, read now from path (copied into the set). Returns
 * 0, or -1 with err filled (the file is missing, unreadable or too large:
 * the dashboard then works without it, and says so). */
int api_static_add_vendor(struct api_static *s, const char *name, const char *path, char *err,
                          size_t err_size);
void api_static_free(struct api_static *s);

/* The content type of a file name by its extension, or NULL when such
 * files are not served. */
const char *api_static_type(const char *name);
/* Whether name is one we would serve: [A-Za-z0-9._-], 1..64 bytes, not
 * starting with '.', of a known type. */
int api_static_name_ok(const char *name);

/* One file: *data and *len (borrowed from the set, or, read from the
 * directory, a new buffer in *owned that the caller frees), *etag (a tag
 * computed once; NULL for files read from the directory). Returns 0, or -1
 * when there is no such file. */
int api_static_find(const struct api_static *s, int vendor, const char *name,
                    const unsigned char **data, size_t *len, unsigned char **owned,
                    const char **etag);

#endif
