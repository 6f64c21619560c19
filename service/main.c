/* service/main.c - larchd: read the settings, make the state directory,
 * serve until SIGTERM or SIGINT, then stop gracefully (stop accepting, let
 * in-flight requests finish for up to shutdown_timeout seconds; a second
 * signal cuts that short) and exit 0. Exit 2: bad settings; 1: could not
 * start. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/routes.h"
#include "config.h"
#include "log.h"
#include "server.h"

enum { EXIT_USAGE = 2 };

/* mkdir -p with mode 0700 for what it creates; dir must end up a directory. */
static int make_state_dir(const char *dir, char *err, size_t err_size)
{
	char path[4096];
	if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
		snprintf(err, err_size, "state dir %s: path too long", dir);
		return -1;
	}
	for (char *p = path + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST) {
			snprintf(err, err_size, "state dir %s: %s", path, strerror(errno));
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, err_size, "state dir %s: not a directory", dir);
		return -1;
	}
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Stops accepting, waits for in-flight requests (a second signal stops the
 * wait), then stops the daemon. */
static void drain(struct svc_server *srv, const sigset_t *signals, unsigned timeout_s)
{
	svc_server_quiesce(srv);
	double deadline = now_s() + timeout_s;
	unsigned left;
	while ((left = svc_server_in_flight(srv)) > 0) {
		double rest = deadline - now_s();
		if (rest <= 0) {
			svc_log(SVC_LOG_WARN, "%u requests still in flight after %us: cutting them off",
			        left, timeout_s);
			break;
		}
		if (rest > 0.05)
			rest = 0.05;
		struct timespec ts = { 0, (long)(rest * 1e9) };
		int sig = sigtimedwait(signals, NULL, &ts);
		if (sig > 0) {
			svc_log(SVC_LOG_WARN, "%s again: cutting off %u requests in flight",
			        strsignal(sig), left);
			break;
		}
	}
	svc_server_free(srv);
}

int main(int argc, char **argv)
{
	struct svc_config cfg;
	char err[4096 + 512];
	int rc = svc_config_load(&cfg, argc, argv, err, sizeof err);
	if (rc != SVC_CONFIG_RUN) {
		if (rc == SVC_CONFIG_ERROR)
			fprintf(stderr, "larchd: %s\n", err);
		svc_config_release(&cfg);
		return rc == SVC_CONFIG_EXIT ? EXIT_SUCCESS : EXIT_USAGE;
	}
	if (svc_log_open(cfg.log_file, cfg.log_level, err, sizeof err) != 0 ||
	    make_state_dir(cfg.state_dir, err, sizeof err) != 0) {
		fprintf(stderr, "larchd: %s\n", err);
		svc_config_release(&cfg);
		return EXIT_FAILURE;
	}

	/* Every thread inherits this mask: the signals reach only sigwait below. */
	sigset_t signals;
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct api_ctx ctx = { 0 };
	struct svc_server_config scfg = {
		.addr = (const struct sockaddr *)&cfg.addr,
		.addr_len = cfg.addr_len,
		.threads = cfg.threads,
		.max_connections = cfg.max_connections,
		.connection_timeout = cfg.connection_timeout,
		.body_limit = cfg.body_limit,
		.routes = api_routes,
		.n_routes = api_routes_count,
		.ctx = &ctx,
	};
	struct svc_server *srv = svc_server_start(&scfg, err, sizeof err);
	if (!srv) {
		fprintf(stderr, "larchd: %s\n", err);
		svc_log_close();
		svc_config_release(&cfg);
		return EXIT_FAILURE;
	}
	printf("larchd: listening on http://%s\n", svc_server_address(srv));
	fflush(stdout);
	svc_log(SVC_LOG_INFO, "larchd %s: listening on http://%s, state dir %s, %u threads, "
	        "body limit %zu bytes%s%s", api_version(), svc_server_address(srv), cfg.state_dir,
	        cfg.threads, cfg.body_limit, cfg.config_file ? ", config " : "",
	        cfg.config_file ? cfg.config_file : "");

	int sig = 0;
	sigwait(&signals, &sig);
	svc_log(SVC_LOG_INFO, "%s: stopping (in flight: %u)", strsignal(sig),
	        svc_server_in_flight(srv));
	drain(srv, &signals, cfg.shutdown_timeout);
	svc_log(SVC_LOG_INFO, "stopped");
	svc_log_close();
	svc_config_release(&cfg);
	return EXIT_SUCCESS;
}
