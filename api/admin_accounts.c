/* api/admin_accounts.c - GET /v1/accounts: Slurm's accounts, their users,
 * limits and fair share (admins).
 *
 * The service answers from a snapshot of sacctmgr and sshare at most
 * accounting_refresh_s old (refreshed in the background once a reader finds
 * it older than a few seconds; api/acct_hooks.h). The body is docs/api.md's
 * accounts object: {"cluster", "updated_at", "stale", ["error",]
 * "accounts": [...]}. Without Slurm's accounting (the local executor, or a
 * cluster without slurmdbd) 409; Slurm not read yet 503. Reading is not an
 * action: no audit entry.
 */
#include "acct_hooks.h"
#include "buf.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

#include <stdlib.h>
#include <string.h>

enum MHD_Result api_admin_accounts_get(struct api_request *req)
{
	static const char *const params[] = { NULL };
	enum MHD_Result ret;
	if (api_query_known_or_reply(req, params, &ret))
		return ret;
	const struct api_acct_hooks *acct = req->ctx ? req->ctx->acct : NULL;
	if (!acct || !acct->accounts)
		return api_reply_error(req, 409, API_ERR_CONFLICT,
		                       "accounting is not configured: larchd has no slurm accounting");
	unsigned status = 500;
	char msg[512] = "";
	char *body = acct->accounts(acct->arg, &status, msg, sizeof msg);
	if (!body) {
		if (status == 409)
			return api_reply_error(req, 409, API_ERR_CONFLICT, "%s", msg);
		if (status == 503) {
			api_reply_header(req, MHD_HTTP_HEADER_RETRY_AFTER, "5");
			return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "%s", msg);
		}
		return api_reply_error(req, 500, API_ERR_INTERNAL, "%s", msg[0] ? msg : "failed");
	}
	struct api_buf b;
	api_buf_init(&b, strlen(body) + 1);
	api_buf_adds(&b, body);
	free(body);
	return api_reply_buf(req, 200, NULL, &b);
}
