/* api/acct_hooks.h - what the accounting endpoints (GET /v1/usage, GET and
 * PATCH /v1/accounts...) and the submit-time account check ask of the
 * service: whether Slurm's accounting (slurmdbd) is there, its accounts and
 * their limits, changing a limit, whether a user may charge an account,
 * how larch users map to Unix users, and how fresh the usage read from
 * Slurm is.
 *
 * Usage itself is in the database (db/usage.h): the endpoints read it
 * there; the service only keeps Slurm's part of it up to date. Reading
 * Slurm's accounts and changing a limit run Slurm's tools (sacctmgr,
 * sshare), which may take seconds: the accounts view is answered from a
 * snapshot in memory, a change is asynchronous as the admin hooks' actions
 * are (api/admin_hooks.h: the handler parks its request, done(done_arg) is
 * called once from another thread).
 *
 * larchd fills these in (service/accounting.c). Keeping them here keeps the
 * dependency one way: api/ never includes service/.
 */
#ifndef LARCH_API_ACCT_HOOKS_H
#define LARCH_API_ACCT_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "admin_hooks.h"

enum api_acct_state {
	API_ACCT_UNKNOWN = -1,   /* not known yet (Slurm has not answered): 503 */
	API_ACCT_OFF = 0,        /* no Slurm accounting (local executor, no slurmdbd): 409 */
	API_ACCT_ON = 1,
};

#define API_ACCT_NAME_MAX 64     /* account and user names: 1..64 bytes */
#define API_ACCT_UNSET (-2)      /* a limit left as it is */
#define API_ACCT_CLEAR (-1)      /* a limit removed (Slurm's -1) */

/* PATCH /v1/accounts/{name}[/users/{user}]: the limits to set, each
 * API_ACCT_UNSET, API_ACCT_CLEAR or a value >= 0 (validated by the
 * endpoint; names as admin_acct_name_ok says). */
struct api_acct_limits {
	const char *account;
	const char *user;            /* NULL: the account's own association */
	long long max_jobs;          /* MaxJobs */
	long long max_wall_s;        /* MaxWall, seconds (Slurm keeps minutes: a multiple of 60) */
	long long grp_cpu;           /* GrpTRES=cpu=N */
	long long grp_gpu;           /* GrpTRES=gres/gpu=N */
};

struct api_acct_hooks {
	/* Whether Slurm's accounting is on; why filled when it is not (lower
	 * case: "the local executor has no Slurm accounting"). Quick. */
	enum api_acct_state (*state)(void *arg, char *why, size_t len);
	/* GET /v1/accounts: the body, a JSON object text (malloc'd; the caller
	 * frees it) from the snapshot, or NULL with *status (409, 503, 500) and
	 * msg saying why. Quick: a snapshot older than a few seconds is
	 * refreshed in the background for the next reader. */
	char *(*accounts)(void *arg, unsigned *status, char *msg, size_t len);
	/* Sets limits with sacctmgr; call->status 200 with call->body the
	 * account's object as GET /v1/accounts shows it right after, and
	 * call->message the command run; else 400 (Slurm refused a value), 404
	 * (no such account, or user in it), 409 (accounting off), 503. in is
	 * borrowed until done runs. */
	void (*set_limits)(void *arg, const struct api_acct_limits *in,
	                   struct api_admin_call *call, api_admin_done_fn done, void *done_arg);
	/* Whether unix_user may charge account (NULL or "": their default
	 * account): 0 yes, or when it cannot be told now (accounting off or
	 * not read yet); -1 no, with err naming the accounts the user has
	 * ("user alice has no association with account physics; theirs: ml-team
	 * (default)"). Quick, from the snapshot; any thread. */
	int (*account_ok)(void *arg, const char *unix_user, const char *account, char *err,
	                  size_t errlen);
	/* The Unix user of a larch user, as accounting names them (sacct's
	 * User): 0, or -1 when there is none. */
	int (*unix_user)(void *arg, const char *larch_user, char *out, size_t len);
	/* The Unix user a job of larch_user runs as (whose associations Slurm
	 * checks): 0, or -1. */
	int (*job_user)(void *arg, const char *larch_user, char *out, size_t len);
	/* How fresh the Slurm usage in the database is: *read_to_ms, what has
	 * been read of sacct (0: nothing yet, or accounting off); error the
	 * last read's failure, "" when it worked. */
	void (*usage_status)(void *arg, int64_t *read_to_ms, char *error, size_t len);
	void *arg;
};

#endif
