/* service/preflight.c - submits' preflights on worker threads, probes as
 * child processes; see preflight.h. */
#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "db/tokens.h"
#include "identity.h"
#include "log.h"
#include "trainer/env.h"

#define PREFLIGHT_WORKERS 4
#define PREFLIGHT_QUEUE_MAX 1024
#define PER_USER_RUNNING 2         /* probes of one user at once: others always get a worker */
#define PER_USER_WAITING 64        /* submits of one user waiting; more are answered 429 */
#define PROBE_OUTPUT_MAX 65536     /* the probe prints one small JSON object */
#define REAP_MAX 256               /* probes killed but not yet gone */

struct item {
	char *user, *spec;
	int admin;
	api_preflight_done_fn done;
	void *done_arg;
	struct item *next;
};

struct svc_preflight {
	struct db *db;
	char *trainer_path, *base_dir, *dataset_root;
	int run_as_owner, slurm;
	struct svc_path_list roots;
	atomic_uint timeout_s;             /* SIGHUP may change it */

	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct item *head, *tail;
	int queued, closing;
	pid_t running[PREFLIGHT_WORKERS];  /* probes' process groups, 0: none */
	char *running_user[PREFLIGHT_WORKERS];   /* whose item each worker holds (borrowed) */
	pid_t gone[REAP_MAX];              /* killed, waiting to be reaped */
	int n_gone;
	int stop_pipe[2];                  /* readable once closing: wakes polls */
	pthread_t workers[PREFLIGHT_WORKERS];
	int n_workers;
};

struct worker {
	struct svc_preflight *pf;
	int slot;
};
static struct worker worker_args[PREFLIGHT_WORKERS];


static void item_free(struct item *it)
{
	if (!it)
		return;
	free(it->user);
	free(it->spec);
	free(it);
}

