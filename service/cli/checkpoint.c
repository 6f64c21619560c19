/* service/cli/checkpoint.c - larch checkpoint ls ID | download ID [--step N]
 * [-o FILE]: a job's checkpoints (GET /v1/jobs/{id}/checkpoints) and one of
 * them as a file (GET /v1/jobs/{id}/checkpoints/{step}).
 *
 * A download goes to FILE.part (default FILE: <id>-step-<8 digits>.safetensors
 * here), written as it arrives, never held in memory. A FILE.part already
 * there is resumed with a Range request from its size (larchd's ETag must
 * still be the recorded sha256, else it starts over); a transfer that breaks
 * is resumed the same way, a few times, and when it cannot be, FILE.part is
 * kept for the next run. At the end the whole FILE.part is hashed: the
 * recorded sha256 renames it to FILE; another hash is an error that keeps
 * FILE.part (delete it to download again).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs.h"
#include "trainer/sha256.h"

#define ATTEMPTS 4                   /* one try and three resumes */
#define STALL_S 60L                  /* a transfer that moves no byte this long broke */

/* ---- ls --------------------------------------------------------------------- */

static int get_list(struct cli *cli, const char *id, json_t **page, json_t **items)
{
	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "/checkpoints");
	int rc = cli_http_get_json(&cli->http, cli_buf_str(&path), id, page);
	cli_buf_release(&path);
	if (rc != CLI_OK)
		return rc;
	*items = json_object_get(*page, "checkpoints");
	if (!json_is_array(*items)) {
		fputs("larch: larchd's checkpoint list lacks \"checkpoints\"\n", stderr);
		json_decref(*page);
		return CLI_REFUSED;
	}
	return CLI_OK;
}

static int ckpt_ls(struct cli *cli, const char *id)
{
	int rc = cli_connect(cli);
	json_t *page = NULL, *items;
	if (rc != CLI_OK || (rc = get_list(cli, id, &page, &items)) != CLI_OK)
		return rc;
	if (cli->json) {
		cli_print_json(page);
		json_decref(page);
		return CLI_OK;
	}
	static const struct cli_column cols[] = {
		{ "STEP", 1, 0 }, { "BYTES", 1, 0 }, { "TIME", 0, 0 }, { "SHA256", 0, 1 },
	};
	struct cli_table *t = cli_table_new(cols, 4);
	size_t i;
	json_t *ck;
	json_array_foreach(items, i, ck) {
		char step[32], bytes[32];
		snprintf(step, sizeof step, "%" JSON_INTEGER_FORMAT,
		         json_integer_value(json_object_get(ck, "step")));
		snprintf(bytes, sizeof bytes, "%" JSON_INTEGER_FORMAT,
		         json_integer_value(json_object_get(ck, "bytes")));
		const char *cells[] = { step, bytes, json_string_value(json_object_get(ck, "time")),
		                        json_string_value(json_object_get(ck, "sha256")) };
		cli_table_row(t, cells);
	}
	if (json_array_size(items))
		cli_table_print(t, stdout, cli_term_width());
	else
		printf("%s has no checkpoint yet\n", id);
	cli_table_free(t);
	json_decref(page);
	return CLI_OK;
}

/* ---- download --------------------------------------------------------------- */

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

/* One GET of the checkpoint from t->have on. The curl code, *status. */
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

/* The checkpoint of step (newest when step < 0) from the list, or NULL after
 * saying why. */
static json_t *pick(json_t *items, const char *id, long long step)
{
	json_t *found = NULL, *ck;
	size_t i;
	json_array_foreach(items, i, ck) {
		json_int_t s = json_integer_value(json_object_get(ck, "step"));
		if (step < 0 ? !found || s > json_integer_value(json_object_get(found, "step"))
		             : s == step)
			found = ck;
	}
	if (!found) {
		char *who = cli_inert(id);
		if (step < 0)
			fprintf(stderr, "larch: job %s has no checkpoint yet\n", who);
		else
			fprintf(stderr, "larch: job %s has no checkpoint of step %lld (larch checkpoint ls "
			        "%s lists them)\n", who, step, who);
		free(who);
	}
	return found;
}

