/* trainer/optim_q8.c - int8 optimizer state (see optim.h and optim_int.h).
 *
 * The code map is the dynamic tree (kernels/quant8.h), not the affine one
 * (x_q = round(x / absmax * 127), 255 for v). Measured on Fashion-MNIST
 * (tests/bench/bench_int8_states.py, test accuracy against fp32 state):
 *  - affine as such: Adam diverges. A v below absmax/510 rounds to 0 under
 *    an m that does not, and its step is m / eps. 784-256-10, 1 epoch:
 *    AdamW 0.114 (fp32 state 0.839; the dynamic map, also without the rule
 *    below, 0.840), LAMB 0.366 (0.827, 0.826); a 2-layer GPT on text,
 *    AdamW: loss 4400 after 600 steps (fp32 and dynamic 1.4).
 *  - affine with the rule both maps keep now (a positive v takes code 1,
 *    never 0) trains, but stays further from fp32. 784-256-10, 2 epochs, 3
 *    seeds: AdamW +0.15 points (dynamic) against +0.32 (affine), LAMB -0.05
 *    against -0.22. 784-1024-1024-10, 5 epochs, one seed: SGD -0.04 /
 *    +0.02, AdamW +0.03 / +0.19, LARS 0.00 / -0.07, LAMB -0.12 / -0.02
 *    (all within a seed's noise). One AdamW step on state spread over
 *    decades (tests/unit/test_kern_quant8.c): the update's error is 2.5%
 *    of its rms with the dynamic map, 41% with the affine one, which sends
 *    every value under absmax/254 to 0 or to the floor.
 * Adam's v is a square: it spans twice the decades of the gradients within
 * a block, and the dynamic map keeps its relative precision down to 1e-6
 * of the block's largest value where the affine one keeps none.
 */
#include "optim_int.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/optimizer.h"
#include "kernels/quant8.h"

#define BLOCK KERN_Q8_BLOCK

long trn_optim_q8_blocks_before(const struct trn_optim *o, long x)
{
	const struct trn_optim_q8 *q = o->q8;
	for (int i = 0; i < o->n_params; i++) {
		const struct trn_param *p = &o->params[i];
		if (x < p->offset + p->numel)
			return q->first[i] + (x > p->offset ? (x - p->offset + BLOCK - 1) / BLOCK : 0);
	}
	return q->first[o->n_params];
}

/* The blocks of tensor i that the range holds in part: one cut by lo (at
 * the start of the range's first tensor), one cut by hi, or one cut by
 * both when the range lies inside a block. */
static void find_cuts(struct trn_optim *o, int i)
{
	struct trn_optim_q8 *q = o->q8;
	const struct trn_param *p = &o->params[i];
	long a, n = trn_optim_piece(o, i, &a);
	if (!n)
		return;
	long p0 = o->lo + a - p->offset, p1 = p0 + n;  /* tensor coordinates */
	if (p0 % BLOCK) {
		long end = (p0 / BLOCK + 1) * BLOCK;
		q->cut[q->n_cut++] = (struct trn_optim_q8_cut){
			.param = i, .a = a, .n = (p1 < end ? p1 : end) - p0,
			.blk = q->first[i] + p0 / BLOCK - q->blk0 };
	}
	if (p1 != p->numel && p1 % BLOCK && !(p0 % BLOCK && p0 / BLOCK == p1 / BLOCK)) {
		long start = p1 / BLOCK * BLOCK;
		q->cut[q->n_cut++] = (struct trn_optim_q8_cut){
			.param = i, .a = a + (start - p0), .n = p1 - start,
			.blk = q->first[i] + p1 / BLOCK - q->blk0 };
	}
}

