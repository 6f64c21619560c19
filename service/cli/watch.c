/* service/cli/watch.c - larch watch ID: one live progress line until the job
 * ends; exit status 0 when it COMPLETED, 1 otherwise.
 *
 *   j-000123  RUNNING  step 120/4680 (3%)  loss 0.4312  1.20 steps/s  2458 samples/s  eta 1h03m
 *   j-000123  CANCELLED  stopped at step 9/17 (53%)  loss 0.51  in 12s: cancelled by alice
 *
 * The job is polled with If-None-Match (a 304 costs larchd nothing). The
 * total is the job's progress.total_steps (larchd knows it from the submit:
 * the spec's steps, or its epochs and the data's size), else the spec's
 * steps. Both rates are exponential moving averages with a time constant of
 * RATE_TAU seconds, weighted by the time between the values they take in,
 * so a one-off slow step (an eval, a checkpoint) moves them a little: steps/s
 * from the steps this watch sees go by; samples/s (tokens/s for gpt) from
 * the trainer's own train/samples_per_s (train/tokens_per_s), read from the
 * job's metrics when the step moves. The ETA is the steps left over the
 * smoothed steps/s (before this watch has seen two steps: the trainer's
 * speed over the batch). A job that ended other than COMPLETED shows the
 * step it stopped at, never its total as if it were done. On a terminal the
 * line is redrawn in place; otherwise a new line is printed when the state
 * or step changes. With --json each new version of the job is one line.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs.h"

#define RATE_TAU 30.0            /* seconds: the rates' time constant */

struct watch {
	const char *id;
	json_t *job;                 /* the latest version (owned) */
	char etag[256];
	long long step, total, speed_step;
	double loss, speed;          /* speed: samples or tokens per second, smoothed; NaN = none */
	double speed_t;              /* when speed last took in a value */
	const char *speed_unit;      /* "samples/s" or "tokens/s" */
	double rate;                 /* steps per second, smoothed; NaN = none */
	double rate_t;               /* when rate_step was seen (0: no step seen yet) */
	long long rate_step;
};

/* avg moved towards x, a value that stands for the last dt seconds. */
static double smooth(double avg, double x, double dt)
{
	if (!isfinite(avg))
		return x;
	return avg + (1.0 - exp(-dt / RATE_TAU)) * (x - avg);
}

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

/* The spec's integer at the top level key, or 0. */
static long long spec_int_top(const json_t *job, const char *key)
{
	json_t *v = json_object_get(json_object_get(job, "spec"), key);
	return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* Takes in the trainer's speed since the last read from the job's metrics
 * (the last few progress lines' worth of steps). Failures leave the speed
 * as it was. */
static void poll_speed(struct cli *cli, struct watch *w, double now)
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
		json_t *series = json_object_get(r.json, "series"), *points, *point;
		const char *key;
		long long newest = w->speed_step;
		double sum = 0;
		size_t n = 0, i;
		/* the points newer than the last one taken in, as one mean */
		json_object_foreach(series, key, points) {
			json_array_foreach(points, i, point) {
				json_t *step = json_array_get(point, 0), *value = json_array_get(point, 1);
				if (!json_is_number(step) || !json_is_number(value) ||
				    (long long)json_number_value(step) <= w->speed_step)
					continue;
				sum += json_number_value(value);
				n++;
				if ((long long)json_number_value(step) > newest)
					newest = (long long)json_number_value(step);
			}
		}
		if (n) {
			w->speed = smooth(w->speed, sum / (double)n, now - w->speed_t);
			w->speed_t = now;
			w->speed_step = newest;
		}
	}
	cli_reply_release(&r);
	cli_buf_release(&path);
}

/* Samples (tokens for gpt) a step, from the spec; 0 when unknown. */
static double per_step(const struct watch *w)
{
	double n = (double)spec_int(w->job, "batch", "global");
	if (w->speed_unit[0] == 't')
		n *= (double)spec_int(w->job, "model", "seq");
	return n;
}

/* Steps per second: this watch's smoothed rate, else the trainer's speed
 * over the batch; NaN when neither is known. */
static double steps_per_s(const struct watch *w)
{
	if (isfinite(w->rate) && w->rate > 0)
		return w->rate;
	if (isfinite(w->speed) && w->speed > 0 && per_step(w) > 0)
		return w->speed / per_step(w);
	return NAN;
}

/* Seconds left, negative when unknown. */
static double eta(const struct watch *w)
{
	double rate = steps_per_s(w);
	if (w->total <= 0 || w->step < 0 || !isfinite(rate))
		return -1;
	return (double)(w->total - w->step) / rate;
}

/* Takes in the step seen now. */
static void see_step(struct watch *w, double now)
{
	if (w->step <= 0)
		return;
	if (w->rate_t == 0 || w->step < w->rate_step) {     /* the first, or a restart */
		w->rate_t = now;
		w->rate_step = w->step;
		return;
	}
	if (w->step == w->rate_step || now <= w->rate_t)
		return;
	double dt = now - w->rate_t;
	w->rate = smooth(w->rate, (double)(w->step - w->rate_step) / dt, dt);
	w->rate_t = now;
	w->rate_step = w->step;
}

/* The progress line, made inert. */
static void describe(const struct watch *w, struct cli_buf *line)
{
	const char *state = cli_job_str(w->job, "state");
	char *id = cli_inert(cli_job_str(w->job, "id")), *st = cli_inert(state);
	char num[64];
	cli_buf_addf(line, "%s  %s", id, st);
	if (!state || strcmp(state, "PENDING") == 0 || strcmp(state, "QUEUED") == 0)
		cli_buf_adds(line, "  waiting to start");
	int stopped = cli_job_final(state) && strcmp(state, "COMPLETED") != 0;
	if (stopped && w->step <= 0) {
		cli_buf_adds(line, "  stopped before its first step");
	} else if (w->step >= 0) {
		cli_buf_addf(line, "  %sstep %lld", stopped ? "stopped at " : "", w->step);
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
		double rate = steps_per_s(w);
		if (isfinite(rate))
			cli_buf_addf(line, "  %.*f steps/s", rate < 10 ? 2 : 0, rate);
		if (isfinite(w->speed))
			cli_buf_addf(line, "  %.0f %s", w->speed, w->speed_unit);
		cli_format_duration(eta(w), num, sizeof num);
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
	                   .loss = NAN, .speed = NAN, .rate = NAN, .speed_unit = "samples/s" };
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
		if (w.total <= 0 && !json_object_get(json_object_get(w.job, "spec"), "epochs"))
			w.total = spec_int_top(w.job, "steps");
		if (!final && state && strcmp(state, "RUNNING") == 0) {
			see_step(&w, now);
			if (w.step != step_was)
				poll_speed(cli, &w, now);
		}

		if (cli->json) {
			if (changed)
				cli_print_json(w.job);
		} else {
			cli_buf_clear(&line);
			describe(&w, &line);
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
