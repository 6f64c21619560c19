/* service/cli/jobs.c - larch submit, ls, show and cancel, and what the
 * commands share about jobs (jobs.h). */
#include "jobs.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MAX_SPEC_FILE (16u << 20)

static const char *const final_states[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", NULL };

int cli_job_final(const char *state)
{
	for (size_t i = 0; state && final_states[i]; i++)
		if (strcmp(state, final_states[i]) == 0)
			return 1;
	return 0;
}

void cli_job_path(struct cli_buf *b, const char *id, const char *suffix)
{
	cli_buf_adds(b, "/v1/jobs/");
	cli_http_escape(b, id);
	cli_buf_adds(b, suffix);
}

int cli_job_get(struct cli *cli, const char *id, json_t **job)
{
	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "");
	int rc = cli_http_get_json(&cli->http, cli_buf_str(&path), id, job);
	cli_buf_release(&path);
	return rc;
}

const char *cli_job_str(const json_t *job, const char *key)
{
	return json_string_value(json_object_get(job, key));
}

int cli_job_progress(const json_t *job, long long *step, long long *total, double *loss)
{
	json_t *p = json_object_get(job, "progress");
	json_t *s = json_object_get(p, "step"), *t = json_object_get(p, "total_steps");
	json_t *l = json_object_get(p, "train/loss");
	*step = json_is_integer(s) ? json_integer_value(s) : -1;
	*total = json_is_integer(t) ? json_integer_value(t) : -1;
	*loss = json_is_number(l) ? json_number_value(l) : NAN;
	return *step >= 0;
}

void cli_print_json(const json_t *j)
{
	json_dumpf(j, stdout, JSON_COMPACT);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Parses a command's options up to one positional argument, the job id. */
static int one_id(struct cli *cli, int argc, char **argv, const char **id)
{
	static const struct option opts[] = { CLI_COMMON_OPTIONS, { 0 } };
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
		if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	if (argc - optind != 1)
		return cli_usage_error(cli, argc == optind ? "a job id is required"
		                            : "one job id, not %d", argc - optind);
	*id = argv[optind];
	return CLI_CONTINUE;
}

/* ---- submit ------------------------------------------------------------------ */

/* "larch-" and 32 random hex digits: a new key for each run. */
static void random_key(char out[64])
{
	unsigned char r[16];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
		for (size_t i = 0; i < sizeof r; i++)
			r[i] = (unsigned char)(lrand48() >> 8);
	}
	char *p = out + sprintf(out, "larch-");
	for (size_t i = 0; i < sizeof r; i++)
		p += sprintf(p, "%02x", r[i]);
}

static int valid_key(const char *key)
{
	size_t n = strlen(key);
	for (const char *p = key; *p; p++)
		if (*p <= ' ' || *p >= 0x7f)
			return 0;
	return n >= 1 && n <= 128;
}

char *cli_read_spec(const char *file, size_t *len, json_t **spec)
{
	const char *shown = strcmp(file, "-") == 0 ? "standard input" : file;
	char *text = cli_read_file(file, MAX_SPEC_FILE, len);
	if (!text) {
		fprintf(stderr, "larch: %s: %s\n", shown,
		        errno == EFBIG ? "larger than 16 MiB" : strerror(errno));
		return NULL;
	}
	json_error_t jerr;
	json_t *root = json_loadb(text, *len, 0, &jerr);
	if (!json_is_object(root)) {
		if (root)
			fprintf(stderr, "larch: %s: a job spec is a JSON object\n", shown);
		else
			fprintf(stderr, "larch: %s: invalid JSON at line %d column %d: %s\n", shown,
			        jerr.line, jerr.column, jerr.text);
		json_decref(root);
		free(text);
		return NULL;
	}
	if (spec)
		*spec = root;
	else
		json_decref(root);
	return text;
}

int cli_cmd_submit(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "idempotency-key", required_argument, NULL, 'k' }, CLI_COMMON_OPTIONS, { 0 },
	};
	const char *key = NULL;
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'k')
			key = optarg;
		else if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one spec file (or - for standard input) is required");
	if (key && !valid_key(key))
		return cli_usage_error(cli, "--idempotency-key: 1 to 128 printable characters, "
		                       "no spaces");
	size_t len;
	char *text = cli_read_spec(argv[optind], &len, NULL);
	if (!text)
		return CLI_USAGE;

	char own_key[64];
	if (!key) {
		random_key(own_key);
		key = own_key;
	}
	if ((rc = cli_connect(cli)) != CLI_OK) {
		free(text);
		return rc;
	}
	struct cli_request rq = { .method = "POST", .path = "/v1/jobs", .body = text,
	                          .body_len = len, .idempotency_key = key };
	struct cli_reply r = { 0 };
	json_t *job = NULL;
	rc = cli_http_send(&cli->http, &rq, &r);
	if (rc == CLI_OK && r.status == 409 && key != own_key) {
		fprintf(stderr, "larch: the idempotency key %s was used before with another spec "
		        "(409)\n", key);
		rc = CLI_REFUSED;
	} else if (rc == CLI_OK) {
		rc = cli_http_take_object(&cli->http, &r, NULL, &job);
	}
	const char *id = cli_job_str(job, "id");
	if (rc == CLI_OK && !id) {
		fputs("larch: larchd's answer has no job id\n", stderr);
		rc = CLI_REFUSED;
	}
	if (rc == CLI_OK) {
		if (r.status == 200 && key != own_key)
			fprintf(stderr, "larch: the key %s had submitted this spec before: nothing new "
			        "was created\n", key);
		if (cli->json)
			cli_print_json(job);
		else
			printf("%s\n", id);
	}
	json_decref(job);
	cli_reply_release(&r);
	free(text);
	return rc;
}

