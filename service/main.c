/* service/main.c - larchd: read the settings, make the state directory,
 * open the database, make the first admin token, start the executor (local
 * or Slurm)
 * and the runner (service/runner.h: it adopts the jobs a previous larchd
 * left running), serve until SIGTERM or SIGINT, then stop gracefully (stop
 * accepting, let in-flight requests finish for up to shutdown_timeout
 * seconds; a second signal cuts that short), stop the runner (jobs keep
 * running; the next start adopts them), close the database and exit 0.
 * SIGHUP reloads the settings that may change at once (config.h) and
 * reopens the log file (logrotate).
 * One larchd per state dir: a second one on it does not start
 * (service/state_dir.h). Exit 2: bad settings; 1: could not start (another
 * larchd holds the state dir, among others). `larchd token ...` and
 * `larchd db ...` are service/admin.h's. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "accounting.h"
#include "admin.h"
#include "api/changes.h"
#include "api/job_cache.h"
#include "api/jobs_hooks.h"
#include "api/request.h"
#include "api/routes.h"
#include "api/static.h"
#include "api/sweeps_hooks.h"
#include "api/webhooks_hooks.h"
#include "auth_db.h"
#include "clock.h"
#include "cluster.h"
#include "config.h"
#include "dashboard_files.h"
#include "larch_version.h"
#include "db/db.h"
#include "executor.h"
#include "db/tokens.h"
#include "identity.h"
#include "log.h"
#include "export.h"
#include "preflight.h"
#include "runner.h"
#include "server.h"
#include "slurm_name.h"
#include "state_dir.h"
#include "tls.h"
#include "webhook_target.h"
#include "webhooks.h"

enum { EXIT_USAGE = 2 };

#define REPORT_FLUSH_S 5      /* a job's last metrics flush; well inside cancel_grace */
#define QUEUE_EXTRA 64        /* jobs handed to the executor beyond those it runs */

/* larch-train beside larchd (installed), else in the build tree
 * (build/service/larchd -> build/trainer/larch-train). */
static int find_trainer(char *out, size_t len, char *err, size_t errlen)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		svc_msgf(err, errlen, "trainer_path: cannot find larchd's own path (%s); set it",
		         strerror(errno));
		return -1;
	}
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	*slash = '\0';
	svc_msgf(out, len, "%s/larch-train", self);
	if (access(out, X_OK) == 0)
		return 0;
	svc_msgf(out, len, "%s/../trainer/larch-train", self);
	char real[PATH_MAX];
	if (access(out, X_OK) == 0 && realpath(out, real)) {
		svc_msgf(out, len, "%s", real);
		return 0;
	}
	svc_msgf(err, errlen, "trainer_path: no executable larch-train in %s or %s/../trainer: "
	         "set trainer_path (--trainer-path FILE)", self, self);
	return -1;
}

/* The URL jobs report to: where we listen, a wildcard address made loopback. */
static void job_server_url(const char *scheme, const char *address, char *out, size_t len)
{
	if (strncmp(address, "0.0.0.0:", 8) == 0)
		svc_msgf(out, len, "%s://127.0.0.1:%s", scheme, address + 8);
	else if (strncmp(address, "[::]:", 5) == 0)
		svc_msgf(out, len, "%s://[::1]:%s", scheme, address + 5);
	else
		svc_msgf(out, len, "%s://%s", scheme, address);
}

/* Stops accepting, waits for in-flight requests (a second signal stops the
 * wait), then stops the daemon. */
static void drain(struct svc_server *srv, const sigset_t *signals, unsigned timeout_s)
{
	svc_server_quiesce(srv);
	int64_t deadline = svc_mono_ms() + (int64_t)timeout_s * 1000;
	unsigned left;
	while ((left = svc_server_in_flight(srv)) > 0) {
		int64_t rest = deadline - svc_mono_ms();
		if (rest <= 0) {
			svc_log(SVC_LOG_WARN, "%u requests still in flight after %us: cutting them off",
			        left, timeout_s);
			break;
		}
		if (rest > 50)
			rest = 50;
		struct timespec ts = { 0, (long)rest * 1000000 };
		int sig = sigtimedwait(signals, NULL, &ts);
		if (sig > 0 && sig != SIGHUP) {          /* no reload while stopping */
			svc_log(SVC_LOG_WARN, "%s again: cutting off %u requests in flight",
			        strsignal(sig), left);
			break;
		}
	}
	svc_server_free(srv);
}

