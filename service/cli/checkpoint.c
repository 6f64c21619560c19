/* service/cli/checkpoint.c - larch checkpoint ls ID | download ID [--step N]
 * [-o FILE]: a job's checkpoints (GET /v1/jobs/{id}/checkpoints) and one of
 * them as a file (GET /v1/jobs/{id}/checkpoints/{step}).
 *
 * A download goes to FILE (default: <id>-step-<8 digits>.safetensors here)
 * through FILE.part, resumed and checked against the recorded sha256 as
 * download.h says.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "download.h"
#include "jobs.h"

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

/* ---- download ---------------------------------------------------------------- */

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
	char expected[65];
	snprintf(expected, sizeof expected, "%s", sha);
	json_decref(page);

	struct cli_buf out = { 0 }, path = { 0 };
	if (out_opt)
		cli_buf_adds(&out, out_opt);
	else
		cli_buf_addf(&out, "%s-step-%08" JSON_INTEGER_FORMAT ".safetensors", id, step);
	char suffix[48];
	snprintf(suffix, sizeof suffix, "/checkpoints/%" JSON_INTEGER_FORMAT, step);
	cli_job_path(&path, id, suffix);
	char what[96];
	snprintf(what, sizeof what, "checkpoint %" JSON_INTEGER_FORMAT " of %s", step, id);
	rc = cli_download(cli, cli_buf_str(&path), id, what, expected, (long long)bytes,
	                  cli_buf_str(&out));
	if (rc != CLI_OK)
		goto done;
	const char *got = expected;           /* checked */
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
done:
	cli_buf_release(&out);
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
