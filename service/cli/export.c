/* service/cli/export.c - larch export: a checkpoint's weights in Hugging
 * Face's layout.
 *
 *   larch export JOB_ID [--step N] [--format hf-gpt2|hf-mlp] -o DIR
 *   larch export CHECKPOINT_FILE --format hf-gpt2|hf-mlp -o DIR [--spec FILE]
 *
 * With a job id (j-000123, or 123) larchd makes the export (POST
 * /v1/jobs/{id}/exports: the newest checkpoint unless --step, the model's
 * format unless --format), larch waits until it is done and downloads its
 * files into DIR through download.h (FILE.part, resumed, the sha256 that
 * larchd lists checked). Only the export's two file names are written,
 * whatever larchd's list says.
 *
 * With a checkpoint file the work is larch-train's (--export,
 * trainer/export_hf.h), here, with no server: larch runs the larch-train
 * installed beside it (else the build tree's, build/service/larch ->
 * build/trainer/larch-train), with its arguments as an argv, never through a
 * shell, and exits with its status. The checkpoint is a file this machine
 * can read (a job dir's checkpoints/step-N.safetensors); its spec is the job
 * dir's spec.json unless --spec names it. An argument that is a file is a
 * checkpoint file, even when it looks like a job id.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "download.h"
#include "jobs.h"

#define POLL_MAX_S 1.0               /* between looks at a running export */

/* larch-train beside this larch, else in the build tree; 0 or -1 said. */
static int find_trainer(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		fprintf(stderr, "larch: export: cannot find larch's own path: %s\n", strerror(errno));
		return -1;
	}
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	if (snprintf(out, len, "%s/larch-train", self) < (int)len && access(out, X_OK) == 0)
		return 0;
	if (snprintf(out, len, "%s/../trainer/larch-train", self) < (int)len &&
	    access(out, X_OK) == 0)
		return 0;
	fprintf(stderr, "larch: export: no executable larch-train in %s or %s/../trainer\n", self,
	        self);
	return -1;
}

/* ---- a job's checkpoint, exported by larchd ------------------------------------ */

/* "j-000123" for "j-000123", "j-123" or "123" into out; -1 for no job id. */
static int job_id(const char *s, char *out, size_t len)
{
	const char *digits = strncmp(s, "j-", 2) == 0 ? s + 2 : s;
	if (!*digits || strlen(digits) > 18 || strspn(digits, "0123456789") != strlen(digits))
		return -1;
	long long n = strtoll(digits, NULL, 10);
	if (n <= 0)
		return -1;
	snprintf(out, len, "j-%06lld", n);
	return 0;
}

/* The export's file name at index i of its files, if it is one of the two
 * an export has (never a path larchd named). */
static const char *file_name(json_t *f)
{
	const char *name = json_string_value(json_object_get(f, "name"));
	if (name && (strcmp(name, "config.json") == 0 || strcmp(name, "model.safetensors") == 0))
		return name;
	return NULL;
}

static int download_files(struct cli *cli, const char *id, json_t *x, const char *dir)
{
	const char *eid = json_string_value(json_object_get(x, "id"));
	json_t *files = json_object_get(x, "files"), *f;
	if (!eid || strchr(eid, '/') || !json_is_array(files) || json_array_size(files) == 0) {
		fputs("larch: larchd's export lacks its id or files\n", stderr);
		return CLI_REFUSED;
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		char *shown = cli_inert(dir);
		fprintf(stderr, "larch: %s: %s\n", shown, strerror(errno));
		free(shown);
		return CLI_USAGE;
	}
	size_t i;
	json_array_foreach(files, i, f) {
		const char *name = file_name(f), *sha = json_string_value(json_object_get(f, "sha256"));
		json_int_t bytes = json_integer_value(json_object_get(f, "bytes"));
		if (!name || !sha || strlen(sha) != 64 || bytes < 0) {
			fputs("larch: larchd's export lists a file that is not one of an export's\n",
			      stderr);
			return CLI_REFUSED;
		}
		struct cli_buf path = { 0 }, out = { 0 };
		char suffix[160], what[200];
		snprintf(suffix, sizeof suffix, "/exports/%s/%s", eid, name);
		cli_job_path(&path, id, suffix);
		cli_buf_addf(&out, "%s/%s", dir, name);
		snprintf(what, sizeof what, "%s of export %s of %s", name, eid, id);
		int rc = cli_download(cli, cli_buf_str(&path), id, what, sha, (long long)bytes,
		                      cli_buf_str(&out));
		cli_buf_release(&path);
		cli_buf_release(&out);
		if (rc != CLI_OK)
			return rc;
	}
	return CLI_OK;
}

