/* api/jobs_logs_get.c - GET /v1/jobs/{id}/logs?stream=&offset=&limit= (or
 * &tail=): a piece of the job's stdout.log or stderr.log, read from its
 * directory (the service's job_dir hook).
 *
 * {"stream", "offset", "next_offset", "size", "data"}: data is up to limit
 * bytes (default 64 KiB, at most 1 MiB) from offset, as a JSON string
 * (bytes that are not UTF-8 become U+FFFD); a character cut by the end of
 * the piece is left for the next one (next_offset says where it starts).
 * An offset past the end gives no data and next_offset = size; a log not
 * written yet has size 0. A follower polls with offset = next_offset.
 * tail=N (instead of offset and limit) gives the last N bytes, less the
 * piece of a character they would start in; offset says where they begin,
 * so a follower opens with tail and goes on from next_offset.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/jobs.h"
#include "handlers.h"
#include "jobs_common.h"
#include "jobs_hooks.h"
#include "reply.h"

#define LOG_LIMIT_DEFAULT (64 * 1024)
#define LOG_LIMIT_MAX (1024 * 1024)
#define JOB_DIR_MAX 4096

/* Reads up to limit bytes of path from *offset into *data (a new buffer,
 * *len bytes) and the file's size; a missing file is empty. With tail, the
 * last limit bytes instead, *offset set to where they begin. 0, or -1 with
 * errno. */
static int read_piece(const char *path, int64_t *offset_io, int64_t limit, int tail, char **data,
                      size_t *len, int64_t *size)
{
	*data = NULL;
	*len = 0;
	*size = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	struct stat st;
	/* the job directory may be its owner's (service/jobfs.h): never a link
	 * followed, a FIFO waited on, or a hard link to a file elsewhere read */
	int e = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) || st.st_nlink != 1 ? EINVAL : 0;
	if (e) {
		close(fd);
		errno = e;
		return -1;
	}
	*size = st.st_size;
	if (tail)
		*offset_io = *size > limit ? *size - limit : 0;
	int64_t offset = *offset_io;
	int64_t want = offset >= *size ? 0 : *size - offset < limit ? *size - offset : limit;
	char *buf = malloc((size_t)want + 1);
	if (!buf) {
		close(fd);
		errno = ENOMEM;
		return -1;
	}
	size_t got = 0;
	while ((int64_t)got < want) {
		ssize_t n = pread(fd, buf + got, (size_t)want - got, offset + (int64_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = errno;
			free(buf);
			close(fd);
			errno = e;
			return -1;
		}
		if (n == 0)
			break;              /* truncated meanwhile */
		got += (size_t)n;
	}
	close(fd);
	*data = buf;
	*len = got;
	return 0;
}

enum MHD_Result api_jobs_logs_get(struct api_request *req)
{
	static const char *const params[] = { "stream", "offset", "limit", "tail", NULL };
	enum MHD_Result ret;
	struct db *db;
	int64_t id, offset, limit, tail;
	if (api_job_request_or_reply(req, params, &db, &id, &ret) ||
	    api_query_int_or_reply(req, "offset", 0, INT64_MAX, 0, &offset, &ret) ||
	    api_query_int_or_reply(req, "limit", 1, LOG_LIMIT_MAX, LOG_LIMIT_DEFAULT, &limit, &ret) ||
	    api_query_int_or_reply(req, "tail", 1, LOG_LIMIT_MAX, 0, &tail, &ret))
		return ret;
	if (tail && (api_query(req, "offset") || api_query(req, "limit")))
		return api_reply_bad_param(req, "tail", "tail: give either tail or offset and limit");
	if (tail)
		limit = tail;
	const char *stream = api_query(req, "stream");
	if (!stream)
		stream = "stdout";
	if (strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0)
		return api_reply_bad_param(req, "stream", "stream: must be stdout or stderr (got \"%s\")",
		                           stream);

	struct db_job job;
	struct db_err err = { 0 };
	int rc = db_jobs_get(db, id, api_owner_scope(req), &job, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	db_job_release(&job);

	const struct api_jobs_hooks *hooks = req->ctx->jobs;
	char dir[JOB_DIR_MAX], path[JOB_DIR_MAX + 16];
	if (!hooks || !hooks->job_dir || hooks->job_dir(hooks->arg, id, dir, sizeof dir) != 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "the job's directory is unknown");
	snprintf(path, sizeof path, "%s/%s.log", dir, stream);

	char *data;
	size_t len;
	int64_t size;
	if (read_piece(path, &offset, limit, tail > 0, &data, &len, &size) != 0)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "%s.log: %s", stream,
		                       strerror(errno));
	if (tail && data) {       /* not from the middle of a character */
		size_t skip = 0;
		while (offset > 0 && skip < 3 && skip < len && ((unsigned char)data[skip] & 0xc0) == 0x80)
			skip++;
		memmove(data, data + skip, len - skip);
		len -= skip;
		offset += (int64_t)skip;
	}
	/* leave a character cut by the end of the piece for the next one, unless
	 * that would leave nothing (then it is shown replaced) */
	size_t keep = api_utf8_complete(data ? data : "", len);
	if (keep > 0)
		len = keep;

	struct api_buf b;
	api_buf_init(&b, 128 + len + len / 8);
	api_buf_adds(&b, "{\"stream\":\"");
	api_buf_adds(&b, stream);
	api_buf_adds(&b, "\",\"offset\":");
	api_buf_json_int(&b, offset);
	api_buf_adds(&b, ",\"next_offset\":");
	api_buf_json_int(&b, offset < size ? offset + (int64_t)len : size);
	api_buf_adds(&b, ",\"size\":");
	api_buf_json_int(&b, size);
	api_buf_adds(&b, ",\"data\":");
	api_buf_json_strn(&b, data ? data : "", len);
	api_buf_addc(&b, '}');
	free(data);
	return api_reply_buf(req, 200, NULL, &b);
}
