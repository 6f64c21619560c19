/* service/cli/main.c - larch, the command-line client of larchd: the command
 * table, global options, help, and the helpers every command's option
 * parsing shares.
 *
 * Exit status: 0 done; 1 larchd said no (or, for watch, the job did not
 * complete); 2 bad command line, config or input; 3 larchd unreachable.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "cli.h"
#include "larch_version.h"

static const struct cli_command commands[] = {
	{ .name = "submit", .run = cli_cmd_submit,
	  .args = "SPEC.json|- [--idempotency-key KEY]",
	  .summary = "submit a training job; prints its id",
	  .help =
	  "Submits the job spec in SPEC.json (\"-\": standard input) and prints the new\n"
	  "job's id (with --json, the job).\n\n"
	  "  --idempotency-key KEY  the key that makes a repeated submit create nothing\n"
	  "                         twice (1-128 characters; default: a random one per run,\n"
	  "                         so that larch's own retries are safe)\n" },
	{ .name = "ls", .run = cli_cmd_ls,
	  .args = "[--state S] [--name N] [--owner U] [--limit N] [--all]",
	  .summary = "list jobs, newest first",
	  .help =
	  "Lists jobs, newest first: ID, NAME, OWNER, STATE, STEP/TOTAL, LOSS, AGE.\n\n"
	  "  --state S   only jobs in state S (PENDING, QUEUED, RUNNING, COMPLETED, ...)\n"
	  "  --name N    only jobs named N\n"
	  "  --owner U   only jobs of user U (admins)\n"
	  "  --limit N   at most N jobs (1-500; with --all: per request)\n"
	  "  --all       every job, following the pages\n" },
	{ .name = "show", .run = cli_cmd_show,
	  .args = "ID",
	  .summary = "show a job and its spec",
	  .help = "Shows job ID: its fields as \"key: value\" lines, then its effective spec.\n" },
	{ .name = "logs", .run = cli_cmd_logs,
	  .args = "ID [--stream stdout|stderr] [--tail N] [-f]",
	  .summary = "print a job's output",
	  .help =
	  "Prints what job ID wrote to standard output (or --stream stderr). For a job\n"
	  "that FAILED or timed out, the last lines of its stderr follow on larch's\n"
	  "own stderr (not with --stream or --json).\n\n"
	  "  --stream S    stdout (default) or stderr\n"
	  "  -n, --tail N  only its last N lines (of its last MiB)\n"
	  "  -f, --follow  keep printing new output until the job has ended\n"
	  "  --interval S  seconds between polls with -f (default 1)\n" },
	{ .name = "metrics", .run = cli_cmd_metrics,
	  .args = "ID [--name N ...] [--from S] [--to S] [--max-points N] [--csv]",
	  .summary = "print a job's metrics",
	  .help =
	  "Prints job ID's metrics as a table: one row per step, one column per metric.\n\n"
	  "  --name N        only metric N (repeat for more; default: all)\n"
	  "  --from S        from step S\n"
	  "  --to S          to step S\n"
	  "  --max-points N  at most N points per metric (larchd keeps the min/max shape)\n"
	  "  --csv           comma-separated values with a header line\n" },
	{ .name = "compare", .run = cli_cmd_compare,
	  .args = "ID ID [ID ...] --name N [--x step|examples|time] [--rows N] [--best min|max]",
	  .summary = "one metric of several jobs side by side, and how their specs differ",
	  .help =
	  "Compares metric N of the jobs: a line per job (state, points, last and best\n"
	  "value), their values side by side at the steps they all have, and a line per\n"
	  "job with the spec fields that differ between them (dotted paths).\n\n"
	  "  --name N      the metric (required)\n"
	  "  --x X         step (default), examples (step x batch.global) or time\n"
	  "                (seconds since the job started; no side-by-side table)\n"
	  "  --rows N      at most N rows side by side, spread evenly (default 20)\n"
	  "  --best B      min or max (default: max for a name with \"acc\", else min)\n" },
	{ .name = "cancel", .run = cli_cmd_cancel,
	  .args = "ID",
	  .summary = "cancel a job",
	  .help =
	  "Cancels job ID: a job that has not started ends at once; a running one is\n"
	  "sent SIGTERM, writes a checkpoint and ends CANCELLED.\n" },
	{ .name = "sweep", .run = cli_cmd_sweep,
	  .args = "submit FILE|- | ls | show ID | cancel ID",
	  .summary = "submit, list, show or cancel sweeps of jobs",
	  .help =
	  "submit FILE  submits the sweep in FILE (\"-\": standard input; docs/api.md,\n"
	  "             \"Sweeps\") and prints its id\n"
	  "ls           lists sweeps: ID, NAME, OWNER, STATE, CHILDREN, DONE, AGE\n"
	  "show ID      the sweep, its counts and a row per child: params, state, best\n"
	  "             value of the target, steps, examples and seconds to the target\n"
	  "cancel ID    cancels every child that has not ended\n" },
	{ .name = "checkpoint", .run = cli_cmd_checkpoint,
	  .args = "ls ID | download ID [--step N] [-o FILE]",
	  .summary = "list a job's checkpoints, or download one",
	  .help =
	  "ls ID        the job's checkpoints: step, bytes, time, sha256\n"
	  "download ID  the newest checkpoint (or --step N) into FILE (default\n"
	  "             <ID>-step-<N>.safetensors here), through FILE.part: a FILE.part\n"
	  "             already there is resumed where it ends, and FILE is only made\n"
	  "             when the whole file has the sha256 larchd recorded (else\n"
	  "             FILE.part is kept and the exit status is 1)\n\n"
	  "  --step N       the checkpoint of step N\n"
	  "  -o, --output FILE  where to save it\n" },
	{ .name = "watch", .run = cli_cmd_watch,
	  .args = "ID [--interval S]",
	  .summary = "follow a job's progress until it ends",
	  .help =
	  "Shows job ID's progress (state, step/total, loss, steps/s, samples/s or\n"
	  "tokens/s, ETA) on one line, redrawn in place on a terminal, one line per\n"
	  "change otherwise, until the job ends. The rates are exponential moving\n"
	  "averages with a 30 s time constant (steps/s as this watch sees the steps go\n"
	  "by, samples/s as the trainer reports it), and the ETA is the steps left over\n"
	  "the smoothed steps/s. A job that ended other than COMPLETED shows the step\n"
	  "it stopped at. Exit status 0 when it COMPLETED, 1 when not.\n\n"
	  "  --interval S  seconds between polls (default 1)\n" },
	{ .name = "plan", .run = cli_cmd_plan,
	  .args = "SPEC.json|- [--host-mem GIB] [--gpu-mem GIB]",
	  .summary = "the memory a spec needs per rank (computed here, no server)",
	  .help =
	  "Prints what each rank of the job in SPEC.json holds in memory: parameters,\n"
	  "gradients, master weights, optimizer state, activations at the micro-batch,\n"
	  "offload stores, checkpoint buffers and the data, and where (host or GPU).\n"
	  "The data files are read for their shape. With limits, says whether the job\n"
	  "fits and, when not, the largest micro-batch that does (exit status 1).\n\n"
	  "  --host-mem GIB  host memory per node\n"
	  "  --gpu-mem GIB   memory per GPU\n" },
	{ .name = "export", .run = cli_cmd_export,
	  .args = "ID [--step N] [--format F] -o DIR | CHECKPOINT_FILE --format F -o DIR",
	  .summary = "a checkpoint in Hugging Face's layout (by larchd, or here)",
	  .help =
	  "Writes a checkpoint's weights to DIR/model.safetensors and DIR/config.json in\n"
	  "Hugging Face's layout. With a job id (j-000123 or 123) larchd exports the\n"
	  "job's newest checkpoint (or step N) and larch downloads the files, checking\n"
	  "their sha256. With CHECKPOINT_FILE (a job dir's\n"
	  "checkpoints/step-N.safetensors) the larch-train installed beside larch does\n"
	  "it here, with no server. A spec's init {\"hf\": DIR} starts a job from such a\n"
	  "directory.\n\n"
	  "  --format F   hf-gpt2 (transformers' GPT2LMHeadModel) or hf-mlp (default\n"
	  "               with a job id: the one of the job's model)\n"
	  "  --step N     with a job id: the checkpoint of step N (default: the newest)\n"
	  "  -o DIR       the directory to write (created if missing)\n"
	  "  --spec FILE  with a file: the spec the checkpoint was trained with\n"
	  "               (default: the spec.json of its job dir)\n" },
	{ .name = "usage", .run = cli_cmd_usage,
	  .args = "[--from T] [--to T] [--group-by KEYS]",
	  .summary = "CPU and GPU hours and jobs, per user and account",
	  .help =
	  "Prints the CPU hours, GPU hours and jobs of the jobs that ended, per user and\n"
	  "account (yours; an admin's token: everyone's). Slurm's jobs as Slurm's\n"
	  "accounting recorded them, the local executor's from larch's records.\n\n"
	  "  --from T         from time T (2026-11-01 or 2026-11-01T08:00:00Z; default:\n"
	  "                   30 days before --to), counted in whole hours (UTC)\n"
	  "  --to T           up to time T (default: now)\n"
	  "  --group-by KEYS  a row per combination of KEYS, comma-separated: user,\n"
	  "                   account, partition, executor, day (default: user,account)\n" },
	{ .name = "admin", .run = cli_cmd_admin,
	  .args = CLI_ADMIN_ARGS,
	  .summary = "queues, nodes, hold/release/requeue, priorities, accounts and their "
	             "limits, the audit log (admins)",
	  .help = CLI_ADMIN_HELP },
};

static const char common_help[] =
	"\nCommon options:\n"
	"  --json             machine output (JSON)\n"
	"  --url URL          larchd's URL (default: LARCH_URL, url in the config file,\n"
	"                     http://127.0.0.1:8080)\n"
	"  --token-file FILE  read the token from FILE (default: LARCH_TOKEN, token in the\n"
	"                     config file ~/.config/larch/config, mode 0600)\n"
	"  https:// URLs are checked against the CA file in LARCH_CA (or ca in the\n"
	"  config file), else against the system's CA store\n"
	"  -h, --help         this help\n";

static void print_usage(FILE *out)
{
	fprintf(out, "usage: larch [--url URL] [--token-file FILE] [--json] COMMAND [ARGS]\n"
	        "       larch help [COMMAND] | larch COMMAND --help | larch --version\n\n"
	        "Commands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fputs(common_help, out);
	fputs("\nExit status: 0 done, 1 larchd said no (watch: the job did not complete),\n"
	      "2 bad usage, 3 larchd unreachable.\n", out);
}

static void print_command_usage(const struct cli_command *cmd, FILE *out)
{
	fprintf(out, "usage: larch %s %s [--json]\n", cmd->name, cmd->args);
}

/* larch CMD --help, larch help CMD */
static void print_command_help(const struct cli_command *cmd)
{
	print_command_usage(cmd, stdout);
	printf("\n%s%s", cmd->help, common_help);
}

