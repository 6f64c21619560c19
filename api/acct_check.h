/* api/acct_check.h - the submit-time check of a job's Slurm account.
 *
 * Under Slurm's accounting (api/acct_hooks.h) a job may charge only an
 * account its user has an association with; with none named, the user's
 * default account (Slurm's choice) must exist. Refused here with 400 and
 * the accounts the user has, rather than later by sbatch. The user is the
 * Unix user the job runs as (acct_hooks.h job_user).
 */
#ifndef LARCH_API_ACCT_CHECK_H
#define LARCH_API_ACCT_CHECK_H

#include "request.h"

/* account: the spec's resources.account ("" or NULL: none); unix_user: the
 * Unix user the job runs as, the owner's (run_as owner; the submit's
 * preflight found it), or NULL for larchd's own (acct_hooks.h job_user).
 * 0 to go on (also when accounting is off or not read yet), or -1 with the
 * 400 invalid_spec (detail.field "resources.account") replied and its
 * result in *ret. */
int api_account_or_reply(struct api_request *req, const char *unix_user, const char *account,
                         enum MHD_Result *ret);

#endif
