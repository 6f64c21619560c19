/* tests/unit/test_optim.c - trainer/optim.c: an update taken tensor by
 * tensor (trn_optim_begin, trn_optim_step_tensor in backward's order, each
 * tensor's gradient in a buffer of its own, trn_optim_end) ends with the
 * same bits as trn_optim_step over the whole buffer: parameters, state (fp32,
 * or int8 codes and block scales) and trust ratios, for SGD (momentum,
 * Nesterov, none), AdamW, LARS and LAMB, with tensors excluded from decay
 * and adaptation and tensors of several int8 blocks, over several steps.
 * And trn_optim_move_to, onto a stand-in "device" (the CPU's kernels over
 * allocations of its own, counted, that can be made to fail): fp32 and
 * int8 state move with every value and step on as before, an allocation
 * that fails leaves the optimizer as it was with nothing leaked, and a
 * ZeRO shard's int8 state refuses to move. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "trainer/optim.h"

enum { N_PARAMS = 5, STEPS = 3 };

/* sizes across int8 block boundaries (2048), odd ones among them */
static struct trn_param params[N_PARAMS] = {
	{ .name = "wte", .ndim = 1, .shape = { 5000 }, .numel = 5000 },
	{ .name = "h0.ln.weight", .ndim = 1, .shape = { 37 }, .numel = 37 },
	{ .name = "h0.fc.weight", .ndim = 1, .shape = { 2049 }, .numel = 2049 },
	{ .name = "h0.fc.bias", .ndim = 1, .shape = { 300 }, .numel = 300 },
	{ .name = "head.weight", .ndim = 1, .shape = { 4096 }, .numel = 4096 },
};

static long layout(void)
{
	long n = 0;
	for (int i = 0; i < N_PARAMS; i++) {
		params[i].offset = n;
		n += params[i].numel;
	}
	return n;
}

static int same_state(const struct trn_optim *a, const struct trn_optim *b, long n)
{
	int ok = a->t == b->t && memcmp(a->trust, b->trust, sizeof(float) * N_PARAMS) == 0;
	if (a->m && !a->q8)
		ok &= memcmp(a->m, b->m, sizeof(float) * (size_t)n) == 0;
	if (a->v && !a->q8)
		ok &= memcmp(a->v, b->v, sizeof(float) * (size_t)n) == 0;
	if (a->q8) {
		const struct trn_optim_q8 *p = a->q8, *q = b->q8;
		if (p->m)
			ok &= memcmp(p->m, q->m, (size_t)n) == 0 &&
			      memcmp(p->ms, q->ms, sizeof(float) * (size_t)p->n_blocks) == 0;
		if (p->v)
			ok &= memcmp(p->v, q->v, (size_t)n) == 0 &&
			      memcmp(p->vs, q->vs, sizeof(float) * (size_t)p->n_blocks) == 0;
	}
	return ok;
}

static void tensor_by_tensor(struct trn_spec_optimizer cfg, const char *what)
{
	long n = layout();
	float *w_whole = malloc(sizeof(float) * (size_t)n), *w_each = malloc(sizeof(float) * (size_t)n);
	float *g = malloc(sizeof(float) * (size_t)n);
	uint64_t rng = 11;
	struct trn_optim whole, each;
	CHECK(w_whole && w_each && g);
	check_fill(w_whole, n, -1.0f, 1.0f, &rng);
	memcpy(w_each, w_whole, sizeof(float) * (size_t)n);
	CHECK_INT_EQ(trn_optim_init(&whole, &cfg, params, N_PARAMS, n, NULL), 0);
	CHECK_INT_EQ(trn_optim_init(&each, &cfg, params, N_PARAMS, n, NULL), 0);
	for (int step = 0; step < STEPS; step++) {
		double lr = 0.01 * (step + 1);
		check_fill(g, n, -0.5f, 0.5f, &rng);
		CHECK_INT_EQ(trn_optim_step(&whole, w_whole, g, lr, NULL), 0);
		trn_optim_begin(&each);
		for (int i = N_PARAMS - 1; i >= 0; i--) {
			/* the gradient in a buffer of its own, as a streamed block's */
			const struct trn_param *p = &params[i];
			float *own = malloc(sizeof(float) * (size_t)p->numel);
			CHECK(own);
			memcpy(own, g + p->offset, sizeof(float) * (size_t)p->numel);
			trn_optim_step_tensor(&each, i, w_each + p->offset, own, lr);
			free(own);
		}
		CHECK_INT_EQ(trn_optim_end(&each, NULL), 0);
		CHECK_MSG(memcmp(w_whole, w_each, sizeof(float) * (size_t)n) == 0,
		          "%s step %d: the parameters differ", what, step + 1);
		CHECK_MSG(same_state(&whole, &each, n), "%s step %d: the state differs", what,
		          step + 1);
	}
	trn_optim_release(&whole);
	trn_optim_release(&each);
	free(w_whole);
	free(w_each);
	free(g);
}

