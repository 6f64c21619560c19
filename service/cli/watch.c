/* service/cli/watch.c - larch watch ID: one live progress line until the job
 * ends; exit status 0 when it COMPLETED, 1 otherwise.
 *
 *   j-000123  RUNNING  step 120/4680 (3%)  loss 0.4312  24123 samples/s  eta 3m14s
 *
 * The job is polled with If-None-Match (a 304 costs larchd nothing). The
 * speed is the trainer's own latest train/samples_per_s (train/tokens_per_s
 * for gpt), read from the job's metrics when the step moves; the ETA comes
 * from it and the spec's batch size, or, before the trainer has reported a
 * speed, from the steps this watch has seen go by. On a terminal the line
 * is redrawn in place; otherwise a new line is printed when the state or
 * step changes. With --json each new version of the job is one line.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"

struct watch {
	const char *id;
	json_t *job;                 /* the latest version (owned) */
	char etag[256];
	long long step, total, speed_step;
	double loss, speed;          /* speed: samples or tokens per second; NaN = none */
	const char *speed_unit;      /* "samples/s" or "tokens/s" */
	double first_t;              /* when this watch first saw a step, and which */
	long long first_step;
};

/* Polls the job; sets *changed when larchd sent a new version. */
static int poll_job(struct cli *cli, struct watch *w, int *changed)
{
	struct cli_buf path = { 0 };
	cli_job_path(&path, w->id, "");
	struct cli_request rq = { .method = "GET", .path = cli_buf_str(&path),
	                          .if_none_match = w->etag[0] ? w->etag : NULL };
	struct cli_reply r = { 0 };
	json_t *job = NULL;
	int rc = cli_http_send(&cli->http, &rq, &r);
	*changed = 0;
	if (rc == CLI_OK && r.status == 304 && w->job) {
		rc = CLI_OK;
	} else if (rc == CLI_OK && (rc = cli_http_take_object(&cli->http, &r, w->id, &job)) == CLI_OK) {
		json_decref(w->job);
		w->job = job;
		snprintf(w->etag, sizeof w->etag, "%s", r.etag);
		*changed = 1;
	}
	cli_reply_release(&r);
	cli_buf_release(&path);
	return rc;
}

