/* api/admin_nodes.c - POST /v1/nodes/{name}/drain and .../resume (admins).
 *
 * drain takes {"reason": "..."} (required: 1 to 256 characters, no control
 * characters, not only spaces); resume takes no body (or {}). The name is a
 * node or a Slurm hostlist of A-Z a-z 0-9 _ . - [ ] , (else 400), handed to
 * scontrol as one argument (NodeName=...), never to a shell. Slurm's
 * answer: no such node 404, resume of a node that is not drained or down
 * 409, Slurm unreachable 503. With the local executor there are no Slurm
 * nodes: 409. The answer is the nodes object of the node(s) right after
 * the change. Every call, refused ones too, leaves an audit entry.
 */
#include <string.h>

#include "admin_common.h"
#include "handlers.h"
#include "jobs_common.h"

/* A drain reason: 1..ADMIN_REASON_MAX characters of UTF-8 (jansson has
 * checked the encoding), no control characters, not only spaces. NULL when
 * fine, else why not. */
static const char *bad_reason(const char *s)
{
	size_t chars = 0;
	int visible = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			return "must not contain control characters";
		if (*p == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0)
			return "must not contain control characters";    /* C1 */
		if ((*p & 0xc0) != 0x80)
			chars++;
		if (*p != ' ')
			visible = 1;
	}
	if (chars == 0 || chars > ADMIN_REASON_MAX)
		return "must be 1 to 256 characters";
	if (!visible)
		return "must not be only spaces";
	return NULL;
}

static enum MHD_Result changed(struct api_request *req)
{
	struct admin_req *s = req->state;
	return s->call.status == 200 ? admin_ok_body(req) : admin_fail_call(req);
}

static enum MHD_Result node_change(struct api_request *req, enum api_admin_op op)
{
	static const char *const params[] = { NULL };
	static const char *const drain_fields[] = { "reason", NULL };
	enum MHD_Result ret;
	const char *name = api_param(req, "name");
	struct admin_req *s = admin_begin(req, op == API_ADMIN_DRAIN ? "node.drain" : "node.resume",
	                                  "nodes", name);
	if (!s)
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	if (api_query_known_or_reply(req, params, &ret))
		return ret;
	json_t *body = NULL;
	if (op == API_ADMIN_RESUME ? admin_no_body_or_reply(req, &ret)
	                           : admin_body_or_reply(req, &body, &ret))
		return ret;
	if (op == API_ADMIN_DRAIN) {
		if (admin_known_fields_or_reply(req, body, drain_fields, &ret)) {
			json_decref(body);
			return ret;
		}
		json_t *reason = json_object_get(body, "reason");
		const char *why = !reason ? "is required"
		                  : !json_is_string(reason) ? "must be a string"
		                  : bad_reason(json_string_value(reason));
		if (why) {
			json_decref(body);
			return admin_fail(req, 400, API_ERR_BAD_REQUEST,
			                  json_pack("{s:s}", "field", "reason"), "reason: %s", why);
		}
		strcpy(s->reason, json_string_value(reason));   /* fits: checked above */
		json_decref(body);
	}
	if (!name || !admin_node_name_ok(name))
		return admin_fail(req, 400, API_ERR_BAD_REQUEST, json_pack("{s:s}", "parameter", "name"),
		                  "name: a node name is 1 to %d characters of A-Z a-z 0-9 _ . - [ ] , "
		                  "not starting with -", ADMIN_NODE_MAX);
	const struct api_admin_hooks *hooks;
	if (admin_hooks_or_reply(req, &hooks, &ret))
		return ret;
	if (strcmp(hooks->executor, "slurm") != 0 || !hooks->node)
		return admin_fail(req, 409, API_ERR_CONFLICT, NULL,
		                  "the %s executor has no Slurm nodes to drain or resume",
		                  hooks->executor);
	strcpy(s->node, name);
	s->call.op = op;
	s->call.node = s->node;
	s->call.reason = op == API_ADMIN_DRAIN ? s->reason : NULL;
	return admin_call(req, hooks->node, changed);
}

enum MHD_Result api_admin_nodes_drain(struct api_request *req)
{
	return node_change(req, API_ADMIN_DRAIN);
}

enum MHD_Result api_admin_nodes_resume(struct api_request *req)
{
	return node_change(req, API_ADMIN_RESUME);
}
