/* service/webhooks.h - the webhook sender: a few threads of larchd that
 * send the outbox's due deliveries (db/webhooks.h), never an HTTP thread.
 * One attempt per user is in flight at a time, the earliest due first, and
 * the threads serve several users at once: a user's slow or silent target
 * (up to the timeout per attempt) delays that user's deliveries only.
 *
 * Each attempt: the event's body (fixed at its first attempt: an event id,
 * type, time and the job or sweep object) POSTed to the hook's URL with
 * X-Larch-Event, X-Larch-Delivery and X-Larch-Signature-256 (sha256=, the
 * hex HMAC-SHA256 of the body with the hook's secret), over a socket of
 * its own to the address resolved and checked against webhook_allow
 * (service/webhook_target.h), for https:// through TLS whose certificate
 * must chain to the system's trusted certificates or webhook_ca and name
 * the URL's host (service/webhook_tls.h), within the connect timeout (the
 * TCP connect) and the total one (everything up to the answer's status
 * line, the handshake included). A 2xx
 * delivers; anything else (no answer, a timeout, a 3xx: redirects are not
 * followed, a 4xx or 5xx) is tried again after a backoff that doubles, until
 * retry_for after the event, then recorded as failed. The outbox is the
 * state: a larchd killed mid-delivery sends it again after its restart
 * (at least once; receivers dedup by the event id).
 */
#ifndef LARCH_SVC_WEBHOOKS_H
#define LARCH_SVC_WEBHOOKS_H

#include <stddef.h>

#include "api/webhooks_hooks.h"
#include "db/db.h"
#include "webhook_target.h"

struct svc_webhooks_config {
	struct db *db;                   /* borrowed; outlives the sender */
	struct svc_allow_list allow;     /* copied */
	unsigned max_per_user;
	unsigned connect_timeout_ms, timeout_ms;
	unsigned backoff_ms, backoff_max_ms;
	unsigned retry_for_s;
	const char *user_agent;          /* copied; "larchd/1.2.3" */
	const char *ca_file;             /* webhook_ca: PEM certificates trusted besides the
	                                    system's, read at start; NULL or "" = none */
};

struct svc_webhooks;

/* Starts the sender's thread. NULL with err filled. */
struct svc_webhooks *svc_webhooks_new(const struct svc_webhooks_config *cfg, char *err,
                                      size_t errlen);
/* Tells the sender the outbox may have new rows (a db change hook: cheap,
 * never blocks, never calls the db). Accepts NULL. */
void svc_webhooks_wake(struct svc_webhooks *w);
/* The endpoints' side (api/webhooks_hooks.h); valid while w lives. */
const struct api_webhooks_hooks *svc_webhooks_hooks(struct svc_webhooks *w);
/* Stops the thread (an attempt in flight is cut off and stays pending, so it
 * is sent again after the next start) and frees w. Accepts NULL. */
void svc_webhooks_free(struct svc_webhooks *w);

#endif
