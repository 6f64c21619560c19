/* trainer/report.c - metrics.jsonl, result.json; see report.h. */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "reporter.h"

static double unix_time(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* Rewrites path keeping only the lines whose "step" is <= keep_until. The
 * file is ours, so a line's step is found by its fixed prefix. */
static int truncate_metrics(const char *path, long keep_until, struct trn_err *err)
{
	FILE *in = fopen(path, "r");
	if (!in)
		return errno == ENOENT ? 0 : trn_err_set(err, "%s: %s", path, strerror(errno));
	char tmp[4300];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *out = fopen(tmp, "w");
	if (!out) {
		fclose(in);
		return trn_err_set(err, "%s: %s", tmp, strerror(errno));
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, in)) > 0) {
		long step;
		/* a torn last line (crash mid-write) has no newline: drop it */
		if (line[len - 1] != '\n' || sscanf(line, "{\"step\":%ld,", &step) != 1)
			continue;
		if (step <= keep_until)
			fputs(line, out);
	}
	free(line);
	fclose(in);
	int bad = fflush(out) != 0 || fsync(fileno(out)) != 0;
	bad |= fclose(out) != 0;
	if (bad || rename(tmp, path) != 0) {
		unlink(tmp);
		return trn_err_set(err, "%s: cannot rewrite: %s", path, strerror(errno));
	}
	return 0;
}

int trn_report_open(struct trn_report *r, const char *job_dir, long keep_until,
                    struct trn_err *err)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/metrics.jsonl", job_dir);
	if (keep_until < 0) {
		if (unlink(path) != 0 && errno != ENOENT)
			return trn_err_set(err, "%s: %s", path, strerror(errno));
	} else if (truncate_metrics(path, keep_until, err) != 0) {
		return -1;
	}
	r->metrics = fopen(path, "a");
	if (!r->metrics)
		return trn_err_set(err, "%s: %s", path, strerror(errno));
	return 0;
}

int trn_report_connect(struct trn_report *r, struct trn_err *err)
{
	struct trn_reporter_config cfg;
	int rc = trn_reporter_config_env(&cfg, err);
	if (rc <= 0)
		return rc;
	r->remote = trn_reporter_start(&cfg);
	if (r->remote)
		printf("report: posting metrics to %.*s\n",
		       (int)(strlen(cfg.metrics_url) - strlen("/metrics")), cfg.metrics_url);
	return 0;
}

void trn_report_close(struct trn_report *r)
{
	if (r->metrics)
		fclose(r->metrics);
	r->metrics = NULL;
	trn_reporter_finish(r->remote, NULL);
	r->remote = NULL;
}

void trn_report_metric(struct trn_report *r, long step, const char *name, double value)
{
	if (!r->metrics)
		return;
	double t = unix_time();
	/* JSON has no inf or NaN: a non-finite value is written as null; the
	 * reporter posts the same text (reporter_queue.c). Values in the
	 * fewest digits that read back the same (up to 17): a loss scale of 2^32
	 * is 4294967296, not 4.2949673e+09 */
	if (isfinite(value)) {
		char num[32];
		trn_format_value(num, sizeof num, value);
		fprintf(r->metrics, "{\"step\":%ld,\"time\":%.3f,\"name\":\"%s\",\"value\":%s}\n",
		        step, t, name, num);
	}
	else
		fprintf(r->metrics, "{\"step\":%ld,\"time\":%.3f,\"name\":\"%s\",\"value\":null}\n",
		        step, t, name);
	trn_reporter_metric(r->remote, step, t, name, value);
}

void trn_report_flush(struct trn_report *r)
{
	if (r->metrics)
		fflush(r->metrics);
	fflush(stdout);
}

int trn_write_file_atomic(const char *path, const char *text, struct trn_err *err)
{
	char tmp[4300];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return trn_err_set(err, "%s: %s", tmp, strerror(errno));
	size_t len = strlen(text), done = 0;
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return trn_err_set(err, "%s: write: %s", tmp, strerror(e));
		}
		done += (size_t)w;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		unlink(tmp);
		return trn_err_set(err, "%s: %s", tmp, strerror(errno));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return trn_err_set(err, "%s: rename: %s", path, strerror(e));
	}
	return 0;
}

/* result.json's text, with a final newline; a new string (free it), or NULL
 * when out of memory. */
static char *result_text(const struct trn_result *res)
{
	json_t *root = json_pack("{s:s, s:I, s:O, s:f, s:i}", "status", res->status, "steps",
	                         (json_int_t)res->steps, "final",
	                         res->final ? res->final : json_null(),
	                         "wall_s", round(res->wall_s * 1000) / 1000, "exit_code",
	                         res->exit_code);
	if (!root)
		return NULL;
	if (res->reason)
		json_object_set_new(root, "reason", json_string(res->reason));
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(root);
	if (!text)
		return NULL;
	size_t len = strlen(text);
	char *with_nl = realloc(text, len + 2);
	if (!with_nl) {
		free(text);
		return NULL;
	}
	memcpy(with_nl + len, "\n", 2);
	return with_nl;
}

static int write_result(const char *job_dir, const char *text, struct trn_err *err)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/result.json", job_dir);
	return trn_write_file_atomic(path, text, err);
}

int trn_report_result(const char *job_dir, const char *status, long steps, json_t *final,
                      double wall_s, int exit_code, const char *reason, struct trn_err *err)
{
	struct trn_result res = { .status = status, .steps = steps, .final = final,
	                          .wall_s = wall_s, .exit_code = exit_code, .reason = reason };
	char *text = result_text(&res);
	if (!text)
		return trn_err_set(err, "result.json: out of memory");
	int rc = write_result(job_dir, text, err);
	free(text);
	return rc;
}

int trn_report_finish(struct trn_report *r, const char *job_dir, const struct trn_result *res,
                      struct trn_err *err)
{
	char *text = result_text(res);
	int rc = 0;
	if (!text)
		rc = trn_err_set(err, "result.json: out of memory");
	else if (job_dir)
		rc = write_result(job_dir, text, err);
	/* the file first: it is the record; larchd's copy comes after */
	trn_reporter_finish(r->remote, text);
	r->remote = NULL;
	free(text);
	return rc;
}

void trn_format_duration(char *buf, size_t len, double s)
{
	if (!isfinite(s) || s < 0)
		snprintf(buf, len, "?");
	else if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}
