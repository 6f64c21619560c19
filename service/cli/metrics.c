/* service/cli/metrics.c - larch metrics ID [--name N ...] [--from S] [--to S]
 * [--max-points N] [--csv]: a job's metric series (GET /v1/jobs/{id}/metrics)
 * as one table, a row per step and a column per metric (blank where a metric
 * has no point at that step), or as CSV with the same shape:
 *
 *   step,train/loss,train/lr
 *   1,2.3026,0.01
 *
 * Values are printed with %.6g in the table and %.9g in CSV; a non-finite
 * value (null from larchd) is "nan". A job that has not reported any point
 * yet (larchd's "reported": false) gets one line on stderr saying so and
 * its state, and exit status 0; so does a step range that holds no point.
 */
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

#define MAX_NAMES 64

struct column {
	const char *name;        /* borrowed from the answer or argv */
	json_t *points;          /* [[step, value], ...] borrowed from the answer */
	size_t next;
};

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct column *)a)->name, ((const struct column *)b)->name);
}

/* Step of column c's next point, or -1 when it has none left. */
static double next_step(const struct column *c)
{
	json_t *p = json_array_get(c->points, c->next);
	json_t *s = json_array_get(p, 0);
	return json_is_number(s) ? json_number_value(s) : -1;
}

static void csv_field(struct cli_buf *b, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		cli_buf_adds(b, s);
		return;
	}
	cli_buf_adds(b, "\"");
	for (; *s; s++)
		cli_buf_adds(b, *s == '"' ? "\"\"" : (char[2]){ *s, '\0' });
	cli_buf_adds(b, "\"");
}

/* Prints the columns merged by step, as CSV or a table. */
static void print_series(struct column *cols, size_t n, int csv)
{
	struct cli_column *heads = calloc(n + 1, sizeof *heads);
	const char **cells = calloc(n + 1, sizeof *cells);
	char (*text)[40] = calloc(n + 1, sizeof *text);
	struct cli_buf line = { 0 };
	heads[0] = (struct cli_column){ .head = "STEP", .right = 1 };
	for (size_t i = 0; i < n; i++)
		heads[i + 1] = (struct cli_column){ .head = cols[i].name, .right = 1 };
	struct cli_table *t = csv ? NULL : cli_table_new(heads, n + 1);
	if (csv) {
		cli_buf_adds(&line, "step");
		for (size_t i = 0; i < n; i++) {
			cli_buf_adds(&line, ",");
			csv_field(&line, cols[i].name);
		}
		printf("%s\n", cli_buf_str(&line));
	}
	for (;;) {
		double step = -1;
		for (size_t i = 0; i < n; i++) {
			double s = next_step(&cols[i]);
			if (s >= 0 && (step < 0 || s < step))
				step = s;
		}
		if (step < 0)
			break;
		snprintf(text[0], sizeof text[0], "%.0f", step);
		cells[0] = text[0];
		for (size_t i = 0; i < n; i++) {
			cells[i + 1] = "";
			if (next_step(&cols[i]) != step)
				continue;
			json_t *v = json_array_get(json_array_get(cols[i].points, cols[i].next++), 1);
			if (json_is_number(v))
				snprintf(text[i + 1], sizeof text[i + 1], csv ? "%.9g" : "%.6g",
				         json_number_value(v));
			else
				snprintf(text[i + 1], sizeof text[i + 1], "nan");
			cells[i + 1] = text[i + 1];
		}
		if (t) {
			cli_table_row(t, cells);
			continue;
		}
		cli_buf_clear(&line);
		for (size_t i = 0; i <= n; i++)
			cli_buf_addf(&line, "%s%s", i ? "," : "", cells[i]);
		printf("%s\n", cli_buf_str(&line));
	}
	if (t)
		cli_table_print(t, stdout, 0);
	cli_table_free(t);
	cli_buf_release(&line);
	free(text);
	free(cells);
	free(heads);
}

/* Why there is nothing to print, on stderr:
 *   larch: job j-000123 has not reported any metrics yet (QUEUED)
 *   larch: job j-000123 reported no metrics (FAILED)
 *   larch: job j-000123 has no points from step 10 to step 20 */
