/* service/cli/export.c - larch export: a checkpoint's weights in Hugging
 * Face's layout, computed here with no server.
 *
 *   larch export CHECKPOINT_FILE --format hf-gpt2|hf-mlp -o DIR [--spec FILE]
 *
 * The work is larch-train's (--export, trainer/export_hf.h): larch runs the
 * larch-train installed beside it (else the build tree's,
 * build/service/larch -> build/trainer/larch-train), with its arguments as
 * an argv, never through a shell, and exits with its status. The
 * checkpoint is a file this machine can read (a job dir's
 * checkpoints/step-N.safetensors); its spec is the job dir's spec.json
 * unless --spec names it. A job id is not taken: a job's checkpoint is
 * brought here first (its download is the API's).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

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

int cli_cmd_export(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "spec", required_argument, NULL, 's' },
		CLI_COMMON_OPTIONS, { 0 },
	};
	const char *format = NULL, *out = NULL, *spec = NULL;
	int c, rc;
	while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
		if (c == 'f')
			format = optarg;
		else if (c == 'o')
			out = optarg;
		else if (c == 's')
			spec = optarg;
		else if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
			return rc;
	}
	if (argc - optind != 1)
		return cli_usage_error(cli, "one checkpoint file is required");
	if (!format || !out)
		return cli_usage_error(cli, "--format hf-gpt2|hf-mlp and -o DIR are required");
	const char *ckpt = argv[optind];
	if (strncmp(ckpt, "j-", 2) == 0 && strspn(ckpt + 2, "0123456789") == strlen(ckpt + 2) &&
	    access(ckpt, F_OK) != 0)
		return cli_usage_error(cli, "%s: a job id; export takes a checkpoint file (a job "
		                       "dir's checkpoints/step-N.safetensors)", ckpt);

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
