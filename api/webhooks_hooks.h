/* api/webhooks_hooks.h - what the webhook endpoints ask of the service
 * (service/webhooks.c): its limits, and whether a URL may be a target.
 */
#ifndef LARCH_API_WEBHOOKS_HOOKS_H
#define LARCH_API_WEBHOOKS_HOOKS_H

#include <stddef.h>

struct api_webhooks_hooks {
	unsigned max_per_user;         /* webhooks a user may have (0: 10) */
	/* 0 if url may be a webhook's target now (an http:// URL whose host
	 * resolves only to allowed addresses), else -1 with err saying why
	 * ("url: ..."). Blocks on DNS for a host name. NULL: every URL is
	 * refused (no sender). */
	int (*check_url)(void *arg, const char *url, char *err, size_t errlen);
	void *arg;
};

#endif