static int export_job(struct cli *cli, const char *id, long long step, const char *format,
                      const char *dir)
{
	int rc = cli_connect(cli);
	if (rc != CLI_OK)
		return rc;
	json_t *body = json_object();
	if (step >= 0)
		json_object_set_new(body, "step", json_integer(step));
	if (format)
		json_object_set_new(body, "format", json_string(format));
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	struct cli_buf path = { 0 };
	cli_job_path(&path, id, "/exports");
	struct cli_request rq = { .method = "POST", .path = cli_buf_str(&path), .body = text,
	                          .body_len = text ? strlen(text) : 0 };
	struct cli_reply r = { 0 };
	json_t *x = NULL;
	rc = cli_http_send(&cli->http, &rq, &r);
	free(text);
	if (rc == CLI_OK)
		rc = cli_http_take_object(&cli->http, &r, id, &x);
	cli_reply_release(&r);
	/* wait for it: a look a second at most */
	double wait = 0.05;
	while (rc == CLI_OK) {
		const char *state = json_string_value(json_object_get(x, "state"));
		const char *eid = json_string_value(json_object_get(x, "id"));
		if (!state || !eid || strchr(eid, '/')) {
			fputs("larch: larchd's export lacks its id or state\n", stderr);
			rc = CLI_REFUSED;
		} else if (strcmp(state, "done") == 0) {
			break;
		} else if (strcmp(state, "failed") == 0) {
			char *why = cli_inert(json_string_value(json_object_get(x, "error")));
			fprintf(stderr, "larch: export %s of %s failed: %s\n", eid, id, why);
			free(why);
			rc = CLI_REFUSED;
		} else {
			cli_sleep(wait);
			wait = wait * 2 > POLL_MAX_S ? POLL_MAX_S : wait * 2;
			char suffix[64];
			snprintf(suffix, sizeof suffix, "/exports/%s", eid);
			cli_buf_clear(&path);
			cli_job_path(&path, id, suffix);
			json_decref(x);
			x = NULL;
			rc = cli_http_get_json(&cli->http, cli_buf_str(&path), id, &x);
		}
	}
	cli_buf_release(&path);
	if (rc == CLI_OK)
		rc = download_files(cli, id, x, dir);
	if (rc == CLI_OK && cli->json) {
		cli_print_json(x);
	} else if (rc == CLI_OK) {
		char *shown = cli_inert(dir);
		printf("exported step %" JSON_INTEGER_FORMAT " of %s (%s) to %s/config.json and "
		       "%s/model.safetensors\n", json_integer_value(json_object_get(x, "step")), id,
		       json_string_value(json_object_get(x, "format")), shown, shown);
		free(shown);
	}
	json_decref(x);
	return rc;
}

int cli_cmd_export(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "spec", required_argument, NULL, 's' },
		{ "step", required_argument, NULL, 'n' },
		CLI_COMMON_OPTIONS, { 0 },
	};
	const char *format = NULL, *out = NULL, *spec = NULL;
	long long step = -1;
	int c, rc;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		if (c == 'f')
			format = optarg;
		else if (c == 'n') {
			if ((rc = cli_parse_long(cli, "--step", optarg, 0, 1LL << 53, &step)) != CLI_OK)
				return rc;
		}
		else if (c == 'o')
			out = optarg;
		else if (c == 's')
			spec = optarg;
		else if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one job id or checkpoint file is required");
	const char *ckpt = argv[optind];
	char id[32];
	if (access(ckpt, F_OK) != 0 && job_id(ckpt, id, sizeof id) == 0) {
		if (!out)
			return cli_usage_error(cli, "-o DIR is required");
		if (spec)
			return cli_usage_error(cli, "--spec goes with a checkpoint file (larchd knows "
			                       "a job's spec)");
		return export_job(cli, id, step, format, out);
	}
	if (!format || !out)
		return cli_usage_error(cli, "--format hf-gpt2|hf-mlp and -o DIR are required");
	if (step >= 0)
		return cli_usage_error(cli, "--step goes with a job id (a checkpoint file is one "
		                       "step)");

	char trainer[PATH_MAX];
	if (find_trainer(trainer, sizeof trainer) != 0)
		return CLI_USAGE;
	const char *args[] = { trainer, "--export", ckpt, "--format", format, "-o", out,
	                       spec ? "--spec" : NULL, spec, NULL };
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "larch: export: fork: %s\n", strerror(errno));
		return CLI_USAGE;
	}
	if (pid == 0) {
		execv(trainer, (char *const *)args);
		fprintf(stderr, "larch: export: %s: %s\n", trainer, strerror(errno));
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			fprintf(stderr, "larch: export: waitpid: %s\n", strerror(errno));
			return CLI_USAGE;
		}
	if (WIFEXITED(status))
		return WEXITSTATUS(status) == 0 ? CLI_OK
		       : WEXITSTATUS(status) == 2 ? CLI_USAGE : CLI_REFUSED;
	return CLI_REFUSED;
}
