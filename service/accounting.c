/* service/accounting.c - the accounting hooks: the thread, the accounts
 * snapshot, the usage reads, limit changes, who is who; see accounting.h.
 * Slurm's commands and their output are accounting_slurm.c's. */
#include "accounting.h"

#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accounting_internal.h"
#include "api/jobs_common.h"
#include "clock.h"
#include "db/db.h"
#include "db/tokens.h"
#include "log.h"

#define UNIX_NAME_MAX 32

/* A limit change waiting for the thread. */
struct acct_task {
	const struct api_acct_limits *in;
	struct api_admin_call *call;
	api_admin_done_fn done;
	void *done_arg;
	struct acct_task *next;
};

struct svc_acct {
	struct db *db;                   /* borrowed */
	int timeout_ms;
	long long refresh_ms;
	char self_user[UNIX_NAME_MAX + 1];   /* larchd's own Unix user */
	char default_account[65];        /* slurm_account: jobs that name none charge it */
	struct api_acct_hooks hooks;

	pthread_mutex_t lock;            /* everything below */
	pthread_cond_t wake;             /* on CLOCK_MONOTONIC */
	pthread_t thread;
	int has_thread, stopping;
	struct acct_task *head, *tail;

	enum api_acct_state state;
	char why[256];                   /* state OFF: why */
	char cluster[65];
	long long probe_due;             /* monotonic ms */

	json_t *accounts;                /* the snapshot (an array); NULL: none yet */
	int64_t accounts_ms;             /* when it was taken (ms since the epoch) */
	long long accounts_mono;
	char accounts_error[256];        /* the last refresh's failure; "" when it worked */
	long long accounts_due, usage_due;

	int64_t usage_read_to;           /* ms since the epoch */
	long long window_h;              /* hours a sacct call reads at most (the thread's) */
	char usage_error[256];
};


/* ---- who is who ------------------------------------------------------------ */

int svc_acct_unix_user(const char *name, char *out, size_t len)
{
	/* A larch user is the Unix user of the same name. */
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > UNIX_NAME_MAX || n >= len || name[0] == '-')
		return -1;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '.' || *p == '-'))
			return -1;
	memcpy(out, name, n + 1);
	return 0;
}

/* The one the user's jobs run as (db_users_unix: mapped, else the same
 * name), as sacct names them. */
static int hook_unix_user(void *arg, const char *larch_user, char *out, size_t len)
{
	struct svc_acct *a = arg;
	char unix_user[DB_UNIX_NAME_MAX + 1];
	struct db_err err = { 0 };
	if (db_users_unix(a->db, larch_user, unix_user, &err) != 0)
		return svc_acct_unix_user(larch_user, out, len);
	if (strlen(unix_user) >= len)
		return -1;
	memcpy(out, unix_user, strlen(unix_user) + 1);
	return 0;
}

/* A job whose submit found no owner's Unix user to run as (run_as service)
 * runs as larchd's own user. */
static int hook_job_user(void *arg, const char *larch_user, char *out, size_t len)
{
	struct svc_acct *a = arg;
	(void)larch_user;
	if (!a->self_user[0] || strlen(a->self_user) >= len)
		return -1;
	memcpy(out, a->self_user, strlen(a->self_user) + 1);
	return 0;
}

/* ---- the thread's work ---------------------------------------------------------- */

static void probe(struct svc_acct *a)
{
	int on = 0;
	char cluster[65] = "", why[256] = "", msg[512] = "";
	int rc = svc_acct_slurm_probe(a->timeout_ms, &on, cluster, sizeof cluster, why, sizeof why,
	                              msg, sizeof msg);
	pthread_mutex_lock(&a->lock);
	if (rc != 0) {
		a->probe_due = svc_mono_ms() + SVC_ACCT_PROBE_RETRY_MS;
		svc_msgf(a->why, sizeof a->why, "slurm has not said whether it keeps accounting: %s", msg);
	} else {
		a->state = on ? API_ACCT_ON : API_ACCT_OFF;
		svc_msgf(a->cluster, sizeof a->cluster, "%s", cluster);
		svc_msgf(a->why, sizeof a->why, "%s", on ? "" : why);
		a->accounts_due = a->usage_due = 0;
	}
	pthread_mutex_unlock(&a->lock);
	if (rc != 0)
		svc_log(SVC_LOG_WARN, "accounting: %s", msg);
	else
		svc_log(SVC_LOG_INFO, "accounting: %s", on ? "slurmdbd (accounts, limits and usage "
		        "from Slurm)" : why);
}

