/* tests/unit/test_opt_offload.c - trainer/opt_offload.c: the copies of
 * optimizer offload. Gradients issued bucket by bucket (in backward's
 * order, buckets of different sizes) reach the host whole at the wait and
 * not before it, twice in a row; the parameters come back rounded to fp32,
 * bf16 and fp16 through the two staging buffers for ranges of 0 to 1000
 * floats in chunks of 1 float to more than the range, with the last two
 * chunks in flight until the wait, unaffected by master weights that
 * change after the send, and each chunk reported to the landed hook once,
 * once it is in; and AdamW steps run on the host through the engine
 * end with the same bits as steps run in place; in place (host memory on
 * both sides) it holds and copies nothing, rounding the parameters into
 * place a chunk at a time and reporting each chunk to the landed hook once
 * it is there (a GPU model's copy of it starts then). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/precision.h"
#include "trainer/optim.h"
#include "trainer/opt_offload.h"

static float pattern(int round, long i)
{
	return (float)(round * 100000) + (float)(i % 997) * 0.37f;
}

/* buckets as dp.c cuts them: contiguous, from the end of the range back */
static int cut_buckets(long n, long *at, long *len)
{
	int nb = 0;
	for (long e = n, k = 0; e > 0; k++) {
		long size = 13 + 29 * ((k * 3) % 5);   /* sizes differ, not in order */
		long a = e > size ? e - size : 0;
		at[nb] = a;
		len[nb++] = e - a;
		e = a;
	}
	return nb;
}

static void test_gradients_arrive_whole_at_the_wait(void)
{
	long n = 1000, at[100], len[100];
	int nb = cut_buckets(n, at, len);
	float *dev = malloc(sizeof(float) * (size_t)n);
	struct trn_opt_offload o;
	CHECK(dev);
	CHECK_INT_EQ(trn_opt_offload_init(&o, n, nb, 64, TRN_DTYPE_FP32, NULL, dev, NULL, 0), 0);
	for (long i = 0; i < n; i++)
		o.grads[i] = -1.0f;
	for (int round = 1; round <= 2; round++) {
		for (long i = 0; i < n; i++)
			dev[i] = pattern(round, i);
		for (int b = 0; b < nb; b++) {
			trn_opt_offload_grads_out(&o, b, at[b], len[b]);
			CHECK_INT_EQ(o.down[b].n, len[b]);
		}
		/* nothing has arrived before the wait: a reader without it sees the
		 * previous step's gradients */
		int stale = 1;
		for (long i = 0; i < n; i++)
			stale &= o.grads[i] == (round == 1 ? -1.0f : pattern(round - 1, i));
		CHECK_MSG(stale, "round %d: gradients arrived before the wait", round);
		trn_opt_offload_grads_wait(&o);
		int whole = 1;
		for (long i = 0; i < n; i++)
			whole &= o.grads[i] == pattern(round, i);
		CHECK_MSG(whole, "round %d: the host gradients are not the device's", round);
		for (int b = 0; b < nb; b++)
			CHECK_INT_EQ(o.down[b].n, 0);
		CHECK_INT_EQ(o.floats_down, round * n);
	}
	/* a bucket issued again before the wait: its first copy is done first */
	for (long i = 0; i < n; i++)
		dev[i] = pattern(3, i);
	trn_opt_offload_grads_out(&o, 0, at[0], len[0]);
	trn_opt_offload_grads_out(&o, 0, at[0], len[0]);
	CHECK(o.grads[at[0]] == pattern(3, at[0]));
	CHECK_INT_EQ(o.floats_down, 2 * n + len[0]);
	trn_opt_offload_grads_wait(&o);
	trn_opt_offload_release(&o);
	free(dev);
}

static float rounded(enum trn_dtype dt, float x)
{
	if (dt == TRN_DTYPE_BF16)
		return kern_bf16_to_fp32(kern_fp32_to_bf16(x));
	if (dt == TRN_DTYPE_FP16)
		return kern_fp16_to_fp32(kern_fp32_to_fp16(x));
	return x;
}

/* what the landed hook saw: each chunk's floats already in dev, once */
struct landings {
	const float *dev;
	const float *want;             /* the rounded master weights sent */
	long covered, calls;
	int early;                     /* a chunk reported before its floats were there */
};

static void record_landing(void *ctx, long a, long n)
{
	struct landings *l = ctx;
	for (long i = a; i < a + n; i++)
		l->early |= l->dev[i] != l->want[i];
	l->covered += n;
	l->calls++;
}

