/* trainer/dp.c - bucketed gradient averaging; see dp.h. */
#include "dp.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kernels/optimizer.h"
#include "optim.h"

/* ZeRO's partition: equal ranges, rank order, the first n % size ranks one
 * float longer; and this rank's gradient shard. */
static int partition(struct trn_dp *dp, struct trn_err *err)
{
	int size = dp->comm->size;
	dp->counts = calloc((size_t)size, sizeof *dp->counts);
	dp->displs = calloc((size_t)size, sizeof *dp->displs);
	if (!dp->counts || !dp->displs)
		return trn_err_set(err, "ZeRO partition: out of memory");
	long base = dp->n_floats / size, extra = dp->n_floats % size, at = 0;
	for (int r = 0; r < size; r++) {
		dp->displs[r] = at;
		dp->counts[r] = base + (r < extra);
		at += dp->counts[r];
	}
	dp->lo = dp->displs[dp->comm->rank];
	dp->hi = dp->lo + dp->counts[dp->comm->rank];
	/* + 1: a range may be empty, and malloc(0) may give NULL */
	if (!(dp->gs = malloc(sizeof(float) * (size_t)(dp->hi - dp->lo + 1))))
		return trn_err_set(err, "ZeRO gradient shard: out of memory");
	return 0;
}

/* A bucket's floats in each rank's range, for its reduce-scatter. */
static int bucket_counts(struct trn_dp *dp, struct trn_dp_bucket *b, struct trn_err *err)
{
	if (!(b->counts = calloc((size_t)dp->comm->size, sizeof *b->counts)))
		return trn_err_set(err, "gradient buckets: out of memory");
	for (int r = 0; r < dp->comm->size; r++) {
		long a = dp->displs[r] > b->offset ? dp->displs[r] : b->offset;
		long e = dp->displs[r] + dp->counts[r];
		if (e > b->offset + b->numel)
			e = b->offset + b->numel;
		b->counts[r] = e > a ? (int)(e - a) : 0;
	}
	return 0;
}

int trn_dp_init(struct trn_dp *dp, struct trn_comm *comm, struct trn_model *m, long bucket_bytes,
                int zero, struct trn_err *err)
{
	memset(dp, 0, sizeof *dp);
	dp->comm = comm;
	dp->g = m->g;
	dp->n_floats = m->n_floats;
	dp->zero = zero && comm->size > 1;
	if (!dp->zero) {
		/* the whole buffer is every rank's: no partition */
		dp->lo = 0;
		dp->hi = dp->n_floats;
		dp->gs = dp->g;
	} else if (partition(dp, err) != 0) {
		trn_dp_release(dp);
		return -1;
	}
	/* buckets on one rank too: for a bucket_started hook */
	if (bucket_bytes > (long)INT_MAX * (long)sizeof(float))
		bucket_bytes = (long)INT_MAX * (long)sizeof(float);
	long cap = bucket_bytes / (long)sizeof(float);
	if (cap < 1)
		cap = 1;
	dp->buckets = calloc((size_t)m->n_params, sizeof *dp->buckets);
	dp->bucket_of = calloc((size_t)m->n_params, sizeof *dp->bucket_of);
	if (!dp->buckets || !dp->bucket_of) {
		trn_dp_release(dp);
		return trn_err_set(err, "gradient buckets: out of memory");
	}
	/* parameters are laid out in w/g by index; a bucket is a run of
	 * consecutive parameters taken from the last one backwards, so that its
	 * floats are one contiguous range */
	struct trn_dp_bucket *b = NULL;
	for (int p = m->n_params - 1; p >= 0; p--) {
		const struct trn_param *pp = &m->params[p];
		if (!b || b->numel + pp->numel > cap) {
			b = &dp->buckets[dp->n_buckets++];
			b->offset = pp->offset + pp->numel;
			b->first_param = p;
		}
		if (pp->offset + pp->numel != b->offset) {
			trn_dp_release(dp);
			return trn_err_set(err, "gradient buckets: parameter %s is not contiguous with the "
			                   "next one", pp->name);
		}
		b->offset = pp->offset;
		b->numel += pp->numel;
		b->n_params++;
		dp->bucket_of[p] = dp->n_buckets - 1;
	}
	for (int i = 0; dp->zero && i < dp->n_buckets; i++)
		if (bucket_counts(dp, &dp->buckets[i], err) != 0) {
			trn_dp_release(dp);
			return -1;
		}
	return 0;
}

void trn_dp_release(struct trn_dp *dp)
{
	if (dp->buckets)
		for (int i = 0; i < dp->n_buckets; i++) {
			free(dp->buckets[i].req);   /* only after a failed step */
			free(dp->buckets[i].counts);
		}
	if (dp->zero && dp->k && dp->gs)
		dp->k->release(dp->gs);
	else if (dp->zero)
		free(dp->gs);
	dp->gs = NULL;
	free(dp->counts);
	free(dp->displs);
	dp->counts = dp->displs = NULL;
	free(dp->buckets);
	free(dp->bucket_of);
	dp->buckets = NULL;
	dp->bucket_of = NULL;
	dp->n_buckets = 0;
}

int trn_dp_move_to(struct trn_dp *dp, const struct trn_optim_kernels *k, float *g,
                   struct trn_err *err)
{
	dp->g = g;
	if (!dp->zero) {
		dp->gs = g;
		dp->k = k;
		return 0;
	}
	free(dp->gs);
	dp->k = k;
	if (!(dp->gs = k->alloc_zeroed(sizeof(float) * (size_t)(dp->hi - dp->lo + 1))))
		return trn_err_set(err, "ZeRO gradient shard: out of %s memory", k->name);
	return 0;
}

