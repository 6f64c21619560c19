/* trainer/main.c - larch-train's command line. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_hf.h"
#include "spec/input.h"
#include "model.h"
#include "options.h"
#include "spec/plan.h"
#include "probe.h"
#include "spec/spec.h"
#include "train.h"
#include "larch_version.h"

static void usage(FILE *out)
{
	fputs("usage: larch-train --spec FILE [--job-dir DIR] [--resume] [--threads N] [--quiet]\n"
	      "                   [--device cpu|cuda] [--data-root PATH]... [--confine-data]\n"
	      "       larch-train --probe --spec FILE|- [--base-dir DIR] [--data-root PATH]...\n"
	      "                   [--confine-data]\n"
	      "       larch-train --check FILE\n"
	      "       larch-train --plan FILE [--gpu-mem GIB] [--host-mem GIB]\n"
	      "       larch-train --export CKPT --format hf-gpt2|hf-mlp -o DIR [--spec FILE]\n"
	      "\n"
	      "Trains the job spec FILE (see docs/spec.md) on the CPU or a CUDA GPU.\n"
	      "\n"
	      "  --spec FILE     the job spec (JSON; - reads it from stdin)\n"
	      "  --job-dir DIR   where spec.json, metrics.jsonl, result.json and checkpoints/\n"
	      "                  go (default: runs/<spec name>); an existing checkpoint there\n"
	      "                  is resumed\n"
	      "  --resume        fail unless there is a checkpoint to resume from\n"
	      "  --threads N     threads for kernels and BLAS (default: OMP_NUM_THREADS, else\n"
	      "                  the CPUs this process may use)\n"
	      "  --quiet         no progress lines\n"
	      "  --device D      cpu or cuda (one GPU per rank: the rank's index on its node,\n"
	      "                  modulo the GPUs); default cuda when the spec asks for GPUs\n"
	      "                  (resources.gpus_per_node > 0), else cpu\n"
	      "  --check FILE    validate FILE, print the effective spec with defaults, exit\n"
	      "  --plan FILE     print FILE's memory plan as JSON (larch plan --json's, for\n"
	      "                  machines without the larch CLI); with --gpu-mem and/or\n"
	      "                  --host-mem (GiB per GPU, per node) also whether it fits and\n"
	      "                  the largest micro-batch that does; exit 0 when it fits, 1 not\n"
	      "  --export CKPT   write checkpoint CKPT's weights to DIR (-o) in Hugging\n"
	      "                  Face's layout: model.safetensors and config.json; --format\n"
	      "                  hf-gpt2 (transformers' GPT2LMHeadModel) or hf-mlp; --spec\n"
	      "                  names the spec it was trained with (default: the spec.json of\n"
	      "                  its job dir, CKPT/../../spec.json)\n"
	      "  --list-devices  print the CUDA GPUs --device cuda would use (exit 0 with at\n"
	      "                  least one, 1 with none)\n"
	      "\n"
	      "Set by larchd, not for standalone use:\n"
	      "  --data-root PATH  (repeatable) a directory or one file the job's data files\n"
	      "                  and init.from must resolve to or under (symbolic links\n"
	      "                  resolved); named data sets are not confined\n"
	      "  --confine-data  confine them even with no --data-root (then only named data\n"
	      "                  sets can be read)\n"
	      "  --probe         check the spec's input files and print one JSON object,\n"
	      "                  {\"ok\": true, \"shape\": {...}} or {\"ok\": false, \"field\": ..,\n"
	      "                  \"message\": ..}; exit 0 (2: bad command line). Reads no data\n"
	      "                  past headers and label files, writes nothing\n"
	      "  --base-dir DIR  with --probe: the job's directory (absolute; need not exist),\n"
	      "                  where relative paths lead\n"
	      "  --version, --help\n"
	      "\n"
	      "SIGUSR1, SIGTERM and SIGINT write a checkpoint at the next step boundary and\n"
	      "exit 3; running again resumes. Exit codes: 0 completed, 1 failed, 2 bad usage\n"
	      "or spec, 3 interrupted (resumable), 4 diverged.\n"
	      "\n"
	      "With LARCH_SERVER_URL, LARCH_JOB_ID and LARCH_JOB_TOKEN set (larchd sets them)\n"
	      "the metrics and the result are also posted to larchd; LARCH_REPORT_FLUSH_S\n"
	      "bounds the final flush (default 10 s). The exit code never depends on larchd.\n"
	      "\n"
	      "From the environment (the run's header prints every option and where it came\n"
	      "from):\n", out);
	int n, width = 0;
	const struct trn_option *rows = trn_options_table(&n);
	for (int i = 0; i < n; i++)
		if (rows[i].env && (int)strlen(rows[i].env) > width)
			width = (int)strlen(rows[i].env);
	for (int i = 0; i < n; i++)
		if (rows[i].env)
			fprintf(out, "  %-*s %s (default: %s)\n", width, rows[i].env, rows[i].help,
			        rows[i].dflt);
}

static void on_signal(int signo)
{
	trn_train_request_stop(signo);
}

static int install_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	/* one request is enough; a second signal of the same kind acts as usual */
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	int signals[] = { SIGUSR1, SIGTERM, SIGINT };
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (sigaction(signals[i], &sa, NULL) != 0)
			return -1;
	return 0;
}