/* Reads the accounts into the snapshot; 0, or -1 (the snapshot kept, its
 * error set). */
static int refresh_accounts(struct svc_acct *a)
{
	json_t *accounts = NULL;
	int no_fairshare = 0;
	char msg[512] = "";
	int rc = svc_acct_slurm_accounts(a->timeout_ms, a->cluster, &accounts, &no_fairshare, msg,
	                                 sizeof msg);
	pthread_mutex_lock(&a->lock);
	if (rc == 0) {
		json_decref(a->accounts);
		a->accounts = accounts;
		a->accounts_ms = db_now_ms();
		a->accounts_mono = svc_mono_ms();
		svc_msgf(a->accounts_error, sizeof a->accounts_error, "%s",
		    no_fairshare ? "sshare did not answer: no fair share" : "");
	} else {
		svc_msgf(a->accounts_error, sizeof a->accounts_error, "%s", msg);
	}
	pthread_mutex_unlock(&a->lock);
	if (rc != 0)
		svc_log(SVC_LOG_WARN, "accounting: accounts: %s", msg);
	return rc;
}

/* Reads sacct up to now, in calls of a->window_h hours at most (a first read
 * goes SVC_ACCT_FIRST_DAYS back: one call for all of it could pass what a
 * command may print), until caught up or stopping. */
static void poll_usage(struct svc_acct *a)
{
	int64_t now = db_now_ms() / 1000 * 1000, to = 0;
	char msg[512] = "";
	size_t added = 0, seen = 0, total = 0;
	int rc = 0;
	do {
		int64_t polled = 0;
		struct db_err err = { 0 };
		if ((rc = db_usage_polled(a->db, DB_USAGE_SLURM, &polled, &err)) != 0) {
			svc_msgf(msg, sizeof msg, "usage: %s", err.text);
			break;
		}
		int64_t from = polled > 0 ? polled - SVC_ACCT_SACCT_SLACK_S * 1000LL
		                          : now - SVC_ACCT_FIRST_DAYS * 86400000LL;
		to = from + a->window_h * 3600000LL < now ? from + a->window_h * 3600000LL : now;
		rc = svc_acct_slurm_usage(a->timeout_ms, a->db, from, to, &seen, &added, msg,
		                          sizeof msg);
		total += added;
		if (rc == 0 && seen < SVC_ACCT_SACCT_FEW && a->window_h < SVC_ACCT_FIRST_DAYS * 24)
			a->window_h *= 2;
		else if ((rc != 0 || seen >= SVC_ACCT_SACCT_FEW) && a->window_h > 1)
			a->window_h /= 2;      /* a failure may be output past what may be read */
		pthread_mutex_lock(&a->lock);
		if (rc == 0)
			a->usage_read_to = to;
		int stopping = a->stopping;
		pthread_mutex_unlock(&a->lock);
		if (stopping)
			break;
	} while (rc == 0 && to < now);
	pthread_mutex_lock(&a->lock);
	svc_msgf(a->usage_error, sizeof a->usage_error, "%s", rc == 0 ? "" : msg);
	pthread_mutex_unlock(&a->lock);
	if (rc != 0)
		svc_log(SVC_LOG_WARN, "accounting: sacct: %s", msg);
	else if (total)
		svc_log(SVC_LOG_DEBUG, "accounting: %zu jobs' usage from sacct", total);
}

/* The account named name in the snapshot (under the lock), or NULL. */
static json_t *account_of(const struct svc_acct *a, const char *name)
{
	size_t i;
	json_t *acc;
	json_array_foreach(a->accounts, i, acc)
		if (strcmp(json_string_value(json_object_get(acc, "name")), name) == 0)
			return acc;
	return NULL;
}

static int has_user(json_t *acc, const char *user)
{
	size_t i;
	json_t *u;
	json_array_foreach(json_object_get(acc, "users"), i, u)
		if (strcmp(json_string_value(json_object_get(u, "name")), user) == 0)
			return 1;
	return 0;
}