/* The first admin (SVC_ADMIN_USER) runs jobs as the Unix user larchd runs
 * as, unless it is mapped already or a Unix user of its name exists. */
static int map_first_admin(struct db *db, char *err, size_t errlen)
{
	struct db_user u;
	struct db_err dberr = { 0 };
	if (db_users_get(db, SVC_ADMIN_USER, &u, &dberr) != 0 || u.unix_user[0] ||
	    svc_unix_user_exists(SVC_ADMIN_USER) != 0)
		return 0;
	struct svc_unix_id self;
	char why[256];
	if (svc_unix_id_self(&self, why, sizeof why) != 0 || !db_unix_name_ok(self.name))
		return 0;
	if (db_users_set_unix(db, SVC_ADMIN_USER, self.name, &dberr) != 0) {
		svc_msgf(err, errlen, "mapping user %s to Unix user %s: %s", SVC_ADMIN_USER, self.name,
		    dberr.text);
		return -1;
	}
	svc_log(SVC_LOG_INFO, "user %s runs jobs as Unix user %s (larchd's own)", SVC_ADMIN_USER,
	        self.name);
	return 0;
}

/* Jobs that run as their owners must reach the state dir (to their own job
 * directory) and the trainer: says which directory on the way is closed to
 * other users. */
static void warn_unreachable(const char *state, const char *trainer)
{
	const char *paths[2] = { state, trainer };
	for (int i = 0; i < 2; i++) {
		char buf[PATH_MAX];
		if (!realpath(paths[i], buf))
			continue;
		for (char *slash = buf + strlen(buf); slash; slash = strrchr(buf, '/')) {
			if (slash == buf)
				break;
			struct stat st;
			if (stat(buf, &st) == 0 && !(st.st_mode & S_IXOTH)) {
				svc_log(SVC_LOG_WARN, "%s is closed to other users (mode %04o): jobs that run "
				        "as a user other than %s cannot reach %s", buf,
				        (unsigned)(st.st_mode & 07777), st.st_uid == 0 ? "root" : "its owner",
				        i ? "the trainer" : "their job directories");
				break;
			}
			*slash = '\0';
		}
	}
}

/* What main starts, stopped in reverse order. */
struct larchd {
	struct svc_config cfg;
	struct db *db;
	struct svc_auth *auth;
	struct svc_runner *runner;
	struct svc_preflight *preflight;   /* submits' look at their files (preflight.h) */
	struct svc_export *exports;        /* exports of checkpoints (export.h) */
	struct api_jobs_hooks jobs_hooks;  /* the runner's, and the preflight */
	struct api_sweeps_hooks sweeps_hooks;   /* the sweep endpoints' settings */
	struct executor *ex;
	struct svc_cluster *cluster;       /* the admin endpoints' Slurm side (cluster.h) */
	struct svc_acct *acct;             /* Slurm's accounting (accounting.h) */
	struct svc_server *srv;
	struct api_static *dashboard;      /* GET / and /ui/... (api/static.h) */
	struct svc_webhooks *webhooks;     /* the webhook sender (webhooks.h) */
	struct api_ctx ctx;
	int lock_fd;                       /* the state dir's lock (state_dir.h), or -1 */
	char *tls_cert, *tls_key;          /* PEM text (tls.h); NULL: plain HTTP */
	struct svc_allow_list trusted_proxies;
};

/* A sweep's children were stored: the runner wakes, finds them PENDING and
 * hands them over together (one Slurm job array; runner.h). */
static void sweep_submitted(void *arg, long long sweep)
{
	struct larchd *d = arg;
	d->jobs_hooks.submitted(d->jobs_hooks.arg, sweep);
}

/* A sweep is cancelled: the executor stops what it runs of it with one
 * order where it can (scancel of the array), before the children's own
 * cancels say who asked. */
