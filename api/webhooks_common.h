/* api/webhooks_common.h - what the webhook endpoints (api/webhooks_*.c) share:
 * the event types, the id of the path, and the webhook object.
 */
#ifndef LARCH_API_WEBHOOKS_COMMON_H
#define LARCH_API_WEBHOOKS_COMMON_H

#include <stdint.h>

#include "buf.h"
#include "db/webhooks.h"
#include "request.h"

/* The event types a webhook may ask for, NULL-terminated (static). */
extern const char *const api_webhook_events[];

/* The {id} of a /v1/webhooks/{id} path; 404 for a malformed one. */
int api_webhook_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret);

/* Writes the webhook object (never its secret). */
void api_webhook_write(struct api_buf *b, const struct db_webhook *w);

#endif
