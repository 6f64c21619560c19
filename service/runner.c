/* service/runner.c - the runner's thread: handing PENDING jobs to the
 * executor, adopting jobs after a restart, polling; see runner.h. Executor
 * events and cancels are in runner_events.c. */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "db/checkpoints.h"
#include "identity.h"
#include "jobfs.h"
#include "log.h"
#include "runner_internal.h"
#include "slurm_cmd.h"
#include "sweep.h"

#define SCAN_MAX 64            /* PENDING jobs handed over per pass */
#define RESCAN_MS 2000         /* look for PENDING jobs at least this often */

int svc_runner_job_dir(const struct svc_runner *r, long long id, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s/jobs/j-%06lld", r->state_dir, id);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* ---- reading jobs ----------------------------------------------------------- */

/* The ids of every job in state, oldest first, into *ids (malloc'd). */
static int list_ids(struct db *db, enum db_state state, int64_t **ids, size_t *n,
                    struct db_err *err)
{
	*ids = NULL;
	*n = 0;
	size_t cap = 0;
	char cursor[DB_CURSOR_MAX] = "";
	do {
		struct db_job_filter f = { .has_state = 1, .state = state, .limit = DB_LIST_MAX,
		                           .cursor = cursor };
		struct db_job_list page = { 0 };
		int rc = db_jobs_list(db, &f, &page, err);
		if (rc) {
			free(*ids);
			*ids = NULL;
			*n = 0;
			return rc;
		}
		if (*n + page.n > cap) {
			cap = (*n + page.n) * 2;
			int64_t *grown = realloc(*ids, cap * sizeof *grown);
			if (!grown) {
				db_job_list_release(&page);
				free(*ids);
				*ids = NULL;
				*n = 0;
				err->code = DB_ERROR;
				snprintf(err->text, sizeof err->text, "list jobs: out of memory");
				return DB_ERROR;
			}
			*ids = grown;
		}
		for (size_t i = 0; i < page.n; i++)
			(*ids)[(*n)++] = page.jobs[i].id;
		snprintf(cursor, sizeof cursor, "%s", page.next_cursor);
		db_job_list_release(&page);
	} while (cursor[0]);
	for (size_t i = 0; i < *n / 2; i++) {      /* newest first -> oldest first */
		int64_t t = (*ids)[i];
		(*ids)[i] = (*ids)[*n - 1 - i];
		(*ids)[*n - 1 - i] = t;
	}
	return 0;
}

/* "HH:MM:SS" or "D-HH:MM:SS" (the validator's normal form) or minutes. */
static long time_limit_s(json_t *v)
{
	if (json_is_integer(v))
		return json_integer_value(v) > 0 ? (long)json_integer_value(v) * 60 : 0;
	if (!json_is_string(v))
		return 0;
	long d = 0, h = 0, m = 0, s = 0;
	const char *t = json_string_value(v);
	if (sscanf(t, "%ld-%ld:%ld:%ld", &d, &h, &m, &s) == 4 ||
	    (d = 0, sscanf(t, "%ld:%ld:%ld", &h, &m, &s) == 3))
		return ((d * 24 + h) * 60 + m) * 60 + s;
	return 0;
}

/* The spec's "mem" in MiB: an integer (MiB) or "<n>[K|M|G|T]"; 0 = unset. */
static long long mem_mb(json_t *v)
{
	if (json_is_integer(v))
		return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
	if (!json_is_string(v))
		return 0;
	char unit = 'M';
	long long n = 0;
	if (sscanf(json_string_value(v), "%lld%c", &n, &unit) < 1 || n <= 0)
		return 0;
	switch (unit) {
	case 'K': return (n + 1023) / 1024;
	case 'G': return n * 1024;
	case 'T': return n * 1024 * 1024;
	default: return n;
	}
}

static void copy_name(char *dst, size_t len, json_t *v)
{
	snprintf(dst, len, "%s", json_is_string(v) ? json_string_value(v) : "");
}

static int int_or(json_t *v, int def)
{
	return json_is_integer(v) && json_integer_value(v) >= 0 &&
	       json_integer_value(v) <= 1 << 20 ? (int)json_integer_value(v) : def;
}

/* The executor's view of job: its dir, ranks, time limit and resources from
 * the spec (validated at submit: names hold only A-Z a-z 0-9 _ . -). 0;
 * -1: the directory's path is too long; 1: out of memory. ej is the
 * caller's to release (exec_job_release) whatever this returns. */
static int exec_job_for(struct svc_runner *r, const struct db_job *job, struct exec_job *ej)
{
	memset(ej, 0, sizeof *ej);
	ej->id = job->id;
	ej->ranks = 1;
	ej->sweep = job->sweep;
	ej->sweep_max_parallel = job->sweep_max_parallel;
	ej->sweep_index = (int)job->sweep_index;
	char dir[EXEC_PATH_MAX];
	if (svc_runner_job_dir(r, job->id, dir, sizeof dir) != 0)
		return -1;
	if (!(ej->dir = strdup(dir)))
		return 1;
	json_t *spec = job->spec ? json_loads(job->spec, 0, NULL) : NULL;
	json_t *ranks = json_object_get(json_object_get(spec, "parallel"), "ranks");
	if (json_is_integer(ranks) && json_integer_value(ranks) >= 1)
		ej->ranks = (int)json_integer_value(ranks);
	json_t *min = json_object_get(json_object_get(json_object_get(spec, "parallel"), "elastic"),
	                              "min_ranks");
	if (json_is_integer(min) && json_integer_value(min) >= 1 &&
	    json_integer_value(min) < ej->ranks)
		ej->min_ranks = (int)json_integer_value(min);
	json_t *res = json_object_get(spec, "resources");
	ej->time_limit_s = time_limit_s(json_object_get(res, "time_limit"));
	copy_name(ej->partition, sizeof ej->partition, json_object_get(res, "partition"));
	copy_name(ej->qos, sizeof ej->qos, json_object_get(res, "qos"));
	copy_name(ej->account, sizeof ej->account, json_object_get(res, "account"));
	if (job->partition && *job->partition)   /* an admin's PATCH wins over the spec */
		snprintf(ej->partition, sizeof ej->partition, "%s", job->partition);
	ej->nodes = int_or(json_object_get(res, "nodes"), 1);
	ej->cpus_per_task = int_or(json_object_get(res, "cpus_per_task"), 1);
	ej->gpus_per_node = int_or(json_object_get(res, "gpus_per_node"), 0);
	ej->mem_mb = mem_mb(json_object_get(res, "mem"));
	json_decref(spec);
	if (r->run_as_owner && job->unix_user)
		snprintf(ej->unix_user, sizeof ej->unix_user, "%s", job->unix_user);
	if (job->slurm_job_id)
		snprintf(ej->ext_id, sizeof ej->ext_id, "%s", job->slurm_job_id);
	return 0;
}

/* A new job token into ej (best effort: without one the job still runs and
 * its metrics are imported when it ends). */
static void mint_token(struct svc_runner *r, struct exec_job *ej)
{
	struct db_err err = { 0 };
	char token[DB_TOKEN_LEN + 1];
	if (db_tokens_create(r->db, NULL, DB_ROLE_JOB, ej->id, token, NULL, &err) == 0)
		snprintf(ej->token, sizeof ej->token, "%s", token);
	else
		svc_log(SVC_LOG_WARN, "job j-%06lld: no job token, it will not report while it "
		        "runs: %s", ej->id, err.text);
	explicit_bzero(token, sizeof token);
}

/* The job's spec as its trainer reads it: the stored spec, with an init
 * that names a checkpoint by job ({"job": "j-000123", "step": 300}, the
 * step optional: the newest) turned into that checkpoint's file, whose
 * path goes to *init_path (a new string; NULL when none). The job named
 * was checked at submit to be one the owner may read; it is checked again
 * here. Returns a new string, or NULL with why filled (and *init_path
 * NULL). */
static char *trainer_spec(struct svc_runner *r, const struct db_job *job, char **init_path,
                          char *why, size_t why_len)
{
	*init_path = NULL;
	json_t *spec = json_loads(job->spec, 0, NULL);
	json_t *init = json_object_get(spec, "init");
	json_t *ref = json_object_get(init, "job");
	if (!spec || !json_is_string(ref)) {
		json_decref(spec);
		char *copy = strdup(job->spec);
		if (!copy)
			snprintf(why, why_len, "out of memory");
		return copy;
	}
	json_t *step = json_object_get(init, "step");
	const char *ref_id = json_string_value(ref);
	int64_t from = 0;
	struct db_user owner;
	struct db_err err = { 0 };
	struct db_checkpoint_list list = { 0 };
	int admin = db_users_get(r->db, job->owner, &owner, &err) == 0 &&
	            owner.role == DB_ROLE_ADMIN;
	char *out = NULL;
	if (db_job_id_parse(ref_id, &from) != 0 ||
	    db_checkpoints_list(r->db, from, admin ? NULL : job->owner, &list, &err) != 0) {
		snprintf(why, why_len, "init.job: no job %s that %s may read", ref_id, job->owner);
		goto out;
	}
	const struct db_checkpoint *pick = NULL;
	for (size_t i = 0; i < list.n; i++)
		if (json_is_integer(step) ? list.items[i].step == json_integer_value(step)
		                          : (!pick || list.items[i].step > pick->step))
			pick = &list.items[i];
	if (!pick) {
		if (json_is_integer(step))
			snprintf(why, why_len, "init: %s has no checkpoint of step %lld (any more: a job "
			         "keeps only its newest keep_checkpoints)", ref_id,
			         (long long)json_integer_value(step));
		else
			snprintf(why, why_len, "init: %s has no checkpoint", ref_id);
		goto out;
	}
	json_object_set_new(spec, "init", json_pack("{s:s}", "from", pick->path));
	out = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	if (out && !(*init_path = strdup(pick->path))) {
		free(out);
		out = NULL;
	}
	if (!out)
		snprintf(why, why_len, "out of memory");
out:
	db_checkpoint_list_release(&list);
	json_decref(spec);
	return out;
}

/* Makes the job directory (0750) and its spec.json; for a job that runs as
 * its owner both belong to the owner. 0, 1 when it should be tried again
 * later, -1 for good (why says why). *existed: the directory was there. */
static int make_job_dir(const struct exec_job *ej, const struct svc_unix_id *owner,
                        const char *spec, int *existed, char *why, size_t why_len)
{
	*existed = 0;
	if (mkdir(ej->dir, 0750) != 0) {
		int e = errno;
		if (e != EEXIST) {
			snprintf(why, why_len, "cannot create the job directory: %s", strerror(e));
			return exec_errno_transient(e) ? 1 : -1;
		}
		*existed = 1;
	}
	uid_t uid = owner ? owner->uid : (uid_t)-1;
	gid_t gid = owner ? owner->gid : (gid_t)-1;
	int dfd = open(ej->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || (owner && fchown(dfd, uid, gid) != 0) || fchmod(dfd, 0750) != 0) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		snprintf(why, why_len, "cannot give the job directory to its owner: %s", strerror(e));
		return exec_errno_transient(e) ? 1 : -1;
	}
	close(dfd);
	size_t len = strlen(spec);
	char *text = malloc(len + 2);
	if (!text) {
		snprintf(why, why_len, "out of memory");
		return 1;
	}
	memcpy(text, spec, len);
	memcpy(text + len, "\n", 2);
	int rc = svc_jobfs_write(ej->dir, "spec.json", text, len + 1, 0640, uid, gid);
	int e = errno;
	free(text);
	if (rc != 0) {
		snprintf(why, why_len, "cannot write the job's spec.json: %s", strerror(e));
		return exec_errno_transient(e) ? 1 : -1;
	}
	return 0;
}

