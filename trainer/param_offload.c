/* trainer/param_offload.c - see param_offload.h. */
#include "param_offload.h"

#include <stdlib.h>
#include <string.h>

long trn_param_offload_slot_floats(int n_blocks, const long *floats)
{
	long n = 0;
	for (int l = 0; l < n_blocks; l++)
		n = floats[l] > n ? floats[l] : n;
	return n;
}

int trn_param_offload_init(struct trn_param_offload *o, int n_blocks, const long *off,
                           const long *floats, float *w, float *g,
                           const struct trn_copier *copier)
{
	memset(o, 0, sizeof *o);
	o->copier = copier;
	o->n_blocks = n_blocks;
	o->w = w;
	o->g = g;
	o->w_held[0] = o->w_held[1] = o->g_held[0] = o->g_held[1] = -1;
	if (n_blocks == 0)
		return 0;
	o->off = malloc(sizeof *o->off * (size_t)n_blocks);
	o->floats = malloc(sizeof *o->floats * (size_t)n_blocks);
	if (!o->off || !o->floats)
		return -1;
	memcpy(o->off, off, sizeof *o->off * (size_t)n_blocks);
	memcpy(o->floats, floats, sizeof *o->floats * (size_t)n_blocks);
	o->slot_floats = trn_param_offload_slot_floats(n_blocks, floats);
	o->arena = copier ? copier->alloc(4 * o->slot_floats + 1)
	                  : malloc(sizeof(float) * (size_t)(4 * o->slot_floats + 1));
	if (!o->arena)
		return -1;
	for (int s = 0; s < 2; s++) {
		o->wslot[s] = o->arena + s * o->slot_floats;
		o->gslot[s] = o->arena + (2 + s) * o->slot_floats;
		if (g)
			continue;
		o->gout[s] = copier ? copier->host_alloc(o->slot_floats + 1)
		                    : malloc(sizeof(float) * (size_t)(o->slot_floats + 1));
		if (!o->gout[s])
			return -1;
	}
	return 0;
}

void trn_param_offload_release(struct trn_param_offload *o)
{
	free(o->off);
	free(o->floats);
	if (o->copier && o->arena)
		o->copier->free(o->arena);
	else
		free(o->arena);
	for (int s = 0; s < 2; s++) {
		if (o->copier && o->gout[s])
			o->copier->host_free(o->gout[s]);
		else
			free(o->gout[s]);
	}
	memset(o, 0, sizeof *o);
}

void trn_param_offload_grads_zeroed(struct trn_param_offload *o)
{
	o->g_zero = 1;
}

/* ---- the copy engine: issue a copy, wait for it ------------------------------- */

/* Channel of copy c (the copier's numbering) */
static int channel(const struct trn_param_offload *o, const struct trn_param_copy *c)
{
	return c >= o->gcopy ? 2 + (int)(c - o->gcopy) : (int)(c - o->wcopy);
}

/* Waits for the copy in flight through c, if any: with the CPU engine it
 * is done now. Returns whether there was one. */
static int wait_copy(struct trn_param_offload *o, struct trn_param_copy *c)
{
	if (c->n == 0)
		return 0;
	if (o->copier)
		o->copier->wait(channel(o, c), c->to_host);
	else
		memcpy(c->dst, c->src, sizeof(float) * (size_t)c->n);
	*c->tally += c->n;
	c->n = 0;
	return 1;
}

/* Starts a copy through c, once the one before is done. Neither side may be
 * touched until wait_copy. */
static void issue(struct trn_param_offload *o, struct trn_param_copy *c, float *dst,
                  const float *src, long n, long *tally, int to_host)
{
	wait_copy(o, c);
	*c = (struct trn_param_copy){ .dst = dst, .src = src, .n = n, .tally = tally,
		                      .to_host = to_host };
	if (o->copier && n)
		o->copier->start(channel(o, c), dst, src, n);
}

/* Starts bringing block l's weights into its slot unless the slot holds
 * them already. */
static void prefetch(struct trn_param_offload *o, int l)
{
	int s = l % 2;
	if (l < 0 || l >= o->n_blocks || o->w_held[s] == l)
		return;
	issue(o, &o->wcopy[s], o->wslot[s], o->w + o->off[l], o->floats[l], &o->w_in, 0);
	o->w_held[s] = l;
}

/* ---- the schedule --------------------------------------------------------------- */

void trn_param_offload_fwd_start(struct trn_param_offload *o)
{
	for (int s = 0; s < 2; s++) {
		wait_copy(o, &o->wcopy[s]);
		o->w_held[s] = -1;
	}
	prefetch(o, 0);
}

/* Waits for the weights arriving in slot s, if any, and rounds them there
 * when they come as master weights. */
static void weights_in(struct trn_param_offload *o, int s)
{
	long n = o->wcopy[s].n;
	if (wait_copy(o, &o->wcopy[s]) && o->round_in)
		o->round_in(o->round_ctx, o->wslot[s], n);
}

const float *trn_param_offload_fwd(struct trn_param_offload *o, int l)
{
	int s = l % 2;
	prefetch(o, l);                /* nothing to do once prefetched */
	prefetch(o, l + 1);
	weights_in(o, s);
	return o->wslot[s];
}

const float *trn_param_offload_bwd_begin(struct trn_param_offload *o, int l, float **grads)
{
	int s = l % 2;
	prefetch(o, l);                /* nothing to do when forward left it there */
	weights_in(o, s);
	/* the slot's last block (l + 2) went out before block l + 1 ended */
	wait_copy(o, &o->gcopy[s]);
	o->g_held[s] = l;
	int zero = o->g_zero || !o->g;     /* streamed: no host sum to start from */
	if (zero && o->copier) {
		o->copier->zero(o->gslot[s], o->floats[l]);
	} else if (zero) {
		memset(o->gslot[s], 0, sizeof(float) * (size_t)o->floats[l]);
	} else {
		issue(o, &o->gcopy[s], o->gslot[s], o->g + o->off[l], o->floats[l], &o->g_in, 0);
		wait_copy(o, &o->gcopy[s]);
	}
	/* the next block's weights after this one's gradient sum: the copies
	 * share a stream, and this block's backward waits for the sum only */
	prefetch(o, l - 1);
	*grads = o->gslot[s];
	return o->wslot[s];
}

int trn_param_offload_bwd_end(struct trn_param_offload *o, int l)
{
	int s = l % 2, other = 1 - s;
	int landed = wait_copy(o, &o->gcopy[other]) ? o->g_held[other] : -1;
	float *dst = o->g ? o->g + o->off[l] : o->gout[s];
	issue(o, &o->gcopy[s], dst, o->gslot[s], o->floats[l], &o->g_out, 1);
	return landed;
}

int trn_param_offload_bwd_finish(struct trn_param_offload *o)
{
	int landed = -1;
	for (int s = 0; s < 2; s++)
		if (wait_copy(o, &o->gcopy[s]))
			landed = o->g_held[s];
	o->g_zero = 0;
	return landed;
}

const float *trn_param_offload_window(const struct trn_param_offload *o, int l)
{
	int s = l % 2;
	if (o->g || l < 0 || l >= o->n_blocks || o->g_held[s] != l || o->gcopy[s].n)
		return NULL;
	return o->gout[s];
}

const float *trn_param_offload_zero_window(struct trn_param_offload *o, int l)
{
	int s = l % 2;
	if (o->g || l < 0 || l >= o->n_blocks)
		return NULL;
	wait_copy(o, &o->gcopy[s]);
	memset(o->gout[s], 0, sizeof(float) * (size_t)o->floats[l]);
	o->g_held[s] = l;
	return o->gout[s];
}
