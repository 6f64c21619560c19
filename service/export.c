/* service/export.c - exports made by larch-train --export on worker threads,
 * as the job's owner; see export.h. */
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/job_file.h"
#include "child_run.h"
#include "clock.h"
#include "export_manifest.h"
#include "identity.h"
#include "jobfs.h"
#include "log.h"
#include "trainer/sha256.h"

#define EXPORT_WORKERS 2           /* exports running at once */
#define EXPORT_QUEUE_MAX 64        /* waiting, of everyone's */
#define EXPORT_PER_USER 4          /* queued or running, of one owner's */
#define EXPORT_TIMEOUT_S 3600      /* then the child is killed */
#define EXPORT_KEPT 1024           /* finished exports remembered in memory */
#define OUTPUT_MAX 16384           /* of the child's stdout and stderr, kept for the error */
#define EXIT_WAIT_MS 5000          /* for the child to exit once its output ended */
#define LIST_MAX 4096              /* exports of one job listed from its directory */
#define DIR_MAX 4096

struct entry {
	long long job;
	char owner[65];
	char unix_user[33];            /* "" = larchd's own user */
	char *checkpoint;              /* the recorded path; owned */
	struct api_export x;
	struct entry *next;            /* oldest first */
};

struct worker {
	struct svc_export *ex;
	int slot;
};

struct svc_export {
	char *trainer_path;
	int run_as_owner;
	int (*job_dir)(void *arg, long long id, char *buf, size_t len);
	void *job_dir_arg;
	struct api_exports_hooks hooks;

	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct entry *head;
	int n_entries, closing;
	pid_t running[EXPORT_WORKERS];     /* children's process groups, 0: none */
	int stop_pipe[2];                  /* readable once closing */
	pthread_t workers[EXPORT_WORKERS];
	struct worker worker_args[EXPORT_WORKERS];   /* each thread's own */
	int n_workers;
};

/* ---- one export ------------------------------------------------------------------ */

/* Who e is exported as, into *owner: 0 with *as (NULL: larchd's user), or
 * -1 with x->error. */
static int export_identity(const struct svc_export *ex, const struct entry *e,
                           struct svc_unix_id *owner, const struct svc_unix_id **as,
                           struct api_export *x)
{
	char why[256];
	*as = NULL;
	if (e->unix_user[0]) {
		if (svc_unix_id_lookup(e->unix_user, owner, why, sizeof why) != 0) {
			snprintf(x->error, sizeof x->error, "%s", why);
			return -1;
		}
		*as = owner;
	} else if (ex->run_as_owner) {
		snprintf(x->error, sizeof x->error, "the job has no Unix user to export as");
		return -1;
	}
	return 0;
}

/* The job's directory into dir, with the checkpoint inside it: 0, or -1
 * with x->error. */
static int export_dir(const struct svc_export *ex, const struct entry *e, char *dir,
                      size_t len, struct api_export *x)
{
	if (ex->job_dir(ex->job_dir_arg, e->job, dir, len) != 0) {
		snprintf(x->error, sizeof x->error, "the job's directory is unknown");
		return -1;
	}
	size_t dl = strlen(dir);
	if (strncmp(e->checkpoint, dir, dl) != 0 || e->checkpoint[dl] != '/') {
		snprintf(x->error, sizeof x->error, "the checkpoint's recorded file is not in the job's "
		         "directory");
		return -1;
	}
	return 0;
}

/* The last non-empty line of out (trimmed), into buf. */
static void last_line(const char *out, size_t n, char *buf, size_t len)
{
	while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' '))
		n--;
	size_t start = n;
	while (start > 0 && out[start - 1] != '\n')
		start--;
	snprintf(buf, len, "%.*s", (int)(n - start), out + start);
}

/* Why a child that ran did not succeed, into x->error; 0 when it did. */
static int child_error(const struct svc_child_result *r, struct api_export *x)
{
	int st = r->status;
	if (r->stopped) {
		snprintf(x->error, sizeof x->error, "larchd stopped during the export; POST it again");
		return -1;
	}
	if (r->timed_out) {
		snprintf(x->error, sizeof x->error, "the export did not finish within %ds: killed",
		         EXPORT_TIMEOUT_S);
		return -1;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char line[API_EXPORT_ERROR_MAX - 64];
	last_line(r->output, r->output_len, line, sizeof line);
	if (WIFEXITED(st) && WEXITSTATUS(st) >= SVC_CHILD_EXIT_DIR)
		snprintf(line, sizeof line, "%s", WEXITSTATUS(st) == SVC_CHILD_EXIT_DIR
		         ? "cannot enter the job's directory or make its exports/ as the job's user"
		         : WEXITSTATUS(st) == SVC_CHILD_EXIT_USER ? "cannot become the job's user"
		         : "cannot run larch-train (trainer_path)");
	snprintf(x->error, sizeof x->error, "larch-train --export %s %d: %s",
	         WIFEXITED(st) ? "exited" : "killed by signal",
	         WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), line[0] ? line : "(no message)");
	return -1;
}

