/* trainer/comm_tcp.c - ranks without MPI: a communicator over TCP for runs
 * that Slurm starts as tasks of one step (srun --mpi=none, or a larch-train
 * built without MPI), so that a GPU run can still share NCCL's unique id
 * (comm_nccl_cuda.c) and a step's loss and flags, and a CPU run its
 * gradients, slowly.
 *
 * Ranks from the Slurm environment: SLURM_PROCID of SLURM_STEP_NUM_TASKS (srun
 * sets both for the tasks of a step). Rendezvous
 * through a file in the job dir: rank 0 listens on an ephemeral port and
 * writes "host port token" to DIR/.comm-<job>.<step>.<restart> (a temp name,
 * then rename); the others read it, connect and introduce themselves with
 * their rank and the token, and rank 0 answers once all are in. The file
 * goes once they are. The settings (comm.h's trn_comm_settings: the
 * options comm_host and comm_timeout_s) name the host rank 0 publishes
 * (otherwise its hostname, or where that resolves to nothing but the
 * loopback, as a node name may, its first non-loopback IPv4 address) and
 * bound the rendezvous.
 *
 * Collectives go through rank 0 (a star): it receives every rank's buffer,
 * sums them in rank order (the same bits on every run) and sends each rank
 * what it gets back. That is a fallback, not a cluster's data path (MPI's
 * and NCCL's rings and trees are): rank 0's link carries 2 x (N - 1)
 * buffers a collective, so the run's header says so (ops' caveat). Non-blocking calls complete before they return (their
 * request is NULL). There is no timeout inside a collective: a rank that
 * dies closes its socket, the rank waiting on it sees the end of the stream
 * and fails, and its abort closes every socket, so that all ranks stop.
 */
#include "comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "env.h"

#define RENDEZVOUS_MAX 4200
#define HELLO_S 5.0                    /* a rank's hello after it connects, at most */

struct tcp_comm {
	struct trn_comm base;
	int *peer;                     /* rank 0: the socket of each rank (peer[0] unused) */
	int hub;                       /* other ranks: the socket to rank 0 */
	char *scratch;                 /* rank 0: one rank's buffer as it arrives */
	size_t scratch_bytes;
	int timeout_s;                 /* the rendezvous's bound */
	char host[256];                /* rank 0: what it publishes, "" its hostname */
};

static struct tcp_comm *tcp_of(struct trn_comm *c)
{
	return (struct tcp_comm *)c;
}

/* ---- whole messages ---------------------------------------------------------- */

/* A peer that died: its end of the stream, or a reset (it had unread data). */
static int gone(int rank, struct trn_err *err)
{
	return trn_err_set(err, "communicator: rank %d is gone (its connection ended: it failed or "
	                   "was stopped)", rank);
}