static const struct cli_command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static int unknown_command(const char *prefix, const char *name)
{
	char *shown = cli_inert(name);
	fprintf(stderr, "%s: unknown command \"%s\" (larch --help lists them)\n", prefix, shown);
	free(shown);
	return CLI_USAGE;
}

/* larch help [COMMAND]: as larch --help, or larch COMMAND --help */
static int help_command(int argc, char **argv)
{
	if (argc > 2) {
		fputs("larch help: takes at most one command (usage: larch help [COMMAND])\n", stderr);
		return CLI_USAGE;
	}
	if (argc < 2) {
		print_usage(stdout);
		return CLI_OK;
	}
	const struct cli_command *cmd = find_command(argv[1]);
	if (!cmd)
		return unknown_command("larch help", argv[1]);
	print_command_help(cmd);
	return CLI_OK;
}

int cli_usage_error(const struct cli *cli, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "larch %s: ", cli->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	print_command_usage(cli->cmd, stderr);
	return CLI_USAGE;
}

int cli_common_option(struct cli *cli, int c, const char *arg)
{
	switch (c) {
	case CLI_OPT_JSON:
		cli->json = 1;
		return CLI_CONTINUE;
	case CLI_OPT_URL:
		cli->url_opt = arg;
		return CLI_CONTINUE;
	case CLI_OPT_TOKEN_FILE:
		cli->token_file_opt = arg;
		return CLI_CONTINUE;
	case 'h':
		print_command_help(cli->cmd);
		return CLI_OK;
	default:        /* getopt_long printed what was wrong */
		print_command_usage(cli->cmd, stderr);
		return CLI_USAGE;
	}
}

