/* service/config.c - see config.h. One table of keys; every layer (default,
 * file, environment, flag) sets a key through the same parser. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "larch_version.h"
#include "trainer/env.h"
#include "webhook_target.h"

enum key_kind { K_LISTEN, K_PATH, K_AUTO_PATH, K_LOG_FILE, K_UINT, K_SIZE, K_LEVEL, K_CHOICE,
		K_NAME, K_GPU_MEMORY, K_PATH_LIST, K_ALLOW, K_FILE };

struct key {
	const char *name;            /* file key; flag --name-with-dashes; env LARCHD_NAME */
	enum key_kind kind;
	size_t offset;               /* of the field in struct svc_config */
	const char *def;             /* the embedded default, parsed like any value */
	unsigned long long min, max; /* K_UINT, K_SIZE */
	int allow_auto;              /* K_UINT: "auto" means the CPU count */
	const char *const *choices;  /* K_CHOICE: the values allowed, NULL-terminated */
	unsigned reload;             /* SVC_RELOAD_* what SIGHUP changes; 0: at the next start */
	const char *metavar, *help;
};

#define FIELD(f) offsetof(struct svc_config, f)

/* .reload marks what SIGHUP changes at once (main.c hands it to its owner).
 * The rest is taken once by what larchd starts: the socket and HTTP server
 * (listen, threads, connections, timeouts, body_limit), the state dir, the
 * executor and the copies it puts in each job's command line (executor,
 * slurm_*, max_local_jobs, cancel_grace, data_roots, trainer_path), run_as,
 * the dashboard's files; a new value of those waits for a restart. */