static int send_all(int fd, const void *buf, size_t len, int rank, struct trn_err *err)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
			return gone(rank, err);
		if (k < 0)
			return trn_err_set(err, "communicator: sending to rank %d: %s", rank,
			                   strerror(errno));
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len, int rank, struct trn_err *err)
{
	char *p = buf;
	while (len > 0) {
		ssize_t k = recv(fd, p, len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return gone(rank, err);
		if (k < 0)
			return trn_err_set(err, "communicator: receiving from rank %d: %s", rank,
			                   strerror(errno));
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

static int scratch(struct tcp_comm *t, size_t bytes, struct trn_err *err)
{
	if (bytes <= t->scratch_bytes)
		return 0;
	char *p = realloc(t->scratch, bytes);
	if (!p)
		return trn_err_set(err, "communicator: out of memory for %zu bytes", bytes);
	t->scratch = p;
	t->scratch_bytes = bytes;
	return 0;
}

/* ---- collectives through rank 0 ------------------------------------------------ */

/* Rank 0: every other rank's n values added into acc (which holds rank
 * 0's), in rank order. */
static int sum_in(struct tcp_comm *t, void *acc, long n, int f64, struct trn_err *err)
{
	size_t bytes = (size_t)n * (f64 ? sizeof(double) : sizeof(float));
	if (scratch(t, bytes, err) != 0)
		return -1;
	for (int r = 1; r < t->base.size; r++) {
		if (recv_all(t->peer[r], t->scratch, bytes, r, err) != 0)
			return -1;
		if (f64) {
			double *d = acc;
			const double *s = (const double *)t->scratch;
			for (long i = 0; i < n; i++)
				d[i] += s[i];
		} else {
			float *d = acc;
			const float *s = (const float *)t->scratch;
			for (long i = 0; i < n; i++)
				d[i] += s[i];
		}
	}
	return 0;
}

/* buf summed over the ranks in rank order, on every rank. */
static int tcp_allreduce(struct trn_comm *c, void *buf, long n, int f64, struct trn_err *err)
{
	struct tcp_comm *t = tcp_of(c);
	size_t bytes = (size_t)n * (f64 ? sizeof(double) : sizeof(float));
	if (n <= 0)
		return 0;
	if (c->rank != 0)
		return send_all(t->hub, buf, bytes, 0, err) != 0 ? -1 : recv_all(t->hub, buf, bytes, 0, err);
	if (sum_in(t, buf, n, f64, err) != 0)
		return -1;
	for (int r = 1; r < c->size; r++)
		if (send_all(t->peer[r], buf, bytes, r, err) != 0)
			return -1;
	return 0;
}

static int tcp_allreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_err *err)
{
	return tcp_allreduce(c, buf, n, 0, err);
}

static int tcp_allreduce_f64(struct trn_comm *c, double *buf, long n, struct trn_err *err)
{
	return tcp_allreduce(c, buf, n, 1, err);
}

static int tcp_iallreduce_f32(struct trn_comm *c, float *buf, long n, struct trn_comm_req **req,
                              struct trn_err *err)
{
	*req = NULL;
	return tcp_allreduce(c, buf, n, 0, err);
}

/* send's ranges summed: each rank's into its recv. Rank 0 receives every
 * rank's whole send, sums in rank order and sends each its range. */
static int tcp_ireduce_scatter_f32(struct trn_comm *c, const float *send, float *recv,
                                   const int *counts, struct trn_comm_req **req,
                                   struct trn_err *err)
{
	struct tcp_comm *t = tcp_of(c);
	long n = 0;
	*req = NULL;
	for (int r = 0; r < c->size; r++)
		n += counts[r];
	if (n == 0)
		return 0;
	if (c->rank != 0) {
		if (send_all(t->hub, send, sizeof(float) * (size_t)n, 0, err) != 0)
			return -1;
		return recv_all(t->hub, recv, sizeof(float) * (size_t)counts[c->rank], 0, err);
	}
	float *sum = malloc(sizeof(float) * (size_t)n);
	if (!sum)
		return trn_err_set(err, "communicator: out of memory");
	memcpy(sum, send, sizeof(float) * (size_t)n);
	int rc = sum_in(t, sum, n, 0, err);
	long at = counts[0];
	for (int r = 1; rc == 0 && r < c->size; r++) {
		rc = send_all(t->peer[r], sum + at, sizeof(float) * (size_t)counts[r], r, err);
		at += counts[r];
	}
	if (rc == 0)
		memcpy(recv, sum, sizeof(float) * (size_t)counts[0]);
	free(sum);
	return rc;
}

/* Every rank's range to rank 0 (root 0 only: the trainer's). */
static int tcp_gather_f32(struct trn_comm *c, const float *send, float *recv, const long *counts,
                          const long *displs, int root, struct trn_err *err)
{
	struct tcp_comm *t = tcp_of(c);
	if (root != 0)
		return trn_err_set(err, "communicator: a gather to rank %d (tcp gathers to 0)", root);
	if (c->rank != 0)
		return send_all(t->hub, send, sizeof(float) * (size_t)counts[c->rank], 0, err);
	if (recv + displs[0] != send)
		memmove(recv + displs[0], send, sizeof(float) * (size_t)counts[0]);
	for (int r = 1; r < c->size; r++)
		if (recv_all(t->peer[r], recv + displs[r], sizeof(float) * (size_t)counts[r], r, err) != 0)
			return -1;
	return 0;
}

static int tcp_bcast(struct trn_comm *c, void *buf, long bytes, int root, struct trn_err *err)
{
	struct tcp_comm *t = tcp_of(c);
	if (bytes <= 0)
		return 0;
	/* a root other than 0 goes to 0 first */
	if (root != 0 && c->rank == root &&
	    send_all(t->hub, buf, (size_t)bytes, 0, err) != 0)
		return -1;
	if (c->rank != 0)
		return c->rank == root ? 0 : recv_all(t->hub, buf, (size_t)bytes, 0, err);
	if (root != 0 && recv_all(t->peer[root], buf, (size_t)bytes, root, err) != 0)
		return -1;
	for (int r = 1; r < c->size; r++)
		if (r != root && send_all(t->peer[r], buf, (size_t)bytes, r, err) != 0)
			return -1;
	return 0;
}

/* In place: each rank's range to rank 0, then the whole buffer to all. */
static int tcp_allgather_f32(struct trn_comm *c, float *buf, const long *counts,
                             const long *displs, struct trn_err *err)
{
	long n = 0;
	for (int r = 0; r < c->size; r++)
		if (displs[r] + counts[r] > n)
			n = displs[r] + counts[r];
	if (tcp_gather_f32(c, buf + displs[c->rank], buf, counts, displs, 0, err) != 0)
		return -1;
	return tcp_bcast(c, buf, n * (long)sizeof(float), 0, err);
}

static int tcp_wait(struct trn_comm *c, struct trn_comm_req *req, struct trn_err *err)
{
	(void)c, (void)req, (void)err;
	return 0;
}

static void tcp_progress(struct trn_comm *c)
{
	(void)c;
}

static int tcp_barrier(struct trn_comm *c, struct trn_err *err)
{
	double one = 1;
	return tcp_allreduce(c, &one, 1, 1, err);
}

static void close_all(struct tcp_comm *t)
{
	if (t->hub >= 0)
		close(t->hub);
	t->hub = -1;
	for (int r = 1; t->peer && r < t->base.size; r++)
		if (t->peer[r] >= 0) {
			close(t->peer[r]);
			t->peer[r] = -1;
		}
}

static void tcp_abort(struct trn_comm *c, int code)
{
	/* the others see their connections end and stop too */
	close_all(tcp_of(c));
	fflush(NULL);
	_exit(code);
}

static void tcp_close(struct trn_comm *c)
{
	struct tcp_comm *t = tcp_of(c);
	close_all(t);
	free(t->peer);
	free(t->scratch);
	free(t);
}

static const struct trn_comm_ops tcp_ops = {
	.name = "tcp",
	.caveat = "tcp star through rank 0 (the fallback without MPI or NCCL, not a cluster's "
	          "data path: every gradient crosses rank 0's link, summed there in series)",
	.allreduce_f32 = tcp_allreduce_f32,
	.allreduce_f64 = tcp_allreduce_f64,
	.iallreduce_f32 = tcp_iallreduce_f32,
	.ireduce_scatter_f32 = tcp_ireduce_scatter_f32,
	.allgather_f32 = tcp_allgather_f32,
	.gather_f32 = tcp_gather_f32,
	.wait = tcp_wait,
	.progress = tcp_progress,
	.bcast = tcp_bcast,
	.barrier = tcp_barrier,
	.abort = tcp_abort,
	.close = tcp_close,
};

/* ---- rendezvous ------------------------------------------------------------------ */

/* Whether name resolves to an address other than the loopback's. */
static int resolves_beyond_loopback(const char *name)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	if (getaddrinfo(name, NULL, &hints, &res) != 0)
		return 0;
	int found = 0;
	for (struct addrinfo *a = res; a && !found; a = a->ai_next) {
		if (a->ai_family == AF_INET)
			found = (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) != 127;
		else if (a->ai_family == AF_INET6)
			found = !IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
	}
	freeaddrinfo(res);
	return found;
}

/* What rank 0 publishes without comm_host: its hostname where that names an
 * address the other nodes may reach; else (a node name that no DNS or
 * /etc/hosts knows, or one that maps to 127.x) the address of its first
 * interface that is up and not the loopback, IPv4; else the hostname. */
static void publish_host(char *host, size_t len)
{
	if (gethostname(host, len) != 0)
		snprintf(host, len, "localhost");
	if (resolves_beyond_loopback(host))
		return;
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) != 0)
		return;
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
		    !(i->ifa_flags & IFF_LOOPBACK) &&
		    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, host,
		              (socklen_t)len))
			break;
	freeifaddrs(ifs);
}

