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
		if (host > 0 || gpu > 0) {
			if (fits)
				printf("fits in %s%.4g GiB of host memory per node%s%.4g GiB per GPU\n",
				       "", host, gpu > 0 ? " and " : "", gpu);
			else if (best > 0)
				printf("does not fit; the largest micro-batch that fits is %ld\n", best);
			else
				printf("does not fit, not even at micro-batch 1\n");
		}
	}
	json_decref(j);
	rc = fits ? CLI_OK : CLI_REFUSED;
out:
	trn_spec_release(&spec);
	return rc;
}