static void sweep_cancel(void *arg, long long sweep)
{
	struct larchd *d = arg;
	if (d->ex)
		exec_cancel_sweep(d->ex, sweep);
}

/* The database's change hook: the event feed, and the webhook sender. */
static void on_change(void *arg, const struct db_change *changes, size_t n)
{
	struct larchd *d = arg;
	api_changes_publish(d->ctx.changes, changes, n);
	svc_webhooks_wake(d->webhooks);
}

/* The dashboard's files: built in, or read from dashboard_dir; and Chart.js
 * from the system, without which it works but draws no charts. */
static int dashboard_new(struct larchd *d, char *err, size_t errlen)
{
	d->dashboard = api_static_new(svc_dashboard_files, svc_dashboard_files_count,
	                              d->cfg.dashboard_dir);
	if (!d->dashboard) {
		svc_msgf(err, errlen, "out of memory");
		return -1;
	}
	char why[PATH_MAX + 128];
	if (d->cfg.chartjs_path &&
	    api_static_add_vendor(d->dashboard, "chart.js", d->cfg.chartjs_path, why,
	                          sizeof why) != 0)
		svc_log(SVC_LOG_WARN, "chartjs_path: %s: the dashboard will show no charts "
		        "(install libjs-chart.js)", why);
	return 0;
}

static void stop(struct larchd *d, int clean)
{
	svc_server_free(d->srv);           /* first: no request uses what follows */
	svc_preflight_free(d->preflight);
	svc_export_free(d->exports);       /* running exports are killed */
	svc_webhooks_free(d->webhooks);    /* an attempt in flight stays pending */
	svc_runner_free(d->runner);        /* jobs keep running: the next start adopts them */
	svc_cluster_free(d->cluster);
	svc_acct_free(d->acct);
	exec_free(d->ex);
	svc_auth_free(d->auth);
	api_job_cache_free(d->ctx.job_cache);
	if (d->db && db_close(d->db) != 0)
		svc_log(SVC_LOG_ERROR, "closing the database failed");
	api_changes_free(d->ctx.changes);  /* after the db: its hook feeds it to the last commit */
	api_static_free(d->dashboard);
	svc_state_dir_unlock(d->lock_fd);  /* last: nothing of ours uses the state dir now */
	free(d->tls_cert);
	free(d->tls_key);
	if (clean)
		svc_log(SVC_LOG_INFO, "stopped");
	svc_log_close();
	svc_config_release(&d->cfg);
}