int cli_parse_long(const struct cli *cli, const char *name, const char *arg, long long min,
                   long long max, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max)
		return cli_usage_error(cli, "%s: must be an integer in [%lld, %lld]", name, min, max);
	*out = v;
	return CLI_OK;
}

int cli_parse_double(const struct cli *cli, const char *name, const char *arg, double min,
                     double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v >= min && v <= max))
		return cli_usage_error(cli, "%s: must be a number in [%g, %g]", name, min, max);
	*out = v;
	return CLI_OK;
}

void cli_sleep(double seconds)
{
	if (!(seconds > 0))
		return;
	struct timespec ts = { (time_t)seconds, (long)((seconds - floor(seconds)) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const struct option global_options[] = {
	CLI_COMMON_OPTIONS,
	{ "version", no_argument, NULL, 'V' },
	{ 0 },
};

int main(int argc, char **argv)
{
	struct cli cli = { 0 };
	signal(SIGPIPE, SIG_IGN);
	srand48((long)time(NULL) ^ (long)getpid());

	int c;
	opterr = 1;
	while ((c = getopt_long(argc, argv, "+h", global_options, NULL)) != -1) {
		if (c == 'V') {
			printf("larch %s\n", LARCH_VERSION_TEXT);
			return CLI_OK;
		} else if (c == 'h') {
			print_usage(stdout);
			return CLI_OK;
		} else if (c == CLI_OPT_JSON || c == CLI_OPT_URL || c == CLI_OPT_TOKEN_FILE) {
			cli_common_option(&cli, c, optarg);
		} else {
			print_usage(stderr);
			return CLI_USAGE;
		}
	}
	if (optind >= argc) {
		print_usage(stderr);
		return CLI_USAGE;
	}
	const char *name = argv[optind];
	if (strcmp(name, "help") == 0)
		return help_command(argc - optind, argv + optind);
	if (!(cli.cmd = find_command(name)))
		return unknown_command("larch", name);
	/* the command's argv: getopt's messages say "larch ls: ..." */
	char prog[64];
	snprintf(prog, sizeof prog, "larch %s", name);
	char **args = argv + optind;
	args[0] = prog;
	optind = 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fputs("larch: cannot initialise libcurl\n", stderr);
		return CLI_UNREACHABLE;
	}
	int rc = cli.cmd->run(&cli, argc - (int)(args - argv), args);
	cli_release(&cli);
	curl_global_cleanup();
	return rc;
}