static void send_params(enum trn_dtype dt, long n, long chunk)
{
	float *master = malloc(sizeof(float) * (size_t)(n + 1));
	float *dev = malloc(sizeof(float) * (size_t)(n + 1));
	uint64_t rng = 17 + (uint64_t)n * 31 + (uint64_t)chunk;
	struct trn_opt_offload o;
	CHECK(master && dev);
	CHECK_INT_EQ(trn_opt_offload_init(&o, n, 0, chunk, dt, master, NULL, dev, 0), 0);
	long c = trn_opt_offload_stage_floats(n, chunk), chunks = c ? (n + c - 1) / c : 0;
	CHECK_INT_EQ(o.chunk, c);
	for (int round = 1; round <= 2; round++) {
		check_fill(master, n, -3.0f, 3.0f, &rng);
		for (long i = 0; i < n; i++)
			dev[i] = -7.0f;
		trn_opt_offload_params_in(&o);
		/* the last two chunks are in flight, the ones before them in place */
		long in_flight = !!o.up[0].n + !!o.up[1].n;
		CHECK_INT_EQ(in_flight, chunks < 2 ? chunks : 2);
		long done = (chunks > 2 ? chunks - 2 : 0) * c;
		int ok = 1;
		for (long i = 0; i < n; i++)
			ok &= dev[i] == (i < done ? rounded(dt, master[i]) : -7.0f);
		CHECK_MSG(ok, "dtype %d, %ld floats in chunks of %ld: not the chunks before the last "
		          "two alone", (int)dt, n, chunk);
		/* the master weights may change once the send has returned */
		float *was = malloc(sizeof(float) * (size_t)(n + 1));
		CHECK(was);
		memcpy(was, master, sizeof(float) * (size_t)n);
		for (long i = 0; i < n; i++)
			master[i] = 99.0f;
		trn_opt_offload_params_wait(&o);
		ok = 1;
		for (long i = 0; i < n; i++)
			ok &= dev[i] == rounded(dt, was[i]);
		CHECK_MSG(ok, "dtype %d, %ld floats in chunks of %ld: the device's parameters are not "
		          "the rounded master weights", (int)dt, n, chunk);
		CHECK_INT_EQ(o.floats_up, round * n);
		/* again with the landed hook: every chunk reported once, after its
		 * floats are in */
		for (long i = 0; i < n; i++)
			was[i] = rounded(dt, was[i]);
		struct landings l = { .dev = dev, .want = was };
		memcpy(master, was, sizeof(float) * (size_t)n);
		for (long i = 0; i < n; i++)
			dev[i] = -7.0f;
		o.landed = record_landing;
		o.landed_ctx = &l;
		trn_opt_offload_params_in(&o);
		trn_opt_offload_params_wait(&o);
		o.landed = NULL;
		CHECK_MSG(l.covered == n && l.calls == chunks && !l.early,
		          "dtype %d, %ld floats in chunks of %ld: %ld floats in %ld landings (%ld "
		          "chunks), early %d", (int)dt, n, chunk, l.covered, l.calls, chunks, l.early);
		o.floats_up -= n;                 /* (the next round counts the first sends) */
		free(was);
	}
	trn_opt_offload_release(&o);
	free(master);
	free(dev);
}

static void test_parameters_come_back_rounded_through_two_buffers(void)
{
	static const enum trn_dtype dts[] = { TRN_DTYPE_FP32, TRN_DTYPE_BF16, TRN_DTYPE_FP16 };
	static const long ns[] = { 0, 1, 100, 1000 };
	static const long chunks[] = { 1, 7, 100, 333, 5000 };
	for (int d = 0; d < 3; d++)
		for (int i = 0; i < 4; i++)
			for (int k = 0; k < 5; k++)
				send_params(dts[d], ns[i], chunks[k]);
}

