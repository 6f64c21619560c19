/* service/accounting.h - Slurm's accounting for larch: larchd's side of
 * api/acct_hooks.h.
 *
 * Under the Slurm executor, one thread of this module talks to Slurm's
 * accounting tools, never an HTTP thread:
 *   - at start (and until Slurm answers) `scontrol show config` says whether
 *     the cluster has slurmdbd (AccountingStorageType=accounting_storage/
 *     slurmdbd) and its ClusterName; without slurmdbd accounting is off
 *     (the endpoints answer 409).
 *   - every refresh_s, and soon after a reader found it older than
 *     SVC_ACCT_MAX_AGE_MS: the accounts snapshot, from `sacctmgr show assoc`
 *     (accounts, users, limits), `sacctmgr show user` (default accounts) and
 *     `sshare -a` (fair share). GET /v1/accounts and the submit-time
 *     account check read it; a refresh that fails keeps the last good one
 *     ("stale": true and the error).
 *   - every refresh_s: Slurm's usage, `sacct -a -X -D` of the jobs that
 *     ended since the last read (less SVC_ACCT_SACCT_SLACK_S, for records
 *     slurmdbd got late; a job read twice counts once), added to the
 *     database (db/usage.h), so that GET /v1/usage never waits for sacct.
 *     A first read goes SVC_ACCT_FIRST_DAYS back, in calls of a span that
 *     starts at SVC_ACCT_SACCT_WINDOW_H hours and doubles after a call that
 *     listed fewer than SVC_ACCT_SACCT_FEW jobs (halves after more, or a
 *     failure), one
 *     after the other until caught up: no call prints more than a busy
 *     cluster's day or two.
 *   - limit changes (PATCH): `sacctmgr -i modify account|user where ...
 *     set MaxJobs= MaxWall= GrpTRES=`, then a refresh of the snapshot,
 *     answered with the account as it is after.
 * Every command goes through slurm_cmd_run (argv, never a shell: names and
 * values arrive validated) with a timeout of slurm_timeout seconds.
 *
 * Who is who: a larch user's Unix user is db_users_unix's answer (mapped
 * with `larchd token create --unix-user`, else the same name); a job whose
 * submit found it an owner to run as is checked against that user's
 * associations, else against larchd's own user's (run_as service); the
 * usage endpoint shows Slurm's rows (Unix users) and the local executor's
 * (larch owners) under the Unix user.
 *
 * With the local executor (or accounting = off) no thread runs; accounting
 * is off and usage is larch's own records.
 *
 * Ownership: the db is borrowed and must outlive the module; free it after
 * the HTTP server has stopped.
 */
#ifndef LARCH_SERVICE_ACCOUNTING_H
#define LARCH_SERVICE_ACCOUNTING_H

#include <jansson.h>
#include <stddef.h>

#include "api/acct_hooks.h"
#include "db/usage.h"

#define SVC_ACCT_MAX_AGE_MS 5000        /* an older snapshot is refreshed for the next reader */
#define SVC_ACCT_PROBE_RETRY_MS 5000    /* Slurm did not answer the probe: ask again */
#define SVC_ACCT_SACCT_SLACK_S 300
#define SVC_ACCT_FIRST_DAYS 90
#define SVC_ACCT_SACCT_WINDOW_H 24      /* the span a sacct call reads at first; */
#define SVC_ACCT_SACCT_FEW 20000        /* doubled after fewer jobs, halved after more */

struct db;
struct svc_acct;

struct svc_acct_config {
	struct db *db;              /* borrowed */
	const char *executor;       /* "local" or "slurm" */
	int enabled;                /* 0: accounting = off */
	unsigned refresh_s;         /* between reads of the snapshot and of sacct */
	unsigned timeout_s;         /* each Slurm command */
	const char *default_account;/* the account of jobs that name none ("" or NULL: the
	                               user's default); copied */
};

/* Starts the thread (under Slurm, enabled). NULL with err filled. */
struct svc_acct *svc_acct_new(const struct svc_acct_config *cfg, char *err, size_t errlen);
/* For struct api_ctx.acct; static storage of a. */
const struct api_acct_hooks *svc_acct_hooks(struct svc_acct *a);
/* Stops the thread (after the command it runs) and frees a. Accepts NULL. */
void svc_acct_free(struct svc_acct *a);

/* name into out when it is a Unix user name (as Slurm and sacct take
 * them): 0; -1 when it is not. */
int svc_acct_unix_user(const char *name, char *out, size_t len);

/* ---- Slurm's output (service/accounting_slurm.c; for tests/unit) ---------- */

/* The accounts of `sacctmgr -nP show assoc format=account,user,partition,
 * parentname,share,maxjobs,maxwall,grptres`, with the default accounts of
 * `sacctmgr -nP show user format=user,defaultaccount` and the fair share of
 * `sshare -a -P -n -o Account,User,RawShares,NormShares,RawUsage,
 * EffectvUsage,FairShare` (may be NULL: no fair share) as a new JSON array,
 * sorted by name: [{"name", "parent", "limits", "fairshare", "users":
 * [{"name", "partition", "default", "limits", "fairshare"}]}] (docs/api.md,
 * "Accounts"). NULL with err filled for output it does not understand. */
json_t *svc_acct_parse_accounts(const char *assoc, const char *users, const char *sshare,
                                char *err, size_t errlen);

/* A TRES list ("cpu=8,mem=4G,gres/gpu=2"): *cpu and *gpu (gres/gpu, else
 * the sum of its typed counts), -1 for absent. 0, or -1 when malformed. */
int svc_acct_tres(const char *tres, long long *cpu, long long *gpu);

/* Finished jobs of `sacct -a -X -D -n -P -o JobIDRaw,User,Account,Partition,
 * Submit,Start,End,AllocCPUS,AllocTRES,State` (local times as sacct
 * prints them). Jobs that never started, or have not ended, are left out.
 * Strings point into text (which is modified) and into keys. */
struct svc_acct_sacct {
	struct db_usage_job *jobs;
	char (*keys)[DB_USAGE_KEY_MAX + 1];   /* "jobid@submit@start" (epoch seconds) */
	size_t n;
	size_t skipped;             /* lines left out: not started, not ended */
};
/* 0, or -1 with err filled for a line it does not understand. Release
 * with svc_acct_sacct_release either way. */
int svc_acct_parse_sacct(char *text, struct svc_acct_sacct *out, char *err, size_t errlen);
void svc_acct_sacct_release(struct svc_acct_sacct *s);

#endif
