/* service/cli/compare.c - larch compare ID ID [ID ...] --name N [--x step|
 * examples|time] [--rows N] [--best min|max]: one metric of several jobs
 * (GET /v1/metrics) side by side.
 *
 * First a line per job: its name, state, points, last value and best value
 * (each with the x it was reached at). Then the values at the x values every
 * job has a point at (steps, or examples seen; with --x time none are
 * common, so no table), at most --rows of them spread evenly, the last
 * common one always. Then a line per job with the spec fields that differ
 * between the jobs, as dotted paths (optimizer.lr=0.1 batch.global=1024;
 * the spec's name aside: it is in the first table).
 *
 * The series are read with max_points 10000, so that the steps the jobs
 * share survive downsampling for any job of up to 10000 points. A job that
 * is missing or not the caller's is reported on stderr and the rest are
 * compared (exit status 1). --json prints larchd's answer with "differs"
 * ({path: value}) added to each job.
 */
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

#define MAX_JOBS 256
#define READ_POINTS "10000"

struct run {
	const char *id;              /* borrowed from argv */
	json_t *entry;               /* borrowed from the answer; NULL: missing */
	json_t *points;              /* [[x, value(, step)], ...] borrowed */
	json_t *flat;                /* dotted path -> value of its spec (owned) */
	json_t *differs;             /* the differing paths -> value (owned) */
};

/* Adds every leaf of v under prefix to flat ("a.b.c" -> value; arrays are
 * leaves). */
static void flatten(json_t *flat, const char *prefix, json_t *v)
{
	if (!json_is_object(v) || json_object_size(v) == 0) {
		if (*prefix)
			json_object_set(flat, prefix, v);
		return;
	}
	const char *key;
	json_t *child;
	json_object_foreach(v, key, child) {
		size_t len = strlen(prefix) + strlen(key) + 2;
		char *path = malloc(len);
		if (!path)
			abort();
		snprintf(path, len, "%s%s%s", prefix, *prefix ? "." : "", key);
		flatten(flat, path, child);
		free(path);
	}
}

/* Fills each run's differs: the paths whose values are not the same in
 * every run (absent counts as a value, null). */
static void diff_specs(struct run *runs, size_t n)
{
	json_t *paths = json_object();
	for (size_t i = 0; i < n; i++) {
		const char *key;
		json_t *v;
		if (runs[i].flat)
			json_object_foreach(runs[i].flat, key, v)
				json_object_set(paths, key, json_true());
	}
	const char *path;
	json_t *ignored;
	json_object_foreach(paths, path, ignored) {
		if (strcmp(path, "name") == 0)
			continue;
		json_t *first = NULL;
		int same = 1, seen = 0;
		for (size_t i = 0; i < n; i++) {
			if (!runs[i].flat)
				continue;
			json_t *v = json_object_get(runs[i].flat, path);
			if (!seen++)
				first = v;
			else if (!(v && first && json_equal(v, first)) && v != first)
				same = 0;
		}
		for (size_t i = 0; !same && i < n; i++) {
			if (!runs[i].flat)
				continue;
			json_t *v = json_object_get(runs[i].flat, path);
			json_object_set(runs[i].differs, path, v ? v : json_null());
		}
	}
	json_decref(paths);
}