static void test_tensor_by_tensor_is_the_whole_step(void)
{
	struct trn_spec_optimizer base = { .lr = 0.01, .momentum = 0.9, .beta1 = 0.9,
	                                   .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
	                                   .trust_coef = 0.001 };
	strcpy(base.exclude_from_weight_decay[0], "bias");
	strcpy(base.exclude_from_weight_decay[1], "ln");
	base.n_exclude_from_weight_decay = 2;
	strcpy(base.exclude_from_adaptation[0], "bias");
	base.n_exclude_from_adaptation = 1;
	static const struct {
		enum trn_opt_type type;
		double momentum;
		int nesterov;
		const char *name;
	} kinds[] = {
		{ TRN_OPT_SGD, 0.9, 0, "sgd" }, { TRN_OPT_SGD, 0.9, 1, "sgd nesterov" },
		{ TRN_OPT_SGD, 0.0, 0, "sgd plain" }, { TRN_OPT_ADAMW, 0.9, 0, "adamw" },
		{ TRN_OPT_LARS, 0.9, 0, "lars" }, { TRN_OPT_LAMB, 0.9, 0, "lamb" },
	};
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		for (int q8 = 0; q8 < 2; q8++) {
			struct trn_spec_optimizer cfg = base;
			char what[64];
			cfg.type = kinds[k].type;
			cfg.momentum = kinds[k].momentum;
			cfg.nesterov = kinds[k].nesterov;
			cfg.eps = cfg.type == TRN_OPT_LAMB ? 1e-6 : 1e-8;
			cfg.state_dtype = q8 ? TRN_DTYPE_INT8 : TRN_DTYPE_FP32;
			if (q8 && cfg.type == TRN_OPT_SGD && cfg.momentum == 0)
				continue;          /* no state to quantize */
			snprintf(what, sizeof what, "%s, %s state", kinds[k].name, q8 ? "int8" : "fp32");
			tensor_by_tensor(cfg, what);
		}
	}
}

/* ---- trn_optim_move_to ----------------------------------------------------------- */

static int dev_live;                   /* the stand-in device's buffers now */
static int dev_fail_at;                /* its allocation that fails (1, 2, ...); 0 none */
static int dev_calls;

static void *dev_alloc_zeroed(size_t bytes)
{
	if (++dev_calls == dev_fail_at)
		return NULL;
	void *p = calloc(bytes ? bytes : 1, 1);
	dev_live += p != NULL;
	return p;
}

static void dev_release(void *p)
{
	dev_live -= p != NULL;
	free(p);
}

static struct trn_optim_kernels dev_kernels(void)
{
	struct trn_optim_kernels k = trn_optim_cpu_kernels;
	k.name = "stand-in";
	k.alloc_zeroed = dev_alloc_zeroed;
	k.release = dev_release;
	return k;
}

/* an optimizer moved after its first step against one that stays, over
 * STEPS steps: the same parameters and state; its state's buffers all on
 * the stand-in, and none left there after release */
static void moved_steps_on(struct trn_spec_optimizer cfg, const char *what)
{
	long n = layout();
	struct trn_optim_kernels k = dev_kernels();
	float *w_host = malloc(sizeof(float) * (size_t)n), *w_dev = malloc(sizeof(float) * (size_t)n);
	float *g = malloc(sizeof(float) * (size_t)n);
	uint64_t rng = 5;
	struct trn_optim host, dev;
	struct trn_err err = { 0 };
	CHECK(w_host && w_dev && g);
	check_fill(w_host, n, -1.0f, 1.0f, &rng);
	memcpy(w_dev, w_host, sizeof(float) * (size_t)n);
	CHECK_INT_EQ(trn_optim_init(&host, &cfg, params, N_PARAMS, n, NULL), 0);
	CHECK_INT_EQ(trn_optim_init(&dev, &cfg, params, N_PARAMS, n, NULL), 0);
	dev_live = dev_calls = dev_fail_at = 0;
	for (int step = 0; step < STEPS; step++) {
		check_fill(g, n, -0.5f, 0.5f, &rng);
		if (step == 1) {          /* state that is not all zero moves */
			CHECK_INT_EQ(trn_optim_move_to(&dev, &k, &err), 0);
			CHECK_MSG(dev.k == &k && dev_live == (dev.q8 ? 4 : dev.n_state),
			          "%s: %d buffers on the stand-in", what, dev_live);
		}
		CHECK_INT_EQ(trn_optim_step(&host, w_host, g, 0.01, NULL), 0);
		CHECK_INT_EQ(trn_optim_step(&dev, w_dev, g, 0.01, NULL), 0);
		CHECK_MSG(memcmp(w_host, w_dev, sizeof(float) * (size_t)n) == 0 &&
		          same_state(&host, &dev, n), "%s step %d: moved and not differ", what,
		          step + 1);
	}
	trn_optim_release(&dev);
	CHECK_MSG(dev_live == 0, "%s: %d buffers left on the stand-in", what, dev_live);
	trn_optim_release(&host);
	free(w_host);
	free(w_dev);
	free(g);
}

