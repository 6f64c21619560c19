/* trainer/spec/plan_print.c - the memory plan's outputs (plan.h): the table
 * that larch plan and larch-train's header print, its JSON. Only what the
 * plan holds is printed, so the two cannot disagree; the notes say what
 * each item is made of and why it lives where it does. */
#include "plan.h"

#include <string.h>

#include "kernels/quant8.h"

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

static const char *offload_name(enum trn_offload mode)
{
	return mode == TRN_OFFLOAD_CPU ? "cpu" : mode == TRN_OFFLOAD_RECOMPUTE ? "recompute" : "none";
}

/* The dtype of item's values, "-" for a mix of them (or of bytes). */
static const char *item_dtype(const struct trn_plan *p, int item)
{
	switch (item) {
	case TRN_PLAN_PARAMS: case TRN_PLAN_GRADS: case TRN_PLAN_PARAMS16:
	case TRN_PLAN_PARAM_STAGING: case TRN_PLAN_ACTIVATIONS: case TRN_PLAN_ACT_OFFLOAD:
	case TRN_PLAN_PARAM_OFFLOAD: case TRN_PLAN_HOST_COPY:
		return trn_dtype_name(p->compute);
	case TRN_PLAN_GRAD_SHARD: case TRN_PLAN_MASTER: case TRN_PLAN_GRAD_HOST:
		return "fp32";
	case TRN_PLAN_OPTIMIZER:
		return p->state_int8 ? "int8" : "fp32";
	default:
		return "-";
	}
}

/* Whether item holds 16-bit values in floats (plan.h). */
static int held_in_floats(const struct trn_plan *p, int item)
{
	if (p->compute == TRN_DTYPE_FP32)
		return 0;
	switch (item) {
	case TRN_PLAN_PARAMS: case TRN_PLAN_GRADS: case TRN_PLAN_PARAM_STAGING:
	case TRN_PLAN_PARAM_OFFLOAD: case TRN_PLAN_HOST_COPY:
		return 1;
	case TRN_PLAN_ACTIVATIONS: case TRN_PLAN_ACT_OFFLOAD:
		return !p->act16;
	default:
		return 0;
	}
}

/* What a nonzero item is made of, into note (size len). */
static void item_note(const struct trn_plan *p, int item, char *note, size_t len)
{
	double all = 4.0 * (double)p->n_params;          /* fp32, or 16 bits in floats */
	const char *opt = p->opt_offload == TRN_OFFLOAD_CPU ? ", offload.optimizer cpu" : "";
	size_t at;
	note[0] = '\0';
	switch (item) {
	case TRN_PLAN_PARAMS: case TRN_PLAN_GRADS:
		if (p->param_offload == TRN_OFFLOAD_CPU)
			snprintf(note, len, "offload.params cpu: two blocks' staging%s of %.2f MiB",
			         p->gpus ? " and the resident tensors" : "", mib(all));
		break;
	case TRN_PLAN_PARAMS16:
		snprintf(note, len, "the 16-bit copy the GEMMs read");
		break;
	case TRN_PLAN_GRAD_SHARD:
		snprintf(note, len, "averaged, 1/%d of %.2f MiB (ZeRO-1)", p->ranks, mib(all));
		break;
	case TRN_PLAN_MASTER:
		if (p->zero)
			snprintf(note, len, "1/%d of %.2f MiB (ZeRO-1)%s", p->ranks, mib(all), opt);
		else
			snprintf(note, len, "%s", opt[0] ? opt + 2 : "");
		break;
	case TRN_PLAN_OPTIMIZER:
		snprintf(note, len, "%s", p->n_state == 2 ? "m and v" : "m");
		at = strlen(note);
		if (p->zero)
			at += (size_t)snprintf(note + at, len - at, ", sharded: 1/%d (ZeRO-1)", p->ranks);
		if (p->state_int8 && at < len)
			at += (size_t)snprintf(note + at, len - at, ", a scale per %ld: 1/%.2f of fp32",
			                       (long)KERN_Q8_BLOCK,
			                       4.0 * p->n_state * (double)p->shard / p->bytes[item]);
		if (at < len)
			snprintf(note + at, len - at, "%s", opt);
		break;
	case TRN_PLAN_GRAD_HOST:
		snprintf(note, len, "offload.optimizer cpu: the range's, copied bucket by bucket");
		break;
	case TRN_PLAN_PARAM_STAGING:
		snprintf(note, len, "offload.optimizer cpu: two buffers for the params' way back");
		break;
	case TRN_PLAN_ACTIVATIONS:
		at = (size_t)snprintf(note, len, "at micro-batch %ld", p->micro);
		if (p->act_offload != TRN_OFFLOAD_NONE && at < len)
			snprintf(note + at, len - at, ", offload.activations %s (none: %.2f MiB)",
			         offload_name(p->act_offload), mib(p->act_none_bytes));
		break;
	case TRN_PLAN_ACT_OFFLOAD:
		snprintf(note, len, "offload.activations cpu: the host store");
		break;
	case TRN_PLAN_PARAM_OFFLOAD:
		snprintf(note, len, "offload.params cpu: params %.2f MiB, grads %.2f MiB%s", mib(all),
		         mib(p->bytes[item] - all),
		         p->streamed ? " (the resident tensors' and two windows)" : "");
		break;
	case TRN_PLAN_HOST_COPY:
		snprintf(note, len, "%s", p->param_offload == TRN_OFFLOAD_CPU
		                          ? "a stage for backward's gradients"
		                          : "the GPU model's params and grads, a gradient stage");
		break;
	case TRN_PLAN_CHECKPOINT:
		snprintf(note, len, "rank 0, while writing");
		break;
	case TRN_PLAN_DATA:
		snprintf(note, len, "the data set and a micro-batch");
		break;
	case TRN_PLAN_WORKSPACE:
		snprintf(note, len, "the GEMM libraries' workspaces, the batch's rows");
		break;
	case TRN_PLAN_RUNTIME:
		snprintf(note, len, "code, libraries, threads, the BLAS's buffers");
		break;
	case TRN_PLAN_LOADER:
		snprintf(note, len, "the idx files' bytes while they load");
		break;
	}
	if (held_in_floats(p, item)) {
		at = strlen(note);
		snprintf(note + at, len - at, "%sheld in floats", at ? ", " : "");
	}
}

