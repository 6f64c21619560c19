/* api/sweeps_study.c - the "study" of a batch_scaling sweep in GET
 * /v1/sweeps/{id} (docs/api.md, "Batch-scaling studies"): per batch size
 * its child's steps, examples and seconds to the target and the speed-up
 * in time-to-target against the reference batch's child (or the smallest
 * batch's when none has the reference size), and the McCandlish et al.
 * fit of the children that reached the target (api/study_fit.h), or a
 * note saying why there is none. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "study_fit.h"
#include "sweeps_common.h"

#define MIN_POINTS 3

/* The definition's base batch.reference (else batch.global) for a
 * batch_scaling sweep; 0 for any other sweep. */
static long study_reference(const struct db_sweep *s)
{
	json_t *def = s->definition ? json_loads(s->definition, 0, NULL) : NULL;
	json_t *kind = json_object_get(def, "kind");
	long ref = 0;
	if (json_is_string(kind) && strcmp(json_string_value(kind), "batch_scaling") == 0) {
		json_t *batch = json_object_get(json_object_get(def, "base"), "batch");
		json_t *r = json_object_get(batch, "reference");
		if (!json_is_integer(r))
			r = json_object_get(batch, "global");
		ref = json_is_integer(r) && json_integer_value(r) > 0 ? (long)json_integer_value(r) : 0;
	}
	json_decref(def);
	return ref;
}

static double seconds_of(const struct db_sweep_child *x)
{
	return x->has_target && x->start_ms > 0 && x->target_time_ms >= x->start_ms
	       ? (double)(x->target_time_ms - x->start_ms) / 1000.0 : -1;
}

static void write_fit(struct api_buf *b, const struct db_sweep_child *ch, size_t n,
                      size_t reached)
{
	double batch[API_STUDY_FIT_MAX], steps[API_STUDY_FIT_MAX];
	size_t k = 0;
	for (size_t i = 0; i < n && k < API_STUDY_FIT_MAX; i++)
		if (ch[i].has_target && ch[i].has_batch && ch[i].target_step > 0) {
			batch[k] = (double)ch[i].batch_global;
			steps[k++] = (double)ch[i].target_step;
		}
	struct api_study_fit f;
	if (k < MIN_POINTS || api_study_fit(batch, steps, k, &f) != 0) {
		api_buf_printf(b, ",\"fit\":null,\"note\":\"%zu of %zu children reached the target: "
		               "the fit needs at least %d\"", reached, n, MIN_POINTS);
		return;
	}
	api_buf_adds(b, ",\"fit\":{\"s_min\":");
	api_buf_json_num(b, f.s_min);
	api_buf_adds(b, ",\"e_min\":");
	api_buf_json_num(b, f.e_min);
	api_buf_adds(b, ",\"b_crit\":");
	api_buf_json_num(b, f.b_crit);
	api_buf_adds(b, ",\"rms\":");
	api_buf_json_num(b, f.rms);
	api_buf_adds(b, ",\"points\":");
	api_buf_json_int(b, (int64_t)k);
	api_buf_adds(b, ",\"residuals\":[");
	for (size_t i = 0; i < k; i++) {
		if (i)
			api_buf_addc(b, ',');
		api_buf_json_num(b, f.residuals[i]);
	}
	api_buf_adds(b, "]},\"note\":");
	if (f.at_edge)
		api_buf_json_str(b, "b_crit is at the edge of the search range: the steps to the "
		                 "target hardly change with the batch size, or fall as 1/B throughout");
	else if (reached < n)
		api_buf_printf(b, "\"%zu of %zu children reached the target; the fit uses those\"",
		               reached, n);
	else
		api_buf_adds(b, "null");
}

void api_sweep_study_write(struct api_buf *b, const struct db_sweep *s,
                           const struct db_sweep_child *ch, size_t n)
{
	long ref = study_reference(s);
	if (!ref)
		return;
	/* the reference child: batch == reference, else the smallest batch */
	const struct db_sweep_child *base = NULL;
	size_t reached = 0;
	for (size_t i = 0; i < n; i++) {
		if (!ch[i].has_batch)
			continue;
		if (ch[i].batch_global == ref)
			base = &ch[i];
		reached += ch[i].has_target;
	}
	for (size_t i = 0; i < n && !(base && base->batch_global == ref); i++)
		if (ch[i].has_batch && (!base || ch[i].batch_global < base->batch_global))
			base = &ch[i];
	double t_ref = base ? seconds_of(base) : -1;
	api_buf_adds(b, ",\"study\":{\"reference\":");
	api_buf_json_int(b, ref);
	api_buf_adds(b, ",\"speedup_against\":");
	if (base)
		api_buf_json_int(b, base->batch_global);
	else
		api_buf_adds(b, "null");
	api_buf_adds(b, ",\"points\":[");
	for (size_t i = 0; i < n; i++) {
		const struct db_sweep_child *x = &ch[i];
		char jid[DB_JOB_ID_MAX];
		db_job_id_format(x->job, jid);
		double t = seconds_of(x);
		api_buf_adds(b, i ? ",{\"batch\":" : "{\"batch\":");
		if (x->has_batch)
			api_buf_json_int(b, x->batch_global);
		else
			api_buf_adds(b, "null");
		api_buf_printf(b, ",\"job\":\"%s\",\"state\":\"%s\",\"steps\":", jid,
		               db_state_name(x->state));
		if (x->has_target)
			api_buf_json_int(b, x->target_step);
		else
			api_buf_adds(b, "null");
		api_buf_adds(b, ",\"examples\":");
		if (x->has_target && x->has_batch)
			api_buf_json_int(b, x->target_step * x->batch_global);
		else
			api_buf_adds(b, "null");
		api_buf_adds(b, ",\"seconds\":");
		if (t >= 0)
			api_buf_json_num(b, t);
		else
			api_buf_adds(b, "null");
		api_buf_adds(b, ",\"speedup\":");
		if (t > 0 && t_ref >= 0)
			api_buf_json_num(b, t_ref / t);
		else
			api_buf_adds(b, "null");
		api_buf_addc(b, '}');
	}
	api_buf_addc(b, ']');
	write_fit(b, ch, n, reached);
	api_buf_addc(b, '}');
}