/* each of the move's allocations failing in turn: -1 and a message, the
 * optimizer still on the host with its state, nothing left on the stand-in */
static void failed_moves(struct trn_spec_optimizer cfg, const char *what)
{
	long n = layout();
	struct trn_optim_kernels k = dev_kernels();
	float *w = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
	uint64_t rng = 9;
	CHECK(w && g);
	check_fill(w, n, -1.0f, 1.0f, &rng);
	check_fill(g, n, -0.5f, 0.5f, &rng);
	for (int fail = 1; fail <= 4; fail++) {
		struct trn_optim o, ref;
		struct trn_err err = { 0 };
		CHECK_INT_EQ(trn_optim_init(&o, &cfg, params, N_PARAMS, n, NULL), 0);
		CHECK_INT_EQ(trn_optim_init(&ref, &cfg, params, N_PARAMS, n, NULL), 0);
		CHECK_INT_EQ(trn_optim_step(&o, w, g, 0.01, NULL), 0);
		CHECK_INT_EQ(trn_optim_step(&ref, w, g, 0.01, NULL), 0);
		dev_live = dev_calls = 0;
		dev_fail_at = fail;
		int rc = trn_optim_move_to(&o, &k, &err);
		int used = dev_calls;
		dev_fail_at = 0;
		if (fail > used) {        /* fewer buffers than this: it moved */
			CHECK_INT_EQ(rc, 0);
			trn_optim_release(&o);
			trn_optim_release(&ref);
			break;
		}
		CHECK_MSG(rc == -1 && strstr(err.text, "out of stand-in memory") && dev_live == 0 &&
		          o.k == &trn_optim_cpu_kernels && same_state(&o, &ref, n),
		          "%s, allocation %d fails: rc %d, \"%s\", %d left on the stand-in", what, fail,
		          rc, err.text, dev_live);
		trn_optim_release(&o);
		trn_optim_release(&ref);
	}
	free(w);
	free(g);
}

static void test_move_to(void)
{
	struct trn_spec_optimizer cfg = { .type = TRN_OPT_ADAMW, .lr = 0.01, .beta1 = 0.9,
	                                  .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01 };
	moved_steps_on(cfg, "adamw fp32");
	failed_moves(cfg, "adamw fp32");
	cfg.state_dtype = TRN_DTYPE_INT8;
	moved_steps_on(cfg, "adamw int8");
	failed_moves(cfg, "adamw int8");
	struct trn_spec_optimizer lamb = cfg;
	lamb.type = TRN_OPT_LAMB;
	lamb.eps = 1e-6;
	moved_steps_on(lamb, "lamb int8");

	/* a ZeRO shard (a range of the buffer) keeps int8 state on the host */
	long n = layout();
	struct trn_optim o;
	struct trn_err err = { 0 };
	struct trn_optim_kernels k = dev_kernels();
	CHECK_INT_EQ(trn_optim_init_shard(&o, &cfg, params, N_PARAMS, n, 1000, n, NULL, &err), 0);
	dev_live = dev_calls = dev_fail_at = 0;
	CHECK_INT_EQ(trn_optim_move_to(&o, &k, &err), -1);
	CHECK_MSG(strstr(err.text, "ZeRO shard") && dev_calls == 0 && o.k == &trn_optim_cpu_kernels,
	          "int8 shard: \"%s\", %d allocations", err.text, dev_calls);
	trn_optim_release(&o);
}

int main(void)
{
	CHECK_RUN(test_tensor_by_tensor_is_the_whole_step);
	CHECK_RUN(test_move_to);
	return check_finish();
}