/* Who job runs as, into owner (NULL: larchd's own user), and whether its
 * input files are confined. 0, or -1 with why filled: the job cannot run. */
static int job_identity(struct svc_runner *r, const struct db_job *job, struct exec_job *ej,
                        struct svc_unix_id *owner, int *as_owner, char *why, size_t why_len)
{
	struct db_user u;
	struct db_err err = { 0 };
	int user_role = db_users_get(r->db, job->owner, &u, &err) != 0 || u.role != DB_ROLE_ADMIN;
	*as_owner = ej->unix_user[0] != '\0';
	ej->confine = r->confine_user_jobs && user_role;
	if (!*as_owner) {
		if (r->run_as_owner) {
			snprintf(why, why_len, "the job has no Unix user to run as (submitted before "
			         "jobs ran as their owners?)");
			return -1;
		}
		return 0;
	}
	char e[256];
	if (svc_unix_id_lookup(ej->unix_user, owner, e, sizeof e) != 0) {
		snprintf(why, why_len, "%s", e);
		return -1;
	}
	if (user_role && owner->uid == 0) {
		snprintf(why, why_len, "user %s is mapped to Unix user %s, uid 0: a job of a user-role "
		         "token never runs as uid 0", job->owner, ej->unix_user);
		return -1;
	}
	return 0;
}

