/* service/preflight.c - submits' preflights on worker threads, probes as
 * child processes; see preflight.h. */
#include "preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_run.h"
#include "db/tokens.h"
#include "identity.h"
#include "log.h"
#include "trainer/env.h"

#define PREFLIGHT_WORKERS 4
#define PREFLIGHT_QUEUE_MAX 1024
#define PER_USER_RUNNING 2         /* probes of one user at once: others always get a worker */
#define PER_USER_WAITING 64        /* submits of one user waiting; more are answered 429 */
#define PROBE_OUTPUT_MAX 65536     /* the probe prints one small JSON object */
#define EXIT_WAIT_MS 100           /* for the probe to exit once its answer ended */
#define REAP_MAX 256               /* probes killed but not yet gone */

struct item {
	char *user, *spec;
	int admin;
	api_preflight_done_fn done;
	void *done_arg;
	struct item *next;
};

struct worker {
	struct svc_preflight *pf;
	int slot;
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
	struct worker worker_args[PREFLIGHT_WORKERS];   /* each thread's own */
	int n_workers;
};

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
};

/* The probe's command line and environment for it. */
static void probe_args(struct svc_preflight *pf, const struct item *it, struct probe *p)
{
	int a = 0;
	p->argv[a++] = pf->trainer_path;
	p->argv[a++] = "--probe";
	p->argv[a++] = "--spec";
	p->argv[a++] = "-";
	p->argv[a++] = "--base-dir";
	p->argv[a++] = pf->base_dir;
	if (!pf->run_as_owner && !it->admin) {
		p->argv[a++] = "--confine-data";
		for (int i = 0; i < pf->roots.n; i++) {
			p->argv[a++] = "--data-root";
			p->argv[a++] = pf->roots.path[i];
		}
	}
	p->argv[a] = NULL;
	int e = 0;
	p->envp[e++] = "PATH=/usr/local/bin:/usr/bin:/bin";
	p->envp[e++] = "LC_ALL=C";
	p->envp[e++] = "HOME=/";
	if (pf->dataset_root) {
		snprintf(p->env_root, sizeof p->env_root, "LARCH_DATASET_ROOT=%s", pf->dataset_root);
		p->envp[e++] = p->env_root;
	}
	p->envp[e] = NULL;
}

/* The spec in memory, at its start, for the probe's stdin (never a pipe
 * the child must drain before we may read): an fd, or -1 (errno). */
static int probe_spec_fd(const struct item *it)
{
	int fd = memfd_create("larch-spec", MFD_CLOEXEC);
	size_t len = strlen(it->spec);
	if (fd >= 0 && (write(fd, it->spec, len) != (ssize_t)len || lseek(fd, 0, SEEK_SET) != 0)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Remembers a killed probe to reap later; lock held (child_run.h's gone). */
static void remember_gone(void *arg, pid_t pid)
{
	struct svc_preflight *pf = arg;
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

/* A probe that gave no answer: stopped (503), too slow, or it failed. */
static void probe_unanswered(const struct item *it, const struct svc_child_result *res,
                             unsigned timeout_s, struct api_preflight_result *r)
{
	if (res->stopped) {
		refuse(r, 503, NULL, "larchd is stopping");
		return;
	}
	if (!res->timed_out) {
		snprintf(r->message, sizeof r->message, "the data files were not examined at submit");
		return;
	}
	snprintf(r->message, sizeof r->message, "the data files were not examined within %us "
	         "(preflight_timeout): the trainer checks them when the job starts", timeout_s);
	static struct svc_log_limit limit;
	svc_log_limited(&limit, 10000, SVC_LOG_WARN, "preflight: a probe for user %s did not "
	                "answer within %us: killed; the job is taken unexamined", it->user,
	                timeout_s);
}

/* Runs larch-train --probe as id (NULL: larchd's user) from worker slot,
 * the spec on its stdin; its answer into r. A probe that does not end is
 * killed and left to reap_gone. */
static void run_probe(struct svc_preflight *pf, int slot, const struct item *it,
                      const struct svc_unix_id *id, struct api_preflight_result *r)
{
	struct probe p;
	probe_args(pf, it, &p);
	unsigned timeout_s = atomic_load(&pf->timeout_s);
	int spec_fd = probe_spec_fd(it);
	struct svc_child_spec spec = {
		.argv = p.argv, .envp = p.envp, .id = id, .stdin_fd = spec_fd,
		.cpu_s = timeout_s + 1,            /* it reads a few headers */
		.timeout_ms = (int64_t)timeout_s * 1000, .stop_fd = pf->stop_pipe[0],
		.output_max = PROBE_OUTPUT_MAX, .exit_wait_ms = EXIT_WAIT_MS,
		.lock = &pf->lock, .running = &pf->running[slot], .closing = &pf->closing,
		.gone = remember_gone, .gone_arg = pf,
	};
	struct svc_child_result res = { 0 };
	if (spec_fd < 0 || svc_child_run(&spec, &res) != 0) {
		svc_log(SVC_LOG_WARN, "preflight: %s: the data files were not examined",
		        spec_fd < 0 ? strerror(errno) : res.why);
		snprintf(r->message, sizeof r->message, "the data files were not examined at submit");
	} else if (res.output_ended) {
		probe_answer(pf, res.output, r);
	} else {
		probe_unanswered(it, &res, timeout_s, r);
	}
	svc_child_result_release(&res);
	if (spec_fd >= 0)
		close(spec_fd);
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
		pf->worker_args[i] = (struct worker){ pf, i };
		int rc = pthread_create(&pf->workers[i], NULL, worker_main, &pf->worker_args[i]);
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
