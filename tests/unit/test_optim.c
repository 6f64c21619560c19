/* tests/unit/test_optim.c - trainer/optim.c: an update taken tensor by
 * tensor (trn_optim_begin, trn_optim_step_tensor in backward's order, each
 * tensor's gradient in a buffer of its own, trn_optim_end) ends with the
 * same bits as trn_optim_step over the whole buffer: parameters, state (fp32,
 * or int8 codes and block scales) and trust ratios, for SGD (momentum,
 * Nesterov, none), AdamW, LARS and LAMB, with tensors excluded from decay
 * and adaptation and tensors of several int8 blocks, over several steps. */
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

int main(void)
{
	CHECK_RUN(test_tensor_by_tensor_is_the_whole_step);
	return check_finish();
}