/* Runs larch-train --export in dir as as (NULL: larchd's user), from worker
 * slot: 0 once it succeeded, or -1 with x->error. */
static int export_child(struct svc_export *ex, int slot, const struct entry *e,
                        const char *dir, const struct svc_unix_id *as, struct api_export *x)
{
	char out_dir[64];
	snprintf(out_dir, sizeof out_dir, "exports/%s", x->id);
	char *argv[] = { ex->trainer_path, "--export", e->checkpoint + strlen(dir) + 1,
	                 "--format", x->format, "-o", out_dir, NULL };
	char *envp[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C", "HOME=/", NULL };
	struct svc_child_spec spec = {
		.argv = argv, .envp = envp, .id = as, .dir = dir, .make_dir = "exports",
		.stdin_fd = -1, .stderr_too = 1, .timeout_ms = (int64_t)EXPORT_TIMEOUT_S * 1000,
		.stop_fd = ex->stop_pipe[0], .output_max = OUTPUT_MAX, .keep_tail = 1,
		.exit_wait_ms = EXIT_WAIT_MS,
		.lock = &ex->lock, .running = &ex->running[slot], .closing = &ex->closing,
	};
	struct svc_child_result r;
	if (svc_child_run(&spec, &r) != 0) {
		snprintf(x->error, sizeof x->error, "cannot start the export: %s", r.why);
		return -1;
	}
	int rc = child_error(&r, x);
	svc_child_result_release(&r);
	return rc;
}

/* The files the child wrote, as the download route will see them, into
 * x->files: 0, or -1 with x->error. */
static int export_hash_files(const char *dir, struct api_export *x)
{
	char why[256];
	for (int i = 0; i < API_EXPORT_FILES; i++) {
		char path[DIR_MAX + 128];
		snprintf(path, sizeof path, "%s/exports/%s/%s", dir, x->id, api_export_file_names[i]);
		struct stat st;
		int gone;
		int fd = api_job_file_open(dir, path, &st, &gone, why, sizeof why);
		char hex[65];
		if (fd < 0 || trn_sha256_fd(fd, hex) != 0) {
			snprintf(x->error, sizeof x->error, "%s: %s", api_export_file_names[i],
			         fd < 0 ? why : strerror(errno));
			if (fd >= 0)
				close(fd);
			x->n_files = 0;
			return -1;
		}
		close(fd);
		snprintf(x->files[i].name, sizeof x->files[i].name, "%s", api_export_file_names[i]);
		snprintf(x->files[i].sha256, sizeof x->files[i].sha256, "%s", hex);
		x->files[i].bytes = (int64_t)st.st_size;
		x->n_files = i + 1;
	}
	return 0;
}

/* Runs the export of e from worker slot; fills e->x's state, error and
 * files. Lock not held. */
static void run_export(struct svc_export *ex, int slot, struct entry *e)
{
	struct api_export *x = &e->x;
	char dir[DIR_MAX], rel[128];
	struct svc_unix_id owner;
	const struct svc_unix_id *as;
	if (export_dir(ex, e, dir, sizeof dir, x) != 0 || export_identity(ex, e, &owner, &as, x) != 0)
		return;
	snprintf(rel, sizeof rel, "exports/%s/export.json", x->id);
	svc_jobfs_unlink(dir, rel);            /* an earlier export's record goes first */
	if (export_child(ex, slot, e, dir, as, x) != 0 || export_hash_files(dir, x) != 0)
		return;
	x->finished_ms = svc_wall_ms();
	if (svc_export_manifest_write(dir, x, as) != 0) {
		snprintf(x->error, sizeof x->error, "cannot write exports/%s/export.json: %s", x->id,
		         strerror(errno));
		x->n_files = 0;
		return;
	}
	x->state = API_EXPORT_DONE;
}

/* ---- the workers ----------------------------------------------------------------- */

/* Forgets the oldest finished entries past EXPORT_KEPT; lock held. */
static void trim(struct svc_export *ex)
{
	struct entry **p = &ex->head;
	while (ex->n_entries > EXPORT_KEPT && *p) {
		struct entry *e = *p;
		if (e->x.state == API_EXPORT_DONE || e->x.state == API_EXPORT_FAILED) {
			*p = e->next;
			free(e->checkpoint);
			free(e);
			ex->n_entries--;
		} else {
			p = &e->next;
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct svc_export *ex = w->ex;
	pthread_mutex_lock(&ex->lock);
	for (;;) {
		struct entry *e = NULL;
		while (!ex->closing) {
			for (e = ex->head; e && e->x.state != API_EXPORT_QUEUED; e = e->next)
				;
			if (e)
				break;
			pthread_cond_wait(&ex->wake, &ex->lock);
		}
		if (ex->closing)
			break;
		e->x.state = API_EXPORT_RUNNING;
		struct api_export x = e->x;        /* the worker's copy: readers see RUNNING */
		struct entry mine = *e;
		mine.x = x;
		pthread_mutex_unlock(&ex->lock);

		mine.x.error[0] = '\0';
		run_export(ex, w->slot, &mine);
		if (mine.x.state != API_EXPORT_DONE) {
			mine.x.state = API_EXPORT_FAILED;
			mine.x.finished_ms = svc_wall_ms();
			svc_log(SVC_LOG_WARN, "export %s of job %lld failed: %s", mine.x.id, e->job,
			        mine.x.error);
		}
		pthread_mutex_lock(&ex->lock);
		e->x = mine.x;                     /* entries are freed only by trim and free */
		trim(ex);
	}
	pthread_mutex_unlock(&ex->lock);
	return NULL;
}

/* ---- the hooks --------------------------------------------------------------------- */

static struct entry *find(struct svc_export *ex, long long job, const char *id)
{
	for (struct entry *e = ex->head; e; e = e->next)
		if (e->job == job && strcmp(e->x.id, id) == 0)
			return e;
	return NULL;
}

static int hook_start(void *arg, const struct api_export_request *in, struct api_export *out)
{
	struct svc_export *ex = arg;
	char id[API_EXPORT_ID_MAX];
	snprintf(id, sizeof id, "%" PRId64 "-%s", in->step, in->format);
	struct api_export disk;
	char dir[DIR_MAX];
	int on_disk = ex->job_dir(ex->job_dir_arg, in->job, dir, sizeof dir) == 0 &&
	              svc_export_manifest_read(dir, id, &disk) == 0 &&
	              strcmp(disk.checkpoint_sha256, in->checkpoint_sha256) == 0;

	pthread_mutex_lock(&ex->lock);
	struct entry *e = find(ex, in->job, id);
	if (e && (e->x.state == API_EXPORT_QUEUED || e->x.state == API_EXPORT_RUNNING)) {
		*out = e->x;
		pthread_mutex_unlock(&ex->lock);
		return 1;
	}
	if (on_disk) {
		pthread_mutex_unlock(&ex->lock);
		*out = disk;
		return 1;
	}
	int queued = 0, mine = 0;
	for (struct entry *q = ex->head; q; q = q->next) {
		int active = q->x.state == API_EXPORT_QUEUED || q->x.state == API_EXPORT_RUNNING;
		queued += q->x.state == API_EXPORT_QUEUED;
		mine += active && strcmp(q->owner, in->owner) == 0;
	}
	if (ex->closing || queued >= EXPORT_QUEUE_MAX) {
		pthread_mutex_unlock(&ex->lock);
		return -1;
	}
	if (mine >= EXPORT_PER_USER) {
		pthread_mutex_unlock(&ex->lock);
		return -2;
	}
	char *ck = strdup(in->checkpoint);
	if (!ck || (!e && !(e = calloc(1, sizeof *e)))) {
		free(ck);
		pthread_mutex_unlock(&ex->lock);
		return -1;
	}
	if (!e->checkpoint) {                  /* a new entry: at the end */
		struct entry **p = &ex->head;
		while (*p)
			p = &(*p)->next;
		*p = e;
		ex->n_entries++;
	}
	free(e->checkpoint);
	e->checkpoint = ck;
	e->job = in->job;
	snprintf(e->owner, sizeof e->owner, "%s", in->owner);
	snprintf(e->unix_user, sizeof e->unix_user, "%s", in->unix_user ? in->unix_user : "");
	memset(&e->x, 0, sizeof e->x);
	snprintf(e->x.id, sizeof e->x.id, "%s", id);
	e->x.step = in->step;
	snprintf(e->x.format, sizeof e->x.format, "%s", in->format);
	e->x.state = API_EXPORT_QUEUED;
	snprintf(e->x.checkpoint_sha256, sizeof e->x.checkpoint_sha256, "%s",
	         in->checkpoint_sha256);
	e->x.created_ms = svc_wall_ms();
	*out = e->x;
	pthread_cond_signal(&ex->wake);
	pthread_mutex_unlock(&ex->lock);
	return 0;
}

static int by_step(const void *a, const void *b)
{
	const struct api_export *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return strcmp(x->format, y->format);
}

static int hook_list(void *arg, long long job, struct api_export **out)
{
	struct svc_export *ex = arg;
	size_t n = 0, cap = 8;
	struct api_export *v = malloc(cap * sizeof *v);
	if (!v)
		return -1;
	char dir[DIR_MAX];
	int fd = ex->job_dir(ex->job_dir_arg, job, dir, sizeof dir) == 0
	         ? svc_jobfs_opendir(dir, "exports") : -1;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0)
		close(fd);
	for (struct dirent *de; d && n < LIST_MAX && (de = readdir(d));) {
		if (n == cap) {
			struct api_export *w = realloc(v, 2 * cap * sizeof *v);
			if (!w)
				break;
			v = w;
			cap *= 2;
		}
		if (svc_export_manifest_read(dir, de->d_name, &v[n]) == 0)
			n++;
	}
	if (d)
		closedir(d);

	pthread_mutex_lock(&ex->lock);
	for (struct entry *e = ex->head; e; e = e->next) {
		if (e->job != job || e->x.state == API_EXPORT_DONE)
			continue;                 /* a done one is listed from its manifest */
		size_t i = 0;
		while (i < n && strcmp(v[i].id, e->x.id) != 0)
			i++;
		if (i == n) {
			if (n == cap) {
				struct api_export *w = realloc(v, 2 * cap * sizeof *v);
				if (!w)
					continue;
				v = w;
				cap *= 2;
			}
			n++;
		}
		v[i] = e->x;                      /* queued, running or failed since */
	}
	pthread_mutex_unlock(&ex->lock);
	qsort(v, n, sizeof *v, by_step);
	*out = v;
	return (int)n;
}

/* ---- life -------------------------------------------------------------------------- */

struct svc_export *svc_export_new(const struct svc_export_config *cfg, char *err, size_t errlen)
{
	struct svc_export *ex = calloc(1, sizeof *ex);
	if (!ex) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ex->run_as_owner = cfg->run_as_owner;
	ex->job_dir = cfg->job_dir;
	ex->job_dir_arg = cfg->job_dir_arg;
	ex->stop_pipe[0] = ex->stop_pipe[1] = -1;
	ex->hooks = (struct api_exports_hooks){ .start = hook_start, .list = hook_list, .arg = ex };
	pthread_mutex_init(&ex->lock, NULL);
	pthread_cond_init(&ex->wake, NULL);
	if (!(ex->trainer_path = strdup(cfg->trainer_path)) || pipe2(ex->stop_pipe, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "exports: %s", strerror(errno ? errno : ENOMEM));
		svc_export_free(ex);
		return NULL;
	}
	for (int i = 0; i < EXPORT_WORKERS; i++) {
		ex->worker_args[i] = (struct worker){ ex, i };
		int rc = pthread_create(&ex->workers[i], NULL, worker_main, &ex->worker_args[i]);
		if (rc != 0) {
			snprintf(err, errlen, "exports: thread: %s", strerror(rc));
			svc_export_free(ex);
			return NULL;
		}
		ex->n_workers++;
	}
	return ex;
}

const struct api_exports_hooks *svc_export_hooks(struct svc_export *x)
{
	return &x->hooks;
}

void svc_export_close(struct svc_export *ex)
{
	if (!ex)
		return;
	pthread_mutex_lock(&ex->lock);
	int was = ex->closing;
	ex->closing = 1;
	for (struct entry *e = ex->head; e; e = e->next)
		if (e->x.state == API_EXPORT_QUEUED) {
			e->x.state = API_EXPORT_FAILED;
			snprintf(e->x.error, sizeof e->x.error, "larchd stopped before the export ran");
		}
	for (int i = 0; i < EXPORT_WORKERS; i++)
		if (ex->running[i] > 0)
			kill(-ex->running[i], SIGKILL);
	pthread_cond_broadcast(&ex->wake);
	pthread_mutex_unlock(&ex->lock);
	if (!was && ex->stop_pipe[1] >= 0) {
		ssize_t ignored = write(ex->stop_pipe[1], "x", 1);
		(void)ignored;
	}
	for (int i = 0; i < ex->n_workers; i++)
		pthread_join(ex->workers[i], NULL);
	ex->n_workers = 0;
}

void svc_export_free(struct svc_export *ex)
{
	if (!ex)
		return;
	svc_export_close(ex);
	for (struct entry *e = ex->head, *next; e; e = next) {
		next = e->next;
		free(e->checkpoint);
		free(e);
	}
	if (ex->stop_pipe[0] >= 0)
		close(ex->stop_pipe[0]);
	if (ex->stop_pipe[1] >= 0)
		close(ex->stop_pipe[1]);
	pthread_cond_destroy(&ex->wake);
	pthread_mutex_destroy(&ex->lock);
	free(ex->trainer_path);
	free(ex);
}
