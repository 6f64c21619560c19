/* service/cli/sweep.c - `larch sweep submit FILE | ls | show ID | cancel ID`:
 * sweeps over child jobs (docs/api.md, "Sweeps"). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "jobs.h"
#include "output.h"

/* A JSON number as text ("-" for null or absent). */
static void num_text(const json_t *v, char *buf, size_t len)
{
	if (json_is_integer(v))
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
	else if (json_is_number(v))
		snprintf(buf, len, "%.4g", json_number_value(v));
	else
		snprintf(buf, len, "-");
}

static void sweep_path(struct cli_buf *b, const char *id, const char *suffix)
{
	cli_buf_adds(b, "/v1/sweeps/");
	cli_http_escape(b, id);
	cli_buf_adds(b, suffix);
}

/* "batch.global=256 optimizer.lr=0.05" from a child's params, made inert;
 * reals to 15 digits, as a person wrote them (0.05, not 0.050000000000000003) */
static char *params_cell(const json_t *params)
{
	struct cli_buf b = { 0 };
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)params, key, v) {
		char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
		cli_buf_addf(&b, "%s%s=%s", b.len ? " " : "", key, text ? text : "?");
		free(text);
	}
	char *out = cli_inert(cli_buf_str(&b));
	cli_buf_release(&b);
	return out;
}

static void print_counts(const json_t *sweep)
{
	const char *state;
	json_t *n;
	int first = 1;
	json_object_foreach(json_object_get(sweep, "counts"), state, n) {
		if (json_integer_value(n) <= 0)
			continue;
		printf("%s%lld %s", first ? "" : ", ", (long long)json_integer_value(n), state);
		first = 0;
	}
	printf("%s\n", first ? "none" : "");
}

/* num_text of each of o's members keys[0..n) into out[0..n). */
static void num_fields(const json_t *o, const char *const *keys, char (*out)[32], size_t n)
{
	for (size_t k = 0; k < n; k++)
		num_text(json_object_get(o, keys[k]), out[k], sizeof out[k]);
}

/* A batch_scaling sweep's study: S(B), E(B), time and speed-up to the
 * target per batch size, then the fit (or the note why there is none). */
static void show_study(const json_t *study)
{
	char ref[32];
	num_text(json_object_get(study, "reference"), ref, sizeof ref);
	printf("\nstudy (reference batch %s; speed-up in time to target against batch ", ref);
	num_text(json_object_get(study, "speedup_against"), ref, sizeof ref);
	printf("%s):\n", ref);
	static const struct cli_column cols[] = {
		{ .head = "BATCH" }, { .head = "JOB" }, { .head = "STATE" }, { .head = "STEPS" },
		{ .head = "EXAMPLES" }, { .head = "SECONDS" }, { .head = "SPEEDUP" },
	};
	struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(study, "points"), i, p) {
		static const char *const keys[] = { "batch", "steps", "examples", "seconds", "speedup" };
		char v[5][32];
		num_fields(p, keys, v, 5);
		char *job = cli_inert(cli_job_str(p, "job")), *st = cli_inert(cli_job_str(p, "state"));
		const char *cells[] = { v[0], job, st, v[1], v[2], v[3], v[4] };
		cli_table_row(t, cells);
		free(job);
		free(st);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
	const json_t *fit = json_object_get(study, "fit");
	if (json_is_object(fit)) {
		char smin[32], emin[32], bcrit[32], rms[32];
		num_text(json_object_get(fit, "s_min"), smin, sizeof smin);
		num_text(json_object_get(fit, "e_min"), emin, sizeof emin);
		num_text(json_object_get(fit, "b_crit"), bcrit, sizeof bcrit);
		num_text(json_object_get(fit, "rms"), rms, sizeof rms);
		printf("fit:       S = S_min (1 + b_crit/B): S_min %s, E_min %s, b_crit %s "
		       "(rms log residual %s)\n", smin, emin, bcrit, rms);
		printf("residuals:");
		json_array_foreach(json_object_get(fit, "residuals"), i, p) {
			num_text(p, rms, sizeof rms);
			printf(" %s", rms);
		}
		printf("\n");
	} else {
		printf("fit:       none\n");
	}
	if (json_is_string(json_object_get(study, "note"))) {
		char *note = cli_inert(cli_job_str(study, "note"));
		printf("note:      %s\n", note);
		free(note);
	}
}

