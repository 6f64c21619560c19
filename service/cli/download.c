/* service/cli/download.c - one file of larchd's into a local file, as
 * download.h says: through FILE.part, resumed with Range, sha256 checked. */
#include "download.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http.h"
#include "trainer/sha256.h"

#define ATTEMPTS 4                   /* one try and three resumes */
#define STALL_S 60L                  /* a transfer that moves no byte this long broke */

/* ---- one file ---------------------------------------------------------------- */

struct transfer {
	CURL *curl;
	int fd;                          /* FILE.part, at its end */
	long long have;                  /* its size */
	int asked_range;                 /* this request has a Range; cleared at its first byte */
	int refused;                     /* not 2xx: the body is an error, kept in err */
	struct cli_buf err;
	char etag[256];
	const char *want_etag;           /* the recorded sha256, quoted */
	int changed;                     /* larchd's ETag is another: nothing written */
	int write_failed;
};

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct transfer *t = arg;
	(void)size;
	size_t len = n;
	while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
		len--;
	if (len > 5 && strncasecmp(p, "ETag:", 5) == 0) {
		size_t i = 5;
		while (i < len && p[i] == ' ')
			i++;
		if (len - i < sizeof t->etag) {
			memcpy(t->etag, p + i, len - i);
			t->etag[len - i] = '\0';
		}
	}
	return n;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct transfer *t = arg;
	(void)size;
	long status = 0;
	curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200 && status != 206) {
		t->refused = 1;
		if (t->err.len < 65536)
			cli_buf_add(&t->err, p, n);
		return n;
	}
	if (t->etag[0] && strcmp(t->etag, t->want_etag) != 0) {
		t->changed = 1;
		return 0;
	}
	if (status == 200 && t->asked_range) {
		/* the whole file came back instead of the range: start over */
		if (ftruncate(t->fd, 0) != 0) {
			t->write_failed = errno;
			return 0;
		}
		t->have = 0;
	}
	t->asked_range = 0;
	for (size_t done = 0; done < n;) {
		ssize_t w = write(t->fd, p + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			t->write_failed = errno;
			return 0;
		}
		done += (size_t)w;
	}
	t->have += (long long)n;
	return n;
}

/* One GET of the file from t->have on. The curl code, *status. */
static CURLcode fetch(struct cli *cli, const char *path, struct transfer *t, long *status)
{
	struct cli_http *h = &cli->http;
	CURL *c = h->curl;
	struct cli_buf url = { 0 }, range = { 0 };
	cli_buf_addf(&url, "%s%s", h->base, path);
	struct curl_slist *hdr = NULL;
	hdr = curl_slist_append(hdr, "Accept: application/octet-stream, application/json");
	if (h->auth)
		hdr = curl_slist_append(hdr, h->auth);
	if (t->have > 0) {
		cli_buf_addf(&range, "Range: bytes=%lld-", t->have);
		hdr = curl_slist_append(hdr, cli_buf_str(&range));
	}
	cli_http_prepare(h, cli_buf_str(&url), hdr);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, STALL_S);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, t);
	curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	t->curl = c;
	t->etag[0] = '\0';
	t->asked_range = t->have > 0;
	*status = 0;
	CURLcode rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(hdr);
	cli_buf_release(&url);
	cli_buf_release(&range);
	return rc;
}

int cli_download(struct cli *cli, const char *path, const char *id, const char *what,
                 const char *expected, long long bytes, const char *out)
{
	char etag[68];
	snprintf(etag, sizeof etag, "\"%s\"", expected);
	struct cli_buf partb = { 0 };
	cli_buf_addf(&partb, "%s.part", out);
	const char *part = cli_buf_str(&partb);
	char *shown = cli_inert(part);
	int rc;
	struct transfer t = { .fd = -1, .want_etag = etag };
	t.fd = open(part, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	struct stat st;
	if (t.fd < 0 || fstat(t.fd, &st) != 0) {
		fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
		rc = CLI_USAGE;
		goto done;
	}
	t.have = st.st_size;
	if (t.have > bytes) {             /* not a piece of this file: start over */
		if (ftruncate(t.fd, 0) != 0) {
			fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
			rc = CLI_USAGE;
			goto done;
		}
		t.have = 0;
	}
	if (t.have > 0 && t.have < bytes && !cli->json)
		fprintf(stderr, "larch: resuming %s at byte %lld of %lld\n", shown, t.have,
		        (long long)bytes);
	for (int attempt = 1; t.have < bytes; attempt++) {
		long status;
		CURLcode cc = fetch(cli, path, &t, &status);
		if (t.write_failed) {
			fprintf(stderr, "larch: %s: %s\n", shown, strerror(t.write_failed));
			rc = CLI_USAGE;
			goto done;
		}
		if (t.refused || (cc == CURLE_OK && status != 200 && status != 206)) {
			struct cli_reply r = { .status = status };
			cli_buf_add(&r.body, t.err.data ? t.err.data : "", t.err.len);
			if (r.body.len)
				r.json = json_loadb(r.body.data, r.body.len, 0, NULL);
			rc = cli_http_fail(&cli->http, &r, id);
			cli_reply_release(&r);
			goto done;
		}
		if (t.changed) {
			char *tag = cli_inert(t.etag);
			fprintf(stderr, "larch: %s changed on larchd while it was listed (ETag %s, listed "
			        "sha256 %s); run again\n", what, tag, expected);
			free(tag);
			rc = CLI_REFUSED;
			goto done;
		}
		if (cc == CURLE_OK)
			break;
		if (attempt == ATTEMPTS) {
			fprintf(stderr, "larch: the download broke at byte %lld of %lld (%s); %s is kept: "
			        "run the same command again to resume\n", t.have, (long long)bytes,
			        cli->http.errbuf[0] ? cli->http.errbuf : curl_easy_strerror(cc), shown);
			rc = CLI_UNREACHABLE;
			goto done;
		}
		cli_sleep(0.5 * attempt);
	}
	char got[65];
	if (trn_sha256_fd(t.fd, got) != 0) {
		fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
		rc = CLI_USAGE;
		goto done;
	}
	if (strcmp(got, expected) != 0) {
		fprintf(stderr, "larch: %s: sha256 %s is not the recorded %s; it is kept (delete it "
		        "to download again)\n", shown, got, expected);
		rc = CLI_REFUSED;
		goto done;
	}
	if (fsync(t.fd) != 0 || rename(part, out) != 0) {
		fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
		rc = CLI_USAGE;
		goto done;
	}
	rc = CLI_OK;
done:
	if (t.fd >= 0)
		close(t.fd);
	cli_buf_release(&t.err);
	free(shown);
	cli_buf_release(&partb);
	return rc;
}
