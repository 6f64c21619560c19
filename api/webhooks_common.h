/* api/webhooks_common.h - what the webhook endpoints (api/webhooks_*.c) share:
 * the event types, the start of a /v1/webhooks/{id} handler, and the webhook object.
 */
#ifndef LARCH_API_WEBHOOKS_COMMON_H
#define LARCH_API_WEBHOOKS_COMMON_H

#include <stdint.h>

#include "buf.h"
#include "db/webhooks.h"
#include "request.h"

/* The event types a webhook may ask for, NULL-terminated (static). */
extern const char *const api_webhook_events[];

/* The start of every /v1/webhooks/{id}... handler: the database
 * (api_db_or_reply), the {id} of the path (404 for a malformed one) and no
 * query parameter outside allowed.
 * Which hooks the caller may see is the db calls' owner scope
 * (api_owner_scope): another user's is their 404. */
int api_webhook_request_or_reply(struct api_request *req, const char *const *allowed,
                                 struct db **db, int64_t *id, enum MHD_Result *ret);

/* Writes the webhook object (never its secret). */
void api_webhook_write(struct api_buf *b, const struct db_webhook *w);

#endif