/* ---- handing PENDING jobs over ---------------------------------------------- */

/* Readies PENDING job id for its executor: its directory, spec.json and
 * token into ej (*existed: the directory was there before). 0: ready, ej
 * the caller's to release (exec_job_release); -1: not now (gone from
 * PENDING, tried again later, or FAILED here), ej holds nothing. */
static int prepare(struct svc_runner *r, int64_t id, struct exec_job *ej, int *existed)
{
	struct db_job job = { 0 };
	struct db_err dberr = { 0 };
	memset(ej, 0, sizeof *ej);
	if (db_jobs_get(r->db, id, NULL, &job, &dberr) != 0 || job.state != DB_STATE_PENDING) {
		db_job_release(&job);
		return -1;                     /* cancelled or held meanwhile */
	}
	struct svc_unix_id owner;
	char why[EXEC_REASON_MAX + 64] = "";
	int as_owner = 0, later = 0, rc;
	char *spec = NULL;
	*existed = 0;
	if ((rc = exec_job_for(r, &job, ej)) != 0) {
		snprintf(why, sizeof why, "%s", rc > 0 ? "out of memory" :
		         "the job directory path is too long");
		later = rc > 0;
	} else if (job_identity(r, &job, ej, &owner, &as_owner, why, sizeof why) != 0)
		;
	else if (!(spec = trainer_spec(r, &job, &ej->init_path, why, sizeof why)))
		;
	else
		later = make_job_dir(ej, as_owner ? &owner : NULL, spec, existed, why,
		                     sizeof why) > 0;
	free(spec);
	db_job_release(&job);
	if (later || why[0])
		exec_job_release(ej);
	if (later) {
		static struct svc_log_limit limit;
		svc_log_limited(&limit, 10000, SVC_LOG_WARN, "job j-%06lld: stays PENDING, tried "
		                "again soon: %s", (long long)id, why);
		return -1;
	}
	if (why[0]) {
		svc_runner_move(r, id, DB_STATE_PENDING, DB_STATE_FAILED, "executor", why, 0, 0);
		return -1;
	}
	mint_token(r, ej);
	return 0;
}