static void refuse(struct api_preflight_result *r, int status, const char *field,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void refuse(struct api_preflight_result *r, int status, const char *field,
                   const char *fmt, ...)
{
	r->status = status;
	snprintf(r->field, sizeof r->field, "%s", field ? field : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->message, sizeof r->message, fmt, ap);
	va_end(ap);
}

/* ---- who the job runs as ---------------------------------------------------- */

static int identity(struct svc_preflight *pf, const struct item *it, struct svc_unix_id *id,
                    struct api_preflight_result *r)
{
	if (!pf->run_as_owner)
		return 0;
	char unix_user[DB_UNIX_NAME_MAX + 1];
	struct db_err err = { 0 };
	int rc = db_users_unix(pf->db, it->user, unix_user, &err);
	if (rc == DB_INVALID) {
		refuse(r, 403, NULL, "user %s has no Unix user to run jobs as: jobs run as their "
		       "owner here (run_as owner); an admin maps one with larchd token create "
		       "--user %s --unix-user NAME", it->user, it->user);
		return -1;
	}
	if (rc != 0) {
		refuse(r, 503, NULL, "looking up user %s: %s", it->user, err.text);
		return -1;
	}
	char why[256];
	if (svc_unix_id_lookup(unix_user, id, why, sizeof why) != 0) {
		refuse(r, 403, NULL, "user %s: %s: jobs run as their owner's Unix user here (run_as "
		       "owner)", it->user, why);
		return -1;
	}
	if (!it->admin && id->uid == 0) {
		refuse(r, 403, NULL, "user %s is mapped to Unix user %s, uid 0: a job of a user-role "
		       "token never runs as uid 0", it->user, id->name);
		return -1;
	}
	snprintf(r->unix_user, sizeof r->unix_user, "%s", id->name);
	return 1;
}

/* ---- the probe --------------------------------------------------------------- */

struct probe {
	char *argv[12 + 2 * SVC_PATH_LIST_MAX];
	char *envp[8];
	char env_root[4200];
	const struct svc_unix_id *id;      /* NULL: as larchd's user */
	int in_fd, out_fd;                 /* the child's stdin (the spec) and stdout */
	unsigned cpu_s;
};

/* In the child (async-signal-safe calls only). Never returns. */
static void probe_child(const struct probe *p) __attribute__((noreturn));

static void probe_child(const struct probe *p)
{
	setpgid(0, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	int in = fcntl(p->in_fd, F_DUPFD, 10), out = fcntl(p->out_fd, F_DUPFD, 10);
	int null = open("/dev/null", O_RDWR);
	if (in < 0 || out < 0 || null < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
	    dup2(null, 2) < 0)
		_exit(126);
	syscall(SYS_close_range, 3U, ~0U, 0U);
	/* it reads a few headers: seconds of CPU, no file written, no core */
	struct rlimit cpu = { p->cpu_s, p->cpu_s + 1 }, none_lim = { 0, 0 };
	setrlimit(RLIMIT_CPU, &cpu);
	setrlimit(RLIMIT_FSIZE, &none_lim);
	setrlimit(RLIMIT_CORE, &none_lim);
	if (p->id && svc_unix_id_become(p->id) != 0)
		_exit(126);
	if (chdir("/") != 0)
		_exit(126);
	execve(p->argv[0], p->argv, p->envp);
	_exit(127);
}

/* Remembers a killed probe to reap later; lock held. */
static void remember_gone(struct svc_preflight *pf, pid_t pid)
{
	if (pf->n_gone < REAP_MAX)
		pf->gone[pf->n_gone++] = pid;
	else
		svc_log(SVC_LOG_WARN, "preflight: more than %d probes stuck: not reaping %d",
		        REAP_MAX, (int)pid);
}

/* Reaps the killed probes that have ended; lock held. */
static void reap_gone(struct svc_preflight *pf)
{
	for (int i = 0; i < pf->n_gone;) {
		if (waitpid(pf->gone[i], NULL, WNOHANG) == 0) {
			i++;
			continue;
		}
		pf->gone[i] = pf->gone[--pf->n_gone];
	}
}

/* Its exit, waited for briefly; a probe that does not end is killed and
 * remembered. */
static void finish_child(struct svc_preflight *pf, pid_t pid)
{
	for (int i = 0; i < 50; i++) {
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return;
		struct timespec ts = { 0, 2 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	kill(-pid, SIGKILL);
	pthread_mutex_lock(&pf->lock);
	remember_gone(pf, pid);
	pthread_mutex_unlock(&pf->lock);
}

/* What the probe said: {"ok": true, "shape": {...}} or {"ok": false,
 * "field": F, "message": M[, "kind": K]}. */
static void probe_answer(struct svc_preflight *pf, const char *out, struct api_preflight_result *r)
{
	json_error_t jerr;
	json_t *root = json_loads(out, 0, &jerr);
	json_t *ok = json_object_get(root, "ok");
	if (!json_is_boolean(ok)) {
		svc_log(SVC_LOG_WARN, "preflight: the probe's answer is not what larch-train --probe "
		        "prints (is trainer_path a larch-train of this version?)");
		snprintf(r->message, sizeof r->message, "the data files were not examined at submit");
		json_decref(root);
		return;
	}
	if (json_is_true(ok)) {
		json_t *shape = json_object_get(root, "shape");
		if (json_is_object(shape))
			r->shape = json_dumps(shape, JSON_COMPACT);
		json_decref(root);
		return;
	}
	const char *field = json_string_value(json_object_get(root, "field"));
	const char *message = json_string_value(json_object_get(root, "message"));
	const char *kind = json_string_value(json_object_get(root, "kind"));
	if (pf->slurm && kind && strcmp(kind, "missing") == 0) {
		/* the compute nodes may see files this host does not */
		snprintf(r->message, sizeof r->message, "%s (not on larchd's host: the job's "
		         "trainer looks again where it runs)", message ? message : "");
		json_decref(root);
		return;
	}
	refuse(r, 400, field ? field : "spec", "%s", message ? message : "the spec's files");
	json_decref(root);
}

static void run_probe(struct svc_preflight *pf, int slot, const struct item *it,
                      const struct svc_unix_id *id, struct api_preflight_result *r)
{
	struct probe p;
	memset(&p, 0, sizeof p);
	int a = 0;
	p.argv[a++] = pf->trainer_path;
	p.argv[a++] = "--probe";
	p.argv[a++] = "--spec";
	p.argv[a++] = "-";
	p.argv[a++] = "--base-dir";
	p.argv[a++] = pf->base_dir;
	if (!pf->run_as_owner && !it->admin) {
		p.argv[a++] = "--confine-data";
		for (int i = 0; i < pf->roots.n; i++) {
			p.argv[a++] = "--data-root";
			p.argv[a++] = pf->roots.path[i];
		}
	}
	p.argv[a] = NULL;
	int e = 0;
	p.envp[e++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	p.envp[e++] = "LC_ALL=C";
	p.envp[e++] = "HOME=/";
	if (pf->dataset_root) {
		snprintf(p.env_root, sizeof p.env_root, "LARCH_DATASET_ROOT=%s", pf->dataset_root);
		p.envp[e++] = p.env_root;
	}
	p.envp[e] = NULL;
	p.id = id;
	unsigned timeout_s = atomic_load(&pf->timeout_s);
	p.cpu_s = timeout_s + 1;

	/* the spec on stdin from memory (never a pipe the child must drain
	 * before we may read), the answer back through a pipe */
	int spec_fd = memfd_create("larch-spec", MFD_CLOEXEC);
	int out[2] = { -1, -1 };
	size_t len = strlen(it->spec);
	if (spec_fd < 0 || write(spec_fd, it->spec, len) != (ssize_t)len ||
	    lseek(spec_fd, 0, SEEK_SET) != 0 || pipe2(out, O_CLOEXEC) != 0) {
		svc_log(SVC_LOG_WARN, "preflight: %s: the data files were not examined",
		        strerror(errno));
		snprintf(r->message, sizeof r->message, "the data files were not examined at submit");
		goto close_fds;
	}
	p.in_fd = spec_fd;
	p.out_fd = out[1];
	pid_t pid = fork();
	if (pid == 0)
		probe_child(&p);
	close(out[1]);
	out[1] = -1;
	if (pid < 0) {
		svc_log(SVC_LOG_WARN, "preflight: fork: %s", strerror(errno));
		snprintf(r->message, sizeof r->message, "the data files were not examined at submit");
		goto close_fds;
	}
	setpgid(pid, pid);
	pthread_mutex_lock(&pf->lock);
	pf->running[slot] = pid;
	int closing = pf->closing;
	pthread_mutex_unlock(&pf->lock);

	char *buf = malloc(PROBE_OUTPUT_MAX + 1);
	size_t got = 0;
	int done = 0, timed_out = 0;
	long long deadline = svc_mono_ms() + (long long)timeout_s * 1000;
	while (buf && !done && !closing) {
		long long left = deadline - svc_mono_ms();
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		struct pollfd fds[2] = { { .fd = out[0], .events = POLLIN },
		                         { .fd = pf->stop_pipe[0], .events = POLLIN } };
		int n = poll(fds, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (fds[1].revents) {
			closing = 1;
			break;
		}
		if (n <= 0)
			continue;
		ssize_t k = read(out[0], buf + got, PROBE_OUTPUT_MAX - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || (got += (size_t)k) == PROBE_OUTPUT_MAX)
			done = 1;
	}
	pthread_mutex_lock(&pf->lock);
	pf->running[slot] = 0;
	pthread_mutex_unlock(&pf->lock);
	if (done && buf) {
		buf[got] = '\0';
		finish_child(pf, pid);
		probe_answer(pf, buf, r);
	} else {
		kill(-pid, SIGKILL);
		pthread_mutex_lock(&pf->lock);
		remember_gone(pf, pid);
		pthread_mutex_unlock(&pf->lock);
		if (closing)
			refuse(r, 503, NULL, "larchd is stopping");
		else if (timed_out)
			snprintf(r->message, sizeof r->message, "the data files were not examined within "
			         "%us (preflight_timeout): the trainer checks them when the job starts",
			         timeout_s);
		else
			snprintf(r->message, sizeof r->message, "the data files were not examined at "
			         "submit");
		if (timed_out) {
			static struct svc_log_limit limit;
			svc_log_limited(&limit, 10000, SVC_LOG_WARN, "preflight: a probe for user %s "
			                "did not answer within %us: killed; the job is taken unexamined",
			                it->user, timeout_s);
		}
	}
	free(buf);
close_fds:
	if (spec_fd >= 0)
		close(spec_fd);
	if (out[0] >= 0)
		close(out[0]);
	if (out[1] >= 0)
		close(out[1]);
}

/* ---- the workers -------------------------------------------------------------- */

static void answer(const struct item *it, struct api_preflight_result *r)
{
	it->done(it->done_arg, r);
	free(r->shape);
	r->shape = NULL;
}

/* Probes of user running now; lock held. */
static int running_for(const struct svc_preflight *pf, const char *user)
{
	int n = 0;
	for (int i = 0; i < PREFLIGHT_WORKERS; i++)
		n += pf->running_user[i] && strcmp(pf->running_user[i], user) == 0;
	return n;
}

/* The oldest waiting item whose user has fewer than PER_USER_RUNNING probes
 * running, unlinked; NULL when none may go. Lock held. */
static struct item *take(struct svc_preflight *pf)
{
	struct item *prev = NULL;
	for (struct item *it = pf->head; it; prev = it, it = it->next) {
		if (running_for(pf, it->user) >= PER_USER_RUNNING)
			continue;
		if (prev)
			prev->next = it->next;
		else
			pf->head = it->next;
		if (pf->tail == it)
			pf->tail = prev;
		it->next = NULL;
		pf->queued--;
		return it;
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct svc_preflight *pf = w->pf;
	pthread_mutex_lock(&pf->lock);
	for (;;) {
		struct item *it = NULL;
		while (!pf->closing && !(it = take(pf)))
			pthread_cond_wait(&pf->wake, &pf->lock);
		if (pf->closing)
			break;
		pf->running_user[w->slot] = it->user;
		reap_gone(pf);
		pthread_mutex_unlock(&pf->lock);

		struct api_preflight_result r;
		memset(&r, 0, sizeof r);
		struct svc_unix_id id;
		int as = identity(pf, it, &id, &r);
		if (as >= 0)
			run_probe(pf, w->slot, it, as ? &id : NULL, &r);
		answer(it, &r);
		pthread_mutex_lock(&pf->lock);
		pf->running_user[w->slot] = NULL;
		pthread_cond_broadcast(&pf->wake);      /* its user's next may go now */
		pthread_mutex_unlock(&pf->lock);
		item_free(it);
		pthread_mutex_lock(&pf->lock);
	}
	pthread_mutex_unlock(&pf->lock);
	return NULL;
}

int svc_preflight_submit(void *arg, const struct api_preflight *in, api_preflight_done_fn done,
                         void *done_arg)
{
	struct svc_preflight *pf = arg;
	struct item *it = calloc(1, sizeof *it);
	if (!it || !(it->user = strdup(in->user)) || !(it->spec = strdup(in->spec))) {
		item_free(it);
		return -1;
	}
	it->admin = in->admin;
	it->done = done;
	it->done_arg = done_arg;
	pthread_mutex_lock(&pf->lock);
	int mine = 0;
	for (struct item *q = pf->head; q && mine < PER_USER_WAITING; q = q->next)
		mine += strcmp(q->user, in->user) == 0;
	if (pf->closing || pf->queued >= PREFLIGHT_QUEUE_MAX || mine >= PER_USER_WAITING) {
		int closing = pf->closing;
		pthread_mutex_unlock(&pf->lock);
		item_free(it);
		return closing || mine < PER_USER_WAITING ? -1 : -2;
	}
	if (pf->tail)
		pf->tail->next = it;
	else
		pf->head = it;
	pf->tail = it;
	pf->queued++;
	pthread_cond_signal(&pf->wake);
	pthread_mutex_unlock(&pf->lock);
	return 0;
}

struct svc_preflight *svc_preflight_new(const struct svc_preflight_config *cfg, char *err,
                                        size_t errlen)
{
	struct svc_preflight *pf = calloc(1, sizeof *pf);
	if (!pf) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pf->db = cfg->db;
	pf->run_as_owner = cfg->run_as_owner;
	pf->slurm = cfg->slurm;
	pf->timeout_s = cfg->timeout_s ? cfg->timeout_s : 10;
	if (cfg->data_roots)
		pf->roots = *cfg->data_roots;
	pf->stop_pipe[0] = pf->stop_pipe[1] = -1;
	pthread_mutex_init(&pf->lock, NULL);
	pthread_cond_init(&pf->wake, NULL);
	const char *root = trn_env_str("LARCH_DATASET_ROOT");
	char base[4200];
	/* the job directory to be: a name no job has (they are j-NNNNNN) */
	snprintf(base, sizeof base, "%s/.submit", cfg->jobs_dir);
	if (!(pf->trainer_path = strdup(cfg->trainer_path)) || !(pf->base_dir = strdup(base)) ||
	    (root && *root && !(pf->dataset_root = strdup(root))) ||
	    pipe2(pf->stop_pipe, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "preflight: %s", strerror(errno ? errno : ENOMEM));
		svc_preflight_free(pf);
		return NULL;
	}
	for (int i = 0; i < PREFLIGHT_WORKERS; i++) {
		worker_args[i] = (struct worker){ pf, i };
		int rc = pthread_create(&pf->workers[i], NULL, worker_main, &worker_args[i]);
		if (rc != 0) {
			snprintf(err, errlen, "preflight: thread: %s", strerror(rc));
			svc_preflight_free(pf);
			return NULL;
		}
		pf->n_workers++;
	}
	return pf;
}

void svc_preflight_set_timeout(struct svc_preflight *pf, unsigned timeout_s)
{
	atomic_store(&pf->timeout_s, timeout_s ? timeout_s : 10);
}

void svc_preflight_close(struct svc_preflight *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->lock);
	int was = pf->closing;
	pf->closing = 1;
	struct item *waiting = pf->head;
	pf->head = pf->tail = NULL;
	pf->queued = 0;
	for (int i = 0; i < PREFLIGHT_WORKERS; i++)
		if (pf->running[i] > 0)
			kill(-pf->running[i], SIGKILL);
	pthread_cond_broadcast(&pf->wake);
	pthread_mutex_unlock(&pf->lock);
	if (!was && pf->stop_pipe[1] >= 0) {
		ssize_t ignored = write(pf->stop_pipe[1], "x", 1);
		(void)ignored;
	}
	for (struct item *it = waiting, *next; it; it = next) {
		next = it->next;
		struct api_preflight_result r;
		memset(&r, 0, sizeof r);
		refuse(&r, 503, NULL, "larchd is stopping");
		answer(it, &r);
		item_free(it);
	}
	for (int i = 0; i < pf->n_workers; i++)
		pthread_join(pf->workers[i], NULL);
	pf->n_workers = 0;
}

void svc_preflight_free(struct svc_preflight *pf)
{
	if (!pf)
		return;
	svc_preflight_close(pf);
	pthread_mutex_lock(&pf->lock);
	reap_gone(pf);
	pthread_mutex_unlock(&pf->lock);
	if (pf->stop_pipe[0] >= 0)
		close(pf->stop_pipe[0]);
	if (pf->stop_pipe[1] >= 0)
		close(pf->stop_pipe[1]);
	pthread_cond_destroy(&pf->wake);
	pthread_mutex_destroy(&pf->lock);
	free(pf->trainer_path);
	free(pf->base_dir);
	free(pf->dataset_root);
	free(pf);
}
