/* tests/bench/hello_mhd.c - the ceiling larchd's HTTP path is measured
 * against: libmicrohttpd with larchd's threading (internal poll loops in a
 * pool of threads, listening socket shared), answering every request with
 * {"status":"ok","version":"0.1.0"} built and serialised by jansson, as
 * larchd's GET /healthz does, and nothing else: no routing, no checks, no
 * request state, no logging.
 *
 *   hello_mhd [--threads N] [--port P]
 *
 * Prints "hello_mhd: listening on http://127.0.0.1:PORT" and serves until
 * SIGTERM or SIGINT. */
#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **req_cls)
{
	static int seen;
	if (!*req_cls) {
		/* the first call has the headers only; answering now would make
		 * MHD close the connection after the reply (no keep-alive) */
		*req_cls = &seen;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0;          /* ignore bodies */
		return MHD_YES;
	}
	json_t *body = json_pack("{s:s,s:s}", "status", "ok", "version", "0.1.0");
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text)
		return MHD_NO;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer_with_free_callback(strlen(text), text, free);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

int main(int argc, char **argv)
{
	long threads = sysconf(_SC_NPROCESSORS_ONLN), port = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--threads") == 0)
			threads = strtol(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--port") == 0)
			port = strtol(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "usage: hello_mhd [--threads N] [--port P]\n");
			return 2;
		}
	}
	if (threads < 1)
		threads = 1;
	sigset_t signals;
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);

	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC, 0, NULL, NULL,
		on_access, NULL, MHD_OPTION_SOCK_ADDR, &addr,
		MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
		threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (unsigned)threads,
		MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "hello_mhd: cannot start\n");
		return 1;
	}
	printf("hello_mhd: listening on http://127.0.0.1:%u\n",
	       (unsigned)MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
	fflush(stdout);
	int sig;
	sigwait(&signals, &sig);
	MHD_stop_daemon(d);
	return 0;
}
