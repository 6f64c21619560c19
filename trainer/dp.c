/* trainer/dp.c - bucketed gradient averaging; see dp.h. */
#include "dp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int trn_dp_init(struct trn_dp *dp, struct trn_comm *comm, struct trn_model *m, long bucket_bytes,
                struct trn_err *err)
{
	memset(dp, 0, sizeof *dp);
	dp->comm = comm;
	dp->g = m->g;
	dp->n_floats = m->n_floats;
	if (comm->size == 1)
		return 0;
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
	return 0;
}

void trn_dp_release(struct trn_dp *dp)
{
	if (dp->buckets)
		for (int i = 0; i < dp->n_buckets; i++)
			free(dp->buckets[i].req);   /* only after a failed step */
	free(dp->buckets);
	free(dp->bucket_of);
	dp->buckets = NULL;
	dp->bucket_of = NULL;
	dp->n_buckets = 0;
}

void trn_dp_arm(struct trn_dp *dp)
{
	dp->armed = dp->comm->size > 1;
}

/* Starts buckets from dp->next on while they are complete (or all, with force). */
static int start_ready(struct trn_dp *dp, int force, struct trn_err *err)
{
	while (dp->next < dp->n_buckets) {
		struct trn_dp_bucket *b = &dp->buckets[dp->next];
		if (!force && b->ready < b->n_params)
			break;
		if (dp->next == 0)
			dp->t_first = now();
		if (trn_comm_iallreduce_f32(dp->comm, dp->g + b->offset, b->numel, &b->req, err) != 0)
			return -1;
		b->started = 1;
		dp->bytes += (double)b->numel * sizeof(float);
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

int trn_dp_finish(struct trn_dp *dp, struct trn_err *err)
{
	if (dp->comm->size == 1)
		return 0;
	double t0 = now();
	int rc = dp->failed ? trn_err_set(err, "%s", dp->err.text) : start_ready(dp, 1, err);
	for (int i = 0; i < dp->n_buckets; i++) {
		struct trn_dp_bucket *b = &dp->buckets[i];
		if (b->started && trn_comm_wait(dp->comm, b->req, rc ? NULL : err) != 0)
			rc = -1;
		b->req = NULL;
		b->started = 0;
		b->ready = 0;
	}
	double t1 = now();
	dp->next = 0;
	dp->armed = 0;
	if (rc != 0)
		return -1;
	dp->wait_s += t1 - t0;
	dp->comm_s += t1 - dp->t_first;
	dp->steps++;
	float inv = 1.0f / (float)dp->comm->size;
	long n = dp->n_floats;
	for (long i = 0; i < n; i++)
		dp->g[i] *= inv;
	return 0;
}

double trn_dp_overlap(const struct trn_dp *dp)
{
	return dp->comm_s > 0 ? 1.0 - dp->wait_s / dp->comm_s : 0.0;
}