static const struct key keys[] = {
	{ .name = "listen", .kind = K_LISTEN, .offset = FIELD(listen), .def = "127.0.0.1:8080",
	  .metavar = "HOST:PORT", .help = "address to listen on; port 0 picks a free port" },
	{ .name = "state_dir", .kind = K_PATH, .offset = FIELD(state_dir), .def = "./larch-state",
	  .metavar = "DIR",
	  .help = "database, job directories, admin token (created 0700; one larchd at a time)" },
	{ .name = "max_local_jobs", .kind = K_UINT, .offset = FIELD(max_local_jobs), .def = "auto",
	  .min = 1, .max = 4096, .allow_auto = 1, .metavar = "N",
	  .help = "job slots of the local executor, one per rank of a running job (auto: the CPUs)" },
	{ .name = "executor", .kind = K_CHOICE, .offset = FIELD(executor), .def = "local",
	  .choices = (const char *const[]){ "local", "slurm", NULL },
	  .metavar = "NAME", .help = "where jobs run: local (child processes) or slurm (a Slurm cluster)" },
	{ .name = "slurm_partition", .kind = K_NAME, .offset = FIELD(slurm_partition), .def = "",
	  .metavar = "NAME", .help = "partition for jobs that name none (empty: the cluster's default)" },
	{ .name = "slurm_account", .kind = K_NAME, .offset = FIELD(slurm_account), .def = "",
	  .metavar = "NAME", .help = "account for jobs that name none (empty: Slurm's default)" },
	{ .name = "slurm_qos", .kind = K_NAME, .offset = FIELD(slurm_qos), .def = "",
	  .metavar = "NAME", .help = "QOS for jobs that name none (empty: Slurm's default)" },
	{ .name = "slurm_poll_ms", .kind = K_UINT, .offset = FIELD(slurm_poll_ms), .def = "1000",
	  .min = 100, .max = 600000, .metavar = "MS",
	  .help = "milliseconds between the squeue calls that follow every Slurm job" },
	{ .name = "slurm_timeout", .kind = K_UINT, .offset = FIELD(slurm_timeout), .def = "30",
	  .min = 1, .max = 3600, .metavar = "SECONDS",
	  .help = "a Slurm command running longer is killed (slurmctld down: ~9 s each)" },
	{ .name = "slurm_submit_parallel", .kind = K_UINT, .offset = FIELD(slurm_submit_parallel),
	  .def = "8", .min = 1, .max = 64, .metavar = "N",
	  .help = "submissions at once when many jobs wait to be handed over" },
	{ .name = "slurm_submit", .kind = K_CHOICE, .offset = FIELD(slurm_submit), .def = "auto",
	  .choices = (const char *const[]){ "auto", "libslurm", "sbatch", NULL },
	  .metavar = "HOW", .help = "hand jobs to Slurm through libslurm (in-process) or an sbatch "
	  "process each; auto: libslurm when built with it and slurm.conf is readable" },
	{ .name = "slurm_mpi", .kind = K_CHOICE, .offset = FIELD(slurm_mpi), .def = "auto",
	  .choices = (const char *const[]){ "auto", "pmix", "mpirun", "none", NULL },
	  .metavar = "HOW", .help = "how a job of several ranks starts them in its allocation: "
	  "srun --mpi=pmix, Open MPI's mpirun, or srun --mpi=none (the ranks meet through the "
	  "job dir and talk TCP); auto: pmix where the node's srun has it, else mpirun where "
	  "there is one, else none" },
	{ .name = "accounting", .kind = K_CHOICE, .offset = FIELD(accounting), .def = "auto",
	  .choices = (const char *const[]){ "auto", "off", NULL },
	  .metavar = "HOW", .help = "Slurm's accounts, limits and usage (GET /v1/accounts, "
	  "/v1/usage): auto reads them with sacctmgr, sshare and sacct where the cluster has "
	  "slurmdbd; off leaves Slurm's accounting alone (usage from larch's own records only)" },
	{ .name = "accounting_refresh_s", .kind = K_UINT, .offset = FIELD(accounting_refresh_s),
	  .def = "60", .min = 1, .max = 86400, .metavar = "SECONDS",
	  .help = "seconds between reads of Slurm's accounts (sacctmgr, sshare) and of the "
	  "usage of the jobs that ended (sacct)" },
	{ .name = "trainer_path", .kind = K_AUTO_PATH, .offset = FIELD(trainer_path),
	  .def = "auto", .metavar = "FILE",
	  .help = "the larch-train jobs run (auto: beside larchd, or the build tree's)" },
	{ .name = "run_as", .kind = K_CHOICE, .offset = FIELD(run_as), .def = "auto",
	  .choices = (const char *const[]){ "auto", "owner", "service", NULL },
	  .metavar = "MODE", .help = "owner: each job runs as its owner's Unix user (larchd must run "
	  "as root); service: as larchd's own user, and user-role jobs may name files only under "
	  "data_roots; auto: owner when larchd runs as root, else service" },
	{ .name = "data_roots", .kind = K_PATH_LIST, .offset = FIELD(data_roots), .def = "",
	  .metavar = "DIR[,DIR...]", .help = "in service mode, the directories whose files jobs of "
	  "user-role tokens may name as data or init (symlinks resolved); empty: none, only named "
	  "datasets and checkpoints by job" },
	{ .name = "sweep_max_children", .kind = K_UINT, .offset = FIELD(sweep_max_children),
	  .def = "1000", .min = 1, .max = 100000, .metavar = "N",
	  .help = "a sweep may have at most this many children (POST /v1/sweeps past it is 400)" },
	{ .name = "preflight_timeout", .kind = K_UINT, .offset = FIELD(preflight_timeout),
	  .def = "10", .min = 1, .max = 600, .reload = SVC_RELOAD_PREFLIGHT,
	  .metavar = "SECONDS",
	  .help = "a submit's look at its data files (as the job's user, off the HTTP threads) "
	  "may take this long; past it the job is taken unexamined and its trainer checks" },
	{ .name = "cancel_grace", .kind = K_UINT, .offset = FIELD(cancel_grace), .def = "30",
	  .min = 1, .max = 86400, .metavar = "SECONDS",
	  .help = "a cancelled job's time to checkpoint after SIGTERM, then SIGKILL" },
	{ .name = "gpu_memory", .kind = K_GPU_MEMORY, .offset = FIELD(gpu_memory), .def = "80G",
	  .min = 1 << 20, .max = 1ULL << 44, .reload = SVC_RELOAD_RUNNER,
	  .metavar = "SIZE[,PART=SIZE...]",
	  .help = "memory of one GPU, and of partition PART's where it differs: a job asking "
	  "for GPUs whose memory plan needs more per GPU is refused at submit (422)" },
	{ .name = "dashboard_dir", .kind = K_AUTO_PATH, .offset = FIELD(dashboard_dir),
	  .def = "auto", .metavar = "DIR",
	  .help = "serve the dashboard's files from DIR, read at each request (for working on "
	  "them; auto: the copy built into larchd)" },
	{ .name = "chartjs_path", .kind = K_AUTO_PATH, .offset = FIELD(chartjs_path),
	  .def = "/usr/share/javascript/chart.js/chart.min.js", .metavar = "FILE",
	  .help = "Chart.js (Debian's libjs-chart.js) the dashboard's charts use, read at start" },
	{ .name = "body_limit", .kind = K_SIZE, .offset = FIELD(body_limit), .def = "1M",
	  .min = 1024, .max = 1ULL << 30, .metavar = "SIZE",
	  .help = "largest request body: bytes, or with K, M, G (binary)" },
	{ .name = "compare_max_jobs", .kind = K_UINT, .offset = FIELD(compare_max_jobs),
	  .def = "16", .min = 2, .max = 256, .metavar = "N",
	  .help = "jobs one GET /v1/metrics may compare at most (more: 400)" },
	{ .name = "webhook_allow", .kind = K_ALLOW, .offset = FIELD(webhook_allow),
	  .def = "loopback", .metavar = "NET[,NET...]",
	  .help = "addresses webhooks may be sent to, each checked after resolving the URL's host: "
	  "loopback, an IP address or network (10.1.0.0/16, fd00::/8), or any" },
	{ .name = "webhook_max_per_user", .kind = K_UINT, .offset = FIELD(webhook_max_per_user),
	  .def = "10", .min = 1, .max = 1000, .metavar = "N",
	  .help = "webhooks one user may have (POST /v1/webhooks past it is 400)" },
	{ .name = "webhook_connect_timeout_ms", .kind = K_UINT,
	  .offset = FIELD(webhook_connect_timeout_ms), .def = "5000", .min = 10, .max = 600000,
	  .metavar = "MS", .help = "a webhook delivery's connect may take this long" },
	{ .name = "webhook_timeout_ms", .kind = K_UINT, .offset = FIELD(webhook_timeout_ms),
	  .def = "10000", .min = 10, .max = 600000, .metavar = "MS",
	  .help = "a webhook delivery, from connect to the answer's status line, may take this "
	  "long; past it the attempt failed" },
	{ .name = "webhook_backoff_ms", .kind = K_UINT, .offset = FIELD(webhook_backoff_ms),
	  .def = "1000", .min = 1, .max = 3600000, .metavar = "MS",
	  .help = "wait before a failed delivery's second attempt, doubled after each, at most "
	  "webhook_backoff_max_ms" },
	{ .name = "webhook_backoff_max_ms", .kind = K_UINT, .offset = FIELD(webhook_backoff_max_ms),
	  .def = "300000", .min = 1, .max = 86400000, .metavar = "MS",
	  .help = "the longest wait between two attempts of a delivery" },
	{ .name = "webhook_retry_for_s", .kind = K_UINT, .offset = FIELD(webhook_retry_for_s),
	  .def = "86400", .min = 0, .max = 2592000, .metavar = "SECONDS",
	  .help = "a delivery is tried again until this long after its event, then recorded "
	  "as failed" },
	{ .name = "webhook_ca", .kind = K_FILE, .offset = FIELD(webhook_ca), .def = "",
	  .metavar = "FILE", .help = "PEM certificates of CAs an https:// webhook target's "
	  "certificate may chain to besides the system's, read at start (empty: the system's "
	  "only)" },
	{ .name = "tls_cert", .kind = K_FILE, .offset = FIELD(tls_cert), .def = "",
	  .metavar = "FILE", .help = "serve HTTPS with this PEM certificate (chain), read at start; "
	  "with tls_key (both or neither; empty: plain HTTP)" },
	{ .name = "tls_key", .kind = K_FILE, .offset = FIELD(tls_key), .def = "",
	  .metavar = "FILE", .help = "the PEM private key of tls_cert, read at start; others "
	  "must not be able to read it (chmod 600)" },
	{ .name = "job_ca", .kind = K_FILE, .offset = FIELD(job_ca), .def = "",
	  .metavar = "FILE", .help = "the PEM file jobs verify larchd's HTTPS certificate with "
	  "(LARCH_CA in their environment; jobs must be able to read it); empty: tls_cert when "
	  "it is self-signed, else the nodes' system CA store" },
	{ .name = "trusted_proxies", .kind = K_ALLOW, .offset = FIELD(trusted_proxies), .def = "",
	  .metavar = "NET[,NET...]", .help = "reverse proxies whose X-Forwarded-For is believed: "
	  "loopback, IP addresses or networks (empty: none, the header is ignored); the client "
	  "is the right-most address of the header not in this list" },
	{ .name = "log_level", .kind = K_LEVEL, .offset = FIELD(log_level), .def = "info",
	  .reload = SVC_RELOAD_LOG,
	  .metavar = "LEVEL", .help = "error, warn, info (a line per request) or debug" },
	{ .name = "log_file", .kind = K_LOG_FILE, .offset = FIELD(log_file), .def = "-",
	  .reload = SVC_RELOAD_LOG,
	  .metavar = "FILE", .help = "append the log to FILE (- for stderr)" },
	{ .name = "threads", .kind = K_UINT, .offset = FIELD(threads), .def = "auto",
	  .min = 1, .max = 1024, .allow_auto = 1, .metavar = "N",
	  .help = "HTTP threads, each with its own poll loop (auto: the CPUs)" },
	{ .name = "max_connections", .kind = K_UINT, .offset = FIELD(max_connections),
	  .def = "4096", .min = 1, .max = 65536, .metavar = "N",
	  .help = "open connections at most (the open-file limit is raised to fit)" },
	{ .name = "max_connections_per_ip", .kind = K_UINT, .offset = FIELD(max_connections_per_ip),
	  .def = "64", .min = 0, .max = 65536, .metavar = "N",
	  .help = "open connections from one client address at most, 127.0.0.1 and ::1 "
	  "aside (0: no cap)" },
	{ .name = "header_timeout", .kind = K_UINT, .offset = FIELD(header_timeout),
	  .def = "10", .min = 1, .max = 3600, .metavar = "SECONDS",
	  .help = "close a connection that sends no whole request head this long after "
	  "connecting or after its previous request" },
	{ .name = "connection_timeout", .kind = K_UINT, .offset = FIELD(connection_timeout),
	  .def = "30", .min = 1, .max = 86400, .metavar = "SECONDS",
	  .help = "close a connection idle this long during a request" },
	{ .name = "request_timeout", .kind = K_UINT, .offset = FIELD(request_timeout),
	  .def = "60", .min = 1, .max = 86400, .metavar = "SECONDS",
	  .help = "a request's body must be in this long after it began, else closed" },
	{ .name = "shutdown_timeout", .kind = K_UINT, .offset = FIELD(shutdown_timeout),
	  .def = "30", .min = 0, .max = 86400, .metavar = "SECONDS",
	  .help = "on SIGTERM, how long in-flight requests may take" },
};

