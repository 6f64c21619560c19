/* tests/unit/test_svc_config.c - service/config.c: svc_config_reload, what
 * SIGHUP changes (the `reload` column) and what it keeps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "service/config.h"

static char conf[512];

static void write_conf(const char *text)
{
	FILE *f = fopen(conf, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static int load(struct svc_config *cfg, char **argv, int argc)
{
	char err[1024];
	int rc = svc_config_load(cfg, argc, argv, err, sizeof err);
	CHECK_MSG(rc == SVC_CONFIG_RUN, "load: %s", err);
	return rc;
}

static void test_reload_changes_only_reloadable_keys(void)
{
	write_conf("log_level = warn\nthreads = 2\ngpu_memory = 1M\npreflight_timeout = 10\n");
	char *argv[] = { "larchd", "--config", conf, "--body-limit", "64K", NULL };
	struct svc_config cfg;
	if (load(&cfg, argv, 5) != SVC_CONFIG_RUN)
		return;
	write_conf("log_level = debug\nthreads = 3\ngpu_memory = 80G,small=40G\n"
	           "preflight_timeout = 10\nbody_limit = 2M\n");
	char changed[256], err[1024];
	int mask = svc_config_reload(&cfg, 5, argv, changed, sizeof changed, err, sizeof err);
	CHECK_INT_EQ(mask, SVC_RELOAD_LOG | SVC_RELOAD_RUNNER);
	CHECK_STR_EQ(changed, "gpu_memory, log_level");
	CHECK_INT_EQ(cfg.log_level, SVC_LOG_DEBUG);
	CHECK_INT_EQ(cfg.gpu_memory.bytes, 80ULL << 30);
	CHECK_INT_EQ(svc_gpu_memory_of(&cfg.gpu_memory, "small"), 40ULL << 30);
	CHECK_INT_EQ(cfg.threads, 2);                 /* not reloadable: kept */
	CHECK_INT_EQ(cfg.body_limit, 64 << 10);       /* the flag still wins over the file */

	/* nothing new: nothing changes */
	mask = svc_config_reload(&cfg, 5, argv, changed, sizeof changed, err, sizeof err);
	CHECK_INT_EQ(mask, 0);
	CHECK_STR_EQ(changed, "");

	/* a file that no longer loads: an error, cfg as it was */
	write_conf("log_level = loud\n");
	mask = svc_config_reload(&cfg, 5, argv, changed, sizeof changed, err, sizeof err);
	CHECK_INT_EQ(mask, -1);
	CHECK_MSG(strstr(err, "log_level: must be error, warn, info or debug") != NULL, "%s", err);
	CHECK_INT_EQ(cfg.log_level, SVC_LOG_DEBUG);
	CHECK_INT_EQ(cfg.gpu_memory.bytes, 80ULL << 30);
	svc_config_release(&cfg);
}

static void test_reload_moves_strings(void)
{
	write_conf("log_file = -\n");
	char *argv[] = { "larchd", "--config", conf, NULL };
	struct svc_config cfg;
	if (load(&cfg, argv, 3) != SVC_CONFIG_RUN)
		return;
	CHECK(cfg.log_file == NULL);
	write_conf("log_file = /var/log/larch/larchd.log\nlisten = 127.0.0.1:9999\n");
	char changed[256], err[1024];
	int mask = svc_config_reload(&cfg, 3, argv, changed, sizeof changed, err, sizeof err);
	CHECK_INT_EQ(mask, SVC_RELOAD_LOG);
	CHECK_STR_EQ(changed, "log_file");
	CHECK_STR_EQ(cfg.log_file ? cfg.log_file : "(null)", "/var/log/larch/larchd.log");
	CHECK_STR_EQ(cfg.listen, "127.0.0.1:8080");   /* not reloadable: kept */
	svc_config_release(&cfg);
}

int main(void)
{
	const char *tmp = getenv("LARCH_TEST_TMP");
	snprintf(conf, sizeof conf, "%s/test_svc_config.%d.conf", tmp ? tmp : "/tmp", (int)getpid());
	CHECK_RUN(test_reload_changes_only_reloadable_keys);
	CHECK_RUN(test_reload_moves_strings);
	unlink(conf);
	return check_finish();
}