/* After submit: QUEUED (or, for an asynchronous executor, a hold that came
 * meanwhile passed on). */
static void handed(struct svc_runner *r, struct executor *ex, int64_t id)
{
	struct db_job job = { 0 };
	struct db_err dberr = { 0 };
	char why[EXEC_REASON_MAX + 64], err[EXEC_REASON_MAX] = "";
	if (ex->ops->async_submit) {
		/* QUEUED when the executor says Slurm took it; held meanwhile, the
		 * hold reaches Slurm too */
		if (db_jobs_get(r->db, id, NULL, &job, &dberr) == 0 && job.state == DB_STATE_HELD &&
		    exec_hold(ex, id, err, sizeof err) != 0)
			svc_log(SVC_LOG_WARN, "job j-%06lld: held while handed over: %s", (long long)id,
			        err);
		db_job_release(&job);
		return;
	}
	snprintf(why, sizeof why, "queued on the %s executor", ex->ops->name);
	if (svc_runner_move(r, id, DB_STATE_PENDING, DB_STATE_QUEUED, "executor", why, 0, 0) != 0) {
		/* cancelled meanwhile, or the db failed: take it back (the executor
		 * starts jobs only on poll, so it has not run) */
		if (exec_cancel(ex, id, err, sizeof err) != 0)
			svc_log(SVC_LOG_WARN, "job j-%06lld: cannot withdraw it: %s", (long long)id, err);
	}
}

static void hand_over_one(struct svc_runner *r, struct executor *ex, int64_t id)
{
	struct exec_job ej;
	char why[EXEC_REASON_MAX + 64], err[EXEC_REASON_MAX] = "";
	int existed;
	if (prepare(r, id, &ej, &existed) != 0)
		return;
	/* a directory from before a restart: the executor decides whether the job
	 * ever launched (it is never started twice) */
	int rc = existed ? exec_adopt(ex, &ej, err, sizeof err) : exec_submit(ex, &ej, err, sizeof err);
	exec_job_release(&ej);
	if (rc != 0) {
		snprintf(why, sizeof why, "the %s executor refused the job: %s", ex->ops->name, err);
		svc_runner_move(r, id, DB_STATE_PENDING, DB_STATE_FAILED, "executor", why, 0, 0);
		return;
	}
	handed(r, ex, id);
}