int trn_optim_q8_init(struct trn_optim *o, int want_m, int want_v, struct trn_err *err)
{
	struct trn_optim_q8 *q = calloc(1, sizeof *q);
	long len = o->hi - o->lo;
	if (!q || !(q->first = malloc(sizeof(long) * (size_t)(o->n_params + 1))))
		goto oom;
	o->q8 = q;
	q->first[0] = 0;
	for (int i = 0; i < o->n_params; i++)
		q->first[i + 1] = q->first[i] + kern_q8_blocks(o->params[i].numel);
	/* the blocks holding lo .. hi - 1: from the one holding lo (the last
	 * to start at or before it) */
	q->blk0 = trn_optim_q8_blocks_before(o, o->lo);
	if (len > 0) {
		q->blk0 = trn_optim_q8_blocks_before(o, o->lo + 1) - 1;
		q->n_blocks = trn_optim_q8_blocks_before(o, o->hi) - q->blk0;
	}
	/* +1: a rank's range may be empty, and calloc(0) may give NULL */
	if (want_m && (!(q->m = calloc((size_t)len + 1, 1)) ||
	               !(q->ms = calloc((size_t)q->n_blocks + 1, sizeof(float)))))
		goto oom;
	if (want_v && (!(q->v = calloc((size_t)len + 1, 1)) ||
	               !(q->vs = calloc((size_t)q->n_blocks + 1, sizeof(float)))))
		goto oom;
	for (int i = 0; i < o->n_params && q->n_cut < 2; i++)
		find_cuts(o, i);
	for (int k = 0; k < q->n_cut; k++)
		if ((want_m && !(q->cut[k].m = malloc(sizeof(float) * BLOCK))) ||
		    (want_v && !(q->cut[k].v = malloc(sizeof(float) * BLOCK))))
			goto oom;
	if (o->comm && !(q->amax = malloc(sizeof(double) * 6 * (size_t)o->comm->size)))
		goto oom;
	return 0;
oom:
	if (!o->q8)
		free(q);
	return trn_err_set(err, "optimizer: out of memory for the int8 state of %ld parameters", len);
}

void trn_optim_q8_free(struct trn_optim_q8 *q, const struct trn_optim_kernels *k)
{
	if (!q)
		return;
	k->release(q->m);
	k->release(q->v);
	k->release(q->ms);
	k->release(q->vs);
	free(q->first);
	for (int c = 0; c < 2; c++) {
		free(q->cut[c].m);
		free(q->cut[c].v);
	}
	free(q->amax);
	free(q);
}

/* Tensor i's part of the range in whole blocks, its part blocks left out:
 * [*a, *a + return) in range coordinates, the first block *blk (an index
 * into the range's scales). */
static long whole_blocks(const struct trn_optim *o, int i, long *a, long *blk)
{
	const struct trn_param *p = &o->params[i];
	long s, n = trn_optim_piece(o, i, &s);
	if (!n)
		return 0;
	long p0 = o->lo + s - p->offset, p1 = p0 + n;
	long b0 = (p0 + BLOCK - 1) / BLOCK * BLOCK;
	long b1 = p1 == p->numel ? p1 : p1 / BLOCK * BLOCK;
	if (b1 <= b0)
		return 0;
	*a = s + (b0 - p0);
	*blk = o->q8->first[i] + b0 / BLOCK - o->q8->blk0;
	return b1 - b0;
}

void trn_optim_q8_begin(struct trn_optim *o)
{
	struct trn_optim_q8 *q = o->q8;
	for (int k = 0; k < q->n_cut; k++) {
		struct trn_optim_q8_cut *c = &q->cut[k];
		if (q->m)
			kern_q8_decode_s(q->m + c->a, c->n, q->ms[c->blk], c->m);
		if (q->v)
			kern_q8_decode_u(q->v + c->a, c->n, q->vs[c->blk], c->v);
	}
}

/* w and g below are tensor i's part of the range (its first float at the
 * range coordinate at): range coordinate x is at w + (x - at). */
double trn_optim_q8_lamb_norm(struct trn_optim *o, int i, const float *w, const float *g,
                              float wd, float bc1, float bc2)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	struct trn_optim_q8 *q = o->q8;
	long at, a, blk, n = whole_blocks(o, i, &a, &blk);
	trn_optim_piece(o, i, &at);
	double s = 0;
	if (n)
		s = o->k->lamb_norm_q8(q->m + a, q->ms + blk, q->v + a, q->vs + blk, g + (a - at),
		                       w + (a - at), n, (float)c->beta1, (float)c->beta2,
		                       (float)c->eps, wd, bc1, bc2);
	/* the part blocks' moments are made here, once, and kept for the update */
	for (int k = 0; k < q->n_cut; k++) {
		struct trn_optim_q8_cut *p = &q->cut[k];
		if (p->param == i)
			s += kern_lamb_moments_ref(p->m, p->v, g + (p->a - at), w + (p->a - at), p->n,
			                           (float)c->beta1, (float)c->beta2, (float)c->eps, wd,
			                           bc1, bc2);
	}
	return s;
}