void trn_dp_arm(struct trn_dp *dp)
{
	dp->armed = dp->comm->size > 1 || dp->bucket_started;
}

/* Starts buckets from dp->next on while they are complete (or all, with force). */
static int start_ready(struct trn_dp *dp, int force, struct trn_err *err)
{
	while (dp->next < dp->n_buckets) {
		struct trn_dp_bucket *b = &dp->buckets[dp->next];
		if (!force && b->ready < b->n_params)
			break;
		if (dp->next == 0)
			dp->t_first = trn_now();
		if (dp->sumsq_on && dp->comm->size > 1) {  /* before the reduction overwrites it */
			double t0 = trn_now();
			dp->sumsq += dp->k ? dp->k->sumsq(dp->g + b->offset, b->numel)
			                   : kern_sumsq_cpu(dp->g + b->offset, b->numel);
			dp->sumsq_s += trn_now() - t0;
		}
		int rc = 0;
		if (dp->comm->size == 1) {
			/* nothing to reduce: the bucket is final */
		} else if (dp->zero) {
			/* this rank's part of the bucket lands at its place in gs */
			long at = b->offset > dp->lo ? b->offset : dp->lo;
			rc = trn_comm_ireduce_scatter_f32(dp->comm, dp->g + b->offset, dp->gs + (at - dp->lo),
			                                  b->counts, &b->req, err);
		} else {
			rc = trn_comm_iallreduce_f32(dp->comm, dp->g + b->offset, b->numel, &b->req, err);
		}
		if (rc != 0)
			return -1;
		b->started = 1;
		if (dp->comm->size > 1)
			dp->bytes += (double)b->numel * sizeof(float);
		dp->early += !force;
		if (dp->bucket_started)
			dp->bucket_started(dp->bucket_ctx, dp->next);
		dp->next++;
	}
	return 0;
}

void trn_dp_grad_ready(void *ctx, int p)
{
	struct trn_dp *dp = ctx;
	if (!dp->armed || dp->failed)
		return;
	dp->buckets[dp->bucket_of[p]].ready++;
	if (start_ready(dp, 0, &dp->err) != 0)
		dp->failed = 1;
	else
		trn_comm_progress(dp->comm);
}

int trn_dp_finish(struct trn_dp *dp, float scale, struct trn_err *err)
{
	if (trn_dp_wait(dp, err) != 0)
		return -1;
	trn_dp_unscale(dp, dp->gs, scale);
	return 0;
}

void trn_dp_unscale(const struct trn_dp *dp, float *x, float scale)
{
	/* the reciprocal, then one product: for a power-of-two rank count and
	 * scale, exactly the division (and nothing to do for a factor of 1) */
	float f = scale / (float)dp->comm->size;
	if (f != 1.0f && dp->k)
		dp->k->scale(x, dp->hi - dp->lo, f);
	else if (f != 1.0f)
		kern_scale_cpu(x, dp->hi - dp->lo, f);
}

int trn_dp_wait(struct trn_dp *dp, struct trn_err *err)
{
	if (dp->comm->size == 1 && !dp->bucket_started)
		return 0;
	double t0 = trn_now();
	int rc = dp->failed ? trn_err_set(err, "%s", dp->err.text) : start_ready(dp, 1, err);
	for (int i = 0; i < dp->n_buckets; i++) {
		struct trn_dp_bucket *b = &dp->buckets[i];
		if (b->started && trn_comm_wait(dp->comm, b->req, rc ? NULL : err) != 0)
			rc = -1;
		b->req = NULL;
		b->started = 0;
		b->ready = 0;
	}
	double t1 = trn_now();
	dp->next = 0;
	dp->armed = 0;
	if (rc != 0)
		return -1;
	dp->wait_s += t1 - t0;
	dp->comm_s += t1 - dp->t_first;
	dp->steps++;
	return 0;
}

long trn_dp_bucket_part(const struct trn_dp *dp, int i, long *a)
{
	const struct trn_dp_bucket *b = &dp->buckets[i];
	long s = b->offset > dp->lo ? b->offset : dp->lo;
	long e = b->offset + b->numel < dp->hi ? b->offset + b->numel : dp->hi;
	*a = s - dp->lo;
	return e > s ? e - s : 0;
}

int trn_dp_allgather(struct trn_dp *dp, float *buf, struct trn_err *err)
{
	if (!dp->zero)
		return 0;
	double t0 = trn_now();
	int rc = trn_comm_allgather_f32(dp->comm, buf, dp->counts, dp->displs, err);
	dp->gather_s += trn_now() - t0;
	return rc;
}

int trn_dp_gather(struct trn_dp *dp, const float *shard, float *full, struct trn_err *err)
{
	if (!dp->zero) {
		if (full && full != shard)
			memcpy(full, shard, sizeof(float) * (size_t)dp->n_floats);
		return 0;
	}
	return trn_comm_gather_f32(dp->comm, shard, full, dp->counts, dp->displs, 0, err);
}

double trn_dp_overlap(const struct trn_dp *dp)
{
	return dp->comm_s > 0 ? 1.0 - dp->wait_s / dp->comm_s : 0.0;
}