#define N_KEYS (sizeof keys / sizeof keys[0])

unsigned svc_cpu_count(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

static int parse_uint(const char *s, unsigned long long *out)
{
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	*out = strtoull(s, &end, 10);
	return errno || *end ? -1 : 0;
}

/* "1048576", "512K", "1M", "1MiB", "2g", "64KB" */
static int parse_size(const char *s, unsigned long long *out)
{
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case '\0': break;
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: return -1;
	}
	if (shift && (strcmp(end, "") == 0 || strcasecmp(end, "B") == 0 || strcmp(end, "iB") == 0))
		end += strlen(end);
	if (*end || v > (ULLONG_MAX >> shift))
		return -1;
	*out = v << shift;
	return 0;
}

/* v as the largest binary unit that divides it: "1K", "16T", "65537". */
static const char *size_text(unsigned long long v, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;
	while (u < 3 && v && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", v);
	else
		snprintf(buf, len, "%llu%c", v, units[u]);
	return buf;
}

static int valid_name(const char *s);
static char *trim(char *s);

/* "SIZE" or "SIZE,PART=SIZE,...": the first size is every other partition's. */
static int parse_gpu_memory(const struct key *k, const char *value, struct svc_gpu_memory *out,
                            const char *where, char *err, size_t err_size)
{
	struct svc_gpu_memory g = { 0 };
	char buf[1024], lo[32], hi[32];
	if (strlen(value) >= sizeof buf)
		goto bad;
	snprintf(buf, sizeof buf, "%s", value);
	int first = 1;
	for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
	     item = strtok_r(NULL, ",", &save), first = 0) {
		char *eq = strchr(item, '=');
		unsigned long long v;
		if ((first != !eq) || parse_size(eq ? eq + 1 : item, &v) != 0 || v < k->min ||
		    v > k->max)
			goto bad;
		if (first) {
			g.bytes = (size_t)v;
			continue;
		}
		*eq = '\0';
		if (!valid_name(item) || !*item || g.n == SVC_GPU_MEMORY_PARTS)
			goto bad;
		snprintf(g.part[g.n].partition, sizeof g.part[g.n].partition, "%s", item);
		g.part[g.n++].bytes = (size_t)v;
	}
	if (!g.bytes)
		goto bad;
	*out = g;
	return 0;
bad:
	snprintf(err, err_size, "%s: must be a size in [%s, %s] such as 80G, then up to %d "
	         "PART=SIZE for partitions whose GPUs differ, comma-separated, e.g. "
	         "\"80G,small=40G\" (got \"%s\")", where, size_text(k->min, lo, sizeof lo),
	         size_text(k->max, hi, sizeof hi), SVC_GPU_MEMORY_PARTS, value);
	return -1;
}