struct hello {
	int32_t rank;
	uint64_t token;
};

static void no_delay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A receive on fd gives up after seconds (0: waits for ever): rank 0's
 * wait for a hello, so that a connection that says nothing (a stranger on
 * the port) cannot hold the rendezvous past its deadline; the collectives
 * after it wait as long as a step takes. */
static void recv_timeout(int fd, double seconds)
{
	struct timeval tv = { 0 };
	if (seconds > 0) {
		tv.tv_sec = (time_t)seconds;
		tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
		if (tv.tv_sec == 0 && tv.tv_usec == 0)
			tv.tv_usec = 1000;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Rank 0: listens, publishes, accepts the others. */
static int serve(struct tcp_comm *t, const char *file, struct trn_err *err)
{
	int size = t->base.size, lfd = socket(AF_INET6, SOCK_STREAM, 0), v6 = 1;
	if (lfd < 0) {
		v6 = 0;
		lfd = socket(AF_INET, SOCK_STREAM, 0);
	}
	if (lfd < 0)
		return trn_err_set(err, "communicator: socket: %s", strerror(errno));
	struct sockaddr_storage sa = { 0 };
	socklen_t sl;
	if (v6) {
		int off = 0;
		setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
		((struct sockaddr_in6 *)&sa)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)&sa)->sin6_addr = in6addr_any;
		sl = sizeof(struct sockaddr_in6);
	} else {
		((struct sockaddr_in *)&sa)->sin_family = AF_INET;
		((struct sockaddr_in *)&sa)->sin_addr.s_addr = htonl(INADDR_ANY);
		sl = sizeof(struct sockaddr_in);
	}
	if (bind(lfd, (struct sockaddr *)&sa, sl) != 0 || listen(lfd, size) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0) {
		trn_err_set(err, "communicator: listening: %s", strerror(errno));
		close(lfd);
		return -1;
	}
	int port = ntohs(v6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
	                    : ((struct sockaddr_in *)&sa)->sin_port);
	char host[256];
	if (t->host[0])
		snprintf(host, sizeof host, "%s", t->host);
	else
		publish_host(host, sizeof host);
	uint64_t token = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid() << 20 ^
	                 (uint64_t)(trn_now() * 1e9);
	char tmp[RENDEZVOUS_MAX + 32];
	snprintf(tmp, sizeof tmp, "%s.tmp%d", file, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%s %d %llu\n", host, port, (unsigned long long)token) < 0 ||
	    fclose(f) != 0 || rename(tmp, file) != 0) {
		trn_err_set(err, "communicator: writing %s: %s", file, strerror(errno));
		close(lfd);
		return -1;
	}
	double deadline = trn_now() + t->timeout_s;
	int joined = 0, rc = 0;
	while (joined < size - 1) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int left = (int)((deadline - trn_now()) * 1000);
		if (left <= 0 || poll(&p, 1, left) == 0) {
			rc = trn_err_set(err, "communicator: %d of %d ranks joined in %d s (LARCH_COMM_TIMEOUT)",
			                 joined + 1, size, t->timeout_s);
			break;
		}
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			continue;
		struct hello hi;
		struct trn_err ignore = { 0 };
		/* a rank says hello as it connects: a few seconds at most */
		double wait = deadline - trn_now();
		recv_timeout(fd, wait < HELLO_S ? wait : HELLO_S);
		if (recv_all(fd, &hi, sizeof hi, -1, &ignore) != 0 || hi.token != token || hi.rank < 1 ||
		    hi.rank >= size || t->peer[hi.rank] >= 0) {
			close(fd);                 /* a stranger, a silent one, or a rank twice */
			continue;
		}
		recv_timeout(fd, 0);
		no_delay(fd);
		t->peer[hi.rank] = fd;
		joined++;
	}
	close(lfd);
	unlink(file);
	for (int r = 1; rc == 0 && r < size; r++) {
		char ok = 1;
		rc = send_all(t->peer[r], &ok, 1, r, err);
	}
	return rc;
}