/* Three tensors; AdamW with weight decay on the weights only. */
static void test_adamw_on_the_host_matches_in_place(void)
{
	enum { N = 1200, STEPS = 4 };
	struct trn_param params[3] = {
		{ .name = "fc1.weight", .ndim = 1, .shape = { 900 }, .numel = 900, .offset = 0 },
		{ .name = "fc1.bias", .ndim = 1, .shape = { 100 }, .numel = 100, .offset = 900 },
		{ .name = "fc2.weight", .ndim = 1, .shape = { 200 }, .numel = 200, .offset = 1000 },
	};
	struct trn_spec_optimizer cfg = { .type = TRN_OPT_ADAMW, .lr = 0.01, .beta1 = 0.9,
	                                  .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
	                                  .n_exclude_from_weight_decay = 1 };
	strcpy(cfg.exclude_from_weight_decay[0], "bias");
	static float w_ref[N], master[N], dev_w[N], dev_g[N];
	long at[100], len[100];
	int nb = cut_buckets(N, at, len);
	uint64_t rng = 5;
	struct trn_optim ref, host;
	struct trn_opt_offload o;
	check_fill(w_ref, N, -1.0f, 1.0f, &rng);
	for (long i = 0; i < N; i++)   /* the device computes with the rounding */
		dev_w[i] = rounded(TRN_DTYPE_BF16, master[i] = w_ref[i]);
	CHECK_INT_EQ(trn_optim_init(&ref, &cfg, params, 3, N, NULL), 0);
	CHECK_INT_EQ(trn_optim_init(&host, &cfg, params, 3, N, NULL), 0);
	CHECK_INT_EQ(trn_opt_offload_init(&o, N, nb, 250, TRN_DTYPE_BF16, master, dev_g, dev_w, 0), 0);
	for (int step = 0; step < STEPS; step++) {
		check_fill(dev_g, N, -0.5f, 0.5f, &rng);
		for (int b = 0; b < nb; b++)
			trn_opt_offload_grads_out(&o, b, at[b], len[b]);
		trn_opt_offload_grads_wait(&o);
		CHECK_INT_EQ(trn_optim_step(&host, master, o.grads, 0.01, NULL), 0);
		trn_opt_offload_params_in(&o);
		CHECK_INT_EQ(trn_optim_step(&ref, w_ref, dev_g, 0.01, NULL), 0);
		trn_opt_offload_params_wait(&o);
	}
	CHECK(memcmp(master, w_ref, sizeof w_ref) == 0);
	CHECK(memcmp(host.m, ref.m, sizeof(float) * N) == 0);
	CHECK(memcmp(host.v, ref.v, sizeof(float) * N) == 0);
	int ok = 1;
	for (long i = 0; i < N; i++)
		ok &= dev_w[i] == rounded(TRN_DTYPE_BF16, w_ref[i]);
	CHECK_MSG(ok, "the device's parameters are not the rounded master weights");
	trn_opt_offload_release(&o);
	trn_optim_release(&ref);
	trn_optim_release(&host);
}

/* In place (the model's parameters and gradients on the host already):
 * nothing of its own, the gradients read where they are, the parameters
 * rounded straight into place at the send, or left alone when they are the
 * master weights. */
static void test_in_place_copies_nothing(void)
{
	enum { N = 700 };
	static float master[N], w[N], g[N];
	uint64_t rng = 9;
	struct trn_opt_offload o;
	static const enum trn_dtype dts[] = { TRN_DTYPE_BF16, TRN_DTYPE_FP16 };
	for (int d = 0; d < 2; d++) {
		CHECK_INT_EQ(trn_opt_offload_init(&o, N, 5, 64, dts[d], master, g, w, 1), 0);
		CHECK(o.grads == g && !o.stage[0] && !o.stage[1] && !o.down);
		check_fill(g, N, -1.0f, 1.0f, &rng);
		check_fill(master, N, -3.0f, 3.0f, &rng);
		trn_opt_offload_grads_out(&o, 2, 100, 50);
		trn_opt_offload_grads_wait(&o);
		static float want[N];
		for (long i = 0; i < N; i++) {
			want[i] = rounded(dts[d], master[i]);
			w[i] = -7.0f;
		}
		struct landings l = { .dev = w, .want = want };
		o.landed = record_landing;
		o.landed_ctx = &l;
		trn_opt_offload_params_in(&o);
		int ok = 1;
		for (long i = 0; i < N; i++)
			ok &= w[i] == want[i];
		CHECK_MSG(ok, "dtype %d: the parameters are not the rounded master weights at the "
		          "send", (int)dts[d]);
		CHECK_MSG(l.covered == N && l.calls == (N + 63) / 64 && !l.early,
		          "dtype %d: %ld floats in %ld landings, early %d", (int)dts[d], l.covered,
		          l.calls, l.early);
		trn_opt_offload_params_wait(&o);
		CHECK_INT_EQ(o.floats_down + o.floats_up, 0);
		trn_opt_offload_release(&o);
	}
	/* the parameters are the master weights (fp32, or a model that rounds
	 * as it reads them): the send leaves them be */
	static const enum trn_dtype all[] = { TRN_DTYPE_FP32, TRN_DTYPE_BF16 };
	for (int d = 0; d < 2; d++) {
		check_fill(w, N, -3.0f, 3.0f, &rng);
		memcpy(master, w, sizeof w);
		CHECK_INT_EQ(trn_opt_offload_init(&o, N, 5, 64, all[d], w, g, w, 1), 0);
		/* (still reported, chunk by chunk: a GPU model sends them) */
		struct landings l = { .dev = w, .want = master };
		o.landed = record_landing;
		o.landed_ctx = &l;
		trn_opt_offload_params_in(&o);
		trn_opt_offload_params_wait(&o);
		CHECK(memcmp(master, w, sizeof w) == 0);
		CHECK_INT_EQ(l.covered, N);
		CHECK_INT_EQ(l.calls, (N + 63) / 64);
		trn_opt_offload_release(&o);
	}
}

int main(void)
{
	CHECK_RUN(test_gradients_arrive_whole_at_the_wait);
	CHECK_RUN(test_parameters_come_back_rounded_through_two_buffers);
	CHECK_RUN(test_adamw_on_the_host_matches_in_place);
	CHECK_RUN(test_in_place_copies_nothing);
	return check_finish();
}
