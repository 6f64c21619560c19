/* trainer/model_mlp.c - multilayer perceptron classifier.
 *
 * fc1 -> act -> fc2 -> act -> ... -> fcL -> softmax cross-entropy, with
 * layers fc<i>.weight [out, in] and fc<i>.bias [out]. The input is the
 * batch's standardised feature rows; the output size is the data's class count.
 *
 * With a 16-bit compute dtype (base.dtype) every activation and activation
 * gradient is rounded to it as soon as its op has written it, as a GPU would
 * store it, while GEMMs and softmax sums accumulate in fp32: forward, each
 * layer's output after the bias (the last one is the logits) and GELU's
 * output; backward, dlogits (which carry the loss scale) and each layer's
 * input gradient before and after the activation's backward. ReLU needs no
 * rounding either way: it passes rounded values or zeros. The per-sample
 * losses and lse stay fp32 (reductions), and the input rows arrive already
 * rounded (trainer/train.c; capi.c for the tests).
 *
 * A hidden layer is a block for offload.activations (model.h): what backward
 * needs of it is its output after the activation (the next layer's input)
 * and, for GELU, before it. "recompute" keeps the former and recomputes the
 * latter (the layer's matmul from its saved input, into one scratch shared
 * by all layers) just before the activation's backward; ReLU, applied in
 * place, keeps nothing else, so there it changes nothing. "cpu" works in two
 * staging slots and keeps the hidden layers' outputs in a host store
 * (trainer/act_offload.h). The logits stay in the model's memory.
 *
 * Each layer is a block for offload.params too (model.h): its weight and
 * bias are reached only through trn_model_block_*, staged with "cpu"
 * (trainer/param_offload.h). Backward takes a hidden layer's activation
 * backward (and its "recompute") at the start of that layer's block, the
 * weights it needs being the layer's own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "kernels/relu.h"
#include "kernels/softmax_xent.h"
#include "rng.h"
#include "spec/mlp_layout.h"

/* "cpu": points hidden layer j's pre and post into staging slot s */
static void map_block(struct mlp *m, int j, int s)
{
	m->post[j] = m->slot[s];
	m->pre[j] = m->act == TRN_ACT_GELU ? m->slot[s] + (long)m->base.max_batch * m->dims[j + 1]
	                                   : m->slot[s];
}

/* Layer i's output before the activation into pre[i], rounded; bw is the
 * layer's weight, its bias follows. */
static void layer_fwd(struct mlp *m, const float *bw, const float *inp, int i, int n)
{
	struct trn_model *base = &m->base;
	kern_matmul_fwd_cpu(m->pre[i], inp, bw, bw + base->params[2 * i].numel, n, m->dims[i],
	                    m->dims[i + 1]);
	trn_model_round(base, m->pre[i], (long)n * m->dims[i + 1]);
}

static const float *layer_input(const struct mlp *m, const struct trn_batch *b, int i)
{
	return i == 0 ? b->x : m->post[i - 1];
}

static double mlp_forward(struct trn_model *base, const struct trn_batch *b, struct trn_fwd_stats *st)
{
	struct mlp *m = (struct mlp *)base;
	int n = b->n;
	m->n = n;
	int cpu = base->act_offload == TRN_OFFLOAD_CPU;
	trn_model_fwd_start(base);
	for (int i = 0; i < m->n_layers; i++) {
		long len = (long)n * m->dims[i + 1];
		int hidden = i + 1 < m->n_layers;
		const float *bw = trn_model_block_fwd(base, i);
		if (cpu && hidden)
			map_block(m, i, trn_act_offload_fwd_begin(&m->off, i));
		layer_fwd(m, bw, layer_input(m, b, i), i, n);
		if (hidden) {
			if (m->act == TRN_ACT_GELU) {
				kern_gelu_fwd_cpu(m->post[i], m->pre[i], len);
				trn_model_round(base, m->post[i], len);
			} else {
				kern_relu_fwd_cpu(m->post[i], m->pre[i], len);
			}
			if (cpu)
				trn_act_offload_fwd_end(&m->off, i);
		}
	}
	int classes = m->dims[m->n_layers];
	const float *logits = m->pre[m->n_layers - 1];
	kern_softmax_xent_fwd_cpu(m->losses, m->lse, logits, b->targets, n, classes);

	return trn_model_score(logits, m->losses, b->targets, n, classes, st);
}

/* Gradients of the activations overwrite their buffers (the _set kernels)
 * rather than being added into zeroed ones: layer i's input gradient goes to
 * one scratch buffer, the two buffers swap roles, and at layer i - 1 the
 * activation's backward turns it in place into the gradient of that layer's
 * output before the activation. */