static void show_sweep(const json_t *s)
{
	char *id = cli_inert(cli_job_str(s, "id")), *name = cli_inert(cli_job_str(s, "name")),
	     *owner = cli_inert(cli_job_str(s, "owner")), *state = cli_inert(cli_job_str(s, "state"));
	printf("id:        %s\nname:      %s\nowner:     %s\nstate:     %s\nchildren:  ", id, name,
	       owner, state);
	print_counts(s);
	free(id);
	free(name);
	free(owner);
	free(state);
	const json_t *target = json_object_get(s, "target");
	if (json_is_object(target)) {
		char value[32];
		num_text(json_object_get(target, "value"), value, sizeof value);
		char *metric = cli_inert(cli_job_str(target, "metric"));
		printf("target:    %s %s %s\n", metric,
		       strcmp(cli_job_str(target, "mode") ? cli_job_str(target, "mode") : "", "min")
		       ? ">=" : "<=", value);
		free(metric);
	}
	/* a SLURM column ("<array>_<task>") where the children went to Slurm */
	static const struct cli_column cols[] = {
		{ .head = "#" }, { .head = "JOB" }, { .head = "SLURM" },
		{ .head = "PARAMS", .elastic = 1 }, { .head = "STATE" }, { .head = "BEST" },
		{ .head = "STEPS" }, { .head = "EXAMPLES" }, { .head = "SECONDS" },
	};
	static const struct cli_column local_cols[] = {
		{ .head = "#" }, { .head = "JOB" }, { .head = "PARAMS", .elastic = 1 },
		{ .head = "STATE" }, { .head = "BEST" }, { .head = "STEPS" }, { .head = "EXAMPLES" },
		{ .head = "SECONDS" },
	};
	const json_t *list = json_object_get(s, "children");
	int slurm = 0;
	size_t i;
	json_t *c;
	json_array_foreach(list, i, c)
		if (json_is_string(json_object_get(c, "slurm_job_id")))
			slurm = 1;
	struct cli_table *t = slurm ? cli_table_new(cols, sizeof cols / sizeof cols[0])
	                            : cli_table_new(local_cols, sizeof local_cols / sizeof local_cols[0]);
	json_array_foreach(list, i, c) {
		static const char *const keys[] = { "index", "best", "steps_to_target",
		                                    "examples_to_target", "seconds_to_target" };
		char v[5][32];
		num_fields(c, keys, v, 5);
		char *job = cli_inert(cli_job_str(c, "job")), *params = params_cell(
			json_object_get(c, "params")), *st = cli_inert(cli_job_str(c, "state")),
			*sid = cli_inert(cli_job_str(c, "slurm_job_id"));
		const char *cells[] = { v[0], job, sid, params, st, v[1], v[2], v[3], v[4] };
		const char *local[] = { v[0], job, params, st, v[1], v[2], v[3], v[4] };
		cli_table_row(t, slurm ? cells : local);
		free(job);
		free(params);
		free(st);
		free(sid);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
	if (json_is_object(json_object_get(s, "study")))
		show_study(json_object_get(s, "study"));
}

static int sweep_submit(struct cli *cli, const char *file)
{
	size_t len;
	char *text = cli_read_spec(file, &len, NULL);
	if (!text)
		return CLI_USAGE;
	int rc = cli_connect(cli);
	if (rc != CLI_OK) {
		free(text);
		return rc;
	}
	struct cli_request rq = { .method = "POST", .path = "/v1/sweeps", .body = text,
	                          .body_len = len };
	struct cli_reply r = { 0 };
	json_t *s = NULL;
	rc = cli_http_send(&cli->http, &rq, &r);
	if (rc == CLI_OK)
		rc = cli_http_take_object(&cli->http, &r, NULL, &s);
	if (rc == CLI_OK) {
		if (cli->json) {
			cli_print_json(s);
		} else {
			char *id = cli_inert(cli_job_str(s, "id"));
			printf("%s\n", id);
			free(id);
		}
	}
	json_decref(s);
	cli_reply_release(&r);
	free(text);
	return rc;
}

static int sweep_ls(struct cli *cli)
{
	int rc = cli_connect(cli);
	if (rc != CLI_OK)
		return rc;
	json_t *sweeps = json_array(), *page = NULL;
	char *cursor = NULL;
	rc = cli_http_get_list(&cli->http, "/v1/sweeps?limit=500", "sweeps", 1, sweeps, &page,
	                       &cursor);
	if (rc == CLI_OK && cli->json) {
		json_object_del(page, "next_cursor");
		json_object_set(page, "sweeps", sweeps);
		cli_print_json(page);
	} else if (rc == CLI_OK) {
		static const struct cli_column cols[] = {
			{ .head = "ID" }, { .head = "NAME", .elastic = 1 }, { .head = "OWNER" },
			{ .head = "STATE" }, { .head = "CHILDREN" }, { .head = "DONE" }, { .head = "AGE" },
		};
		struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
		double now = (double)time(NULL);
		size_t i;
		json_t *s;
		json_array_foreach(sweeps, i, s) {
			const json_t *counts = json_object_get(s, "counts");
			long long done = 0;
			static const char *const final[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT" };
			for (size_t k = 0; k < 4; k++)
				done += json_integer_value(json_object_get(counts, final[k]));
			char n[24], d[24], age[32];
			num_text(json_object_get(s, "children_count"), n, sizeof n);
			snprintf(d, sizeof d, "%lld", done);
			double at = cli_parse_time(cli_job_str(s, "created_at"));
			cli_format_age(at > 0 ? now - at : 0, age, sizeof age);
			char *id = cli_inert(cli_job_str(s, "id")), *name = cli_inert(cli_job_str(s, "name")),
			     *owner = cli_inert(cli_job_str(s, "owner")),
			     *state = cli_inert(cli_job_str(s, "state"));
			const char *cells[] = { id, name, owner, state, n, d, age };
			cli_table_row(t, cells);
			free(id);
			free(name);
			free(owner);
			free(state);
		}
		cli_table_print(t, stdout, cli_term_width());
		cli_table_free(t);
	}
	free(cursor);
	json_decref(page);
	json_decref(sweeps);
	return rc;
}

static int sweep_one(struct cli *cli, const char *verb, const char *id)
{
	int rc = cli_connect(cli);
	if (rc != CLI_OK)
		return rc;
	int cancel = strcmp(verb, "cancel") == 0;
	struct cli_buf path = { 0 };
	sweep_path(&path, id, cancel ? "/cancel" : "");
	struct cli_request rq = { .method = cancel ? "POST" : "GET", .path = cli_buf_str(&path) };
	struct cli_reply r = { 0 };
	json_t *s = NULL;
	rc = cli_http_send(&cli->http, &rq, &r);
	if (rc == CLI_OK)
		rc = cli_http_take_object(&cli->http, &r, NULL, &s);
	if (rc == CLI_OK && cli->json) {
		cli_print_json(s);
	} else if (rc == CLI_OK && cancel) {
		char *sid = cli_inert(cli_job_str(s, "id")), *state = cli_inert(cli_job_str(s, "state"));
		printf("%s: %s; children: ", sid, state);
		print_counts(s);
		free(sid);
		free(state);
	} else if (rc == CLI_OK) {
		show_sweep(s);
	}
	json_decref(s);
	cli_reply_release(&r);
	cli_buf_release(&path);
	return rc;
}

int cli_cmd_sweep(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = { CLI_COMMON_OPTIONS, { 0 } };
	int c, rc;
	/* the options anywhere (getopt moves the verb and its arguments last) */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
		if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	if (optind >= argc)
		return cli_usage_error(cli, "a verb is required: submit FILE, ls, show ID, cancel ID");
	const char *verb = argv[optind++];
	int left = argc - optind;
	if (strcmp(verb, "ls") == 0) {
		if (left)
			return cli_usage_error(cli, "ls takes no argument");
		return sweep_ls(cli);
	}
	if (strcmp(verb, "submit") == 0 || strcmp(verb, "show") == 0 ||
	    strcmp(verb, "cancel") == 0) {
		if (left != 1)
			return cli_usage_error(cli, "%s takes one %s", verb,
			                       verb[1] == 'u' ? "file (or - for standard input)"
			                                      : "sweep id");
		if (verb[1] == 'u')
			return sweep_submit(cli, argv[optind]);
		return sweep_one(cli, verb, argv[optind]);
	}
	return cli_usage_error(cli, "no verb \"%s\" (submit, ls, show, cancel)", verb);
}
