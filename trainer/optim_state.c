/* trainer/optim_state.c - an optimizer's state over the whole buffer, for
 * checkpoints (see optim.h): gathered from the ranks' ranges on rank 0 to
 * save, and cut back to a range after a load.
 *
 * The int8 codes travel as floats (exact for 8-bit integers), through the
 * same gather as the fp32 state. Scales travel in blocks: each block is
 * sent by the rank whose range holds its first value (a block cut by a
 * range boundary has the same scale on all the ranks that hold a part).
 */
#include "optim_int.h"

#include <stdlib.h>
#include <string.h>

#include "dp.h"

int trn_optim_state_init(struct trn_optim_state *s, const struct trn_optim *o,
                         struct trn_err *err)
{
	const struct trn_optim_q8 *q = o->q8;
	memset(s, 0, sizeof *s);
	if (q)
		s->n_blocks = q->first[o->n_params];
	if (o->lo == 0 && o->hi == o->n_floats && o->k == &trn_optim_cpu_kernels) {
		*s = (struct trn_optim_state){ .m = o->m, .v = o->v, .n_blocks = s->n_blocks };
		if (q)
			s->mq = q->m, s->vq = q->v, s->ms = q->ms, s->vs = q->vs;
		return 0;
	}
	s->owned = 1;
	size_t n = (size_t)o->n_floats, nb = (size_t)s->n_blocks + 1;
	int ok = 1;
	if (o->m)
		ok &= (s->m = malloc(sizeof(float) * n)) != NULL;
	if (o->v)
		ok &= (s->v = malloc(sizeof(float) * n)) != NULL;
	if (q && q->m)
		ok &= (s->mq = malloc(n)) && (s->ms = malloc(sizeof(float) * nb));
	if (q && q->v)
		ok &= (s->vq = malloc(n)) && (s->vs = malloc(sizeof(float) * nb));
	if (!ok) {
		trn_optim_state_release(s);
		return trn_err_set(err, "checkpoint: out of memory for the whole optimizer state");
	}
	return 0;
}

void trn_optim_state_release(struct trn_optim_state *s)
{
	if (s->owned) {
		free(s->m);
		free(s->v);
		free(s->mq);
		free(s->vq);
		free(s->ms);
		free(s->vs);
	}
	memset(s, 0, sizeof *s);
}

/* One buffer of int8 codes: through floats, gathered into s on rank 0. */
static int gather_codes(struct trn_dp *dp, const void *codes, int is_signed, float *part,
                        float *whole, void *out, long n_floats, struct trn_err *err)
{
	long n = dp->hi - dp->lo;
	for (long i = 0; i < n; i++)
		part[i] = is_signed ? ((const int8_t *)codes)[i] : ((const uint8_t *)codes)[i];
	if (trn_dp_gather(dp, part, whole, err) != 0)
		return -1;
	for (long i = 0; whole && i < n_floats; i++) {
		if (is_signed)
			((int8_t *)out)[i] = (int8_t)whole[i];
		else
			((uint8_t *)out)[i] = (uint8_t)whole[i];
	}
	return 0;
}

/* The scales of the blocks whose first value each rank holds. */
static int gather_scales(struct trn_dp *dp, const struct trn_optim *o, const float *mine,
                         float *all, struct trn_err *err)
{
	int size = dp->comm->size;
	long *counts = malloc(sizeof(long) * (size_t)size), *displs = malloc(sizeof(long) * (size_t)size);
	int rc = -1;
	if (!counts || !displs) {
		trn_err_set(err, "checkpoint: out of memory");
		goto out;
	}
	for (int r = 0; r < size; r++) {
		displs[r] = trn_optim_q8_blocks_before(o, dp->displs[r]);
		counts[r] = trn_optim_q8_blocks_before(o, dp->displs[r] + dp->counts[r]) - displs[r];
	}
	long skip = displs[dp->comm->rank] - o->q8->blk0;  /* a first block held in part */
	rc = trn_comm_gather_f32(dp->comm, mine + skip, all, counts, displs, 0, err);
out:
	free(counts);
	free(displs);
	return rc;
}