/* "" or "DIR,DIR,...": absolute paths, each resolved (symlinks too) now. */
static int parse_path_list(const char *value, struct svc_path_list *out, const char *where,
                           char *err, size_t err_size)
{
	struct svc_path_list l = { 0 };
	char buf[SVC_PATH_LIST_MAX * 256];
	if (strlen(value) >= sizeof buf) {
		snprintf(err, err_size, "%s: too long (at most %zu bytes)", where, sizeof buf - 1);
		return -1;
	}
	snprintf(buf, sizeof buf, "%s", value);
	for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		char *dir = trim(item);
		if (!*dir)
			continue;
		char real[PATH_MAX];
		struct stat st;
		if (dir[0] != '/') {
			snprintf(err, err_size, "%s: %s: must be an absolute path", where, dir);
			return -1;
		}
		if (!realpath(dir, real) || stat(real, &st) != 0) {
			snprintf(err, err_size, "%s: %s: %s", where, dir, strerror(errno));
			return -1;
		}
		if (!S_ISDIR(st.st_mode)) {
			snprintf(err, err_size, "%s: %s: not a directory", where, dir);
			return -1;
		}
		if (l.n == SVC_PATH_LIST_MAX) {
			snprintf(err, err_size, "%s: at most %d directories", where, SVC_PATH_LIST_MAX);
			return -1;
		}
		snprintf(l.path[l.n++], sizeof l.path[0], "%s", real);
	}
	*out = l;
	return 0;
}

size_t svc_gpu_memory_of(const struct svc_gpu_memory *g, const char *partition)
{
	for (int i = 0; partition && *partition && i < g->n; i++)
		if (strcmp(g->part[i].partition, partition) == 0)
			return g->part[i].bytes;
	return g->bytes;
}