static void say_empty(const char *id, int not_reported, const char *state, const char *from,
                      const char *to)
{
	char *who = cli_inert(id), *st = cli_inert(state ? state : "state unknown");
	if (not_reported && cli_job_final(state))
		fprintf(stderr, "larch: job %s reported no metrics (%s)\n", who, st);
	else if (not_reported)
		fprintf(stderr, "larch: job %s has not reported any metrics yet (%s)\n", who, st);
	else
		fprintf(stderr, "larch: job %s has no points%s%s%s%s\n", who, from ? " from step " : "",
		        from ? from : "", to ? " to step " : "", to ? to : "");
	free(st);
	free(who);
}

int cli_cmd_metrics(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "name", required_argument, NULL, 'n' }, { "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' }, { "max-points", required_argument, NULL, 'm' },
		{ "csv", no_argument, NULL, 'c' }, CLI_COMMON_OPTIONS, { 0 },
	};
	const char *names[MAX_NAMES], *from = NULL, *to = NULL, *max_points = NULL;
	size_t nnames = 0;
	int csv = 0, c, rc;
	long long v;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (nnames == MAX_NAMES)
				return cli_usage_error(cli, "--name: at most %d", MAX_NAMES);
			names[nnames++] = optarg;
			break;
		case 'f':
		case 't':
		case 'm':
			if ((rc = cli_parse_long(cli, c == 'f' ? "--from" : c == 't' ? "--to" : "--max-points",
			                         optarg, c == 'm' ? 1 : 0, (1LL << 53), &v)) != CLI_OK)
				return rc;
			*(c == 'f' ? &from : c == 't' ? &to : &max_points) = optarg;
			break;
		case 'c':
			csv = 1;
			break;
		default:
			if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
				return rc;
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one job id is required");
	const char *id = argv[optind];
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;

	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "/metrics");
	for (size_t i = 0; i < nnames; i++)
		cli_http_param(&path, "name", names[i]);
	cli_http_param(&path, "from_step", from);
	cli_http_param(&path, "to_step", to);
	cli_http_param(&path, "max_points", max_points);
	json_t *answer = NULL;
	rc = cli_http_get_json(&cli->http, cli_buf_str(&path), id, &answer);
	cli_buf_release(&path);
	if (rc != CLI_OK)
		return rc;
	json_t *series = json_object_get(answer, "series");
	if (!json_is_object(series)) {
		fputs("larch: larchd's metrics answer has no \"series\" object\n", stderr);
		json_decref(answer);
		return CLI_REFUSED;
	}
	if (cli->json) {
		cli_print_json(answer);
		json_decref(answer);
		return CLI_OK;
	}

	json_t *reported = json_object_get(answer, "reported");
	if (json_object_size(series) == 0 && (json_is_false(reported) || !nnames)) {
		say_empty(id, json_is_false(reported),
		          json_string_value(json_object_get(answer, "state")), from, to);
		json_decref(answer);
		return CLI_OK;
	}

	/* the columns: the names asked for, in that order; else all, sorted */
	struct column *cols = calloc(json_object_size(series) + nnames + 1, sizeof *cols);
	size_t ncols = 0;
	const char *key;
	json_t *points;
	if (nnames) {
		for (size_t i = 0; i < nnames; i++) {
			points = json_object_get(series, names[i]);
			if (json_is_array(points)) {
				cols[ncols++] = (struct column){ .name = names[i], .points = points };
			} else {
				char *shown = cli_inert(names[i]), *who = cli_inert(id);
				fprintf(stderr, "larch: job %s has no metric \"%s\"\n", who, shown);
				free(who);
				free(shown);
			}
		}
	} else {
		json_object_foreach(series, key, points)
			if (json_is_array(points))
				cols[ncols++] = (struct column){ .name = key, .points = points };
		qsort(cols, ncols, sizeof *cols, by_name);
	}
	print_series(cols, ncols, csv);
	free(cols);
	json_decref(answer);
	return CLI_OK;
}