/* The spec's integer at a.b, or 0. */
static long long spec_int(const json_t *job, const char *a, const char *b)
{
	json_t *v = json_object_get(json_object_get(json_object_get(job, "spec"), a), b);
	return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* Reads the trainer's latest speed from the job's metrics (the last few
 * progress lines' worth of steps). Failures leave the speed as it was. */
static void poll_speed(struct cli *cli, struct watch *w)
{
	json_t *log_every = json_object_get(json_object_get(w->job, "spec"), "log_every");
	long long window = 2 * (json_is_integer(log_every) ? json_integer_value(log_every) : 10);
	char from[32];
	snprintf(from, sizeof from, "%lld", w->step > window ? w->step - window : 0);
	struct cli_buf path = { 0 };
	cli_job_path(&path, w->id, "/metrics");
	cli_http_param(&path, "name", w->speed_unit[0] == 't' ? "train/tokens_per_s"
	                                                      : "train/samples_per_s");
	cli_http_param(&path, "from_step", from);
	struct cli_request rq = { .method = "GET", .path = cli_buf_str(&path) };
	struct cli_reply r = { 0 };
	if (cli_http_send(&cli->http, &rq, &r) == CLI_OK && r.status == 200) {
		json_t *series = json_object_get(r.json, "series"), *points;
		const char *key;
		json_object_foreach(series, key, points) {
			json_t *last = json_array_get(points, json_array_size(points) - 1);
			json_t *step = json_array_get(last, 0), *value = json_array_get(last, 1);
			if (json_is_number(step) && json_is_number(value) &&
			    (long long)json_number_value(step) >= w->speed_step) {
				w->speed_step = (long long)json_number_value(step);
				w->speed = json_number_value(value);
			}
		}
	}
	cli_reply_release(&r);
	cli_buf_release(&path);
}

/* Seconds left: from the trainer's speed and the batch, else from the
 * steps seen go by; negative when unknown. */
static double eta(const struct watch *w, double now)
{
	if (w->total <= 0 || w->step < 0)
		return -1;
	double left = (double)(w->total - w->step);
	double per_step = (double)spec_int(w->job, "batch", "global");
	if (w->speed_unit[0] == 't')
		per_step *= (double)spec_int(w->job, "model", "seq");
	if (isfinite(w->speed) && w->speed > 0 && per_step > 0)
		return left * per_step / w->speed;
	if (w->first_t > 0 && w->step > w->first_step && now > w->first_t)
		return left * (now - w->first_t) / (double)(w->step - w->first_step);
	return -1;
}

/* The progress line, made inert. */
static void describe(const struct watch *w, struct cli_buf *line, double now)
{
	const char *state = cli_job_str(w->job, "state");
	char *id = cli_inert(cli_job_str(w->job, "id")), *st = cli_inert(state);
	char num[64];
	cli_buf_addf(line, "%s  %s", id, st);
	if (!state || strcmp(state, "PENDING") == 0 || strcmp(state, "QUEUED") == 0)
		cli_buf_adds(line, "  waiting to start");
	if (w->step >= 0) {
		cli_buf_addf(line, "  step %lld", w->step);
		if (w->total > 0)
			cli_buf_addf(line, "/%lld (%.0f%%)", w->total,
			             100.0 * (double)w->step / (double)w->total);
	}
	if (isfinite(w->loss)) {
		cli_format_number(w->loss, num, sizeof num);
		cli_buf_addf(line, "  loss %s", num);
	}
	if (cli_job_final(state)) {
		json_t *code = json_object_get(w->job, "exit_code");
		const char *reason = cli_job_str(w->job, "reason");
		double t0 = cli_parse_time(cli_job_str(w->job, "started_at"));
		double t1 = cli_parse_time(cli_job_str(w->job, "ended_at"));
		if (t0 >= 0 && t1 >= t0) {
			cli_format_duration(t1 - t0, num, sizeof num);
			cli_buf_addf(line, "  in %s", num);
		}
		if (json_is_integer(code) && json_integer_value(code) != 0)
			cli_buf_addf(line, "  exit code %lld", (long long)json_integer_value(code));
		if (reason && strcmp(state, "COMPLETED") != 0) {
			cli_buf_adds(line, ": ");
			cli_buf_add_inert(line, reason, strlen(reason), 0);
		}
	} else if (state && strcmp(state, "RUNNING") == 0) {
		if (isfinite(w->speed))
			cli_buf_addf(line, "  %.0f %s", w->speed, w->speed_unit);
		cli_format_duration(eta(w, now), num, sizeof num);
		cli_buf_addf(line, "  eta %s", num);
	}
	free(id);
	free(st);
}

int cli_cmd_watch(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' }, CLI_COMMON_OPTIONS, { 0 },
	};
	double interval = 1;
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'i' && (rc = cli_parse_double(cli, "--interval", optarg, 0.05, 3600,
		                                       &interval)) != CLI_OK)
			return rc;
		else if (c != 'i' && (rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one job id is required");
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;

	struct watch w = { .id = argv[optind], .step = -1, .total = -1, .speed_step = -1,
	                   .loss = NAN, .speed = NAN, .speed_unit = "samples/s" };
	int tty = !cli->json && isatty(STDOUT_FILENO);
	struct cli_buf line = { 0 };
	char shown_state[32] = "";   /* what the last line printed showed (not on a terminal) */
	long long shown_step = -2;
	for (;;) {
		int changed;
		if ((rc = poll_job(cli, &w, &changed)) != CLI_OK)
			break;
		const char *state = cli_job_str(w.job, "state");
		int final = cli_job_final(state);
		double now = cli_now();
		long long step_was = w.step;
		const char *model = json_string_value(json_object_get(
			json_object_get(json_object_get(w.job, "spec"), "model"), "type"));
		w.speed_unit = model && strcmp(model, "gpt") == 0 ? "tokens/s" : "samples/s";
		cli_job_progress(w.job, &w.step, &w.total, &w.loss);
		if (w.step > 0 && w.first_t == 0) {
			w.first_t = now;
			w.first_step = w.step;
		}
		if (w.step != step_was && !final && state && strcmp(state, "RUNNING") == 0)
			poll_speed(cli, &w);

		if (cli->json) {
			if (changed)
				cli_print_json(w.job);
		} else {
			cli_buf_clear(&line);
			describe(&w, &line, now);
			if (tty) {
				printf("\r%s\033[K", cli_buf_str(&line));
				fflush(stdout);
			} else if (w.step != shown_step || strcmp(state ? state : "", shown_state) != 0) {
				/* a new line when the state or the step moved, not for a new ETA */
				printf("%s\n", cli_buf_str(&line));
				fflush(stdout);
				shown_step = w.step;
				snprintf(shown_state, sizeof shown_state, "%s", state ? state : "");
			}
		}
		if (final) {
			if (tty)
				putchar('\n');
			rc = strcmp(state, "COMPLETED") == 0 ? CLI_OK : CLI_REFUSED;
			break;
		}
		cli_sleep(interval);
	}
	cli_buf_release(&line);
	json_decref(w.job);
	return rc;
}
