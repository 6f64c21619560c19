/* service/cli/usage.c - larch usage: GET /v1/usage as a table (CPU and GPU
 * hours and jobs per user and account, or per what --group-by names), or
 * its JSON with --json. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jobs.h"

enum { OPT_FROM = 0x2000, OPT_TO, OPT_GROUP_BY };

static void hours_text(const json_t *row, const char *key, char *out, size_t len)
{
	json_t *v = json_object_get(row, key);
	if (json_is_number(v))
		snprintf(out, len, "%.2f", json_number_value(v));
	else
		snprintf(out, len, "-");
}

static void print_usage_table(const json_t *u)
{
	json_t *keys = json_object_get(u, "group_by");
	size_t nkeys = json_array_size(keys);
	if (nkeys > 5)
		nkeys = 5;
	struct cli_column cols[8];
	char heads[5][16];
	for (size_t i = 0; i < nkeys; i++) {
		const char *k = json_string_value(json_array_get(keys, i));
		size_t j = 0;
		for (; k && k[j] && j < sizeof heads[i] - 1; j++)
			heads[i][j] = (char)(k[j] >= 'a' && k[j] <= 'z' ? k[j] - 32 : k[j]);
		heads[i][j] = '\0';
		cols[i] = (struct cli_column){ .head = heads[i] };
	}
	cols[nkeys] = (struct cli_column){ .head = "CPU HOURS", .right = 1 };
	cols[nkeys + 1] = (struct cli_column){ .head = "GPU HOURS", .right = 1 };
	cols[nkeys + 2] = (struct cli_column){ .head = "JOBS", .right = 1 };
	struct cli_table *t = cli_table_new(cols, nkeys + 3);
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(u, "usage"), i, row) {
		const char *cells[8];
		char cpu[32], gpu[32], jobs[32];
		for (size_t k = 0; k < nkeys; k++)
			cells[k] = cli_job_str(row, json_string_value(json_array_get(keys, k)));
		hours_text(row, "cpu_hours", cpu, sizeof cpu);
		hours_text(row, "gpu_hours", gpu, sizeof gpu);
		json_t *n = json_object_get(row, "jobs");
		snprintf(jobs, sizeof jobs, "%lld", json_is_integer(n) ? (long long)json_integer_value(n)
		                                                       : 0LL);
		cells[nkeys] = cpu;
		cells[nkeys + 1] = gpu;
		cells[nkeys + 2] = jobs;
		cli_table_row(t, cells);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
	json_t *slurm = json_object_get(u, "slurm");
	const char *err = cli_job_str(slurm, "error");
	if (err) {
		char *shown = cli_inert(err);
		fprintf(stderr, "larch: Slurm's usage could not be read lately (%s): it may be behind\n",
		        shown);
		free(shown);
	}
}

int cli_cmd_usage(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, OPT_FROM },
		{ "to", required_argument, NULL, OPT_TO },
		{ "group-by", required_argument, NULL, OPT_GROUP_BY },
		CLI_COMMON_OPTIONS, { 0 },
	};
	const char *from = NULL, *to = NULL, *group_by = NULL;
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_FROM: from = optarg; break;
		case OPT_TO: to = optarg; break;
		case OPT_GROUP_BY: group_by = optarg; break;
		default:
			if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error(cli, "takes no arguments");
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;
	struct cli_buf path = { 0 };
	cli_buf_adds(&path, "/v1/usage");
	cli_http_param(&path, "from", from);
	cli_http_param(&path, "to", to);
	cli_http_param(&path, "group_by", group_by);
	json_t *u = NULL;
	rc = cli_http_get_json(&cli->http, cli_buf_str(&path), NULL, &u);
	cli_buf_release(&path);
	if (rc == CLI_OK) {
		if (cli->json)
			cli_print_json(u);
		else
			print_usage_table(u);
	}
	json_decref(u);
	return rc;
}