/* ---- ls ---------------------------------------------------------------------- */

static const struct cli_column ls_columns[] = {
	{ .head = "ID" },
	{ .head = "NAME", .elastic = 1 },
	{ .head = "OWNER" },
	{ .head = "STATE" },
	{ .head = "STEP/TOTAL", .right = 1 },
	{ .head = "LOSS", .right = 1 },
	{ .head = "AGE", .right = 1 },
};

static void ls_row(struct cli_table *t, const json_t *job, double now)
{
	char steps[64] = "-", loss[32] = "-", age[32] = "-";
	long long step, total;
	double l;
	if (cli_job_progress(job, &step, &total, &l)) {
		if (total > 0)
			snprintf(steps, sizeof steps, "%lld/%lld", step, total);
		else
			snprintf(steps, sizeof steps, "%lld", step);
	}
	cli_format_number(l, loss, sizeof loss);
	double created = cli_parse_time(cli_job_str(job, "created_at"));
	if (created >= 0)
		cli_format_age(now - created, age, sizeof age);
	const char *cells[] = {
		cli_job_str(job, "id"), cli_job_str(job, "name"), cli_job_str(job, "owner"),
		cli_job_str(job, "state"), steps, loss, age,
	};
	cli_table_row(t, cells);
}

int cli_cmd_ls(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' }, { "name", required_argument, NULL, 'n' },
		{ "owner", required_argument, NULL, 'o' }, { "limit", required_argument, NULL, 'l' },
		{ "all", no_argument, NULL, 'a' }, CLI_COMMON_OPTIONS, { 0 },
	};
	const char *name = NULL, *owner = NULL, *limit_arg = NULL;
	char state[32] = "";
	long long limit = 0;
	int all = 0, c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (strlen(optarg) >= sizeof state)
				return cli_usage_error(cli, "--state: no state is called that");
			for (size_t i = 0; optarg[i]; i++)
				state[i] = (char)toupper((unsigned char)optarg[i]);
			state[strlen(optarg)] = '\0';
			break;
		case 'n': name = optarg; break;
		case 'o': owner = optarg; break;
		case 'a': all = 1; break;
		case 'l':
			if ((rc = cli_parse_long(cli, "--limit", optarg, 1, 500, &limit)) != CLI_OK)
				return rc;
			limit_arg = optarg;
			break;
		default:
			if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error(cli, "unexpected argument \"%s\"", argv[optind]);
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;

	json_t *jobs = json_array(), *page = NULL;
	char *cursor = NULL;
	struct cli_buf path = { 0 };
	cli_buf_adds(&path, "/v1/jobs");
	cli_http_param(&path, "limit", limit_arg ? limit_arg : all ? "500" : NULL);
	cli_http_param(&path, "state", state[0] ? state : NULL);
	cli_http_param(&path, "name", name);
	cli_http_param(&path, "owner", owner);
	rc = cli_http_get_list(&cli->http, cli_buf_str(&path), "jobs", all, jobs, &page, &cursor);
	cli_buf_release(&path);

	if (rc == CLI_OK && cli->json) {
		if (all)
			json_object_del(page, "next_cursor");
		json_object_set(page, "jobs", jobs);
		cli_print_json(page);
	} else if (rc == CLI_OK) {
		struct cli_table *t = cli_table_new(ls_columns, sizeof ls_columns / sizeof ls_columns[0]);
		double now = (double)time(NULL);
		size_t i;
		json_t *job;
		json_array_foreach(jobs, i, job)
			ls_row(t, job, now);
		cli_table_print(t, stdout, cli_term_width());
		cli_table_free(t);
		if (cursor)
			fputs("larch: there are more jobs: --all lists them all\n", stderr);
	}
	free(cursor);
	json_decref(page);
	json_decref(jobs);
	return rc;
}

/* ---- show -------------------------------------------------------------------- */

/* Prints "key:   value" with value made inert. */
static void show_line(const char *key, const char *value)
{
	char *v = cli_inert(value);
	printf("%-12s %s\n", key, v);
	free(v);
}

static void show_time(const json_t *job, const char *key, const char *label, double now)
{
	const char *s = cli_job_str(job, key);
	double t = cli_parse_time(s);
	if (t < 0) {
		show_line(label, s);
		return;
	}
	char age[32], text[128];
	cli_format_age(now - t, age, sizeof age);
	snprintf(text, sizeof text, "%s (%s ago)", s, age);
	show_line(label, text);
}