/* Everything up to serving; 0, or -1 with err filled (d holds what started). */
static int start(struct larchd *d, char *err, size_t errlen, char *admin_path, size_t pathlen,
                 int *admin_created)
{
	char state[PATH_MAX], path[PATH_MAX + 16], trainer[PATH_MAX];
	int owner = strcmp(d->cfg.run_as, "owner") == 0;
	int slurm = strcmp(d->cfg.executor, "slurm") == 0;
	if (owner && geteuid() != 0) {
		svc_msgf(err, errlen, "run_as owner: larchd starts each job as its owner's Unix user, which "
		    "takes root (it runs as uid %u); set run_as = service to run jobs as larchd's "
		    "own user", (unsigned)geteuid());
		return -1;
	}
	/* the files first: a bad one stops larchd before it touches the state dir */
	if (d->cfg.tls_cert && (!(d->tls_cert = svc_tls_read(d->cfg.tls_cert, 0, err, errlen)) ||
	                        !(d->tls_key = svc_tls_read(d->cfg.tls_key, 1, err, errlen))))
		return -1;
	/* what jobs verify our certificate with (LARCH_CA) */
	char job_ca[PATH_MAX], job_ca_note[2 * PATH_MAX + 256];
	int has_job_ca = svc_tls_job_ca(d->cfg.job_ca, d->cfg.tls_cert, d->tls_cert, owner, job_ca,
	                                sizeof job_ca, job_ca_note, sizeof job_ca_note, err, errlen);
	if (has_job_ca < 0)
		return -1;
	if (svc_allow_parse(d->cfg.trusted_proxies, &d->trusted_proxies, err, errlen) != 0)
		return -1;
	if (svc_state_dir_make(d->cfg.state_dir, err, errlen) != 0)
		return -1;
	if (!realpath(d->cfg.state_dir, state)) {
		svc_msgf(err, errlen, "state dir %s: %s", d->cfg.state_dir, strerror(errno));
		return -1;
	}
	/* owner mode: job owners pass through it to their job directories, and
	 * list nothing */
	mode_t want = owner ? 0711 : 0700, was;
	/* one larchd per state dir, locked before anything in it changes (and
	 * not at all where it is not ours to use) */
	if (svc_state_dir_check(d->cfg.state_dir, want, err, errlen) != 0 ||
	    (d->lock_fd = svc_state_dir_lock(state, err, errlen)) < 0)
		return -1;
	int changed = svc_state_dir_secure(d->cfg.state_dir, want, &was, err, errlen);
	if (changed < 0)
		return -1;
	if (changed && (was & 077 & ~want))
		svc_log(SVC_LOG_WARN, "state dir %s was mode %04o, open to other users: now %04o",
		        d->cfg.state_dir, (unsigned)was, (unsigned)want);
	else if (changed)
		svc_log(SVC_LOG_INFO, "state dir %s: mode %04o, was %04o", d->cfg.state_dir,
		        (unsigned)want, (unsigned)was);
	if (d->cfg.trainer_path) {
		svc_msgf(trainer, sizeof trainer, "%s", d->cfg.trainer_path);
		if (access(trainer, X_OK) != 0) {
			svc_msgf(err, errlen, "trainer_path %s: %s", trainer, strerror(errno));
			return -1;
		}
	} else if (find_trainer(trainer, sizeof trainer, err, errlen) != 0) {
		return -1;
	}

	svc_msgf(path, sizeof path, "%s/larch.db", state);
	struct db_err dberr = { 0 };
	if (!(d->db = db_open(path, NULL, &dberr))) {
		svc_msgf(err, errlen, "%s: %s", path, dberr.text);
		return -1;
	}
	if (svc_admin_token_ensure(d->db, state, admin_path, pathlen, admin_created, err,
	                           errlen) != 0 ||
	    map_first_admin(d->db, err, errlen) != 0)
		return -1;

	/* every job event from here on feeds GET /v1/events */
	if (!(d->ctx.changes = api_changes_new())) {
		svc_msgf(err, errlen, "the change feed would not start (out of memory or threads)");
		return -1;
	}
	/* and wakes the webhook sender, whose outbox the same commits fill */
	struct svc_webhooks_config wcfg = {
		.db = d->db, .max_per_user = d->cfg.webhook_max_per_user,
		.connect_timeout_ms = d->cfg.webhook_connect_timeout_ms,
		.timeout_ms = d->cfg.webhook_timeout_ms, .backoff_ms = d->cfg.webhook_backoff_ms,
		.backoff_max_ms = d->cfg.webhook_backoff_max_ms,
		.retry_for_s = d->cfg.webhook_retry_for_s, .user_agent = "larchd/" LARCH_VERSION_TEXT,
		.ca_file = d->cfg.webhook_ca,
	};
	if (svc_allow_parse(d->cfg.webhook_allow, &wcfg.allow, err, errlen) != 0 ||
	    !(d->webhooks = svc_webhooks_new(&wcfg, err, errlen)))
		return -1;
	db_set_change_hook(d->db, on_change, d);

	if (!(d->auth = svc_auth_new(d->db, state))) {
		svc_msgf(err, errlen, "out of memory");
		return -1;
	}
	/* Slurm queues every job it is given; the local executor a few beyond its slots */
	struct svc_runner_config rcfg = { .db = d->db, .state_dir = state,
	                                  .run_as_owner = owner, .confine_user_jobs = !owner,
	                                  .queue_max = slurm ? 0 : (int)d->cfg.max_local_jobs +
	                                                           QUEUE_EXTRA,
	                                  .executor = d->cfg.executor,
	                                  .gpu_memory = &d->cfg.gpu_memory };
	if (!(d->runner = svc_runner_new(&rcfg, err, errlen)))
		return -1;
	char jobs_dir[PATH_MAX + 8];
	svc_msgf(jobs_dir, sizeof jobs_dir, "%s/jobs", state);
	struct svc_preflight_config pcfg = { .db = d->db, .trainer_path = trainer,
	                                     .jobs_dir = jobs_dir, .run_as_owner = owner,
	                                     .slurm = slurm, .data_roots = &d->cfg.data_roots,
	                                     .timeout_s = d->cfg.preflight_timeout };
	if (!(d->preflight = svc_preflight_new(&pcfg, err, errlen)))
		return -1;
	char instance[SLURM_INSTANCE_LEN + 1] = "";   /* the executor reads the same */
	if (slurm && slurm_instance_id(state, instance, err, errlen) != 0)
		return -1;
	if (!(d->cluster = svc_cluster_new(d->db, d->cfg.executor, d->cfg.max_local_jobs,
	                                   d->cfg.slurm_timeout, instance, err, errlen)))
		return -1;
	struct svc_acct_config acfg = { .db = d->db, .executor = d->cfg.executor,
	                                .enabled = strcmp(d->cfg.accounting, "off") != 0,
	                                .refresh_s = d->cfg.accounting_refresh_s,
	                                .timeout_s = d->cfg.slurm_timeout,
	                                .default_account = d->cfg.slurm_account };
	if (!(d->acct = svc_acct_new(&acfg, err, errlen)))
		return -1;
	if (dashboard_new(d, err, errlen) != 0)
		return -1;
	d->ctx.auth_lookup = svc_auth_lookup;
	d->ctx.auth_cls = d->auth;
	d->ctx.db = d->db;
	d->jobs_hooks = *svc_runner_hooks(d->runner);
	d->jobs_hooks.preflight = svc_preflight_submit;
	d->jobs_hooks.preflight_arg = d->preflight;
	d->jobs_hooks.compare_max_jobs = d->cfg.compare_max_jobs;
	struct svc_export_config expcfg = { .trainer_path = trainer, .run_as_owner = owner,
	                                  .job_dir = d->jobs_hooks.job_dir,
	                                  .job_dir_arg = d->jobs_hooks.arg };
	if (!(d->exports = svc_export_new(&expcfg, err, errlen)))
		return -1;
	d->jobs_hooks.exports = svc_export_hooks(d->exports);
	d->ctx.jobs = &d->jobs_hooks;
	d->sweeps_hooks = (struct api_sweeps_hooks){ .max_children = d->cfg.sweep_max_children,
	                                             .sweep_submitted = sweep_submitted,
	                                             .sweep_cancel = sweep_cancel, .arg = d };
	d->ctx.sweeps = &d->sweeps_hooks;
	d->ctx.svc = d->runner;
	d->ctx.admin = svc_cluster_hooks(d->cluster);
	d->ctx.acct = svc_acct_hooks(d->acct);
	d->ctx.job_cache = api_job_cache_new();
	d->ctx.dashboard = d->dashboard;
	d->ctx.webhooks = svc_webhooks_hooks(d->webhooks);
	char tls_source[2 * PATH_MAX + 32] = "";
	if (d->tls_cert)
		svc_msgf(tls_source, sizeof tls_source, "tls_cert %s, tls_key %s", d->cfg.tls_cert,
		         d->cfg.tls_key);
	struct svc_server_config scfg = {
		.addr = (const struct sockaddr *)&d->cfg.addr,
		.addr_len = d->cfg.addr_len,
		.threads = d->cfg.threads,
		.max_connections = d->cfg.max_connections,
		.max_connections_per_ip = d->cfg.max_connections_per_ip,
		.connection_timeout = d->cfg.connection_timeout,
		.header_timeout = d->cfg.header_timeout,
		.request_timeout = d->cfg.request_timeout,
		.body_limit = d->cfg.body_limit,
		.routes = api_routes,
		.n_routes = api_routes_count,
		.ctx = &d->ctx,
		.tls_cert_pem = d->tls_cert,
		.tls_key_pem = d->tls_key,
		.tls_source = tls_source,
		.trusted_proxies = &d->trusted_proxies,
	};
	if (!(d->srv = svc_server_start(&scfg, err, errlen)))
		return -1;

	/* the executor needs the URL jobs report to, known once we listen */
	char url[256];
	const char *scheme = d->tls_cert ? "https" : "http";
	job_server_url(scheme, svc_server_address(d->srv), url, sizeof url);
	char listen_url[256];
	svc_msgf(listen_url, sizeof listen_url, "%s://%s", scheme, svc_server_address(d->srv));
	if (svc_state_dir_lock_note(d->lock_fd, listen_url, err, errlen) != 0)
		return -1;
	char what[512];
	const char *roots[SVC_PATH_LIST_MAX];
	for (int i = 0; i < d->cfg.data_roots.n; i++)
		roots[i] = d->cfg.data_roots.path[i];
	if (slurm) {
		struct exec_slurm_config xcfg = {
			.trainer_path = trainer,
			.server_url = url,
			.ca_file = has_job_ca ? job_ca : NULL,
			.state_dir = state,
			.partition = d->cfg.slurm_partition,
			.account = d->cfg.slurm_account,
			.qos = d->cfg.slurm_qos,
			.poll_ms = (int)d->cfg.slurm_poll_ms,
			.timeout_s = (int)d->cfg.slurm_timeout,
			.submit_parallel = (int)d->cfg.slurm_submit_parallel,
			.submit_via = strcmp(d->cfg.slurm_submit, "sbatch") == 0 ? EXEC_SLURM_SUBMIT_SBATCH
			              : strcmp(d->cfg.slurm_submit, "libslurm") == 0
			                  ? EXEC_SLURM_SUBMIT_LIBSLURM : EXEC_SLURM_SUBMIT_AUTO,
			.mpi = strcmp(d->cfg.slurm_mpi, "pmix") == 0 ? EXEC_SLURM_MPI_PMIX
			       : strcmp(d->cfg.slurm_mpi, "mpirun") == 0 ? EXEC_SLURM_MPI_MPIRUN
			       : strcmp(d->cfg.slurm_mpi, "none") == 0   ? EXEC_SLURM_MPI_NONE
			                                                 : EXEC_SLURM_MPI_AUTO,
			.grace_s = (int)d->cfg.cancel_grace,
			.report_flush_s = REPORT_FLUSH_S,
			.data_roots = roots,
			.n_data_roots = d->cfg.data_roots.n,
		};
		if (!(d->ex = exec_slurm_new(&xcfg, err, errlen)))
			return -1;
		svc_msgf(what, sizeof what, "slurm executor (submits with %s, squeue every %u ms%s%s)",
		    exec_slurm_submits_with(d->ex), d->cfg.slurm_poll_ms,
		    *d->cfg.slurm_partition ? ", default partition " : "", d->cfg.slurm_partition);
	} else {
		struct exec_local_config xcfg = {
			.trainer_path = trainer,
			.server_url = url,
			.ca_file = has_job_ca ? job_ca : NULL,
			.max_running = (int)d->cfg.max_local_jobs,
			.grace_s = (int)d->cfg.cancel_grace,
			.report_flush_s = REPORT_FLUSH_S,
			.data_roots = roots,
			.n_data_roots = d->cfg.data_roots.n,
		};
		if (!(d->ex = exec_local_new(&xcfg, err, errlen)))
			return -1;
		svc_msgf(what, sizeof what, "local executor: %u jobs at once", d->cfg.max_local_jobs);
	}
	if (svc_runner_start(d->runner, d->ex, err, errlen) != 0)
		return -1;
	svc_log(SVC_LOG_INFO, "larchd %s: listening on %s, state dir %s, %u threads, "
	        "body limit %zu bytes, %s, %s, jobs run as %s%s%s", LARCH_VERSION_TEXT,
	        listen_url, state, d->cfg.threads, d->cfg.body_limit,
	        what, trainer, owner ? "their owners" : "larchd's user",
	        d->cfg.config_file ? ", config " : "", d->cfg.config_file ? d->cfg.config_file : "");
	if (owner)
		warn_unreachable(state, trainer);
	if (job_ca_note[0])
		svc_log(SVC_LOG_WARN, "%s", job_ca_note);
	else if (has_job_ca)
		svc_log(SVC_LOG_INFO, "jobs verify larchd's certificate with %s (LARCH_CA)", job_ca);
	return 0;
}

