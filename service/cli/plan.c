/* service/cli/plan.c - larch plan: the memory preflight of a spec, computed
 * here with the trainer's own planner (trainer/spec/plan.h), no server needed.
 * larchd applies the same plan at submit time against its nodes. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainer/spec/plan.h"
#include "trainer/spec/spec.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The line under the plan when limits were given:
 *   fits in 16 GiB of host memory per node and 80 GiB per GPU
 *   does not fit: it needs 20.50 GiB of host memory per node (16 GiB given);
 *   the largest micro-batch that fits is 64
 * A CPU job uses no GPU memory: --gpu-mem is said not to apply to it. */
static void print_verdict(const struct trn_plan *p, double host, double gpu, int fits, long best)
{
	double node = p->host_bytes * p->ranks_per_node;
	int gpu_ignored = !p->gpus && gpu > 0;
	if (gpu_ignored)
		gpu = 0;
	if (fits && host <= 0 && gpu <= 0) {
		printf("fits: a CPU job needs no GPU memory (--gpu-mem does not apply)\n");
		return;
	}
	if (fits) {
		printf("fits");
		if (host > 0)
			printf(" in %.4g GiB of host memory per node", host);
		if (gpu > 0)
			printf("%s %.4g GiB per GPU", host > 0 ? " and" : " in", gpu);
	} else {
		const char *sep = ": it needs";
		printf("does not fit");
		if (host > 0 && node / GIB > host) {
			printf("%s %.2f GiB of host memory per node (%.4g GiB given)", sep, node / GIB,
			       host);
			sep = " and";
		}
		if (gpu > 0 && p->device_bytes / GIB > gpu)
			printf("%s %.2f GiB per GPU (%.4g GiB given)", sep, p->device_bytes / GIB, gpu);
		if (best > 0)
			printf("; the largest micro-batch that fits is %ld", best);
		else
			printf(", not even at micro-batch 1");
	}
	if (gpu_ignored)
		printf(" (a CPU job: --gpu-mem does not apply)");
	printf("\n");
}

int cli_cmd_plan(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host-mem", required_argument, NULL, 'm' },
		{ "gpu-mem", required_argument, NULL, 'g' },
		CLI_COMMON_OPTIONS, { 0 },
	};
	double host = 0, gpu = 0;
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'm' || c == 'g') {
			if ((rc = cli_parse_double(cli, c == 'm' ? "--host-mem" : "--gpu-mem", optarg,
			                           1e-3, 1e6, c == 'm' ? &host : &gpu)) != CLI_OK)
				return rc;
		} else if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE) {
			return rc;
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one spec file (or - for standard input) is required");
	const char *file = argv[optind];
	const char *shown = strcmp(file, "-") == 0 ? "standard input" : file;
	size_t len;
	json_t *root = NULL;
	char *text = cli_read_spec(file, &len, &root);
	if (!text)
		return CLI_USAGE;
	free(text);
	struct trn_spec spec;
	struct trn_err err = { 0 };
	struct trn_plan p;
	rc = CLI_USAGE;
	if (trn_spec_from_json(&spec, root, &err) != 0) {
		json_decref(root);
		fprintf(stderr, "larch: %s: %s\n", shown, err.text);
		return CLI_USAGE;
	}
	json_decref(root);
	int made = trn_plan_make(&p, &spec, 0, &err);
	if (made != 0) {
		fprintf(stderr, "larch: %s: %s\n", shown, err.text);
		if (made == TRN_PLAN_TOO_LARGE)
			rc = CLI_REFUSED;
		goto out;
	}
	int fits;
	json_t *j = trn_plan_json_within(&p, &spec, host * GIB, gpu * GIB, &fits, &err);
	if (!j) {
		fprintf(stderr, "larch: %s: %s\n", shown, err.text);
		goto out;
	}
	long best = json_integer_value(json_object_get(j, "largest_micro"));
	if (cli->json) {
		char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (s)
			puts(s);
		free(s);
	} else {
		trn_plan_print(stdout, &p);
		if (host > 0 || gpu > 0)
			print_verdict(&p, host, gpu, fits, best);
	}
	json_decref(j);
	rc = fits ? CLI_OK : CLI_REFUSED;
out:
	trn_spec_release(&spec);
	return rc;
}