static void show_scalar(const json_t *job, const char *key, const char *label)
{
	json_t *v = json_object_get(job, key);
	if (json_is_string(v) || !v || json_is_null(v)) {
		show_line(label, json_string_value(v));
		return;
	}
	char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	show_line(label, text);
	free(text);
}

static void show_job(const json_t *job)
{
	static const char *const plain[][2] = {
		{ "id", "id:" }, { "name", "name:" }, { "owner", "owner:" }, { "run_as", "runs as:" },
		{ "state", "state:" }, { "executor", "executor:" }, { "slurm_job_id", "slurm job:" },
		{ "node_list", "nodes:" }, { "priority", "priority:" }, { "attempt", "attempt:" },
	};
	/* shown only where the job has them (a Slurm job's; node_list once it ran) */
	static const char *const when_set[] = { "slurm_job_id", "run_as", "node_list" };
	static const char *const times[][2] = {
		{ "created_at", "created:" }, { "started_at", "started:" }, { "ended_at", "ended:" },
	};
	double now = (double)time(NULL);
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
		int optional = 0;
		for (size_t k = 0; k < sizeof when_set / sizeof when_set[0]; k++)
			optional |= strcmp(plain[i][0], when_set[k]) == 0;
		if (!optional || json_is_string(json_object_get(job, plain[i][0])))
			show_scalar(job, plain[i][0], plain[i][1]);
	}
	for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
		show_time(job, times[i][0], times[i][1], now);
	show_scalar(job, "exit_code", "exit code:");
	show_scalar(job, "reason", "reason:");

	long long step, total;
	double loss;
	char text[128] = "-", l[32];
	if (cli_job_progress(job, &step, &total, &loss)) {
		cli_format_number(loss, l, sizeof l);
		if (total > 0)
			snprintf(text, sizeof text, "step %lld/%lld (%.0f%%), loss %s", step, total,
			         100.0 * (double)step / (double)total, l);
		else
			snprintf(text, sizeof text, "step %lld, loss %s", step, l);
	}
	show_line("progress:", text);

	printf("spec:\n");
	/* 15 digits: 0.1 reads "0.1", not "0.10000000000000001" (--json keeps all 17) */
	char *spec = json_dumps(json_object_get(job, "spec"),
	                        JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
	for (char *line = spec, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *v = cli_inert(line);
		printf("  %s\n", v);
		free(v);
		if (!next)
			break;
	}
	free(spec);
}

int cli_cmd_show(struct cli *cli, int argc, char **argv)
{
	const char *id = NULL;
	json_t *job = NULL;
	int rc = one_id(cli, argc, argv, &id);
	if (rc != CLI_CONTINUE)
		return rc;
	if ((rc = cli_connect(cli)) == CLI_OK && (rc = cli_job_get(cli, id, &job)) == CLI_OK) {
		if (cli->json)
			cli_print_json(job);
		else
			show_job(job);
	}
	json_decref(job);
	return rc;
}

/* ---- cancel ------------------------------------------------------------------ */

int cli_cmd_cancel(struct cli *cli, int argc, char **argv)
{
	const char *id = NULL;
	int rc = one_id(cli, argc, argv, &id);
	if (rc != CLI_CONTINUE)
		return rc;
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;
	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "/cancel");
	struct cli_request rq = { .method = "POST", .path = cli_buf_str(&path) };
	struct cli_reply r = { 0 };
	json_t *job = NULL;
	rc = cli_http_send(&cli->http, &rq, &r);
	if (rc == CLI_OK && r.status == 409) {
		/* say which final state, when larchd tells (quietly: the 409 is the news) */
		cli_buf_clear(&path);
		cli_job_path(&path, id, "");
		struct cli_request get = { .method = "GET", .path = cli_buf_str(&path) };
		struct cli_reply g = { 0 };
		const char *state = NULL;
		if (cli_http_send(&cli->http, &get, &g) == CLI_OK && g.status == 200)
			state = cli_job_str(g.json, "state");
		if (cli_job_final(state)) {
			char *who = cli_inert(id), *shown = cli_inert(state);
			fprintf(stderr, "larch: job %s already finished (%s): nothing to cancel (409)\n",
			        who, shown);
			free(who);
			free(shown);
			rc = CLI_REFUSED;
		} else {
			rc = cli_http_fail(&cli->http, &r, id);
		}
		cli_reply_release(&g);
	} else if (rc == CLI_OK && (rc = cli_http_take_object(&cli->http, &r, id, &job)) == CLI_OK) {
		const char *state = cli_job_str(job, "state");
		char *who = cli_inert(cli_job_str(job, "id")), *shown = cli_inert(state);
		if (cli->json)
			cli_print_json(job);
		else if (cli_job_final(state))
			printf("%s: %s\n", who, shown);
		else
			printf("%s: cancelling (%s: it ends after writing a checkpoint)\n", who, shown);
		free(who);
		free(shown);
	}
	json_decref(job);
	cli_reply_release(&r);
	cli_buf_release(&path);
	return rc;
}
