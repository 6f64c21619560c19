/* api/sweeps_common.c - the sweep object, its state and ids; see
 * sweeps_common.h. */
#include "sweeps_common.h"

#include <string.h>

#include "jobs_common.h"
#include "reply.h"

int api_sweep_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret)
{
	return api_id_or_reply(req, 's', "sweep", id, ret);
}

int api_sweep_request_or_reply(struct api_request *req, struct db **db, int64_t *id,
                               enum MHD_Result *ret)
{
	static const char *const none[] = { NULL };
	return api_id_request_or_reply(req, 's', "sweep", none, db, id, ret);
}

const char *api_sweep_state(const struct db_sweep *s)
{
	const int64_t *c = s->counts;
	int64_t final = c[DB_STATE_COMPLETED] + c[DB_STATE_FAILED] + c[DB_STATE_CANCELLED] +
	                c[DB_STATE_TIMEOUT];
	if (final < s->n_children)
		return c[DB_STATE_RUNNING] || final ? "RUNNING" : "QUEUED";
	/* every child has ended: early-stopped children count as done */
	if (c[DB_STATE_COMPLETED] + s->early_stopped > 0)
		return "COMPLETED";
	if (c[DB_STATE_CANCELLED] > 0)
		return "CANCELLED";
	return "FAILED";
}

static void write_target_figures(struct api_buf *b, const struct db_sweep *s,
                                 const struct db_sweep_child *x)
{
	api_buf_adds(b, ",\"best\":");
	if (x->has_best)
		api_buf_json_num(b, x->best);
	else
		api_buf_adds(b, "null");
	if (!x->has_target) {
		api_buf_adds(b, ",\"steps_to_target\":null,\"examples_to_target\":null,"
		             "\"seconds_to_target\":null");
		return;
	}
	api_buf_adds(b, ",\"steps_to_target\":");
	api_buf_json_int(b, x->target_step);
	api_buf_adds(b, ",\"examples_to_target\":");
	if (x->has_batch)
		api_buf_json_int(b, x->target_step * x->batch_global);
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"seconds_to_target\":");
	if (x->start_ms > 0 && x->target_time_ms >= x->start_ms)
		api_buf_json_num(b, (double)(x->target_time_ms - x->start_ms) / 1000.0);
	else
		api_buf_adds(b, "null");
	(void)s;
}

void api_sweep_write(struct api_buf *b, const struct db_sweep *s,
                     const struct db_sweep_child *children, size_t n)
{
	api_buf_object_head(b, 's', s->id, s->name, s->owner);
	api_buf_adds(b, ",\"state\":\"");
	api_buf_adds(b, api_sweep_state(s));
	api_buf_adds(b, "\",\"method\":");
	api_buf_json_str(b, s->method);
	api_buf_adds(b, ",\"max_parallel\":");
	api_buf_json_int(b, s->max_parallel);
	api_buf_adds(b, ",\"target\":");
	if (s->target_metric) {
		api_buf_adds(b, "{\"metric\":");
		api_buf_json_str(b, s->target_metric);
		api_buf_adds(b, ",\"value\":");
		api_buf_json_num(b, s->target_value);
		api_buf_adds(b, ",\"mode\":");
		api_buf_json_str(b, s->target_mode);
		api_buf_addc(b, '}');
	} else {
		api_buf_adds(b, "null");
	}
	api_buf_adds(b, ",\"labels\":");
	api_buf_adds(b, s->labels && *s->labels ? s->labels : "{}");
	api_buf_adds(b, ",\"created_at\":");
	api_buf_json_time(b, s->submit_ms);
	api_buf_adds(b, ",\"children_count\":");
	api_buf_json_int(b, s->n_children);
	api_buf_adds(b, ",\"counts\":{");
	for (int st = 0; st < DB_STATE_COUNT; st++) {
		if (st)
			api_buf_addc(b, ',');
		api_buf_json_key(b, db_state_name(st));
		api_buf_json_int(b, s->counts[st]);
	}
	api_buf_adds(b, "},\"early_stopped\":");
	api_buf_json_int(b, s->early_stopped);
	/* the definition was stored as the JSON it was checked as */
	api_buf_adds(b, ",\"definition\":");
	api_buf_adds(b, s->definition && *s->definition ? s->definition : "null");
	if (children) {
		api_buf_adds(b, ",\"children\":[");
		for (size_t i = 0; i < n; i++) {
			const struct db_sweep_child *x = &children[i];
			if (i)
				api_buf_addc(b, ',');
			api_buf_adds(b, "{\"index\":");
			api_buf_json_int(b, x->index);
			api_buf_adds(b, ",\"job\":");
			api_buf_json_id(b, 'j', x->job);
			api_buf_adds(b, ",\"params\":");
			api_buf_adds(b, x->params && *x->params ? x->params : "{}");
			api_buf_adds(b, ",\"state\":\"");
			api_buf_adds(b, db_state_name(x->state));
			api_buf_adds(b, "\",\"reason\":");
			api_buf_json_str(b, x->reason);
			api_buf_adds(b, ",\"step\":");
			api_buf_json_int(b, x->progress_step);
			api_buf_adds(b, ",\"attempt\":");
			api_buf_json_int(b, x->attempt);
			api_buf_adds(b, ",\"slurm_job_id\":");
			api_buf_json_str(b, x->slurm_job_id);
			write_target_figures(b, s, x);
			api_buf_addc(b, '}');
		}
		api_buf_addc(b, ']');
		api_sweep_study_write(b, s, children, n);
	}
	api_buf_addc(b, '}');
}

enum MHD_Result api_reply_sweep(struct api_request *req, unsigned status, int64_t id)
{
	struct db_sweep s;
	struct db_sweep_child *children;
	size_t n;
	struct db_err err = { 0 };
	int rc = db_sweeps_get(req->ctx->db, id, api_owner_scope(req), &s, &children, &n, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	struct api_buf b;
	api_buf_init(&b, 1024 + n * 256 + (s.definition ? strlen(s.definition) : 0));
	api_sweep_write(&b, &s, children, n);
	db_sweep_children_free(children, n);
	db_sweep_release(&s);
	return api_reply_buf(req, status, NULL, &b);
}