/* SIGHUP: the settings again (config.h says which change now), and the log
 * file reopened, renamed or not (logrotate's postrotate). */
static void reload(struct larchd *d, int argc, char **argv)
{
	char err[4096 + 512], changed[512] = "";
	/* first the file logrotate renamed, so that what follows is in the new one */
	if (svc_log_open(d->cfg.log_file, d->cfg.log_level, err, sizeof err) != 0)
		svc_log(SVC_LOG_ERROR, "SIGHUP: %s: the log goes where it went", err);
	int mask = svc_config_reload(&d->cfg, argc, argv, changed, sizeof changed, err, sizeof err);
	if (mask < 0) {
		svc_log(SVC_LOG_ERROR, "SIGHUP: log reopened; the settings were not reloaded, larchd "
		        "keeps its own: %s", err);
		return;
	}
	if ((mask & SVC_RELOAD_LOG) &&
	    svc_log_open(d->cfg.log_file, d->cfg.log_level, err, sizeof err) != 0)
		svc_log(SVC_LOG_ERROR, "SIGHUP: %s: the log goes where it went", err);
	if (mask & SVC_RELOAD_RUNNER)
		svc_runner_set_gpu_memory(d->runner, &d->cfg.gpu_memory);
	if (mask & SVC_RELOAD_PREFLIGHT)
		svc_preflight_set_timeout(d->preflight, d->cfg.preflight_timeout);
	svc_log(SVC_LOG_INFO, "SIGHUP: log reopened, settings read again%s%s: %s%s",
	        d->cfg.config_file ? " from " : "", d->cfg.config_file ? d->cfg.config_file : "",
	        *changed ? "changed now " : "none changed", changed);
}