/* Checks HOST:PORT (HOST may be [v6]); resolution waits for resolve_listen. */
static int split_listen(const char *s, char *host, size_t host_size, char *port, size_t port_size)
{
	const char *colon;
	const char *h = s;
	size_t hlen;
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -1;
		h = s + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return -1;
		hlen = (size_t)(colon - s);
	}
	unsigned long long p;
	if (hlen == 0 || hlen >= host_size || parse_uint(colon + 1, &p) != 0 || p > 65535 ||
	    strlen(colon + 1) >= port_size)
		return -1;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

/* "" or a name as the job spec has them (they reach Slurm's arguments). */
static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0)
		return 1;
	if (n > 64 || s[0] == '.' || s[0] == '-')
		return 0;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-')
			return 0;
	return 1;
}

static int replace_string(char **field, const char *value)
{
	char *copy = strdup(value);
	if (!copy)
		return -1;
	free(*field);
	*field = copy;
	return 0;
}

static int set_string(char **field, const char *value, char *err, size_t err_size)
{
	if (replace_string(field, value) == 0)
		return 0;
	snprintf(err, err_size, "out of memory");
	return -1;
}

/* Sets one key; on error writes "WHERE: what is wrong (got "value")". */
static int set_key(struct svc_config *cfg, const struct key *k, const char *value,
                   const char *where, char *err, size_t err_size)
{
	char *base = (char *)cfg;
	unsigned long long v;
	char host[256], port[8];
	switch (k->kind) {
	case K_LISTEN:
		if (split_listen(value, host, sizeof host, port, sizeof port) != 0) {
			snprintf(err, err_size, "%s: must be HOST:PORT with a port in [0, 65535], "
			         "e.g. 127.0.0.1:8080 or [::1]:0 (got \"%s\")", where, value);
			return -1;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	case K_PATH:
		if (!*value || strlen(value) >= PATH_MAX) {
			snprintf(err, err_size, "%s: must be a directory path (got \"%s\")", where, value);
			return -1;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	case K_AUTO_PATH:
		if (!*value || strlen(value) >= PATH_MAX) {
			snprintf(err, err_size, "%s: must be a file path or auto (got \"%s\")", where,
			         value);
			return -1;
		}
		if (strcmp(value, "auto") == 0) {
			free(*(char **)(base + k->offset));
			*(char **)(base + k->offset) = NULL;
			return 0;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	case K_FILE:
		if (strlen(value) >= PATH_MAX) {
			snprintf(err, err_size, "%s: must be a file path or empty (got \"%s\")", where,
			         value);
			return -1;
		}
		if (!*value) {
			free(*(char **)(base + k->offset));
			*(char **)(base + k->offset) = NULL;
			return 0;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	case K_LOG_FILE:
		if (!*value || strcmp(value, "-") == 0) {
			free(cfg->log_file);
			cfg->log_file = NULL;
			return 0;
		}
		return set_string(&cfg->log_file, value, err, err_size);
	case K_LEVEL:
		if (svc_log_level_parse(value, (enum svc_log_level *)(base + k->offset)) != 0) {
			snprintf(err, err_size, "%s: must be error, warn, info or debug (got \"%s\")",
			         where, value);
			return -1;
		}
		return 0;
	case K_UINT:
		if (k->allow_auto && strcmp(value, "auto") == 0)
			v = svc_cpu_count() > k->max ? k->max : svc_cpu_count();
		else if (parse_uint(value, &v) != 0 || v < k->min || v > k->max) {
			snprintf(err, err_size, "%s: must be an integer in [%llu, %llu]%s (got \"%s\")",
			         where, k->min, k->max, k->allow_auto ? " or auto" : "", value);
			return -1;
		}
		*(unsigned *)(base + k->offset) = (unsigned)v;
		return 0;
	case K_CHOICE:
		for (const char *const *c = k->choices; *c; c++)
			if (strcmp(value, *c) == 0)
				return set_string((char **)(base + k->offset), value, err, err_size);
		{
			size_t o = (size_t)snprintf(err, err_size, "%s: must be ", where);
			for (const char *const *c = k->choices; *c && o < err_size; c++)
				o += (size_t)snprintf(err + o, err_size - o, "%s%s",
				                      c == k->choices ? "" : c[1] ? ", " : " or ", *c);
			if (o < err_size)
				snprintf(err + o, err_size - o, " (got \"%s\")", value);
		}
		return -1;
	case K_NAME:
		if (!valid_name(value)) {
			snprintf(err, err_size, "%s: must be empty or 1 to 64 characters of A-Z a-z "
			         "0-9 _ . - not starting with . or - (got \"%s\")", where, value);
			return -1;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	case K_ALLOW: {
		struct svc_allow_list allow;
		char why[512];
		if (svc_allow_parse(value, &allow, why, sizeof why) != 0) {
			snprintf(err, err_size, "%s: %s", where, why);
			return -1;
		}
		return set_string((char **)(base + k->offset), value, err, err_size);
	}
	case K_PATH_LIST:
		return parse_path_list(value, (struct svc_path_list *)(base + k->offset), where, err,
		                       err_size);
	case K_GPU_MEMORY:
		return parse_gpu_memory(k, value, (struct svc_gpu_memory *)(base + k->offset), where,
		                        err, err_size);
	case K_SIZE:
		if (parse_size(value, &v) != 0 || v < k->min || v > k->max) {
			char lo[32], hi[32];
			snprintf(err, err_size, "%s: must be a size in [%s, %s] such as 65536, 512K, 2M "
			         "or 80G (got \"%s\")", where, size_text(k->min, lo, sizeof lo),
			         size_text(k->max, hi, sizeof hi), value);
			return -1;
		}
		*(size_t *)(base + k->offset) = (size_t)v;
		return 0;
	}
	return -1;
}

static const struct key *find_key(const char *name, size_t len, int dashes)
{
	for (size_t i = 0; i < N_KEYS; i++) {
		const char *n = keys[i].name;
		if (strlen(n) != len)
			continue;
		size_t j = 0;
		while (j < len && (n[j] == name[j] || (dashes && n[j] == '_' && name[j] == '-')))
			j++;
		if (j == len)
			return &keys[i];
	}
	return NULL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		s[--len] = '\0';
	return s;
}

static int load_file(struct svc_config *cfg, const char *path, char *err, size_t err_size)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, err_size, "config file %s: %s", path, strerror(errno));
		return -1;
	}
	int seen[N_KEYS] = { 0 };
	char *line = NULL, where[PATH_MAX + 64];
	size_t cap = 0;
	int lineno = 0, rc = 0;
	while (rc == 0 && getline(&line, &cap, f) >= 0) {
		lineno++;
		snprintf(where, sizeof where, "%s:%d", path, lineno);
		char *s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, err_size, "%s: expected key = value", where);
			rc = -1;
			break;
		}
		*eq = '\0';
		char *name = trim(s), *value = trim(eq + 1);
		size_t vlen = strlen(value);
		if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
			value[vlen - 1] = '\0';
			value++;
		}
		const struct key *k = find_key(name, strlen(name), 0);
		if (!k) {
			snprintf(err, err_size, "%s: unknown key \"%s\"", where, name);
			rc = -1;
		} else if (seen[k - keys]) {
			snprintf(err, err_size, "%s: %s is already set on line %d", where, name,
			         seen[k - keys]);
			rc = -1;
		} else {
			seen[k - keys] = lineno;
			char here[PATH_MAX + 128];
			snprintf(here, sizeof here, "%s: %s", where, k->name);
			rc = set_key(cfg, k, value, here, err, err_size);
		}
	}
	free(line);
	fclose(f);
	return rc;
}

