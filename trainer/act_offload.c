/* trainer/act_offload.c - see act_offload.h. */
#include "act_offload.h"

#include <stdlib.h>
#include <string.h>

/* blocks from here on stay in their slots between forward and backward */
static int first_resident(const struct trn_act_offload *o)
{
	return o->n_blocks > 2 ? o->n_blocks - 2 : 0;
}

long trn_act_offload_host_floats(int n_blocks, const long *floats)
{
	struct trn_act_offload o = { .n_blocks = n_blocks };
	long n = 0;
	for (int l = 0; l < first_resident(&o); l++)
		n += floats[l];
	return n;
}

int trn_act_offload_init(struct trn_act_offload *o, int n_blocks, const long *floats,
                         float *slot0, float *slot1, const struct trn_copier *copier,
                         int chan0)
{
	memset(o, 0, sizeof *o);
	o->copier = copier;
	o->chan0 = chan0;
	o->n_blocks = n_blocks;
	o->slot[0] = slot0;
	o->slot[1] = slot1;
	o->held[0] = o->held[1] = -1;
	if (n_blocks == 0)
		return 0;
	o->floats = malloc(sizeof *o->floats * (size_t)n_blocks);
	o->host_off = malloc(sizeof *o->host_off * (size_t)n_blocks);
	if (!o->floats || !o->host_off)
		return -1;
	for (int l = 0; l < n_blocks; l++) {
		o->floats[l] = floats[l];
		o->host_off[l] = l < first_resident(o) ? o->host_floats : -1;
		if (l < first_resident(o))
			o->host_floats += floats[l];
	}
	if (o->host_floats) {
		o->host = copier ? copier->host_alloc(o->host_floats)
		                 : malloc(sizeof(float) * (size_t)o->host_floats);
		if (!o->host)
			return -1;
	}
	return 0;
}

void trn_act_offload_release(struct trn_act_offload *o)
{
	free(o->floats);
	free(o->host_off);
	if (o->copier && o->host)
		o->copier->host_free(o->host);
	else
		free(o->host);
	memset(o, 0, sizeof *o);
}

/* ---- the copy engine: issue a copy through a slot, wait for it ---------------- */

/* Waits for the copy in flight through slot s, if any: with the CPU engine
 * it is done now. Neither copy needs the host to wait: the host store is
 * only ever the copies' own. */
static void wait_slot(struct trn_act_offload *o, int s)
{
	struct trn_act_copy *c = &o->copy[s];
	if (c->dir == TRN_COPY_NONE)
		return;
	if (o->copier)
		o->copier->wait(o->chan0 + s, 0);
	else
		memcpy(c->dst, c->src, sizeof(float) * (size_t)c->n);
	if (c->dir == TRN_COPY_OUT)
		o->floats_out += c->n;
	else
		o->floats_in += c->n;
	c->dir = TRN_COPY_NONE;
}

/* Starts copying block l out of its slot to the host store. The slot must
 * not be written until wait_slot. */
static void copy_out(struct trn_act_offload *o, int l)
{
	int s = l % 2;
	wait_slot(o, s);
	o->copy[s] = (struct trn_act_copy){ .dir = TRN_COPY_OUT, .dst = o->host + o->host_off[l],
	                                    .src = o->slot[s], .n = o->floats[l] };
	if (o->copier)
		o->copier->start(o->chan0 + s, o->copy[s].dst, o->copy[s].src, o->copy[s].n);
}

/* Starts bringing block l into its slot unless the slot holds it already.
 * The slot must not be read until wait_slot. */
static void prefetch_in(struct trn_act_offload *o, int l)
{
	int s = l % 2;
	if (o->held[s] == l || o->host_off[l] < 0)   /* the latter: not after a forward */
		return;
	wait_slot(o, s);
	o->copy[s] = (struct trn_act_copy){ .dir = TRN_COPY_IN, .dst = o->slot[s],
	                                    .src = o->host + o->host_off[l], .n = o->floats[l] };
	if (o->copier)
		o->copier->start(o->chan0 + s, o->copy[s].dst, o->copy[s].src, o->copy[s].n);
	o->held[s] = l;
}

/* ---- the schedule --------------------------------------------------------------- */

int trn_act_offload_fwd_begin(struct trn_act_offload *o, int l)
{
	int s = l % 2;
	wait_slot(o, s);
	o->held[s] = l;
	return s;
}

void trn_act_offload_fwd_end(struct trn_act_offload *o, int l)
{
	if (o->host_off[l] >= 0)
		copy_out(o, l);
}

int trn_act_offload_bwd_begin(struct trn_act_offload *o, int l)
{
	int s = l % 2;
	prefetch_in(o, l);             /* nothing to do once prefetched or resident */
	if (l > 0)
		prefetch_in(o, l - 1);
	wait_slot(o, s);
	return s;
}