/* Other ranks: reads rank 0's address and joins. */
static int join(struct tcp_comm *t, const char *file, struct trn_err *err)
{
	double deadline = trn_now() + t->timeout_s;
	char why[640] = "no rendezvous file yet";
	while (trn_now() < deadline) {
		char host[256];
		int port;
		unsigned long long token;
		FILE *f = fopen(file, "r");
		int got = f ? fscanf(f, "%255s %d %llu", host, &port, &token) : 0;
		if (f)
			fclose(f);
		if (got == 3) {
			char service[16];
			struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
			snprintf(service, sizeof service, "%d", port);
			int e = getaddrinfo(host, service, &hints, &ai);
			for (struct addrinfo *a = e ? NULL : ai; a; a = a->ai_next) {
				int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
				if (fd < 0)
					continue;
				if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
					snprintf(why, sizeof why, "connecting to %s:%d: %s", host, port,
					         strerror(errno));
					close(fd);
					continue;
				}
				struct hello hi = { .rank = t->base.rank, .token = token };
				char ok = 0;
				struct trn_err ignore = { 0 };
				no_delay(fd);
				/* rank 0 lets the ranks in once all have joined, or
				 * closes the connection at its own deadline */
				if (send_all(fd, &hi, sizeof hi, 0, &ignore) == 0 &&
				    recv_all(fd, &ok, 1, 0, &ignore) == 0 && ok == 1) {
					t->hub = fd;
					freeaddrinfo(ai);
					return 0;
				}
				snprintf(why, sizeof why, "rank 0 at %s:%d did not let this rank in", host, port);
				close(fd);
			}
			if (e)
				snprintf(why, sizeof why, "resolving %s: %s", host, gai_strerror(e));
			if (ai)
				freeaddrinfo(ai);
		}
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return trn_err_set(err, "communicator: rank %d could not join rank 0 in %d s through %s (%s; "
	                   "LARCH_COMM_TIMEOUT)", t->base.rank, t->timeout_s, file, why);
}