static int resolve_listen(struct svc_config *cfg, char *err, size_t err_size)
{
	char host[256], port[8];
	split_listen(cfg->listen, host, sizeof host, port, sizeof port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	hints.ai_family = cfg->listen[0] == '[' ? AF_INET6 : AF_UNSPEC;
	struct addrinfo *res, *pick = NULL;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, err_size, "listen: cannot resolve \"%s\": %s", host, gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *a = res; a && !pick; a = a->ai_next)
		if (a->ai_family == AF_INET)
			pick = a;                   /* IPv4 first for names like localhost */
	if (!pick)
		pick = res;
	memcpy(&cfg->addr, pick->ai_addr, pick->ai_addrlen);
	cfg->addr_len = pick->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void usage(void)
{
	printf("usage: larchd [--config FILE] [--listen HOST:PORT] [--state-dir DIR] [options]\n"
	       "       larchd token create --user NAME --role user|admin [--unix-user UNIX] | "
	       "token list |\n"
	       "       larchd token revoke ID\n"
	       "       larchd db migrate | db check | db backup DEST\n"
	       "\n"
	       "larch's HTTP service: the REST API v1 (docs/api.md) over SQLite, running jobs\n"
	       "with the local executor or on a Slurm cluster. The token and db commands work\n"
	       "on the state dir's database (larchd token --help, larchd db --help).\n"
	       "\n"
	       "  %-28s %s\n", "--config FILE", "read settings from FILE (also $LARCHD_CONFIG)");
	for (size_t i = 0; i < N_KEYS; i++) {
		char flag[64];
		int n = snprintf(flag, sizeof flag, "--%s %s", keys[i].name, keys[i].metavar);
		for (int j = 2; j < n && flag[j] != ' '; j++)
			if (flag[j] == '_')
				flag[j] = '-';
		printf("  %-28s %s (default %s%s)\n", flag, keys[i].help,
		       *keys[i].def ? keys[i].def : "none", keys[i].reload ? "; SIGHUP reloads it" : "");
	}
	printf("  %-28s %s\n", "--help, --version", "print this or the version and exit");
	printf("\n"
	       "Each --some-key VALUE is also a line \"some_key = VALUE\" in the config file and\n"
	       "the environment variable LARCHD_SOME_KEY; flags win over the environment, which\n"
	       "wins over the file. deploy/larchd.conf.example describes every key.\n"
	       "SIGTERM or SIGINT: stop accepting, let in-flight requests finish, exit 0.\n"
	       "SIGHUP: read the settings again (those marked \"SIGHUP reloads it\" change at\n"
	       "once, the others at the next start) and reopen the log file.\n");
}

/* A --flag and its value, kept until the other layers are applied. */
struct flag_value {
	const struct key *key;
	const char *value;
};

int svc_config_load(struct svc_config *cfg, int argc, char **argv, char *err, size_t err_size)
{
	memset(cfg, 0, sizeof *cfg);
	struct flag_value *flags = calloc((size_t)argc + 1, sizeof *flags);
	size_t n_flags = 0;
	const char *config = NULL;
	int rc = SVC_CONFIG_ERROR;
	if (!flags) {
		snprintf(err, err_size, "out of memory");
		return SVC_CONFIG_ERROR;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			usage();
			rc = SVC_CONFIG_EXIT;
			goto out;
		}
		if (strcmp(arg, "--version") == 0) {
			printf("larchd %s\n", LARCH_VERSION_TEXT);
			rc = SVC_CONFIG_EXIT;
			goto out;
		}
		if (strncmp(arg, "--", 2) != 0) {
			snprintf(err, err_size, "unexpected argument \"%s\" (see larchd --help)", arg);
			goto out;
		}
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const char *value = eq ? eq + 1 : NULL;
		const struct key *k = find_key(name, len, 1);
		int is_config = len == 6 && strncmp(name, "config", 6) == 0;
		if (!k && !is_config) {
			snprintf(err, err_size, "unknown option --%.*s (see larchd --help)", (int)len, name);
			goto out;
		}
		if (!value) {
			if (i + 1 >= argc) {
				snprintf(err, err_size, "--%.*s: needs a value", (int)len, name);
				goto out;
			}
			value = argv[++i];
		}
		if (is_config)
			config = value;
		else
			flags[n_flags++] = (struct flag_value){ k, value };
	}

	for (size_t i = 0; i < N_KEYS; i++) {
		char where[64];
		snprintf(where, sizeof where, "default %s", keys[i].name);
		if (set_key(cfg, &keys[i], keys[i].def, where, err, err_size) != 0)
			goto out;
	}
	if (!config)
		config = trn_env_str("LARCHD_CONFIG");
	if (config) {
		if (set_string(&cfg->config_file, config, err, err_size) != 0 ||
		    load_file(cfg, config, err, err_size) != 0)
			goto out;
	}
	for (size_t i = 0; i < N_KEYS; i++) {
		char env[64];
		size_t j = 0;
		j += (size_t)snprintf(env, sizeof env, "LARCHD_");
		for (const char *p = keys[i].name; *p && j + 1 < sizeof env; p++)
			env[j++] = (char)toupper((unsigned char)*p);
		env[j] = '\0';
		const char *value = trn_env_str(env);
		if (value && set_key(cfg, &keys[i], value, env, err, err_size) != 0)
			goto out;
	}
	for (size_t i = 0; i < n_flags; i++) {
		char where[64];
		snprintf(where, sizeof where, "--%s", flags[i].key->name);
		for (char *p = where + 2; *p; p++)
			if (*p == '_')
				*p = '-';
		if (set_key(cfg, flags[i].key, flags[i].value, where, err, err_size) != 0)
			goto out;
	}
	if (!cfg->tls_cert != !cfg->tls_key) {
		snprintf(err, err_size, "tls_cert and tls_key: give both or neither (only %s is set)",
		         cfg->tls_cert ? "tls_cert" : "tls_key");
		goto out;
	}
	if (resolve_listen(cfg, err, err_size) != 0)
		goto out;
	if (strcmp(cfg->run_as, "auto") == 0 &&
	    set_string(&cfg->run_as, geteuid() == 0 ? "owner" : "service", err, err_size) != 0)
		goto out;
	rc = SVC_CONFIG_RUN;
out:
	free(flags);
	return rc;
}