/* The PENDING children of sweep, oldest first, handed over together
 * (exec_submit_sweep: one Slurm job array); those whose directory was there
 * before a restart are adopted one by one. */
static void hand_over_sweep(struct svc_runner *r, struct executor *ex, int64_t sweep)
{
	int64_t *ids = NULL;
	size_t n = 0, cap = 0;
	char cursor[DB_CURSOR_MAX] = "";
	struct db_err dberr = { 0 };
	do {
		struct db_job_filter f = { .has_state = 1, .state = DB_STATE_PENDING, .sweep = sweep,
		                           .limit = DB_LIST_MAX, .cursor = cursor };
		struct db_job_list page = { 0 };
		if (db_jobs_list(r->db, &f, &page, &dberr) != 0) {
			svc_log(SVC_LOG_WARN, "runner: listing the children of sweep %lld: %s",
			        (long long)sweep, dberr.text);
			free(ids);
			return;                    /* again at the next scan */
		}
		if (n + page.n > cap) {
			cap = (n + page.n) * 2;
			int64_t *grown = realloc(ids, cap * sizeof *grown);
			if (!grown) {
				db_job_list_release(&page);
				free(ids);
				return;
			}
			ids = grown;
		}
		for (size_t i = 0; i < page.n; i++)
			if (!exec_has(ex, page.jobs[i].id))
				ids[n++] = page.jobs[i].id;
		snprintf(cursor, sizeof cursor, "%s", page.next_cursor);
		db_job_list_release(&page);
	} while (cursor[0]);
	struct exec_job *ejs = n ? calloc(n, sizeof *ejs) : NULL;
	int64_t *taken_ids = n ? calloc(n, sizeof *taken_ids) : NULL;
	if (n && (!ejs || !taken_ids)) {
		free(ejs);
		free(taken_ids);
		free(ids);
		return;
	}
	int k = 0;
	for (size_t i = n; i-- > 0;) {         /* newest first -> oldest first */
		int existed;
		if (prepare(r, ids[i], &ejs[k], &existed) != 0)
			continue;
		if (existed) {
			char err[EXEC_REASON_MAX] = "", why[EXEC_REASON_MAX + 64];
			int rc = exec_adopt(ex, &ejs[k], err, sizeof err);
			exec_job_release(&ejs[k]);
			if (rc != 0) {
				snprintf(why, sizeof why, "the %s executor refused the job: %s",
				         ex->ops->name, err);
				svc_runner_move(r, ids[i], DB_STATE_PENDING, DB_STATE_FAILED, "executor", why,
				                0, 0);
			} else {
				handed(r, ex, ids[i]);
			}
			continue;
		}
		taken_ids[k++] = ids[i];
	}
	free(ids);
	int taken = 0;
	char err[EXEC_REASON_MAX] = "", why[EXEC_REASON_MAX + 64];
	int rc = k ? exec_submit_sweep(ex, ejs, k, &taken, err, sizeof err) : 0;
	for (int i = 0; i < k; i++)
		exec_job_release(&ejs[i]);
	free(ejs);
	if (rc != 0)
		snprintf(why, sizeof why, "the %s executor refused the job: %s", ex->ops->name, err);
	for (int i = 0; i < k; i++) {
		if (i < taken)
			handed(r, ex, taken_ids[i]);
		else
			svc_runner_move(r, taken_ids[i], DB_STATE_PENDING, DB_STATE_FAILED, "executor",
			                why, 0, 0);
	}
	free(taken_ids);
}

/* A PENDING job to its executor: with its sweep's other PENDING children
 * where the executor takes a sweep as one unit, else on its own. */
static void hand_over(struct svc_runner *r, struct executor *ex, int64_t id)
{
	struct db_job job = { 0 };
	struct db_err dberr = { 0 };
	int64_t sweep = 0;
	if (ex->ops->submit_sweep && db_jobs_get(r->db, id, NULL, &job, &dberr) == 0)
		sweep = job.sweep;
	db_job_release(&job);
	if (sweep)
		hand_over_sweep(r, ex, sweep);
	else
		hand_over_one(r, ex, id);
}

/* Hands over the oldest PENDING jobs the executor has room for. Returns 1 if
 * some were left for the next pass. */
