/* api/job_file.c - a job directory's file as a reply; see job_file.h. */
#include "job_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reply.h"
#include "trainer/sha256.h"

#define JOB_DIR_MAX 4096
#define READ_PIECE (256 * 1024)
#define VERDICTS 64

/* ---- verdicts: files already hashed ---------------------------------------- */

struct verdict {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	char sha256[65];            /* the recorded hash it was checked against */
	int good;
	unsigned long long used;    /* for eviction: the least recently used goes */
};

static struct verdict verdicts[VERDICTS];
static unsigned long long verdict_clock;
static unsigned long long hashes;   /* files hashed for answers, under verdict_lock */
static pthread_mutex_t verdict_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_file(const struct verdict *v, const struct stat *st, const char *sha)
{
	return v->used && v->dev == st->st_dev && v->ino == st->st_ino && v->size == st->st_size &&
	       v->mtime.tv_sec == st->st_mtim.tv_sec && v->mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       v->ctime.tv_sec == st->st_ctim.tv_sec && v->ctime.tv_nsec == st->st_ctim.tv_nsec &&
	       strcmp(v->sha256, sha) == 0;
}

/* 1 good, 0 bad, -1 not known. */
static int verdict_get(const struct stat *st, const char *sha)
{
	int r = -1;
	pthread_mutex_lock(&verdict_lock);
	for (int i = 0; i < VERDICTS; i++)
		if (same_file(&verdicts[i], st, sha)) {
			verdicts[i].used = ++verdict_clock;
			r = verdicts[i].good;
			break;
		}
	pthread_mutex_unlock(&verdict_lock);
	return r;
}

static void verdict_put(const struct stat *st, const char *sha, int good)
{
	pthread_mutex_lock(&verdict_lock);
	int slot = 0;
	for (int i = 0; i < VERDICTS; i++) {
		if (same_file(&verdicts[i], st, sha) || !verdicts[i].used) {
			slot = i;
			break;
		}
		if (verdicts[i].used < verdicts[slot].used)
			slot = i;
	}
	struct verdict *v = &verdicts[slot];
	v->dev = st->st_dev;
	v->ino = st->st_ino;
	v->size = st->st_size;
	v->mtime = st->st_mtim;
	v->ctime = st->st_ctim;
	snprintf(v->sha256, sizeof v->sha256, "%s", sha);
	v->good = good;
	v->used = ++verdict_clock;
	pthread_mutex_unlock(&verdict_lock);
}

