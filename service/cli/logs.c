/* service/cli/logs.c - larch logs ID [--stream stdout|stderr] [--tail N] [-f]:
 * a job's output, read with offsets (GET /v1/jobs/{id}/logs); --tail starts
 * with its last N lines (of its last MiB, one read with tail=); -f polls for
 * more until the job has ended and its last output is printed.
 *
 * The job's output is printed as it is (it is the trainer's own text, like
 * `docker logs`); with --json each piece larchd sent is one line of JSON.
 *
 * A job that FAILED or timed out usually says why on its stderr, which
 * `larch logs ID` alone does not print: after its stdout, the last lines of
 * its stderr follow on larch's own stderr, made inert, under a line that
 * names the state and the command that prints all of it:
 *
 *   larch: job j-000123 FAILED; the last 10 lines of its stderr (all of it:
 *   larch logs --stream stderr j-000123):
 *     ...
 *     larch-train: data.train.images: ...: truncated
 *
 * (a shorter stderr: "larch: job j-000123 FAILED; its stderr:" and all of it)
 *
 * Not with --stream (the stream was chosen) nor --json.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

#define CHUNK "1048576"          /* the most one answer may carry */
#define STDERR_LINES 10         /* of a failed job's stderr, after its stdout */

struct log_state {
	const char *id, *stream;
	long long offset;
	long tail_lines;         /* > 0: the first read is the log's tail, this many lines */
};

/* Where the last n lines of s[0..len) start. */
static size_t last_lines(const char *s, size_t len, long n)
{
	size_t at = len;
	if (at && s[at - 1] == '\n')
		at--;                    /* the last line's own newline */
	while (at > 0) {
		if (s[at - 1] == '\n' && --n == 0)
			return at;
		at--;
	}
	return 0;
}

/* Reads one piece from st->offset and prints it. Sets *more when larchd has
 * more already. CLI_OK, or the exit status. */
static int read_piece(struct cli *cli, struct log_state *st, int *more)
{
	char offset[32];
	snprintf(offset, sizeof offset, "%lld", st->offset);
	struct cli_buf path = { 0 };
	cli_job_path(&path, st->id, "/logs");
	cli_http_param(&path, "stream", st->stream);
	if (st->tail_lines > 0) {
		cli_http_param(&path, "tail", CHUNK);
	} else {
		cli_http_param(&path, "offset", offset);
		cli_http_param(&path, "limit", CHUNK);
	}
	json_t *piece = NULL;
	int rc = cli_http_get_json(&cli->http, cli_buf_str(&path), st->id, &piece);
	cli_buf_release(&path);
	if (rc != CLI_OK)
		return rc;
	json_t *data = json_object_get(piece, "data");
	json_t *next = json_object_get(piece, "next_offset"), *size = json_object_get(piece, "size");
	json_t *from = json_object_get(piece, "offset");
	if (st->tail_lines > 0 && json_is_integer(from))
		st->offset = json_integer_value(from);
	if (!json_is_string(data) || !json_is_integer(next) || !json_is_integer(size) ||
	    json_integer_value(next) < st->offset) {
		fputs("larch: larchd's log answer lacks data, next_offset or size\n", stderr);
		json_decref(piece);
		return CLI_REFUSED;
	}
	const char *text = json_string_value(data);
	size_t len = json_string_length(data), start = 0;
	if (st->tail_lines > 0) {
		start = last_lines(text, len, st->tail_lines);
		st->tail_lines = 0;
	}
	if (cli->json)
		cli_print_json(piece);
	else
		fwrite(text + start, 1, len - start, stdout);
	fflush(stdout);
	long long was = st->offset;
	st->offset = json_integer_value(next);
	/* no progress although there is more: do not spin, poll */
	*more = st->offset < json_integer_value(size) && st->offset > was;
	json_decref(piece);
	if (ferror(stdout))
		return errno == EPIPE ? CLI_OK : CLI_REFUSED;
	return CLI_OK;
}

/* After the stdout of a job that ended in state: the last lines of its
 * stderr on larch's stderr, when it FAILED or timed out. Best effort: a
 * failure to read them says nothing more. */
