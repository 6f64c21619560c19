/* service/cli/cli.h - the larch command-line client: what the commands share.
 *
 * main.c parses the global options, finds the command in its table and calls
 * it with the command's own argv (argv[0] = "larch CMD"). A command parses
 * its options (its own plus CLI_COMMON_OPTIONS, handed to cli_common_option),
 * calls cli_connect to resolve the server and token (config.c) and open the
 * HTTP handle (http.h), and returns the process's exit status.
 */
#ifndef LARCH_CLI_CLI_H
#define LARCH_CLI_CLI_H

#include <getopt.h>

#include "http.h"

#ifndef LARCH_VERSION
#define LARCH_VERSION "0.0.0-unknown"
#endif

/* Exit statuses of every command. */
enum cli_exit {
	CLI_OK = 0,
	CLI_REFUSED = 1,     /* the server said no, or the job did not complete (watch) */
	CLI_USAGE = 2,       /* bad command line, config or input file */
	CLI_UNREACHABLE = 3, /* larchd could not be reached */
};

/* cli_common_option's answer when parsing goes on. */
#define CLI_CONTINUE (-1)

struct cli_command;

struct cli {
	const struct cli_command *cmd;   /* the command running (static) */
	const char *url_opt;             /* --url (borrowed from argv), or NULL */
	const char *token_file_opt;      /* --token-file (borrowed from argv), or NULL */
	int json;                        /* --json: machine output */
	struct cli_http http;            /* open after cli_connect */
};

struct cli_command {
	const char *name;
	const char *args;                /* "ID [--stream stdout|stderr] [-f]" */
	const char *summary;             /* one line for `larch --help` */
	const char *help;                /* the options, for `larch CMD --help` */
	int (*run)(struct cli *cli, int argc, char **argv);
};

/* Options every command takes; their values are above any a command uses. */
enum { CLI_OPT_JSON = 0x1000, CLI_OPT_URL, CLI_OPT_TOKEN_FILE };
#define CLI_COMMON_OPTIONS \
	{ "json", no_argument, NULL, CLI_OPT_JSON }, \
	{ "url", required_argument, NULL, CLI_OPT_URL }, \
	{ "token-file", required_argument, NULL, CLI_OPT_TOKEN_FILE }, \
	{ "help", no_argument, NULL, 'h' }

/* Handles c, an option getopt_long returned that the command does not know
 * itself: a common option (CLI_CONTINUE), -h/--help (prints the command's
 * help, returns CLI_OK) or a bad one (usage on stderr, CLI_USAGE). */
int cli_common_option(struct cli *cli, int c, const char *arg);
/* Prints "larch CMD: <message>" and the command's usage line on stderr;
 * returns CLI_USAGE. */
int cli_usage_error(const struct cli *cli, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Parses arg as an integer in [min, max] for option name; CLI_USAGE with a
 * message when it is not one. */
int cli_parse_long(const struct cli *cli, const char *name, const char *arg, long long min,
                   long long max, long long *out);
int cli_parse_double(const struct cli *cli, const char *name, const char *arg, double min,
                     double max, double *out);

/* Resolves the server URL and the token (config.c: --url > LARCH_URL > config
 * file > default; --token-file > LARCH_TOKEN > config file) and opens
 * cli->http. CLI_OK, or the exit status after printing why not. */
int cli_connect(struct cli *cli);
void cli_release(struct cli *cli);

/* Reads the whole of path ("-": stdin), at most max bytes, NUL-terminated.
 * Returns a new buffer (free), or NULL with errno set (EFBIG: too large). */
char *cli_read_file(const char *path, size_t max, size_t *len);
/* Reads the job spec in file ("-": stdin, at most 16 MiB) and checks that it
 * is a JSON object: returns its text (free), and the parsed object in *spec
 * when spec is not NULL (json_decref); NULL after saying why on stderr. */
char *cli_read_spec(const char *file, size_t *len, json_t **spec);

/* The commands (jobs.c, logs.c, metrics.c, watch.c). */
int cli_cmd_submit(struct cli *cli, int argc, char **argv);
int cli_cmd_ls(struct cli *cli, int argc, char **argv);
int cli_cmd_show(struct cli *cli, int argc, char **argv);
int cli_cmd_cancel(struct cli *cli, int argc, char **argv);
int cli_cmd_logs(struct cli *cli, int argc, char **argv);
int cli_cmd_metrics(struct cli *cli, int argc, char **argv);
int cli_cmd_watch(struct cli *cli, int argc, char **argv);
int cli_cmd_plan(struct cli *cli, int argc, char **argv);
int cli_cmd_usage(struct cli *cli, int argc, char **argv);
int cli_cmd_compare(struct cli *cli, int argc, char **argv);   /* compare.c */
int cli_cmd_sweep(struct cli *cli, int argc, char **argv);     /* sweep.c */
int cli_cmd_checkpoint(struct cli *cli, int argc, char **argv); /* checkpoint.c */
int cli_cmd_export(struct cli *cli, int argc, char **argv);    /* export.c */

/* Sleeps for seconds (fractions allowed). */
void cli_sleep(double seconds);
/* Seconds on a monotonic clock. */
double cli_now(void);

#endif