/* Why an item that ZeRO or the offloads would make someone look for is
 * not there, or NULL. */
static const char *item_absent(const struct trn_plan *p, int item)
{
	int opt_off = p->opt_offload == TRN_OFFLOAD_CPU, poff = p->param_offload == TRN_OFFLOAD_CPU;
	if (item == TRN_PLAN_MASTER && (p->zero || opt_off || poff))
		return p->compute == TRN_DTYPE_FP32 ? "none: the fp32 params are the master weights"
		                                    : "none: the params' fp32 host copies are the "
		                                      "master weights";
	if (item == TRN_PLAN_GRAD_HOST && opt_off)
		return p->streamed && poff ? "none: the update follows backward, tensor by tensor, "
		                             "in the params' host copies"
		       : p->streamed ? "none: the update follows backward, tensor by tensor"
		                     : "none: the update reads and writes the params' host copies "
		                       "in place";
	return NULL;
}

void trn_plan_print(FILE *f, const struct trn_plan *p)
{
	fprintf(f, "memory plan per rank: %ld parameters, micro-batch %ld, %d rank%s%s, %s",
	        p->n_params, p->micro, p->ranks, p->ranks > 1 ? "s" : "",
	        p->zero ? " (ZeRO-1)" : "", p->gpus ? "GPU" : "CPU");
	if (p->gpus)
		fprintf(f, ", the optimizer on the %s", p->resident ? "device" : "host");
	fprintf(f, "\n  %-13s %10s      %-6s  %-5s  %s\n", "item", "MiB", "where", "dtype",
	        "notes");
	for (int i = 0; i < TRN_PLAN_N; i++) {
		char note[160];
		const char *absent = p->bytes[i] > 0 ? NULL : item_absent(p, i);
		if (absent) {
			fprintf(f, "  %-13s %10s      %s\n", trn_plan_item_name(i), "-", absent);
			continue;
		}
		if (p->bytes[i] <= 0)
			continue;
		item_note(p, i, note, sizeof note);
		fprintf(f, "  %-13s %10.2f MiB  %-6s  %-*s%s%s\n", trn_plan_item_name(i),
		        mib(p->bytes[i]), p->on_host[i] ? "host" : "device", note[0] ? 5 : 0,
		        item_dtype(p, i), note[0] ? "  " : "", note);
	}
	fprintf(f, "  %-13s %10.2f MiB  total\n", "host", mib(p->host_bytes));
	if (p->gpus)
		fprintf(f, "  %-13s %10.2f MiB  total, per GPU\n", "device", mib(p->device_bytes));
	if (p->ranks_per_node > 1)
		fprintf(f, "  %-13s %10.2f MiB  host total, %d ranks per node\n", "node",
		        mib(p->host_bytes * p->ranks_per_node), p->ranks_per_node);
}

json_t *trn_plan_json(const struct trn_plan *p)
{
	json_t *items = json_object();
	if (!items)
		return NULL;
	for (int i = 0; i < TRN_PLAN_N; i++)
		if (p->bytes[i] > 0)
			json_object_set_new(items, trn_plan_item_name(i),
			                    json_integer((json_int_t)p->bytes[i]));
	return json_pack("{s:i, s:i, s:I, s:I, s:b, s:o, s:I, s:I, s:I}",
	                 "ranks", p->ranks, "ranks_per_node", p->ranks_per_node,
	                 "micro", (json_int_t)p->micro, "params", (json_int_t)p->n_params,
	                 "zero", p->zero, "items", items,
	                 "host_bytes_per_rank", (json_int_t)p->host_bytes,
	                 "host_bytes_per_node", (json_int_t)(p->host_bytes * p->ranks_per_node),
	                 "device_bytes_per_gpu", (json_int_t)p->device_bytes);
}

json_t *trn_plan_json_within(const struct trn_plan *p, const struct trn_spec *spec,
                             double host_limit, double device_limit, int *fits,
                             struct trn_err *err)
{
	*fits = trn_plan_fits(p, host_limit, device_limit);
	json_t *j = trn_plan_json(p);
	if (!j) {
		trn_err_set(err, "out of memory");
		return NULL;
	}
	if (host_limit <= 0 && device_limit <= 0)
		return j;
	long best = *fits ? p->micro : trn_plan_max_micro(spec, host_limit, device_limit, err);
	if (best < 0) {
		json_decref(j);
		return NULL;
	}
	json_object_set_new(j, "fits", json_boolean(*fits));
	json_object_set_new(j, "largest_micro", json_integer(best));
	return j;
}
