/* service/config.h - larchd's settings: defaults, file, environment, flags.
 *
 * Every setting is a key (deploy/larchd.conf.example documents each):
 *   in the config file    body_limit = 2M
 *   in the environment    LARCHD_BODY_LIMIT=2M
 *   on the command line   --body-limit 2M   (or --body-limit=2M)
 * Precedence: flags > environment > file > embedded defaults. The file is
 * --config FILE, else $LARCHD_CONFIG, else none; it holds `key = value`
 * lines, blank lines and comment lines starting with '#'. An empty
 * environment variable counts as unset. A bad value, unknown key or flag
 * is an error naming where it came from ("LARCHD_BODY_LIMIT: must be a
 * size ...", "larchd.conf:3: unknown key \"foo\""); larchd exits 2.
 *
 * SIGHUP reads every layer again (svc_config_reload). Only the keys whose
 * table row has a `reload` class take the new value at once: log_level,
 * log_file, gpu_memory, preflight_timeout. The others are read by what
 * larchd starts once (the listening socket and HTTP server, the state dir
 * and database, the executor and the copies it keeps, the run_as mode):
 * a new value of one of those is logged as taking a restart, and ignored.
 */
#ifndef LARCH_SERVICE_CONFIG_H
#define LARCH_SERVICE_CONFIG_H

#include <stddef.h>
#include <sys/socket.h>

#include "log.h"

/* Memory of one GPU, by partition: "80G" or "80G,small=40G,big=141G". */
#define SVC_GPU_MEMORY_PARTS 16
struct svc_gpu_memory {
	size_t bytes;                    /* the other partitions' (and the default's) */
	int n;
	struct {
		char partition[65];
		size_t bytes;
	} part[SVC_GPU_MEMORY_PARTS];
};

/* The GPU memory of partition (NULL or "": the default partition). */
size_t svc_gpu_memory_of(const struct svc_gpu_memory *g, const char *partition);

/* Directories, each absolute and resolved (realpath) when the setting was read. */
#define SVC_PATH_LIST_MAX 16
struct svc_path_list {
	int n;
	char path[SVC_PATH_LIST_MAX][4096];
};

struct svc_config {
	char *listen;                    /* "127.0.0.1:8080" */
	struct sockaddr_storage addr;    /* listen, resolved */
	socklen_t addr_len;
	char *state_dir;                 /* "./larch-state" */
	char *executor;                  /* "local" or "slurm" */
	char *slurm_partition;           /* "" = the cluster's default */
	char *slurm_account, *slurm_qos; /* "" = Slurm's default */
	unsigned slurm_poll_ms;          /* between squeue calls */
	unsigned slurm_timeout;          /* seconds a Slurm command may take */
	unsigned slurm_submit_parallel;  /* submissions at once */
	char *slurm_submit;              /* "auto", "libslurm" or "sbatch" */
	char *slurm_mpi;                 /* "auto", "pmix" or "mpirun" */
	char *accounting;                /* "auto" or "off" */
	unsigned accounting_refresh_s;   /* between sacctmgr/sshare/sacct reads */
	unsigned max_local_jobs;         /* the local executor's concurrent jobs */
	char *trainer_path;              /* larch-train; NULL: beside larchd ("auto") */
	unsigned cancel_grace;           /* seconds from SIGTERM to SIGKILL on cancel */
	char *run_as;                    /* "owner" or "service" ("auto" resolved at load) */
	struct svc_path_list data_roots; /* service mode: where user-role jobs' files may be */
	unsigned preflight_timeout;      /* seconds a submit's look at its data files may take */
	unsigned sweep_max_children;     /* children a sweep may have */
	char *dashboard_dir;             /* NULL: the dashboard built into larchd */
	char *chartjs_path;              /* Chart.js for the dashboard; NULL ("auto"): none */
	size_t body_limit;               /* request body bytes */
	unsigned compare_max_jobs;       /* GET /v1/metrics: jobs per request */
	char *webhook_allow;             /* where webhooks may go (service/webhook_target.h) */
	unsigned webhook_max_per_user;   /* webhooks one user may have */
	unsigned webhook_connect_timeout_ms, webhook_timeout_ms;   /* per attempt */
	unsigned webhook_backoff_ms, webhook_backoff_max_ms;       /* between attempts */
	unsigned webhook_retry_for_s;    /* attempts stop this long after the event */
	char *webhook_ca;                /* PEM CAs https webhooks may chain to besides the
	                                    system's; NULL: the system's only */
	struct svc_gpu_memory gpu_memory; /* bytes per GPU for submit-time memory plans */
	enum svc_log_level log_level;
	char *log_file;                  /* NULL: stderr */
	unsigned threads;                /* HTTP threads */
	unsigned max_connections;
	unsigned max_connections_per_ip; /* from one address; 0: no cap */
	unsigned header_timeout;         /* seconds to a whole request head */
	unsigned connection_timeout;     /* seconds a connection may idle */
	unsigned request_timeout;        /* seconds a request's body may take */
	unsigned shutdown_timeout;       /* seconds in-flight requests get on SIGTERM */
	char *tls_cert, *tls_key;        /* PEM files; both NULL (plain HTTP) or both set */
	char *job_ca;                    /* LARCH_CA for jobs; NULL: tls_cert if self-signed */
	char *trusted_proxies;           /* whose X-Forwarded-For counts ("": nobody's) */
	char *config_file;               /* the file read, or NULL */
};

/* What a reloaded key changes (config.c's `reload` column), as a bit mask. */
enum svc_config_reload {
	SVC_RELOAD_LOG = 1 << 0,         /* log_level, log_file: svc_log_open again */
	SVC_RELOAD_RUNNER = 1 << 1,      /* gpu_memory: svc_runner_set_gpu_memory */
	SVC_RELOAD_PREFLIGHT = 1 << 2,   /* preflight_timeout: svc_preflight_set_timeout */
};

enum svc_config_status {
	SVC_CONFIG_RUN = 0,              /* cfg is complete: start */
	SVC_CONFIG_EXIT = 1,             /* --help or --version was printed: exit 0 */
	SVC_CONFIG_ERROR = -1,           /* err says what: exit 2 */
};

/* Fills cfg from the defaults, the config file, the environment and argv
 * (argv[0] is the program). Prints --help and --version to stdout. Returns
 * an enum svc_config_status; on SVC_CONFIG_ERROR err holds the message.
 * Release cfg with svc_config_release whatever it returned. */
int svc_config_load(struct svc_config *cfg, int argc, char **argv, char *err, size_t err_size);
void svc_config_release(struct svc_config *cfg);

/* Reads the settings again as svc_config_load did from the same argv (so
 * flags and the environment still win over the file), and moves into cfg
 * the new values of the reloadable keys; a changed key that is not
 * reloadable keeps its value, with a warning in the log naming it. Returns
 * the SVC_RELOAD_* bits of what changed, with the names of the keys that
 * changed, comma-separated, in changed (may be cut at changed_size); or -1
 * with err filled when the settings do not load, cfg untouched. */
int svc_config_reload(struct svc_config *cfg, int argc, char **argv, char *changed,
                      size_t changed_size, char *err, size_t err_size);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
unsigned svc_cpu_count(void);

#endif