int main(int argc, char **argv)
{
	if (svc_admin_is_command(argc, argv))
		return svc_admin_main(argc, argv);

	struct larchd d;
	memset(&d, 0, sizeof d);
	d.lock_fd = -1;
	char err[4096 + 512];
	int rc = svc_config_load(&d.cfg, argc, argv, err, sizeof err);
	if (rc != SVC_CONFIG_RUN) {
		if (rc == SVC_CONFIG_ERROR)
			fprintf(stderr, "larchd: %s\n", err);
		svc_config_release(&d.cfg);
		return rc == SVC_CONFIG_EXIT ? EXIT_SUCCESS : EXIT_USAGE;
	}
	if (svc_log_open(d.cfg.log_file, d.cfg.log_level, err, sizeof err) != 0) {
		fprintf(stderr, "larchd: %s\n", err);
		svc_config_release(&d.cfg);
		return EXIT_FAILURE;
	}

	/* Every thread inherits this mask: the signals reach only sigwait below
	 * (the executor unblocks them in its children). */
	sigset_t signals;
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	char admin_path[PATH_MAX + 32];
	int admin_created = 0;
	if (start(&d, err, sizeof err, admin_path, sizeof admin_path, &admin_created) != 0) {
		fprintf(stderr, "larchd: %s\n", err);
		stop(&d, 0);
		return EXIT_FAILURE;
	}
	printf("larchd: listening on %s://%s\n", d.tls_cert ? "https" : "http",
	       svc_server_address(d.srv));
	if (admin_created)
		printf("larchd: admin token written to %s\n", admin_path);
	fflush(stdout);

	int sig = 0;
	while (sigwait(&signals, &sig) == 0 && sig == SIGHUP)
		reload(&d, argc, argv);
	svc_log(SVC_LOG_INFO, "%s: stopping (in flight: %u)", strsignal(sig),
	        svc_server_in_flight(d.srv));
	api_changes_close(d.ctx.changes);  /* parked long polls answer now */
	svc_preflight_close(d.preflight);  /* and parked submits (503) */
	drain(d.srv, &signals, d.cfg.shutdown_timeout);
	d.srv = NULL;                      /* drain freed it */
	stop(&d, 1);
	return EXIT_SUCCESS;
}
