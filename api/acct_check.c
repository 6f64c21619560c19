/* api/acct_check.c - the submit-time account check; see acct_check.h. */
#include "acct_check.h"

#include "acct_hooks.h"
#include "reply.h"

int api_account_or_reply(struct api_request *req, const char *unix_user, const char *account,
                         enum MHD_Result *ret)
{
	const struct api_acct_hooks *acct = req->ctx ? req->ctx->acct : NULL;
	char self[API_USER_MAX], why[512];
	if (!acct || !acct->account_ok)
		return 0;
	if (!unix_user) {
		if (!acct->job_user ||
		    acct->job_user(acct->arg, req->principal.user, self, sizeof self) != 0)
			return 0;
		unix_user = self;
	}
	if (acct->account_ok(acct->arg, unix_user, account, why, sizeof why) == 0)
		return 0;
	*ret = api_reply_error_detail(req, 400, API_ERR_INVALID_SPEC,
	                              json_pack("{s:s}", "field", "resources.account"),
	                              "resources.account: %s", why);
	return -1;
}
