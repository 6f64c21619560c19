/* trainer/opt_offload.c - see opt_offload.h. Its sizes, which the memory
 * plan counts too, are trainer/spec/opt_offload_sizes.c's. */
#include "opt_offload.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/precision.h"

int trn_opt_offload_init(struct trn_opt_offload *o, long n, int n_buckets, long chunk,
                         enum trn_dtype dtype, float *master, const float *dev_grads,
                         float *dev_params, int in_place)
{
	memset(o, 0, sizeof *o);
	o->n = n;
	o->dtype = dtype;
	o->master = master;
	o->dev_grads = dev_grads;
	o->dev_params = dev_params;
	o->chunk = trn_opt_offload_stage_floats(n, chunk);
	o->n_down = n_buckets;
	if (in_place) {
		o->in_place = 1;
		o->grads = (float *)dev_grads;
		return 0;
	}
	/* + 1: a rank's range may be empty, and malloc(0) may give NULL */
	o->grads = malloc(sizeof(float) * (size_t)(n + 1));
	o->down = calloc((size_t)n_buckets + 1, sizeof *o->down);
	o->stage[0] = malloc(sizeof(float) * (size_t)(o->chunk + 1));
	o->stage[1] = malloc(sizeof(float) * (size_t)(o->chunk + 1));
	if (!o->grads || !o->down || !o->stage[0] || !o->stage[1])
		return -1;
	return 0;
}

void trn_opt_offload_release(struct trn_opt_offload *o)
{
	if (!o->in_place)
		free(o->grads);
	free(o->down);
	free(o->stage[0]);
	free(o->stage[1]);
	memset(o, 0, sizeof *o);
}

/* ---- the copy engine: issue a copy, wait for it ------------------------------------ */

/* Waits for the copy c, if any: here it is done now. */
static long wait_copy(struct trn_opt_copy *c)
{
	long n = c->n;
	if (n)
		memcpy(c->dst, c->src, sizeof(float) * (size_t)n);
	c->n = 0;
	return n;
}

/* Starts copy c (none must be in flight through it): neither its source
 * may be written nor its destination read until wait_copy. */
static void start_copy(struct trn_opt_copy *c, float *dst, const float *src, long n)
{
	*c = (struct trn_opt_copy){ .dst = dst, .src = src, .n = n };
}

/* ---- device -> host: the gradients ---------------------------------------------- */

void trn_opt_offload_grads_out(struct trn_opt_offload *o, int i, long a, long n)
{
	if (o->in_place)
		return;                /* read where they are */
	struct trn_opt_copy *c = &o->down[i];
	o->floats_down += wait_copy(c);
	start_copy(c, o->grads + a, o->dev_grads + a, n);
}

void trn_opt_offload_grads_wait(struct trn_opt_offload *o)
{
	for (int i = 0; i < o->n_down && !o->in_place; i++)
		o->floats_down += wait_copy(&o->down[i]);
}

/* ---- host -> device: the parameters ---------------------------------------------- */

/* dst[0, n) = src's rounding to dtype, in one pass (dst may be src) */
static void round_to(enum trn_dtype dtype, float *dst, const float *src, long n)
{
	if (dtype == TRN_DTYPE_FP16)
		kern_round_fp16_to_cpu(dst, src, n);
	else if (dtype == TRN_DTYPE_BF16)
		kern_round_bf16_to_cpu(dst, src, n);
	else if (dst != src)
		memcpy(dst, src, sizeof(float) * (size_t)n);
}

/* Waits for the parameter copy c, and says so when asked. */
static long wait_up(struct trn_opt_offload *o, struct trn_opt_copy *c)
{
	long a = c->n ? c->dst - o->dev_params : 0, n = wait_copy(c);
	if (n && o->landed)
		o->landed(o->landed_ctx, a, n);
	return n;
}

void trn_opt_offload_params_in(struct trn_opt_offload *o)
{
	for (long a = 0, k = 0; a < o->n; a += o->chunk, k++) {
		long n = o->n - a < o->chunk ? o->n - a : o->chunk;
		if (o->in_place) {
			/* rounded straight into place, and on its way from there
			 * while the next chunk is (a GPU model's host copies) */
			if (o->master != o->dev_params)
				round_to(o->dtype, o->dev_params + a, o->master + a, n);
			if (o->landed)
				o->landed(o->landed_ctx, a, n);
			continue;
		}
		int s = (int)(k % 2);
		/* the copy out of this staging buffer (chunk k - 2) before it is
		 * written again */
		o->floats_up += wait_up(o, &o->up[s]);
		round_to(o->dtype, o->stage[s], o->master + a, n);
		start_copy(&o->up[s], o->dev_params + a, o->stage[s], n);
	}
}

void trn_opt_offload_params_wait(struct trn_opt_offload *o)
{
	o->floats_up += wait_up(o, &o->up[0]);
	o->floats_up += wait_up(o, &o->up[1]);
}