static int scan_pending(struct svc_runner *r, struct executor *ex)
{
	int room = r->queue_max > 0 ? r->queue_max - exec_count(ex) : SCAN_MAX;
	if (room <= 0)
		return 0;
	/* the oldest ones that fit, and one more to know whether more wait */
	int64_t ids[SCAN_MAX + 1];
	size_t want = (size_t)room < SCAN_MAX ? (size_t)room : SCAN_MAX, n;
	struct db_err err = { 0 };
	if (db_jobs_oldest(r->db, DB_STATE_PENDING, ids, want + 1, &n, &err) != 0) {
		svc_log(SVC_LOG_WARN, "runner: listing pending jobs: %s", err.text);
		return 0;                      /* again after RESCAN_MS */
	}
	size_t take = n < want ? n : want, handed = 0;
	for (size_t i = 0; i < take; i++) {
		if (exec_has(ex, ids[i]))
			continue;                  /* being handed over (async executors) */
		hand_over(r, ex, ids[i]);
		handed++;
	}
	return handed && take < n && (r->queue_max <= 0 || exec_count(ex) < r->queue_max);
}

/* ---- adoption after a restart ------------------------------------------------ */

static void adopt_one(struct svc_runner *r, struct executor *ex, int64_t id)
{
	struct db_job job = { 0 };
	struct db_err dberr = { 0 };
	if (db_jobs_get(r->db, id, NULL, &job, &dberr) != 0) {
		svc_log(SVC_LOG_WARN, "reconcile: %s", dberr.text);
		return;
	}
	enum db_state state = job.state;
	struct exec_job ej;
	struct stat sb;
	struct svc_unix_id owner;
	char why[EXEC_REASON_MAX + 64] = "";
	int as_owner = 0;
	int ok = exec_job_for(r, &job, &ej) == 0;
	/* as when it was handed over: who it runs as, its confinement, its init
	 * (none when that fails: the trainer checks what is left) */
	char *spec = NULL;
	if (ok && job_identity(r, &job, &ej, &owner, &as_owner, why, sizeof why) == 0)
		spec = trainer_spec(r, &job, &ej.init_path, why, sizeof why);
	free(spec);
	db_job_release(&job);
	if (!ok || stat(ej.dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		exec_job_release(&ej);
		svc_runner_move(r, id, state, DB_STATE_FAILED, "reconciler", "job directory lost", 0, 0);
		return;
	}
	mint_token(r, &ej);
	char err[EXEC_REASON_MAX];
	int rc = exec_adopt(ex, &ej, err, sizeof err);
	exec_job_release(&ej);
	if (rc != 0) {
		snprintf(why, sizeof why, "cannot adopt the job: %s", err);
		svc_runner_move(r, id, state, DB_STATE_FAILED, "reconciler", why, 0, 0);
		return;
	}
	char by[DB_NAME_MAX + 1];
	if (svc_runner_cancel_by(r, id, by, NULL, 0) && exec_cancel(ex, id, err, sizeof err) == 0)
		svc_log(SVC_LOG_INFO, "job j-%06lld: cancel requested by %s, again after a restart",
		        (long long)id, by);
}

static int reconcile(struct svc_runner *r, struct executor *ex, char *err, size_t errlen)
{
	static const enum db_state held[] = { DB_STATE_QUEUED, DB_STATE_RUNNING };
	size_t adopted = 0;
	for (size_t s = 0; s < sizeof held / sizeof held[0]; s++) {
		int64_t *ids;
		size_t n;
		struct db_err dberr = { 0 };
		if (list_ids(r->db, held[s], &ids, &n, &dberr) != 0) {
			snprintf(err, errlen, "reconcile: %s", dberr.text);
			return -1;
		}
		for (size_t i = 0; i < n; i++)
			adopt_one(r, ex, ids[i]);
		adopted += n;
		free(ids);
	}
	if (adopted)
		svc_log(SVC_LOG_INFO, "reconcile: %zu queued or running jobs handed back to the %s "
		        "executor", adopted, ex->ops->name);
	return 0;
}

/* ---- the thread --------------------------------------------------------------- */


static void *runner_main(void *arg)
{
	struct svc_runner *r = arg;
	long long last_scan = 0, last_sweeps = 0;
	pthread_mutex_lock(&r->lock);
	while (!r->stopping) {
		r->begun++;
		int scan = r->kicked || svc_mono_ms() - last_scan >= RESCAN_MS ||
		           r->ex->ops->async_submit;   /* their PENDING jobs leave on events */
		r->kicked = 0;
		struct executor *ex = r->ex;
		pthread_mutex_unlock(&r->lock);

		int more = 0;
		if (scan) {
			last_scan = svc_mono_ms();
			more = scan_pending(r, ex);
		}
		int before = exec_count(ex);
		svc_runner_retry_events(r);
		exec_poll(ex, svc_runner_on_event, r);
		if (exec_count(ex) < before)
			more = 1;                  /* room for a PENDING job */
		if (svc_mono_ms() - last_sweeps >= SVC_SWEEP_PASS_MS) {
			last_sweeps = svc_mono_ms();
			svc_sweep_pass(r);         /* early stopping */
		}

		pthread_mutex_lock(&r->lock);
		r->ended = r->begun;
		pthread_cond_broadcast(&r->passed);
		if (more)
			r->kicked = 1;
		if (r->kicked || r->stopping)
			continue;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		long long ns = until.tv_nsec + (long long)r->poll_ms * 1000000;
		until.tv_sec += ns / 1000000000;
		until.tv_nsec = ns % 1000000000;
		while (!r->kicked && !r->stopping &&
		       pthread_cond_timedwait(&r->wake, &r->lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/* ---- hooks and lifecycle ------------------------------------------------------ */

static void hook_submitted(void *arg, long long id)
{
	(void)id;
	struct svc_runner *r = arg;
	pthread_mutex_lock(&r->lock);
	r->kicked = 1;
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
}

static int hook_held(void *arg, long long id)
{
	struct svc_runner *r = arg;
	pthread_mutex_lock(&r->lock);
	struct executor *ex = r->ex;
	pthread_mutex_unlock(&r->lock);
	char err[EXEC_REASON_MAX];
	if (ex && exec_has(ex, id))
		return exec_hold(ex, id, err, sizeof err);
	return 0;                          /* not handed over: the runner skips HELD jobs */
}

static int hook_job_dir(void *arg, long long id, char *buf, size_t len)
{
	return svc_runner_job_dir(arg, id, buf, len);
}

static struct executor *executor_of(struct svc_runner *r)
{
	pthread_mutex_lock(&r->lock);
	struct executor *ex = r->ex;
	pthread_mutex_unlock(&r->lock);
	return ex;
}

static int hook_partition_ok(void *arg, const char *partition, char *err, size_t errlen)
{
	struct executor *ex = executor_of(arg);
	return ex && exec_partition_ok(ex, partition, err, errlen) == 0 ? -1 : 0;
}

static void hook_memory_limits(void *arg, const char *partition, double *host, double *gpu)
{
	struct svc_runner *r = arg;
	struct executor *ex = executor_of(r);
	*host = 0;
	pthread_mutex_lock(&r->lock);
	*gpu = (double)svc_gpu_memory_of(&r->gpu_memory, partition);
	pthread_mutex_unlock(&r->lock);
	if (ex && exec_host_memory(ex, partition, host) != 0)
		*host = 0;
}

static int hook_health(void *arg, char *detail, size_t len)
{
	struct executor *ex = executor_of(arg);
	if (!ex) {
		snprintf(detail, len, "starting: adopting the jobs of the last run");
		return 1;
	}
	return exec_health(ex, detail, len);
}

static size_t hook_slurm_calls(void *arg, struct api_count *out, size_t max)
{
	(void)arg;
	size_t n = 0;
	for (int k = 0; k < SLURM_CMD_KINDS && n < max; k++, n++)
		out[n] = (struct api_count){ slurm_cmd_kind_name(k), slurm_cmd_calls(k) };
	return n;
}

static int hook_slurm_polls(void *arg, struct api_poll_times *out)
{
	struct svc_runner *r = arg;
	if (strcmp(r->executor_name, "slurm") != 0)
		return 0;
	struct slurm_poll_stats st;
	slurm_poll_get(&st);
	memset(out, 0, sizeof *out);
	out->n = SLURM_POLL_BUCKETS < API_POLL_BUCKETS_MAX ? SLURM_POLL_BUCKETS : API_POLL_BUCKETS_MAX;
	for (size_t i = 0; i < out->n; i++) {
		out->le[i] = slurm_poll_bounds[i];
		out->count_le[i] = st.le[i];
	}
	out->count = st.count;
	out->wall_s = st.wall_s;
	out->cpu_s = st.cpu_s;
	return 1;
}

struct svc_runner *svc_runner_new(const struct svc_runner_config *cfg, char *err, size_t errlen)
{
	if (!cfg->db || !cfg->state_dir || !*cfg->state_dir) {
		snprintf(err, errlen, "runner: needs a database and a state directory");
		return NULL;
	}
	struct svc_runner *r = calloc(1, sizeof *r);
	if (!r || !(r->state_dir = strdup(cfg->state_dir)) ||
	    !(r->executor_name = strdup(cfg->executor ? cfg->executor : "local"))) {
		if (r)
			free(r->state_dir);
		free(r);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	r->db = cfg->db;
	r->poll_ms = cfg->poll_ms > 0 ? cfg->poll_ms : 200;
	r->queue_max = cfg->queue_max;
	r->run_as_owner = cfg->run_as_owner;
	r->confine_user_jobs = cfg->confine_user_jobs;
	if (cfg->gpu_memory)
		r->gpu_memory = *cfg->gpu_memory;
	r->hooks = (struct api_jobs_hooks){ .submitted = hook_submitted,
	                                    .cancel = svc_runner_cancel,
	                                    .held = hook_held,
	                                    .job_dir = hook_job_dir,
	                                    .partition_ok = hook_partition_ok,
	                                    .memory_limits = hook_memory_limits,
	                                    .health = hook_health, .slurm_calls = hook_slurm_calls,
	                                    .slurm_polls = hook_slurm_polls,
	                                    .executor = r->executor_name, .arg = r };
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->wake, NULL);
	pthread_cond_init(&r->passed, NULL);
	r->kicked = 1;
	return r;
}

void svc_runner_set_gpu_memory(struct svc_runner *r, const struct svc_gpu_memory *g)
{
	pthread_mutex_lock(&r->lock);
	r->gpu_memory = *g;
	pthread_mutex_unlock(&r->lock);
}

const struct api_jobs_hooks *svc_runner_hooks(struct svc_runner *r)
{
	return &r->hooks;
}

int svc_runner_start(struct svc_runner *r, struct executor *ex, char *err, size_t errlen)
{
	char jobs[EXEC_PATH_MAX];
	snprintf(jobs, sizeof jobs, "%s/jobs", r->state_dir);
	/* owners reach their own job directories through it, and list nothing */
	mode_t mode = r->run_as_owner ? 0711 : 0750;
	if ((mkdir(jobs, mode) != 0 && errno != EEXIST) || chmod(jobs, mode) != 0) {
		snprintf(err, errlen, "%s: %s", jobs, strerror(errno));
		return -1;
	}
	pthread_mutex_lock(&r->lock);
	int already = r->ex != NULL;
	if (!already)
		r->ex = ex;
	pthread_mutex_unlock(&r->lock);
	if (already) {
		snprintf(err, errlen, "runner: started already");
		return -1;
	}
	if (reconcile(r, ex, err, errlen) != 0)
		return -1;
	int rc = pthread_create(&r->thread, NULL, runner_main, r);
	if (rc != 0) {
		snprintf(err, errlen, "runner: thread: %s", strerror(rc));
		return -1;
	}
	pthread_mutex_lock(&r->lock);
	r->running = 1;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

int svc_runner_sync(struct svc_runner *r, int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	long long ns = until.tv_nsec + (long long)timeout_ms * 1000000;
	until.tv_sec += ns / 1000000000;
	until.tv_nsec = ns % 1000000000;
	pthread_mutex_lock(&r->lock);
	unsigned long long want = r->begun + 1;
	r->kicked = 1;
	pthread_cond_signal(&r->wake);
	int rc = 0;
	while (rc == 0 && r->running && !r->stopping && r->ended < want)
		rc = pthread_cond_timedwait(&r->passed, &r->lock, &until);
	int ok = r->ended >= want;
	pthread_mutex_unlock(&r->lock);
	return ok ? 0 : -1;
}

void svc_runner_free(struct svc_runner *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	int running = r->running;
	r->stopping = 1;
	pthread_cond_broadcast(&r->wake);
	pthread_cond_broadcast(&r->passed);
	pthread_mutex_unlock(&r->lock);
	if (running)
		pthread_join(r->thread, NULL);
	for (struct cancel_req *c = r->cancels, *next; c; c = next) {
		next = c->next;
		free(c);
	}
	free(r->retry);
	free(r->state_dir);
	free(r->executor_name);
	pthread_cond_destroy(&r->passed);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