static int download(struct cli *cli, const char *id, long long step_opt, const char *out_opt)
{
	int rc = cli_connect(cli);
	json_t *page = NULL, *items;
	if (rc != CLI_OK || (rc = get_list(cli, id, &page, &items)) != CLI_OK)
		return rc;
	json_t *ck = pick(items, id, step_opt);
	const char *sha = json_string_value(json_object_get(ck, "sha256"));
	json_int_t bytes = json_integer_value(json_object_get(ck, "bytes"));
	json_int_t step = json_integer_value(json_object_get(ck, "step"));
	if (ck && (!sha || strlen(sha) != 64 || bytes < 0)) {
		fputs("larch: larchd's checkpoint lacks its sha256 or bytes\n", stderr);
		ck = NULL;
	}
	if (!ck) {
		json_decref(page);
		return CLI_REFUSED;
	}
	char expected[65], etag[68];
	snprintf(expected, sizeof expected, "%s", sha);
	snprintf(etag, sizeof etag, "\"%s\"", expected);
	json_decref(page);

	struct cli_buf out = { 0 }, part = { 0 }, path = { 0 };
	if (out_opt)
		cli_buf_adds(&out, out_opt);
	else
		cli_buf_addf(&out, "%s-step-%08" JSON_INTEGER_FORMAT ".safetensors", id, step);
	cli_buf_addf(&part, "%s.part", cli_buf_str(&out));
	char suffix[48];
	snprintf(suffix, sizeof suffix, "/checkpoints/%" JSON_INTEGER_FORMAT, step);
	cli_job_path(&path, id, suffix);
	char *shown = cli_inert(cli_buf_str(&part));

	struct transfer t = { .fd = -1, .want_etag = etag };
	t.fd = open(cli_buf_str(&part), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
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
		CURLcode cc = fetch(cli, cli_buf_str(&path), &t, &status);
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
			fprintf(stderr, "larch: checkpoint %" JSON_INTEGER_FORMAT " of %s changed on larchd "
			        "while it was listed (ETag %s, listed sha256 %s); run again\n", step, id,
			        tag, expected);
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
	if (fsync(t.fd) != 0 || rename(cli_buf_str(&part), cli_buf_str(&out)) != 0) {
		fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
		rc = CLI_USAGE;
		goto done;
	}
	char *outshown = cli_inert(cli_buf_str(&out));
	if (cli->json) {
		json_t *j = json_pack("{s:s, s:I, s:I, s:s}", "file", cli_buf_str(&out), "step",
		                      (json_int_t)step, "bytes", (json_int_t)bytes, "sha256", got);
		cli_print_json(j);
		json_decref(j);
	} else {
		printf("%s: step %" JSON_INTEGER_FORMAT " of %s, %lld bytes, sha256 %s\n", outshown,
		       step, id, (long long)bytes, got);
	}
	free(outshown);
	rc = CLI_OK;
done:
	if (t.fd >= 0)
		close(t.fd);
	cli_buf_release(&t.err);
	free(shown);
	cli_buf_release(&out);
	cli_buf_release(&part);
	cli_buf_release(&path);
	return rc;
}

int cli_cmd_checkpoint(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "step", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		CLI_COMMON_OPTIONS, { 0 }
	};
	long long step = -1;
	const char *out = NULL;
	int c, rc;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		if (c == 's') {
			if ((rc = cli_parse_long(cli, "--step", optarg, 0, 1LL << 53, &step)) != CLI_OK)
				return rc;
		} else if (c == 'o') {
			out = optarg;
		} else if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE) {
			return rc;
		}
	}
	if (optind >= argc)
		return cli_usage_error(cli, "a verb is required: ls ID, download ID");
	const char *verb = argv[optind++];
	if (strcmp(verb, "ls") != 0 && strcmp(verb, "download") != 0)
		return cli_usage_error(cli, "no verb \"%s\" (ls, download)", verb);
	if (argc - optind != 1)
		return cli_usage_error(cli, "%s takes one job id", verb);
	if (verb[0] == 'l') {
		if (step >= 0 || out)
			return cli_usage_error(cli, "--step and -o are for download");
		return ckpt_ls(cli, argv[optind]);
	}
	return download(cli, argv[optind], step, out);
}