static long env_long(const char *name, long def)
{
	const char *v = trn_env_str(name);
	return v ? atol(v) : def;
}

int trn_comm_slurm_tasks(void)
{
	return trn_env_has("SLURM_PROCID") ? (int)env_long("SLURM_STEP_NUM_TASKS", 0) : 0;
}

struct trn_comm *trn_comm_tcp_open(int ranks, const char *dir,
                                   const struct trn_comm_settings *set, struct trn_err *err)
{
	int size = trn_comm_slurm_tasks(), rank = (int)env_long("SLURM_PROCID", -1);
	if (trn_comm_check_size(size, ranks, set ? set->min_ranks : 0, "slurm",
	                        err) != 0)
		return NULL;
	if (rank < 0 || rank >= size || !dir || !*dir) {
		trn_err_set(err, "communicator: SLURM_PROCID %d of %d, or no job dir to meet in", rank,
		            size);
		return NULL;
	}
	struct tcp_comm *t = calloc(1, sizeof *t);
	if (!t || !(t->peer = malloc(sizeof(int) * (size_t)size))) {
		free(t);
		trn_err_set(err, "communicator: out of memory");
		return NULL;
	}
	for (int r = 0; r < size; r++)
		t->peer[r] = -1;
	t->hub = -1;
	t->base = (struct trn_comm){ .ops = &tcp_ops, .rank = rank, .size = size };
	t->timeout_s = set && set->timeout_s > 0 ? set->timeout_s : TRN_COMM_TIMEOUT_S;
	snprintf(t->host, sizeof t->host, "%s", set && set->host ? set->host : "");
	char file[RENDEZVOUS_MAX];
	snprintf(file, sizeof file, "%s/.comm-%ld.%ld.%ld", dir, env_long("SLURM_JOB_ID", 0),
	         env_long("SLURM_STEP_ID", 0), env_long("SLURM_RESTART_COUNT", 0));
	mkdir(dir, 0755);                  /* the trainer makes it too; whoever comes first */
	if ((rank == 0 ? serve(t, file, err) : join(t, file, err)) != 0) {
		tcp_close(&t->base);
		return NULL;
	}
	return &t->base;
}