static double num(json_t *v)
{
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static void fmt_x(char *buf, size_t len, double x, const char *axis)
{
	if (strcmp(axis, "time") == 0)
		snprintf(buf, len, "%.1fs", x);
	else
		snprintf(buf, len, "%.0f", x);
}

/* The first table: a line per job. */
static void print_summary(struct run *runs, size_t n, const char *axis, int best_max)
{
	static const struct cli_column cols[] = {
		{ .head = "JOB" }, { .head = "NAME", .elastic = 1 }, { .head = "STATE" },
		{ .head = "POINTS", .right = 1 }, { .head = "LAST", .right = 1 },
		{ .head = "AT", .right = 1 }, { .head = "BEST", .right = 1 }, { .head = "AT", .right = 1 },
	};
	struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
	for (size_t i = 0; i < n; i++) {
		if (!runs[i].entry)
			continue;
		char count[24], last[32] = "-", last_at[32] = "-", best[32] = "-", best_at[32] = "-";
		size_t np = json_array_size(runs[i].points);
		snprintf(count, sizeof count, "%zu", np);
		double bv = NAN, bx = NAN;
		for (size_t k = 0; k < np; k++) {
			json_t *p = json_array_get(runs[i].points, k);
			double v = num(json_array_get(p, 1));
			if (isnan(v))
				continue;
			if (isnan(bv) || (best_max ? v > bv : v < bv)) {
				bv = v;
				bx = num(json_array_get(p, 0));
			}
		}
		if (np) {
			json_t *p = json_array_get(runs[i].points, np - 1);
			cli_format_number(num(json_array_get(p, 1)), last, sizeof last);
			fmt_x(last_at, sizeof last_at, num(json_array_get(p, 0)), axis);
		}
		if (!isnan(bv)) {
			cli_format_number(bv, best, sizeof best);
			fmt_x(best_at, sizeof best_at, bx, axis);
		}
		const char *cells[] = { runs[i].id, cli_job_str(runs[i].entry, "name"),
		                        cli_job_str(runs[i].entry, "state"), count, last, last_at,
		                        best, best_at };
		cli_table_row(t, cells);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
}

/* The value of run r at x (its first point there), or NULL. */
static json_t *point_at(const struct run *r, double x, size_t *from)
{
	size_t np = json_array_size(r->points);
	for (; *from < np; (*from)++) {
		json_t *p = json_array_get(r->points, *from);
		double px = num(json_array_get(p, 0));
		if (px == x)
			return p;
		if (px > x)
			return NULL;
	}
	return NULL;
}

/* The second table: the values at the x values every job has, at most rows
 * of them. Returns how many x values were common. */
static size_t print_common(struct run *runs, size_t n, const char *axis, long long rows)
{
	struct run *base = NULL;
	size_t live = 0;
	for (size_t i = 0; i < n; i++)
		if (runs[i].entry) {
			live++;
			if (!base || json_array_size(runs[i].points) < json_array_size(base->points))
				base = &runs[i];
		}
	if (!base || live < 2 || strcmp(axis, "time") == 0)
		return 0;
	size_t nb = json_array_size(base->points), ncommon = 0;
	double *common = malloc((nb ? nb : 1) * sizeof *common);
	size_t *cursor = calloc(n, sizeof *cursor);
	for (size_t k = 0; k < nb; k++) {
		double x = num(json_array_get(json_array_get(base->points, k), 0));
		int all = 1;
		for (size_t i = 0; i < n && all; i++)
			if (runs[i].entry && !point_at(&runs[i], x, &cursor[i]))
				all = 0;
		if (all && (!ncommon || common[ncommon - 1] != x))
			common[ncommon++] = x;
	}
	if (ncommon) {
		struct cli_column *heads = calloc(live + 1, sizeof *heads);
		const char **cells = calloc(live + 1, sizeof *cells);
		char (*text)[32] = calloc(live + 1, sizeof *text);
		heads[0] = (struct cli_column){ .head = strcmp(axis, "step") ? "EXAMPLES" : "STEP",
		                                .right = 1 };
		size_t c = 1;
		for (size_t i = 0; i < n; i++)
			if (runs[i].entry)
				heads[c++] = (struct cli_column){ .head = runs[i].id, .right = 1 };
		struct cli_table *t = cli_table_new(heads, live + 1);
		size_t shown = ncommon < (size_t)rows ? ncommon : (size_t)rows;
		memset(cursor, 0, n * sizeof *cursor);
		for (size_t r = 0; r < shown; r++) {
			/* evenly spread, the last common x always the last row */
			size_t k = shown == 1 ? ncommon - 1 : r * (ncommon - 1) / (shown - 1);
			fmt_x(text[0], sizeof text[0], common[k], axis);
			cells[0] = text[0];
			c = 1;
			for (size_t i = 0; i < n; i++) {
				if (!runs[i].entry)
					continue;
				json_t *p = point_at(&runs[i], common[k], &cursor[i]);
				cli_format_number(num(json_array_get(p, 1)), text[c], sizeof text[c]);
				if (isnan(num(json_array_get(p, 1))))
					snprintf(text[c], sizeof text[c], "nan");
				cells[c] = text[c];
				c++;
			}
			cli_table_row(t, cells);
		}
		putchar('\n');
		cli_table_print(t, stdout, 0);
		cli_table_free(t);
		free(text);
		free(cells);
		free(heads);
	} else {
		printf("\nno %s that every job has a point at\n", strcmp(axis, "step") ? "x" : "step");
	}
	free(cursor);
	free(common);
	return ncommon;
}

static void print_differs(struct run *runs, size_t n)
{
	putchar('\n');
	for (size_t i = 0; i < n; i++) {
		if (!runs[i].flat)
			continue;
		struct cli_buf line = { 0 };
		cli_buf_addf(&line, "%s ", runs[i].id);
		const char *path;
		json_t *v;
		if (json_object_size(runs[i].differs) == 0)
			cli_buf_adds(&line, " (the same spec as the others)");
		json_object_foreach(runs[i].differs, path, v) {
			char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
			cli_buf_adds(&line, " ");
			cli_buf_add_inert(&line, path, strlen(path), 0);
			cli_buf_adds(&line, "=");
			cli_buf_add_inert(&line, text ? text : "?", text ? strlen(text) : 1, 60);
			free(text);
		}
		printf("%s\n", cli_buf_str(&line));
		cli_buf_release(&line);
	}
}

int cli_cmd_compare(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "name", required_argument, NULL, 'n' }, { "x", required_argument, NULL, 'x' },
		{ "rows", required_argument, NULL, 'r' }, { "best", required_argument, NULL, 'b' },
		CLI_COMMON_OPTIONS, { 0 },
	};
	const char *name = NULL, *axis = "step", *best = NULL;
	long long rows = 20;
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			name = optarg;
			break;
		case 'x':
			if (strcmp(optarg, "step") && strcmp(optarg, "examples") && strcmp(optarg, "time"))
				return cli_usage_error(cli, "--x: must be step, examples or time");
			axis = optarg;
			break;
		case 'r':
			if ((rc = cli_parse_long(cli, "--rows", optarg, 1, 100000, &rows)) != CLI_OK)
				return rc;
			break;
		case 'b':
			if (strcmp(optarg, "min") && strcmp(optarg, "max"))
				return cli_usage_error(cli, "--best: must be min or max");
			best = optarg;
			break;
		default:
			if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
				return rc;
		}
	}
	size_t n = (size_t)(argc - optind);
	if (n < 2)
		return cli_usage_error(cli, "two or more job ids are required");
	if (n > MAX_JOBS)
		return cli_usage_error(cli, "at most %d job ids", MAX_JOBS);
	if (!name)
		return cli_usage_error(cli, "--name is required (the metric to compare)");
	/* an accuracy is best high, anything else (a loss) low */
	int best_max = best ? strcmp(best, "max") == 0
	                    : strstr(name, "acc") != NULL;
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;

	struct cli_buf path = { 0 }, ids = { 0 };
	for (size_t i = 0; i < n; i++)
		cli_buf_addf(&ids, "%s%s", i ? "," : "", argv[optind + i]);
	cli_buf_adds(&path, "/v1/metrics");
	cli_http_param(&path, "jobs", cli_buf_str(&ids));
	cli_http_param(&path, "name", name);
	cli_http_param(&path, "x", axis);
	cli_http_param(&path, "max_points", READ_POINTS);
	json_t *answer = NULL;
	rc = cli_http_get_json(&cli->http, cli_buf_str(&path), NULL, &answer);
	cli_buf_release(&path);
	cli_buf_release(&ids);
	if (rc != CLI_OK)
		return rc;
	json_t *jobs = json_object_get(answer, "jobs");
	if (!json_is_array(jobs) || json_array_size(jobs) != n) {
		fputs("larch: larchd's compare answer has no \"jobs\" array of the jobs asked for\n",
		      stderr);
		json_decref(answer);
		return CLI_REFUSED;
	}

	struct run *runs = calloc(n, sizeof *runs);
	int status = CLI_OK;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(jobs, i);
		runs[i].id = argv[optind + i];
		json_t *err = json_object_get(e, "error");
		if (err) {
			char *who = cli_inert(runs[i].id);
			char *msg = cli_inert(json_string_value(json_object_get(err, "message")));
			fprintf(stderr, "larch: job %s: %s\n", who, msg);
			free(msg);
			free(who);
			status = CLI_REFUSED;
			continue;
		}
		runs[i].entry = e;
		runs[i].points = json_object_get(e, "points");
		json_t *job = NULL;
		if ((rc = cli_job_get(cli, runs[i].id, &job)) != CLI_OK) {
			status = rc;
			continue;
		}
		runs[i].flat = json_object();
		runs[i].differs = json_object();
		flatten(runs[i].flat, "", json_object_get(job, "spec"));
		json_decref(job);
	}
	diff_specs(runs, n);

	if (cli->json) {
		for (size_t i = 0; i < n; i++)
			if (runs[i].entry && runs[i].differs)
				json_object_set(runs[i].entry, "differs", runs[i].differs);
		cli_print_json(answer);
	} else {
		char *shown = cli_inert(name);
		printf("%s by %s (best: %s)\n\n", shown, axis, best_max ? "highest" : "lowest");
		free(shown);
		print_summary(runs, n, axis, best_max);
		print_common(runs, n, axis, rows);
		print_differs(runs, n);
	}
	for (size_t i = 0; i < n; i++) {
		json_decref(runs[i].flat);
		json_decref(runs[i].differs);
	}
	free(runs);
	json_decref(answer);
	return status;
}