static int check_spec(const char *path)
{
	struct trn_spec spec;
	struct trn_err err = { 0 };
	if (trn_spec_from_file(&spec, path, &err) != 0) {
		fprintf(stderr, "larch-train: %s\n", err.text);
		return TRN_EXIT_USAGE;
	}
	char *text = trn_json_dumps(spec.json, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (text)
		puts(text);
	free(text);
	trn_spec_release(&spec);
	return TRN_EXIT_OK;
}

/* --plan: the memory plan of the spec at path, within the limits (GiB). */
static int plan_spec(const char *path, double host_gib, double gpu_gib)
{
	struct trn_spec spec;
	struct trn_err err = { 0 };
	if (trn_spec_from_file(&spec, path, &err) != 0) {
		fprintf(stderr, "larch-train: %s\n", err.text);
		return TRN_EXIT_USAGE;
	}
	const double gib = 1024.0 * 1024.0 * 1024.0;
	struct trn_plan p;
	int rc = TRN_EXIT_USAGE, fits = 0;
	json_t *j = NULL;
	if (trn_plan_make(&p, &spec, 0, &err) == 0)
		j = trn_plan_json_within(&p, &spec, host_gib * gib, gpu_gib * gib, &fits, &err);
	if (j) {
		char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
		if (text)
			puts(text);
		free(text);
		json_decref(j);
		rc = fits ? TRN_EXIT_OK : TRN_EXIT_FAILED;
	} else {
		fprintf(stderr, "larch-train: %s: %s\n", path, err.text);
	}
	trn_spec_release(&spec);
	return rc;
}

/* A memory limit in GiB (--gpu-mem, --host-mem): > 0; -1 when not. */
static double parse_gib(const char *opt, const char *text)
{
	char *end;
	double v = strtod(text, &end);
	if (end == text || *end || !(v > 0 && v <= 1e6)) {
		fprintf(stderr, "larch-train: %s: must be a number of GiB in (0, 1e6] (got \"%s\")\n",
		        opt, text);
		return -1;
	}
	return v;
}

/* --probe: the answer on stdout, one line of JSON. */
static int probe(const char *spec_path, const struct trn_input_policy *inputs,
                 const char *base_dir)
{
	struct trn_spec spec;
	struct trn_err err = { 0 };
	int rc = strcmp(spec_path, "-") == 0 ? trn_spec_from_fd(&spec, 0, "stdin", &err)
	                                     : trn_spec_from_file(&spec, spec_path, &err);
	json_t *answer = rc == 0 ? trn_probe(&spec, inputs, base_dir) : trn_probe_failure(err.text);
	if (rc == 0)
		trn_spec_release(&spec);
	char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
	json_decref(answer);
	if (!text) {
		fprintf(stderr, "larch-train: --probe: out of memory\n");
		return TRN_EXIT_FAILED;
	}
	puts(text);
	free(text);
	return fflush(stdout) == 0 ? TRN_EXIT_OK : TRN_EXIT_FAILED;
}

/* What the command line asked for. */
struct cmdline {
	const char *spec_path, *check_path, *plan_path, *base_dir;
	const char *export_path, *format, *out_dir;    /* --export, --format, -o */
	double gpu_gib, host_gib;
	struct trn_options opts;       /* the rows given as flags */
	const char **roots;            /* --data-root's, at most one per argument */
	int n_roots, confine, probing;
};

static const struct option longopts[] = {
	{ "spec", required_argument, NULL, 's' },
	{ "job-dir", required_argument, NULL, 'd' },
	{ "resume", no_argument, NULL, 'r' },
	{ "threads", required_argument, NULL, 't' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "check", required_argument, NULL, 'c' },
	{ "plan", required_argument, NULL, 'P' },
	{ "gpu-mem", required_argument, NULL, 'G' },
	{ "host-mem", required_argument, NULL, 'H' },
	{ "device", required_argument, NULL, 'D' },
	{ "list-devices", no_argument, NULL, 'L' },
	{ "data-root", required_argument, NULL, 'R' },
	{ "confine-data", no_argument, NULL, 'C' },
	{ "probe", no_argument, NULL, 'p' },
	{ "base-dir", required_argument, NULL, 'B' },
	{ "export", required_argument, NULL, 'X' },
	{ "format", required_argument, NULL, 'F' },
	{ "output", required_argument, NULL, 'o' },
	{ "version", no_argument, NULL, 'V' },
	{ "help", no_argument, NULL, 'h' },
	{ 0 },
};

/* A flag that is a row of the options table (options.h): 0, or -1 said. */
static int option_flag(struct trn_options *o, int c, const char *value)
{
	const struct option *lo = longopts;
	while (lo->name && lo->val != c)
		lo++;
	char flag[32], err[256];
	snprintf(flag, sizeof flag, "--%s", lo->name);
	if (trn_options_set_flag(o, trn_option_find(flag), value, err, sizeof err) == 0)
		return 0;
	fprintf(stderr, "larch-train: %s\n", err);
	return -1;
}

/* --list-devices: with the options given so far, else the environment's
 * (the GPU backend's file). */
static int list_devices(struct trn_options *o)
{
	char err[256];
	if (trn_options_from_env(o, err, sizeof err) != 0) {
		fprintf(stderr, "larch-train: %s\n", err);
		return TRN_EXIT_USAGE;
	}
	return trn_model_cuda_list(stdout, o) > 0 ? TRN_EXIT_OK : TRN_EXIT_FAILED;
}

/* Reads argv into c: -1 to go on, else the exit code (--help, --version,
 * --list-devices, a bad flag). */
static int parse_args(int argc, char **argv, struct cmdline *c)
{
	int f;
	while ((f = getopt_long(argc, argv, "s:d:rt:qc:Vho:", longopts, NULL)) != -1) {
		switch (f) {
		case 's': c->spec_path = optarg; break;
		case 'd':
		case 'r':
		case 'q':
		case 'D':
		case 't':
			if (option_flag(&c->opts, f, optarg) != 0)
				return TRN_EXIT_USAGE;
			break;
		case 'c': c->check_path = optarg; break;
		case 'P': c->plan_path = optarg; break;
		case 'R': c->roots[c->n_roots++] = optarg; break;
		case 'C': c->confine = 1; break;
		case 'p': c->probing = 1; break;
		case 'B': c->base_dir = optarg; break;
		case 'X': c->export_path = optarg; break;
		case 'F': c->format = optarg; break;
		case 'o': c->out_dir = optarg; break;
		case 'G':
		case 'H': {
			double v = parse_gib(f == 'G' ? "--gpu-mem" : "--host-mem", optarg);
			if (v < 0)
				return TRN_EXIT_USAGE;
			*(f == 'G' ? &c->gpu_gib : &c->host_gib) = v;
			break;
		}
		case 'L': return list_devices(&c->opts);
		case 'V': printf("larch-train %s\n", LARCH_VERSION_TEXT); return TRN_EXIT_OK;
		case 'h': usage(stdout); return TRN_EXIT_OK;
		default: usage(stderr); return TRN_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "larch-train: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return TRN_EXIT_USAGE;
	}
	return -1;
}

/* Flags that go together: -1 when they do, else TRN_EXIT_USAGE, said. */
static int check_args(const struct cmdline *c)
{
	static const char need_spec[] = "--spec FILE is required";
	const char *wrong = NULL;
	if ((c->format || c->out_dir) && !c->export_path)
		wrong = "--format and -o go with --export";
	else if (c->export_path && (!c->format || !c->out_dir))
		wrong = "--export needs --format hf-gpt2|hf-mlp and -o DIR";
	else if (c->export_path && (c->check_path || c->plan_path || c->probing || c->n_roots ||
	                            c->confine))
		wrong = "--export goes with --format, -o and --spec only";
	else if (c->export_path)
		return -1;
	else if ((c->n_roots || c->confine) && (c->check_path || c->plan_path))
		wrong = "--data-root and --confine-data go with --spec";
	else if (c->base_dir && (!c->probing || c->base_dir[0] != '/'))
		wrong = "--base-dir: goes with --probe and must be an absolute path";
	else if (c->check_path || c->plan_path)
		return -1;
	else if (c->gpu_gib > 0 || c->host_gib > 0)
		wrong = "--gpu-mem and --host-mem go with --plan";
	else if (!c->spec_path)
		wrong = need_spec;
	if (!wrong)
		return -1;
	fprintf(stderr, "larch-train: %s\n", wrong);
	if (wrong == need_spec)
		usage(stderr);
	return TRN_EXIT_USAGE;
}

/* --spec: trains, with the options from the command line, else the
 * environment (the inputs' roots are canonical by now). */
static int train_spec(struct cmdline *c, const struct trn_input_policy *inputs)
{
	char err[256];
	struct trn_err serr = { 0 };
	if (trn_options_from_env(&c->opts, err, sizeof err) != 0) {
		fprintf(stderr, "larch-train: %s\n", err);
		return TRN_EXIT_USAGE;
	}
	c->opts.inputs = inputs;
	struct trn_spec spec;
	int loaded = strcmp(c->spec_path, "-") == 0
	                     ? trn_spec_from_fd(&spec, 0, "stdin", &serr)
	                     : trn_spec_from_file(&spec, c->spec_path, &serr);
	if (loaded != 0) {
		fprintf(stderr, "larch-train: %s\n", serr.text);
		return TRN_EXIT_USAGE;
	}
	char default_dir[TRN_NAME_MAX + 8];
	if (!c->opts.job_dir) {
		snprintf(default_dir, sizeof default_dir, "runs/%s", spec.name);
		c->opts.job_dir = default_dir;
	}
	int code = TRN_EXIT_FAILED;
	if (install_handlers() != 0)
		perror("larch-train: sigaction");
	else
		code = trn_train(&spec, &c->opts);
	trn_spec_release(&spec);
	return code;
}

/* --export: the checkpoint in Hugging Face's layout (export_hf.h). */
static int export_hf(const struct cmdline *c)
{
	struct trn_err err = { 0 };
	if (trn_export_hf(c->export_path, c->spec_path, c->format, c->out_dir, &err) != 0) {
		fprintf(stderr, "larch-train: %s\n", err.text);
		return strncmp(err.text, "--format", 8) == 0 ? TRN_EXIT_USAGE : TRN_EXIT_FAILED;
	}
	printf("exported %s to %s/model.safetensors and %s/config.json (%s)\n", c->export_path,
	       c->out_dir, c->out_dir, c->format);
	return TRN_EXIT_OK;
}

int main(int argc, char **argv)
{
	const char *roots[argc];
	struct cmdline c = { .roots = roots };
	int code = parse_args(argc, argv, &c);
	if (code < 0)
		code = check_args(&c);
	if (code >= 0)
		return code;
	if (c.check_path)
		return check_spec(c.check_path);
	if (c.plan_path)
		return plan_spec(c.plan_path, c.host_gib, c.gpu_gib);
	if (c.export_path)
		return export_hf(&c);

	/* the roots, canonical from here on (a root that is missing is an error) */
	struct trn_input_policy inputs;
	struct trn_err err = { 0 };
	trn_input_policy_init(&inputs);
	inputs.confine = c.confine;
	for (int i = 0; i < c.n_roots && code < 0; i++)
		if (trn_input_policy_add_root(&inputs, c.roots[i], &err) != 0) {
			fprintf(stderr, "larch-train: %s\n", err.text);
			code = TRN_EXIT_USAGE;
		}
	if (code < 0)
		code = c.probing ? probe(c.spec_path, &inputs, c.base_dir) : train_spec(&c, &inputs);
	trn_input_policy_release(&inputs);
	return code;
}