static int same_identity(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

int api_job_file_trust(const struct stat *before, const struct stat *after,
                       const char *sha256)
{
	if (!before || !after || !sha256 || strlen(sha256) != 64 ||
	    strspn(sha256, "0123456789abcdef") != 64 || !S_ISREG(after->st_mode) ||
	    !same_identity(before, after))
		return 0;
	verdict_put(after, sha256, 1);
	return 1;
}

unsigned long long api_job_file_hashes(void)
{
	pthread_mutex_lock(&verdict_lock);
	unsigned long long n = hashes;
	pthread_mutex_unlock(&verdict_lock);
	return n;
}

/* ---- opening the file inside the job directory ------------------------------ */

int api_job_file_open(const char *dir, const char *path, struct stat *st, int *gone, char *why,
                      size_t whylen)
{
	*gone = 0;
	size_t dl = strlen(dir);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	if (strncmp(path, dir, dl) != 0 || path[dl] != '/') {
		snprintf(why, whylen, "its recorded file is not in the job's directory");
		return -1;
	}
	char rel[JOB_DIR_MAX];
	if (snprintf(rel, sizeof rel, "%s", path + dl + 1) >= (int)sizeof rel) {
		snprintf(why, whylen, "its recorded path is too long");
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat dst;
	if (fd < 0 || fstat(fd, &dst) != 0) {
		*gone = errno == ENOENT;
		snprintf(why, whylen, "the job's directory cannot be opened: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	uid_t owner = dst.st_uid;
	char *save = NULL;
	char *part = strtok_r(rel, "/", &save);
	while (part) {
		char *next = strtok_r(NULL, "/", &save);
		if (strcmp(part, ".") == 0 || strcmp(part, "..") == 0) {
			close(fd);
			snprintf(why, whylen, "its recorded path has a \"%s\" component", part);
			return -1;
		}
		int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (next ? O_DIRECTORY : O_NONBLOCK);
		int sub = openat(fd, part, flags);
		int e = errno;
		close(fd);
		if (sub < 0) {
			*gone = e == ENOENT;
			snprintf(why, whylen, "%s", e == ELOOP || (e == ENOTDIR && next)
			         ? "its file or a directory above it is a symbolic link, which is not followed"
			         : strerror(e));
			return -1;
		}
		fd = sub;
		if (fstat(fd, st) != 0) {
			snprintf(why, whylen, "%s", strerror(errno));
			close(fd);
			return -1;
		}
		if (st->st_uid != owner) {
			snprintf(why, whylen, "its file does not belong to the job's user");
			close(fd);
			return -1;
		}
		part = next;
	}
	if (!S_ISREG(st->st_mode) || st->st_nlink != 1) {
		snprintf(why, whylen, "its file is not a regular file of one link");
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- the body --------------------------------------------------------------- */

struct body {
	int fd;
	off_t start;                /* of the range in the file */
	uint64_t len;
	char sha256[65];            /* what the hash must be (for the log) */
	struct stat st;             /* the file's identity when it was verified */
};

/* Whether fd is still the file of identity *st (size, mtime, ctime: what
 * the verdict is keyed by). */
static int unchanged(int fd, const struct stat *st)
{
	struct stat now;
	return fstat(fd, &now) == 0 && now.st_size == st->st_size &&
	       now.st_mtim.tv_sec == st->st_mtim.tv_sec &&
	       now.st_mtim.tv_nsec == st->st_mtim.tv_nsec &&
	       now.st_ctim.tv_sec == st->st_ctim.tv_sec && now.st_ctim.tv_nsec == st->st_ctim.tv_nsec;
}

static ssize_t body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct body *b = cls;
	if (pos >= b->len)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (max > b->len - pos)
		max = (size_t)(b->len - pos);
	ssize_t n;
	do
		n = pread(b->fd, buf, max, b->start + (off_t)pos);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		fprintf(stderr, "larchd: file download: read failed at byte %" PRIu64 ": %s\n",
		        pos, n < 0 ? strerror(errno) : "the file got shorter");
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (pos + (uint64_t)n == b->len && !unchanged(b->fd, &b->st)) {
		fprintf(stderr, "larchd: file download cut: the file changed while it was sent "
		        "(recorded sha256 %s)\n", b->sha256);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	return n;
}

static void body_free(void *cls)
{
	struct body *b = cls;
	close(b->fd);
	free(b);
}

/* ---- Range ------------------------------------------------------------------ */

/* One "bytes=" range against size: 1 and [*start, *end] (inclusive) for a
 * satisfiable one, 0 to answer the whole file (none, malformed, several),
 * -1 for one that is not satisfiable (416). */
static int parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end)
{
	if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
		return 0;
	const char *p = h + 6;
	while (*p == ' ')
		p++;
	uint64_t a = 0, b = 0;
	int has_a = 0, has_b = 0;
	for (; *p >= '0' && *p <= '9'; p++, has_a = 1) {
		if (a > (UINT64_MAX - 9) / 10)
			return 0;
		a = a * 10 + (uint64_t)(*p - '0');
	}
	if (*p++ != '-')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++, has_b = 1) {
		if (b > (UINT64_MAX - 9) / 10)
			b = UINT64_MAX / 10;  /* past any size: clamped below */
		else
			b = b * 10 + (uint64_t)(*p - '0');
	}
	while (*p == ' ')
		p++;
	if (*p || (!has_a && !has_b) || (has_a && has_b && b < a))
		return 0;
	if (!has_a) {                  /* the last b bytes */
		if (b == 0 || size == 0)
			return -1;
		*start = b >= size ? 0 : size - b;
		*end = size - 1;
		return 1;
	}
	if (a >= size)
		return -1;
	*start = a;
	*end = has_b && b < size ? b : size - 1;
	return 1;
}

/* ---- If-Range --------------------------------------------------------------- */

/* Whether a Range may be served under If-Range value h (NULL: no
 * If-Range): only when h is etag itself, compared strongly (RFC 9110
 * 13.1.5); a weak tag, another tag or a date (no Last-Modified is sent)
 * asks for the whole file. */
static int if_range_holds(const char *h, const char *etag)
{
	if (!h)
		return 1;
	while (*h == ' ' || *h == '\t')
		h++;
	size_t n = strlen(h);
	while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
		n--;
	return n == strlen(etag) && memcmp(h, etag, n) == 0;
}

/* ---- the reply ---------------------------------------------------------------- */

enum MHD_Result api_job_file_reply(struct api_request *req, const struct api_job_file *f)
{
	char etag[68];
	snprintf(etag, sizeof etag, "\"%s\"", f->sha256);
	if (api_etag_match(req->if_none_match, etag)) {
		struct MHD_Response *resp =
			MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		return api_reply_response(req, MHD_HTTP_NOT_MODIFIED, NULL, etag, resp);
	}

	struct stat st;
	char why[256];
	int gone;
	int fd = api_job_file_open(f->dir, f->path, &st, &gone, why, sizeof why);
	if (fd < 0 && gone)
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "%s: its file is gone (pruned, "
		                       "or the job directory removed)", f->what);
	if (fd < 0)
		return api_reply_error(req, 409, API_ERR_CONFLICT, "%s: %s; it is not served",
		                       f->what, why);
	if ((int64_t)st.st_size != f->bytes) {
		close(fd);
		return api_reply_error(req, 409, API_ERR_CONFLICT, "%s: its file has %lld bytes, "
		                       "%lld were recorded; it is not served", f->what,
		                       (long long)st.st_size, (long long)f->bytes);
	}
	int good = verdict_get(&st, f->sha256);
	if (good < 0) {
		char hex[65];
		pthread_mutex_lock(&verdict_lock);
		hashes++;
		pthread_mutex_unlock(&verdict_lock);
		if (trn_sha256_fd(fd, hex) != 0) {
			int e = errno;
			close(fd);
			return api_reply_error(req, 500, API_ERR_INTERNAL, "%s: cannot read its file: %s",
			                       f->what, strerror(e));
		}
		good = strcmp(hex, f->sha256) == 0;
		verdict_put(&st, f->sha256, good);
	}
	if (!good) {
		close(fd);
		return api_reply_error(req, 409, API_ERR_CONFLICT, "%s: its file does not match its "
		                       "recorded sha256 %s (corrupted or rewritten); it is not served",
		                       f->what, f->sha256);
	}

	uint64_t size = (uint64_t)st.st_size, first = 0, last = size ? size - 1 : 0;
	const char *range = api_header(req, "Range");
	int ranged = 0;
	if (if_range_holds(api_header(req, "If-Range"), etag))
		ranged = parse_range(range, size, &first, &last);
	char text[160];
	if (ranged < 0) {
		close(fd);
		snprintf(text, sizeof text, "bytes */%" PRIu64, size);
		api_reply_header(req, MHD_HTTP_HEADER_CONTENT_RANGE, text);
		return api_reply_error(req, 416, API_ERR_RANGE, "range: %s is past the end of %s (%"
		                       PRIu64 " bytes)", range, f->what, size);
	}
	struct body *b = calloc(1, sizeof *b);
	if (!b) {
		close(fd);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	}
	b->fd = fd;
	b->start = (off_t)first;
	b->len = ranged ? last - first + 1 : size;
	b->st = st;
	snprintf(b->sha256, sizeof b->sha256, "%s", f->sha256);
	struct MHD_Response *resp = MHD_create_response_from_callback(b->len, READ_PIECE, body_read,
	                                                              b, body_free);
	if (!resp) {
		body_free(b);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	}
	api_reply_header(req, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
	snprintf(text, sizeof text, "attachment; filename=\"%s\"", f->filename);
	api_reply_header(req, "Content-Disposition", text);
	if (ranged) {
		snprintf(text, sizeof text, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
		api_reply_header(req, MHD_HTTP_HEADER_CONTENT_RANGE, text);
	}
	return api_reply_response(req, ranged ? 206 : 200, f->content_type, etag, resp);
}