void svc_config_release(struct svc_config *cfg)
{
	free(cfg->listen);
	free(cfg->state_dir);
	free(cfg->log_file);
	free(cfg->trainer_path);
	free(cfg->config_file);
	free(cfg->executor);
	free(cfg->slurm_partition);
	free(cfg->slurm_account);
	free(cfg->slurm_qos);
	free(cfg->slurm_submit);
	free(cfg->slurm_mpi);
	free(cfg->accounting);
	free(cfg->dashboard_dir);
	free(cfg->webhook_allow);
	free(cfg->trusted_proxies);
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->job_ca);
	free(cfg->webhook_ca);
	free(cfg->chartjs_path);
	free(cfg->run_as);
	memset(cfg, 0, sizeof *cfg);
}

/* ---- SIGHUP: svc_config_reload ------------------------------------------- */

/* A key's value in cfg as text for the log ("2", "80G,small=40G", "-"). */
static const char *value_text(const struct svc_config *cfg, const struct key *k, char *buf,
                              size_t len)
{
	const char *base = (const char *)cfg;
	const void *f = base + k->offset;
	size_t o = 0;
	switch (k->kind) {
	case K_LISTEN: case K_PATH: case K_AUTO_PATH: case K_LOG_FILE: case K_CHOICE: case K_NAME:
	case K_ALLOW: case K_FILE: {
		const char *s = *(char *const *)f;
		svc_msgf(buf, len, "%s", s ? s : k->kind == K_LOG_FILE ? "-"
		                                : k->kind == K_FILE ? "" : "auto");
		break;
	}
	case K_UINT:
		svc_msgf(buf, len, "%u", *(const unsigned *)f);
		break;
	case K_SIZE:
		size_text(*(const size_t *)f, buf, len);
		break;
	case K_LEVEL:
		svc_msgf(buf, len, "%s", svc_log_level_name(*(const enum svc_log_level *)f));
		break;
	case K_GPU_MEMORY: {
		const struct svc_gpu_memory *g = f;
		char one[32];
		svc_msgf(buf, len, "%s", size_text(g->bytes, one, sizeof one));
		for (int i = 0; i < g->n && (o = strlen(buf)) < len; i++)
			svc_msgf(buf + o, len - o, ",%s=%s", g->part[i].partition,
			         size_text(g->part[i].bytes, one, sizeof one));
		break;
	}
	case K_PATH_LIST: {
		const struct svc_path_list *l = f;
		buf[0] = '\0';
		for (int i = 0; i < l->n && (o = strlen(buf)) < len; i++)
			svc_msgf(buf + o, len - o, "%s%s", i ? "," : "", l->path[i]);
		break;
	}
	}
	return buf;
}

