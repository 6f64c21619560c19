/* api/webhooks_post.c - POST /v1/webhooks: a user's new webhook.
 *
 * Body {"url": "http://...", "events": ["job.completed", ...], "secret":
 * "..."}: the URL must be http:// or https:// to an address webhook_allow
 * allows (checked after resolving its host, by the service's hook), every
 * event a known type (no duplicates), the secret 16 to 256 bytes. A user has at most
 * webhook_max_per_user hooks. 201 with the webhook; the secret is never
 * shown again.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"
#include "webhooks_common.h"
#include "webhooks_hooks.h"

#define SECRET_MIN 16
#define SECRET_MAX 256

static enum MHD_Result bad_field(struct api_request *req, const char *field, const char *msg)
{
	return api_reply_error_detail(req, 400, API_ERR_BAD_REQUEST,
	                              json_pack("{s:s}", "field", field), "%s", msg);
}

static int known_event(const char *s)
{
	for (const char *const *e = api_webhook_events; *e; e++)
		if (strcmp(*e, s) == 0)
			return 1;
	return 0;
}

/* The events as a JSON array text (a new string), or NULL with why set. */
static char *events_text(json_t *events, char *why, size_t len)
{
	if (!json_is_array(events) || json_array_size(events) == 0) {
		snprintf(why, len, "events: must be a non-empty array of event types");
		return NULL;
	}
	size_t i, j;
	json_t *v, *w;
	json_array_foreach(events, i, v) {
		if (!json_is_string(v) || !known_event(json_string_value(v))) {
			char *got = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
			size_t o = (size_t)snprintf(why, len, "events[%zu]: unknown event type %.64s "
			                            "(known:", i, got ? got : "?");
			free(got);
			for (const char *const *e = api_webhook_events; *e && o < len; e++)
				o += (size_t)snprintf(why + o, len - o, " %s", *e);
			if (o < len)
				snprintf(why + o, len - o, ")");
			return NULL;
		}
		json_array_foreach(events, j, w) {
			if (j < i && json_equal(v, w)) {
				snprintf(why, len, "events[%zu]: %s is listed twice", i, json_string_value(v));
				return NULL;
			}
		}
	}
	return json_dumps(events, JSON_COMPACT);
}

enum MHD_Result api_webhooks_post(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	if (api_post_request_or_reply(req, &db, &ret))
		return ret;
	const struct api_webhooks_hooks *hooks = req->ctx->webhooks;
	if (!hooks || !hooks->check_url)
		return api_reply_error(req, 503, API_ERR_UNAVAILABLE, "webhooks are not enabled");
	json_t *body = api_body_or_reply(req, &ret);
	if (!body)
		return ret;
	if (!json_is_object(body)) {
		json_decref(body);
		return bad_field(req, "", "body: must be an object with url, events and secret");
	}
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		if (strcmp(key, "url") && strcmp(key, "events") && strcmp(key, "secret")) {
			char msg[160];
			snprintf(msg, sizeof msg, "%.64s: unknown field (known: url, events, secret)", key);
			ret = bad_field(req, key, msg);
			json_decref(body);
			return ret;
		}
	}
	json_t *url = json_object_get(body, "url"), *secret = json_object_get(body, "secret");
	char why[1024];
	char *events = NULL;
	if (!json_is_string(url) || !*json_string_value(url)) {
		ret = bad_field(req, "url", "url: required, an http:// or https:// URL");
	} else if (json_string_length(url) > 2048) {
		ret = bad_field(req, "url", "url: longer than 2048 bytes");
	} else if (strlen(json_string_value(url)) != json_string_length(url)) {
		ret = bad_field(req, "url", "url: must not contain NUL");
	} else if (!(events = events_text(json_object_get(body, "events"), why, sizeof why))) {
		ret = bad_field(req, "events", why);
	} else if (!json_is_string(secret)) {
		ret = bad_field(req, "secret", "secret: required, a string of 16 to 256 bytes that "
		                "signs each delivery");
	} else if (json_string_length(secret) < SECRET_MIN || json_string_length(secret) > SECRET_MAX ||
	           strlen(json_string_value(secret)) != json_string_length(secret)) {
		ret = bad_field(req, "secret", "secret: must be 16 to 256 bytes (no NUL)");
	} else if (hooks->check_url(hooks->arg, json_string_value(url), why, sizeof why) != 0) {
		ret = bad_field(req, "url", why);
	} else {
		struct db_webhook_new in = { .owner = req->principal.user,
		                             .url = json_string_value(url), .events = events,
		                             .secret = json_string_value(secret) };
		int max = hooks->max_per_user ? (int)hooks->max_per_user : 10;
		int64_t id = 0;
		struct db_err err = { 0 };
		int rc = db_webhooks_create(db, &in, max, &id, &err);
		struct db_webhook w;
		if (rc == DB_CONFLICT) {
			snprintf(why, sizeof why, "webhooks: %s has %d already, the most a user may have "
			         "(webhook_max_per_user); delete one first", req->principal.user, max);
			ret = api_reply_error(req, 400, API_ERR_BAD_REQUEST, "%s", why);
		} else if (rc || (rc = db_webhooks_get(db, id, NULL, &w, &err)) != 0) {
			ret = api_reply_db_error(req, rc, &err);
		} else {
			struct api_buf b;
			api_buf_init(&b, 512);
			api_webhook_write(&b, &w);
			db_webhook_release(&w);
			char loc[64];
			char hid[DB_WEBHOOK_ID_MAX];
			db_webhook_id_format(id, hid);
			snprintf(loc, sizeof loc, "/v1/webhooks/%s", hid);
			api_reply_header(req, "Location", loc);
			ret = api_reply_buf(req, 201, NULL, &b);
		}
	}
	free(events);
	json_decref(body);
	return ret;
}