static void set_limits(struct svc_acct *a, struct acct_task *t)
{
	struct api_admin_call *call = t->call;
	const struct api_acct_limits *in = t->in;
	char cmd[API_ADMIN_MESSAGE_MAX], msg[API_ADMIN_MESSAGE_MAX] = "";
	int changed = 0;
	unsigned status = 500;
	if (svc_acct_slurm_set(a->timeout_ms, a->cluster, in, &changed, cmd, sizeof cmd, &status,
	                       msg, sizeof msg) != 0) {
		call->status = status;
		svc_msgf(call->message, sizeof call->message, "%s%s", status == 503 ? "slurm is "
		    "unreachable: " : "slurm refused: ", msg);
		return;
	}
	char read_msg[256] = "";
	int read = refresh_accounts(a);
	pthread_mutex_lock(&a->lock);
	json_t *acc = read == 0 ? account_of(a, in->account) : NULL;
	int found = acc && (!in->user || has_user(acc, in->user));
	if (read != 0)
		svc_msgf(read_msg, sizeof read_msg, "%s", a->accounts_error);
	call->body = found ? json_dumps(acc, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
	pthread_mutex_unlock(&a->lock);
	if (read != 0) {
		call->status = 503;
		call->partial = changed;
		svc_msgf(call->message, sizeof call->message, "%s; reading the accounts back failed: %s",
		    changed ? cmd : "nothing changed", read_msg);
	} else if (!found) {
		call->status = 404;
		if (in->user)
			svc_msgf(call->message, sizeof call->message, "user %s has no association with "
			    "account %s", in->user, in->account);
		else
			svc_msgf(call->message, sizeof call->message, "slurm has no account %s", in->account);
	} else if (!call->body) {
		call->status = 500;
		svc_msgf(call->message, sizeof call->message, "out of memory");
	} else {
		call->status = 200;
		svc_msgf(call->message, sizeof call->message, "%s%s", cmd,
		    changed ? "" : " (nothing to change)");
	}
}

static int wait_until(struct svc_acct *a, long long due)
{
	if (due <= 0)
		return pthread_cond_wait(&a->wake, &a->lock);
	struct timespec ts = { .tv_sec = due / 1000, .tv_nsec = due % 1000 * 1000000 };
	return pthread_cond_timedwait(&a->wake, &a->lock, &ts);
}

static void *worker(void *arg)
{
	struct svc_acct *a = arg;
	pthread_mutex_lock(&a->lock);
	while (!a->stopping) {
		struct acct_task *t = a->head;
		if (t) {
			a->head = t->next;
			if (!a->head)
				a->tail = NULL;
			int on = a->state == API_ACCT_ON;
			pthread_mutex_unlock(&a->lock);
			if (on) {
				set_limits(a, t);
			} else {
				t->call->status = 503;
				svc_msgf(t->call->message, sizeof t->call->message, "accounting: slurm has not "
				    "answered yet");
			}
			if (t->call->status != 200)
				svc_log(SVC_LOG_INFO, "admin %s: %s", t->call->by ? t->call->by : "?",
				        t->call->message);
			t->done(t->done_arg);
			free(t);
			pthread_mutex_lock(&a->lock);
			continue;
		}
		long long now = svc_mono_ms();
		if (a->state == API_ACCT_UNKNOWN) {
			if (now >= a->probe_due) {
				pthread_mutex_unlock(&a->lock);
				probe(a);
				pthread_mutex_lock(&a->lock);
			} else {
				wait_until(a, a->probe_due);
			}
			continue;
		}
		if (a->state == API_ACCT_OFF) {
			wait_until(a, 0);
			continue;
		}
		if (now >= a->accounts_due) {
			a->accounts_due = now + a->refresh_ms;
			pthread_mutex_unlock(&a->lock);
			refresh_accounts(a);
			pthread_mutex_lock(&a->lock);
		} else if (now >= a->usage_due) {
			a->usage_due = now + a->refresh_ms;
			pthread_mutex_unlock(&a->lock);
			poll_usage(a);
			pthread_mutex_lock(&a->lock);
		} else {
			wait_until(a, a->accounts_due < a->usage_due ? a->accounts_due : a->usage_due);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* ---- hooks ------------------------------------------------------------------------ */

static enum api_acct_state hook_state(void *arg, char *why, size_t len)
{
	struct svc_acct *a = arg;
	pthread_mutex_lock(&a->lock);
	enum api_acct_state s = a->state;
	if (s == API_ACCT_UNKNOWN)
		svc_msgf(why, len, "%s", a->why[0] ? a->why : "slurm has not answered yet");
	else
		svc_msgf(why, len, "%s", a->why);
	pthread_mutex_unlock(&a->lock);
	return s;
}

static char *hook_accounts(void *arg, unsigned *status, char *msg, size_t len)
{
	struct svc_acct *a = arg;
	char *body = NULL;
	pthread_mutex_lock(&a->lock);
	if (a->state == API_ACCT_OFF) {
		*status = 409;
		svc_msgf(msg, len, "accounting is not configured: %s", a->why);
	} else if (a->state == API_ACCT_UNKNOWN) {
		*status = 503;
		svc_msgf(msg, len, "accounting: %s", a->why[0] ? a->why : "slurm has not answered yet");
	} else if (!a->accounts) {
		*status = 503;
		svc_msgf(msg, len, "accounting: no accounts read from slurm yet%s%s",
		    a->accounts_error[0] ? ": " : "", a->accounts_error);
	} else {
		char at[32];
		api_time_format(a->accounts_ms, at);
		json_t *o = json_pack("{s:s,s:s,s:b,s:O}", "cluster", a->cluster, "updated_at", at,
		                      "stale", a->accounts_error[0] != '\0', "accounts", a->accounts);
		if (o && a->accounts_error[0])
			json_object_set_new(o, "error", json_string(a->accounts_error));
		body = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
		json_decref(o);
		*status = body ? 200 : 500;
		if (!body)
			svc_msgf(msg, len, "out of memory");
		if (svc_mono_ms() - a->accounts_mono > SVC_ACCT_MAX_AGE_MS) {
			a->accounts_due = 0;
			pthread_cond_signal(&a->wake);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return body;
}

static void hook_set_limits(void *arg, const struct api_acct_limits *in,
                            struct api_admin_call *call, api_admin_done_fn done, void *done_arg)
{
	struct svc_acct *a = arg;
	pthread_mutex_lock(&a->lock);
	enum api_acct_state s = a->state;
	struct acct_task *t = s == API_ACCT_ON && !a->stopping ? calloc(1, sizeof *t) : NULL;
	if (t) {
		*t = (struct acct_task){ .in = in, .call = call, .done = done, .done_arg = done_arg };
		if (a->tail)
			a->tail->next = t;
		else
			a->head = t;
		a->tail = t;
		pthread_cond_signal(&a->wake);
	} else if (s == API_ACCT_OFF) {
		call->status = 409;
		svc_msgf(call->message, sizeof call->message, "accounting is not configured: %s", a->why);
	} else {
		call->status = s == API_ACCT_ON && !a->stopping ? 500 : 503;
		svc_msgf(call->message, sizeof call->message, "%s", s != API_ACCT_ON
		    ? "accounting: slurm has not answered yet" : a->stopping ? "larchd is stopping"
		                                                          : "out of memory");
	}
	pthread_mutex_unlock(&a->lock);
	if (!t)
		done(done_arg);
}

static int hook_account_ok(void *arg, const char *unix_user, const char *account, char *err,
                           size_t errlen)
{
	struct svc_acct *a = arg;
	int rc = 0;
	if ((!account || !*account) && a->default_account[0])
		account = a->default_account;
	pthread_mutex_lock(&a->lock);
	if (a->state == API_ACCT_ON && a->accounts && unix_user) {
		char theirs[512] = "";
		size_t n = 0, count = 0;
		int allowed = 0;
		size_t i, k;
		json_t *acc, *u;
		json_array_foreach(a->accounts, i, acc) {
			const char *name = json_string_value(json_object_get(acc, "name"));
			int listed = 0;
			json_array_foreach(json_object_get(acc, "users"), k, u) {
				if (strcmp(json_string_value(json_object_get(u, "name")), unix_user) != 0 ||
				    listed)
					continue;
				listed = 1;
				count++;
				if (account && *account && strcmp(account, name) == 0)
					allowed = 1;
				if (n < sizeof theirs)
					n += (size_t)snprintf(theirs + n, sizeof theirs - n, "%s%s%s",
					                      count > 1 ? ", " : "", name,
					                      json_is_true(json_object_get(u, "default"))
					                          ? " (default)" : "");
			}
		}
		if (count == 0) {
			rc = -1;
			svc_msgf(err, errlen, "user %s has no slurm account to charge (an admin gives them "
			    "one: sacctmgr add user %s account=...)", unix_user, unix_user);
		} else if (account && *account && !allowed) {
			rc = -1;
			svc_msgf(err, errlen, "user %s has no association with account %s; their accounts: %s",
			    unix_user, account, theirs);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return rc;
}

static void hook_usage_status(void *arg, int64_t *read_to_ms, char *error, size_t len)
{
	struct svc_acct *a = arg;
	pthread_mutex_lock(&a->lock);
	*read_to_ms = a->state == API_ACCT_ON ? a->usage_read_to : 0;
	svc_msgf(error, len, "%s", a->state == API_ACCT_ON ? a->usage_error : "");
	pthread_mutex_unlock(&a->lock);
}

/* ---- lifecycle ------------------------------------------------------------------------ */

struct svc_acct *svc_acct_new(const struct svc_acct_config *cfg, char *err, size_t errlen)
{
	int slurm = cfg->executor && strcmp(cfg->executor, "slurm") == 0;
	if (!cfg->db || (!slurm && (!cfg->executor || strcmp(cfg->executor, "local") != 0))) {
		svc_msgf(err, errlen, "accounting: needs a database and the executor local or slurm");
		return NULL;
	}
	struct svc_acct *a = calloc(1, sizeof *a);
	if (!a) {
		svc_msgf(err, errlen, "out of memory");
		return NULL;
	}
	a->db = cfg->db;
	svc_msgf(a->default_account, sizeof a->default_account, "%s",
	    cfg->default_account ? cfg->default_account : "");
	a->timeout_ms = (int)(cfg->timeout_s ? cfg->timeout_s : 30) * 1000;
	a->refresh_ms = (long long)(cfg->refresh_s ? cfg->refresh_s : 60) * 1000;
	a->window_h = SVC_ACCT_SACCT_WINDOW_H;
	a->state = slurm && cfg->enabled ? API_ACCT_UNKNOWN : API_ACCT_OFF;
	if (!slurm)
		svc_msgf(a->why, sizeof a->why, "the local executor has no slurm accounting");
	else if (!cfg->enabled)
		svc_msgf(a->why, sizeof a->why, "larchd's accounting setting is off");
	struct passwd pw, *found = NULL;
	char buf[4096];
	if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &found) == 0 && found)
		svc_acct_unix_user(found->pw_name, a->self_user, sizeof a->self_user);
	a->hooks = (struct api_acct_hooks){ .state = hook_state, .accounts = hook_accounts,
	                                    .set_limits = hook_set_limits,
	                                    .account_ok = hook_account_ok,
	                                    .unix_user = hook_unix_user, .job_user = hook_job_user,
	                                    .usage_status = hook_usage_status, .arg = a };
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&a->lock, NULL);
	if (a->state == API_ACCT_UNKNOWN) {
		int rc = pthread_create(&a->thread, NULL, worker, a);
		if (rc != 0) {
			svc_msgf(err, errlen, "accounting: cannot start a thread: %s", strerror(rc));
			svc_acct_free(a);
			return NULL;
		}
		a->has_thread = 1;
	}
	return a;
}

const struct api_acct_hooks *svc_acct_hooks(struct svc_acct *a)
{
	return &a->hooks;
}

void svc_acct_free(struct svc_acct *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stopping = 1;
	pthread_cond_broadcast(&a->wake);
	pthread_mutex_unlock(&a->lock);
	if (a->has_thread)
		pthread_join(a->thread, NULL);
	/* the server has stopped: no request waits on a task left */
	while (a->head) {
		struct acct_task *next = a->head->next;
		free(a->head);
		a->head = next;
	}
	json_decref(a->accounts);
	pthread_cond_destroy(&a->wake);
	pthread_mutex_destroy(&a->lock);
	free(a);
}