static void mlp_backward(struct trn_model *base, const struct trn_batch *b, float scale)
{
	struct mlp *m = (struct mlp *)base;
	int n = m->n;
	int last = m->n_layers - 1;
	float *dout = m->dpre, *dinp = m->dpost;

	kern_softmax_xent_bwd_set_cpu(dout, scale / (float)n, m->pre[last], m->lse, b->targets, n,
	                              m->dims[last + 1]);
	trn_model_round(base, dout, (long)n * m->dims[last + 1]);
	for (int i = last; i >= 0; i--) {
		float *bg;
		const float *bw = trn_model_block_bwd(base, i, &bg);
		long wn = base->params[2 * i].numel;
		if (i < last) {
			/* dout: the gradient of hidden layer i's output after the activation */
			long len = (long)n * m->dims[i + 1];
			if (m->act == TRN_ACT_GELU) {
				if (base->act_offload == TRN_OFFLOAD_RECOMPUTE)
					layer_fwd(m, bw, layer_input(m, b, i), i, n);
				kern_gelu_bwd_set_cpu(dout, m->pre[i], dout, len);
				trn_model_round(base, dout, len);
			} else {
				/* pre[i] holds relu's output: > 0 exactly where its input was */
				kern_relu_bwd_set_cpu(dout, m->pre[i], dout, len);
			}
		}
		/* layer i's input is hidden layer i - 1's output */
		if (i > 0 && base->act_offload == TRN_OFFLOAD_CPU)
			map_block(m, i - 1, trn_act_offload_bwd_begin(&m->off, i - 1));
		kern_matmul_bwd_set_cpu(i > 0 ? dinp : NULL, bg, bg + wn, dout, layer_input(m, b, i),
		                        bw, n, m->dims[i], m->dims[i + 1]);
		trn_model_block_grad_ready(base, i, 2 * i + 1);
		trn_model_block_grad_ready(base, i, 2 * i);
		trn_model_block_bwd_end(base, i);
		if (i > 0) {
			trn_model_round(base, dinp, (long)n * m->dims[i]);
			float *t = dout;
			dout = dinp;
			dinp = t;
		}
	}
	trn_model_blocks_bwd_done(base);
}

/* He (Kaiming) normal init for the weights, std = sqrt(2 / fan_in), which
 * keeps activation variance through ReLU layers; zero biases. */
static void mlp_init_weights(struct trn_model *base, uint64_t seed)
{
	struct mlp *m = (struct mlp *)base;
	struct trn_rng rng;
	trn_rng_seed(&rng, seed, 1);
	for (int i = 0; i < m->n_layers; i++) {
		const struct trn_param *w = &base->params[2 * i], *bias = &base->params[2 * i + 1];
		double std = sqrt(2.0 / m->dims[i]);
		trn_rng_fill_normal(&rng, base->w + w->offset, w->numel, std);
		memset(base->w + bias->offset, 0, sizeof(float) * (size_t)bias->numel);
	}
}

static void mlp_free(struct trn_model *base)
{
	struct mlp *m = (struct mlp *)base;
	trn_act_offload_release(&m->off);
	free(m->arena);
	trn_mlp_layout_release(m);
	free(m);
}

const struct trn_model_ops trn_mlp_ops = {
	.forward = mlp_forward,
	.backward = mlp_backward,
	.init_weights = mlp_init_weights,
	.free = mlp_free,
};

/* Lays the activations of m's offload.activations out in one arena. */
static int alloc_acts(struct mlp *m)
{
	struct trn_model *base = &m->base;
	long B = base->max_batch;
	long total = trn_mlp_carve(m, base->act_offload, B, NULL);
	if (!(m->arena = malloc(sizeof(float) * (size_t)total)))
		return -1;
	trn_mlp_carve(m, base->act_offload, B, m->arena);
	if (base->act_offload != TRN_OFFLOAD_CPU)
		return 0;
	long floats[MLP_MAX_LAYERS];
	int n_blocks = m->n_layers - 1;
	for (int j = 0; j < n_blocks; j++)
		floats[j] = trn_mlp_block_floats(m, j);
	return trn_act_offload_init(&m->off, n_blocks, floats, m->slot[0], m->slot[1], NULL, 0);
}

struct trn_model *trn_mlp_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                              int max_batch, struct trn_err *err)
{
	struct mlp *m = calloc(1, sizeof *m);
	if (!m) {
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	struct trn_model *base = &m->base;
	base->ops = &trn_mlp_ops;
	if (trn_mlp_layout_init(m, spec, ds, max_batch, err) != 0) {
		mlp_free(base);
		return NULL;
	}
	if (trn_model_alloc(base) < 0 || alloc_acts(m) < 0) {
		mlp_free(base);
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	return base;
}