static void show_failure(struct cli *cli, const char *id, const char *state)
{
	if (!state || (strcmp(state, "FAILED") != 0 && strcmp(state, "TIMEOUT") != 0))
		return;
	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "/logs");
	cli_http_param(&path, "stream", "stderr");
	cli_http_param(&path, "tail", CHUNK);
	struct cli_request rq = { .method = "GET", .path = cli_buf_str(&path) };
	struct cli_reply r = { 0 };
	json_t *data = NULL;
	if (cli_http_send(&cli->http, &rq, &r) == CLI_OK && r.status == 200)
		data = json_object_get(r.json, "data");
	char *who = cli_inert(id), *st = cli_inert(state);
	const char *text = json_string_value(data);
	size_t len = json_string_length(data);
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
		len--;
	if (!text || len == 0) {
		fprintf(stderr, "larch: job %s %s; its stderr is empty (larch show %s gives the "
		        "reason)\n", who, st, who);
	} else {
		size_t start = last_lines(text, len, STDERR_LINES), n = 1;
		for (size_t i = start; i < len; i++)
			n += text[i] == '\n';
		if (start)
			fprintf(stderr, "larch: job %s %s; the last %zu lines of its stderr (all of it: "
			        "larch logs --stream stderr %s):\n", who, st, n, who);
		else
			fprintf(stderr, "larch: job %s %s; its stderr:\n", who, st);
		struct cli_buf line = { 0 };
		for (size_t at = start; at < len;) {
			size_t end = at;
			while (end < len && text[end] != '\n')
				end++;
			cli_buf_clear(&line);
			cli_buf_adds(&line, "  ");
			cli_buf_add_inert(&line, text + at, end - at, 0);
			fprintf(stderr, "%s\n", cli_buf_str(&line));
			at = end + 1;
		}
		cli_buf_release(&line);
	}
	free(st);
	free(who);
	cli_reply_release(&r);
	cli_buf_release(&path);
}

int cli_cmd_logs(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "stream", required_argument, NULL, 's' }, { "follow", no_argument, NULL, 'f' },
		{ "interval", required_argument, NULL, 'i' }, { "tail", required_argument, NULL, 'n' },
		CLI_COMMON_OPTIONS, { 0 },
	};
	struct log_state st = { .stream = "stdout" };
	int follow = 0, chosen = 0, c, rc;
	double interval = 1;
	double tail = 0;
	while ((c = getopt_long(argc, argv, "fhn:", opts, NULL)) != -1) {
		if (c == 's')
			st.stream = optarg;
		else if (c == 'f')
			follow = 1;
		else if (c == 'i' && (rc = cli_parse_double(cli, "--interval", optarg, 0.05, 3600,
		                                            &interval)) != CLI_OK)
			return rc;
		else if (c == 'n' && (rc = cli_parse_double(cli, "--tail", optarg, 1, 1e9, &tail)) !=
		         CLI_OK)
			return rc;
		else if (c != 'i' && c != 'n' && (rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
		chosen |= c == 's';
	}
	if (tail != (double)(long)tail)
		return cli_usage_error(cli, "--tail: a whole number of lines");
	st.tail_lines = (long)tail;
	if (strcmp(st.stream, "stdout") != 0 && strcmp(st.stream, "stderr") != 0)
		return cli_usage_error(cli, "--stream: stdout or stderr");
	if (argc - optind != 1)
		return cli_usage_error(cli, "one job id is required");
	st.id = argv[optind];
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;

	int ended = 0, more;
	char state[32] = "";
	json_t *job = NULL;
	for (;;) {
		if ((rc = read_piece(cli, &st, &more)) != CLI_OK || ferror(stdout))
			return rc;
		if (more)
			continue;
		if (!follow || ended)
			break;
		if ((rc = cli_job_get(cli, st.id, &job)) != CLI_OK)
			return rc;
		/* once it has ended, one more read takes what it wrote last */
		snprintf(state, sizeof state, "%s", cli_job_str(job, "state") ? cli_job_str(job, "state")
		                                                               : "");
		ended = cli_job_final(state);
		json_decref(job);
		job = NULL;
		if (!ended)
			cli_sleep(interval);
	}
	if (chosen || cli->json)
		return CLI_OK;
	if (!follow && cli_job_get(cli, st.id, &job) == CLI_OK) {
		snprintf(state, sizeof state, "%s", cli_job_str(job, "state") ? cli_job_str(job, "state")
		                                                               : "");
		json_decref(job);
	}
	show_failure(cli, st.id, state);
	return CLI_OK;
}