/* Whether a key has the same value in a and b. */
static int same_value(const struct svc_config *a, const struct svc_config *b, const struct key *k)
{
	const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;
	switch (k->kind) {
	case K_UINT: return *(const unsigned *)fa == *(const unsigned *)fb;
	case K_SIZE: return *(const size_t *)fa == *(const size_t *)fb;
	case K_LEVEL: return *(const enum svc_log_level *)fa == *(const enum svc_log_level *)fb;
	case K_GPU_MEMORY: {
		const struct svc_gpu_memory *ga = fa, *gb = fb;
		if (ga->bytes != gb->bytes || ga->n != gb->n)
			return 0;
		for (int i = 0; i < ga->n; i++)
			if (ga->part[i].bytes != gb->part[i].bytes ||
			    strcmp(ga->part[i].partition, gb->part[i].partition) != 0)
				return 0;
		return 1;
	}
	case K_PATH_LIST: {
		const struct svc_path_list *la = fa, *lb = fb;
		if (la->n != lb->n)
			return 0;
		for (int i = 0; i < la->n; i++)
			if (strcmp(la->path[i], lb->path[i]) != 0)
				return 0;
		return 1;
	}
	default: {
		const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;
		return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
	}
	}
}

/* The bytes of a key's field in struct svc_config. */
static size_t field_size(enum key_kind kind)
{
	switch (kind) {
	case K_UINT: return sizeof(unsigned);
	case K_SIZE: return sizeof(size_t);
	case K_LEVEL: return sizeof(enum svc_log_level);
	case K_GPU_MEMORY: return sizeof(struct svc_gpu_memory);
	case K_PATH_LIST: return sizeof(struct svc_path_list);
	default: return sizeof(char *);
	}
}

int svc_config_reload(struct svc_config *cfg, int argc, char **argv, char *changed,
                      size_t changed_size, char *err, size_t err_size)
{
	struct svc_config *next = malloc(sizeof *next);
	if (!next) {
		snprintf(err, err_size, "out of memory");
		return -1;
	}
	if (svc_config_load(next, argc, argv, err, err_size) != SVC_CONFIG_RUN) {
		svc_config_release(next);
		free(next);
		return -1;
	}
	int mask = 0;
	size_t o = 0;
	changed[0] = '\0';
	for (size_t i = 0; i < N_KEYS; i++) {
		const struct key *k = &keys[i];
		if (same_value(cfg, next, k))
			continue;
		char was[1024], now[1024];
		value_text(cfg, k, was, sizeof was);
		value_text(next, k, now, sizeof now);
		if (!k->reload) {
			svc_log(SVC_LOG_WARN, "config: %s = %s takes a restart: larchd keeps %s until then",
			        k->name, now, was);
			continue;
		}
		/* swap the field: next (released below) takes the old value */
		char tmp[sizeof(struct svc_path_list)];
		size_t n = field_size(k->kind);
		memcpy(tmp, (char *)cfg + k->offset, n);
		memcpy((char *)cfg + k->offset, (char *)next + k->offset, n);
		memcpy((char *)next + k->offset, tmp, n);
		mask |= (int)k->reload;
		svc_log(SVC_LOG_INFO, "config: %s = %s (was %s)", k->name, now, was);
		if (o < changed_size)
			o += (size_t)snprintf(changed + o, changed_size - o, "%s%s", o ? ", " : "",
			                      k->name);
	}
	svc_config_release(next);
	free(next);
	return mask;
}