void trn_optim_q8_update(struct trn_optim *o, int i, float *w, const float *g, float lr,
                         float wd, float bc1, float bc2)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	struct trn_optim_q8 *q = o->q8;
	float mu = (float)c->momentum, b1 = (float)c->beta1, b2 = (float)c->beta2;
	float eps = (float)c->eps;
	long at, a, blk, n = whole_blocks(o, i, &a, &blk);
	trn_optim_piece(o, i, &at);
	if (n) {
		int8_t *mq = q->m + a;
		float *ms = q->ms + blk, *wa = w + (a - at);
		const float *ga = g + (a - at);
		const struct trn_optim_kernels *k = o->k;
		if (c->type == TRN_OPT_SGD)
			k->sgd_q8(wa, mq, ms, ga, n, lr, mu, wd, c->nesterov);
		else if (c->type == TRN_OPT_ADAMW)
			k->adamw_q8(wa, mq, ms, q->v + a, q->vs + blk, ga, n, lr, b1, b2, eps, wd, bc1,
			            bc2);
		else if (c->type == TRN_OPT_LARS)
			k->lars_q8(wa, mq, ms, ga, n, lr, mu, wd);
		else
			k->lamb_q8(wa, mq, ms, q->v + a, q->vs + blk, ga, n, lr, b1, b2, eps, wd, bc1,
			           bc2);
	}
	for (int k = 0; k < q->n_cut; k++) {
		struct trn_optim_q8_cut *p = &q->cut[k];
		if (p->param != i)
			continue;
		float *wp = w + (p->a - at);
		const float *gp = g + (p->a - at);
		if (c->type == TRN_OPT_SGD)
			kern_sgd_update_ref(wp, p->m, gp, p->n, lr, mu, wd, c->nesterov);
		else if (c->type == TRN_OPT_ADAMW)
			kern_adamw_update_ref(wp, p->m, p->v, gp, p->n, lr, b1, b2, eps, wd, bc1, bc2);
		else if (c->type == TRN_OPT_LARS)
			kern_lars_update_ref(wp, p->m, gp, p->n, lr, mu, wd);
		else
			kern_lamb_apply_ref(wp, p->m, p->v, p->n, lr, eps, wd, bc1, bc2);
	}
}

/* Every rank puts (block number + 1, absmax of m, absmax of v) of each of
 * its part blocks in its own six slots; after the sum each rank takes the
 * largest absmax of its blocks' numbers. */
int trn_optim_q8_finish(struct trn_optim *o, struct trn_err *err)
{
	struct trn_optim_q8 *q = o->q8;
	int size = o->comm ? o->comm->size : 1, rank = o->comm ? o->comm->rank : 0;
	double own[6] = { 0 };
	double *x = q->amax ? q->amax : own;
	if (q->amax)
		memset(x, 0, sizeof(double) * 6 * (size_t)size);
	for (int k = 0; k < q->n_cut; k++) {
		const struct trn_optim_q8_cut *p = &q->cut[k];
		double *slot = x + 6 * rank + 3 * k;
		slot[0] = (double)(q->blk0 + p->blk + 1);
		slot[1] = p->m ? kern_q8_absmax(p->m, p->n) : 0;
		slot[2] = p->v ? kern_q8_absmax(p->v, p->n) : 0;
	}
	if (q->amax && trn_comm_allreduce_f64(o->comm, x, 6L * size, err) != 0)
		return -1;
	for (int k = 0; k < q->n_cut; k++) {
		const struct trn_optim_q8_cut *p = &q->cut[k];
		double id = (double)(q->blk0 + p->blk + 1), sm = 0, sv = 0;
		for (int j = 0; j < 2 * size; j++) {
			if (x[3 * j] != id)
				continue;
			sm = x[3 * j + 1] > sm ? x[3 * j + 1] : sm;
			sv = x[3 * j + 2] > sv ? x[3 * j + 2] : sv;
		}
		if (p->m) {
			q->ms[p->blk] = (float)sm;
			kern_q8_encode_s(p->m, p->n, (float)sm, q->m + p->a);
		}
		if (p->v) {
			q->vs[p->blk] = (float)sv;
			kern_q8_encode_u(p->v, p->n, (float)sv, q->v + p->a);
		}
	}
	return 0;
}