/* A device's state (trn_optim_move_to): copied to the host, and with ZeRO
 * (fp32 state only) every rank's range gathered on rank 0. */
static int gather_device(struct trn_optim_state *s, const struct trn_optim *o, struct trn_dp *dp,
                         struct trn_err *err)
{
	const struct trn_optim_q8 *q = o->q8;
	long n = o->hi - o->lo;
	size_t bytes = sizeof(float) * (size_t)n;
	if (n == o->n_floats) {
		size_t scales = q ? sizeof(float) * (size_t)q->n_blocks : 0;
		if (s->m)
			o->k->to_host(s->m, o->m, bytes);
		if (s->v)
			o->k->to_host(s->v, o->v, bytes);
		if (s->mq) {
			o->k->to_host(s->mq, q->m, (size_t)n);
			o->k->to_host(s->ms, q->ms, scales);
		}
		if (s->vq) {
			o->k->to_host(s->vq, q->v, (size_t)n);
			o->k->to_host(s->vs, q->vs, scales);
		}
		return 0;
	}
	float *part = malloc(bytes + sizeof(float));
	if (!part)
		return trn_err_set(err, "checkpoint: out of memory for the optimizer state");
	int rc = 0;
	if (s->m) {
		o->k->to_host(part, o->m, bytes);
		rc = trn_dp_gather(dp, part, s->m, err);
	}
	if (rc == 0 && s->v) {
		o->k->to_host(part, o->v, bytes);
		rc = trn_dp_gather(dp, part, s->v, err);
	}
	free(part);
	return rc;
}

int trn_optim_state_gather(struct trn_optim_state *s, const struct trn_optim *o,
                           struct trn_dp *dp, struct trn_err *err)
{
	const struct trn_optim_q8 *q = o->q8;
	if (!s->owned)
		return 0;               /* the optimizer's own state is whole */
	if (o->k != &trn_optim_cpu_kernels)
		return gather_device(s, o, dp, err);
	if ((s->m && trn_dp_gather(dp, o->m, s->m, err) != 0) ||
	    (s->v && trn_dp_gather(dp, o->v, s->v, err) != 0))
		return -1;
	if (!q)
		return 0;
	int lead = dp->comm->rank == 0, rc = -1;
	float *part = malloc(sizeof(float) * (size_t)(dp->hi - dp->lo + 1));
	float *whole = lead ? malloc(sizeof(float) * (size_t)o->n_floats) : NULL;
	if (!part || (lead && !whole)) {
		trn_err_set(err, "checkpoint: out of memory for the whole optimizer state");
		goto out;
	}
	if ((q->m && (gather_codes(dp, q->m, 1, part, whole, s->mq, o->n_floats, err) != 0 ||
	              gather_scales(dp, o, q->ms, s->ms, err) != 0)) ||
	    (q->v && (gather_codes(dp, q->v, 0, part, whole, s->vq, o->n_floats, err) != 0 ||
	              gather_scales(dp, o, q->vs, s->vs, err) != 0)))
		goto out;
	rc = 0;
out:
	free(part);
	free(whole);
	return rc;
}

void trn_optim_state_take(struct trn_optim *o, const struct trn_optim_state *s)
{
	struct trn_optim_q8 *q = o->q8;
	size_t n = (size_t)(o->hi - o->lo), nb = q ? (size_t)q->n_blocks : 0;
	if (!s->owned)
		return;
	if (s->m)
		o->k->from_host(o->m, s->m + o->lo, sizeof(float) * n);
	if (s->v)
		o->k->from_host(o->v, s->v + o->lo, sizeof(float) * n);
	if (s->mq) {
		o->k->from_host(q->m, s->mq + o->lo, n);
		o->k->from_host(q->ms, s->ms + q->blk0, sizeof(float) * nb);
	}
	if (s->vq) {
		o->k->from_host(q->v, s->vq + o->lo, n);
		o->k->from_host(q->vs, s->vs + q->blk0, sizeof(float) * nb);
	}
}
