/* trainer/model_mlp_cuda.c - the MLP classifier on the GPU: model_mlp.c's
 * forward and backward, op for op, with the kernels' CUDA versions on
 * device copies of the parameters (trainer/model_cuda.h). ReLU is applied
 * in place (its output tells backward where its input was positive), GELU
 * keeps its input; two gradient buffers swap roles from the top layer down.
 *
 * The offloads are model_mlp.c's: each layer is a block, its weight and
 * bias reached through trn_model_block_* (with offload.params "cpu" the
 * engine's device slots, whose gradients this model rounds in place before
 * they go out); offload.activations "recompute" keeps the hidden layers'
 * outputs and recomputes GELU's input into one scratch; "cpu" stages the
 * hidden layers in two device slots and keeps them in a page-locked host
 * store (trainer/act_offload.h).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/gelu_cuda.h"
#include "kernels/matmul_cuda.h"
#include "kernels/relu_cuda.h"
#include "kernels/softmax_xent_cuda.h"
#include "act_offload.h"
#include "model_cuda.h"
#include "param_offload.h"

#define MLP_MAX_LAYERS (TRN_MAX_HIDDEN + 1)

struct mlp_cuda {
	struct trn_cuda_model c;           /* first */
	int n_layers;
	int dims[MLP_MAX_LAYERS + 1];
	enum trn_act act;
	int n;                             /* rows in the last forward */
	float *x;                          /* [B, dims[0]] the input rows */
	float *pre[MLP_MAX_LAYERS], *post[MLP_MAX_LAYERS];
	float *slot[2];                    /* "cpu": staging, where pre and post of hidden layers point */
	struct trn_act_offload off;        /* "cpu" */
	float *dpre, *dpost;               /* [B, widest] */
	float *losses, *lse;
	int *ready;
};

/* floats of hidden layer j's saved activations at max_batch rows */
static long block_floats(const struct mlp_cuda *m, int j)
{
	return (m->act == TRN_ACT_GELU ? 2L : 1L) * m->c.base.max_batch * m->dims[j + 1];
}

/* "cpu": points hidden layer j's pre and post into staging slot s */
static void map_block(struct mlp_cuda *m, int j, int s)
{
	m->post[j] = m->slot[s];
	m->pre[j] = m->act == TRN_ACT_GELU ? m->slot[s] + (long)m->c.base.max_batch * m->dims[j + 1]
	                                   : m->slot[s];
}

/* Lays the arena out for offload.activations mode from base (NULL: only
 * counts), as model_mlp.c's carve; each buffer starts on 256 bytes. */
static long carve(struct mlp_cuda *m, enum trn_offload mode, long B, float *base)
{
	int last = m->n_layers - 1, gelu = m->act == TRN_ACT_GELU;
	long used = 0, widest = 0;
#define TAKE(ptr, n) do { if (base) (ptr) = base + used; used += ((n) + 63) / 64 * 64; } while (0)
	TAKE(m->x, B * m->dims[0]);
	for (int i = 0; i <= last; i++) {
		widest = m->dims[i] > widest ? m->dims[i] : widest;
		widest = m->dims[i + 1] > widest ? m->dims[i + 1] : widest;
	}
	if (mode == TRN_OFFLOAD_RECOMPUTE && gelu && last > 0) {
		/* one pre for all hidden layers, recomputed for backward */
		long wide = 0;
		for (int j = 0; j < last; j++)
			wide = m->dims[j + 1] > wide ? m->dims[j + 1] : wide;
		float *scratch = NULL;
		TAKE(scratch, B * wide);
		for (int j = 0; j < last; j++) {
			if (base)
				m->pre[j] = scratch;
			TAKE(m->post[j], B * m->dims[j + 1]);
		}
	} else if (mode == TRN_OFFLOAD_CPU && last > 0) {
		long slot = 0;
		for (int j = 0; j < last; j++)
			slot = block_floats(m, j) > slot ? block_floats(m, j) : slot;
		TAKE(m->slot[0], slot);
		TAKE(m->slot[1], slot);
	} else {
		for (int j = 0; j < last; j++) {
			TAKE(m->pre[j], B * m->dims[j + 1]);
			if (gelu)
				TAKE(m->post[j], B * m->dims[j + 1]);
			else if (base)
				m->post[j] = m->pre[j];
		}
	}
	TAKE(m->pre[last], B * m->dims[last + 1]);
	TAKE(m->dpre, B * widest);
	TAKE(m->dpost, B * widest);
	TAKE(m->losses, B);
	TAKE(m->lse, B);
#undef TAKE
	return used;
}

static const float *layer_input(const struct mlp_cuda *m, int i)
{
	return i == 0 ? m->x : m->post[i - 1];
}

/* Layer i's output before the activation into pre[i], rounded; bw is the
 * layer's weight, its bias follows. */
static void layer_fwd(struct mlp_cuda *m, const float *bw, int i, int n)
{
	kern_matmul_fwd_cuda(m->pre[i], layer_input(m, i), bw, bw + m->c.base.params[2 * i].numel,
	                     n, m->dims[i], m->dims[i + 1]);
	trn_cuda_model_round(&m->c, m->pre[i], (long)n * m->dims[i + 1]);   /* as model_mlp.c */
}

static double mlp_cuda_forward(struct trn_model *base, const struct trn_batch *b,
                               struct trn_fwd_stats *st)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	int n = b->n;
	int cpu = base->act_offload == TRN_OFFLOAD_CPU;
	m->n = n;
	trn_cuda_model_sync_weights(&m->c);
	trn_cuda_model_gemms(&m->c);
	trn_cuda_model_inputs(&m->c, b, m->x, m->dims[0]);
	trn_model_fwd_start(base);
	for (int i = 0; i < m->n_layers; i++) {
		long len = (long)n * m->dims[i + 1];
		int hidden = i + 1 < m->n_layers;
		const float *bw = trn_model_block_fwd(base, i);
		if (cpu && hidden)
			map_block(m, i, trn_act_offload_fwd_begin(&m->off, i));
		layer_fwd(m, bw, i, n);
		if (!hidden)
			break;
		if (m->act == TRN_ACT_GELU) {
			kern_gelu_fwd_cuda(m->post[i], m->pre[i], len);   /* stored rounded */
		} else {
			kern_relu_fwd_cuda(m->post[i], m->pre[i], len);
		}
		if (cpu)
			trn_act_offload_fwd_end(&m->off, i);
	}
	int classes = m->dims[m->n_layers];
	const float *logits = m->pre[m->n_layers - 1];
	kern_softmax_xent_fwd_cuda(m->losses, m->lse, logits, m->c.targets_dev, n, classes);
	return trn_cuda_model_score(&m->c, m->losses, KERN_ACT_F32, logits, classes, b->targets, n,
	                            classes, st);
}

static void mlp_cuda_backward(struct trn_model *base, const struct trn_batch *b, float scale)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	(void)b;
	int n = m->n, last = m->n_layers - 1;
	int poff = base->param_off != NULL;
	int out = trn_cuda_model_streams_grads(&m->c);  /* layer by layer, as they are final */
	int dev = trn_cuda_model_reports_on_device(&m->c);   /* the same, on the device */
	float *dout = m->dpre, *dinp = m->dpost;
	trn_cuda_model_gemms(&m->c);
	trn_cuda_model_grads_begin(&m->c);
	kern_softmax_xent_bwd_set_cuda(dout, scale / (float)n, m->pre[last], m->lse,
	                               m->c.targets_dev, n, m->dims[last + 1]);   /* stored rounded */
	for (int i = last; i >= 0; i--) {
		float *bg;
		const float *bw = trn_model_block_bwd(base, i, &bg);
		long wn = base->params[2 * i].numel;
		if (i < last) {
			/* dout: the gradient of hidden layer i's output after the activation */
			long len = (long)n * m->dims[i + 1];
			if (m->act == TRN_ACT_GELU) {
				if (base->act_offload == TRN_OFFLOAD_RECOMPUTE)
					layer_fwd(m, bw, i, n);
				kern_gelu_bwd_set_cuda(dout, m->pre[i], dout, len);   /* stored rounded */
			} else {    /* pre[i] holds relu's output: > 0 exactly where its input was */
				kern_relu_bwd_set_cuda(dout, m->pre[i], dout, len);
			}
		}
		/* layer i's input is hidden layer i - 1's output */
		if (i > 0 && base->act_offload == TRN_OFFLOAD_CPU)
			map_block(m, i - 1, trn_act_offload_bwd_begin(&m->off, i - 1));
		kern_matmul_bwd_set_cuda(i > 0 ? dinp : NULL, bg, bg + wn, dout, layer_input(m, i), bw,
		                         n, m->dims[i], m->dims[i + 1]);
		if (poff) {
			/* final: rounded in the slot, which goes out to g as it is */
			trn_cuda_model_round(&m->c, bg, wn + base->params[2 * i + 1].numel);
			trn_model_block_bwd_end(base, i);
		} else if (out) {
			trn_cuda_model_block_out(&m->c, i, m->ready);
		} else if (dev) {
			trn_cuda_model_block_final(&m->c, i, m->ready);
		}
		if (i > 0) {
			trn_cuda_model_round(&m->c, dinp, (long)n * m->dims[i]);
			float *t = dout;
			dout = dinp;
			dinp = t;
		}
	}
	if (!poff && !out) {
		if (!dev)
			trn_cuda_model_grads_out(&m->c, m->ready);
		return;
	}
	if (poff)
		trn_model_blocks_bwd_done(base);
	else
		trn_cuda_model_blocks_out_done(&m->c, m->ready);
	base->g_zeroed = 0;
}

static void mlp_cuda_init_weights(struct trn_model *base, uint64_t seed)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	trn_model_init_weights(m->c.cpu, seed);
}

static void mlp_cuda_free(struct trn_model *base)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	trn_cuda_model_drain_copies();
	trn_act_offload_release(&m->off);
	trn_cuda_model_release(&m->c);
	free(m->ready);
	free(m);
}

static const struct trn_model_ops mlp_cuda_ops = {
	.forward = mlp_cuda_forward,
	.backward = mlp_cuda_backward,
	.init_weights = mlp_cuda_init_weights,
	.free = mlp_cuda_free,
	.zero_device_grads = trn_cuda_model_zero_device_grads,
	.pull_weights = trn_cuda_model_pull_weights,
	.publish_master = trn_cuda_model_publish_master,
	.device_weights_changed = trn_cuda_model_device_weights_changed,
	.device_memory = trn_cuda_model_device_memory,
	.range_changed = trn_cuda_model_range_changed,
	.stage_batch = trn_cuda_model_stage_batch,
};

struct trn_model *trn_mlp_cuda_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   struct trn_model *cpu, int max_batch, struct trn_err *err)
{
	struct mlp_cuda *m = calloc(1, sizeof *m);
	if (!m) {
		trn_model_free(cpu);
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	m->c.cpu = cpu;
	m->act = spec->model.activation;
	m->n_layers = spec->model.n_hidden + 1;
	m->dims[0] = ds->dim;
	for (int i = 0; i < spec->model.n_hidden; i++)
		m->dims[i + 1] = spec->model.hidden[i];
	m->dims[m->n_layers] = ds->n_classes;
	if (cpu->n_params != 2 * m->n_layers) {
		mlp_cuda_free(&m->c.base);
		trn_err_set(err, "model: the mlp's parameter table has %d entries, the GPU model "
		            "expects %d", cpu->n_params, 2 * m->n_layers);
		return NULL;
	}
	if (!(m->ready = malloc(sizeof(int) * (size_t)cpu->n_params))) {
		mlp_cuda_free(&m->c.base);
		trn_err_set(err, "model: out of memory");
		return NULL;
	}
	for (int i = m->n_layers - 1, k = 0; i >= 0; i--) {   /* model_mlp.c's order */
		m->ready[k++] = 2 * i + 1;
		m->ready[k++] = 2 * i;
	}
	enum trn_offload mode = spec->offload.activations;
	m->c.base.max_batch = max_batch;   /* block_floats' rows, before trn_cuda_model_init */
	long floats = carve(m, mode, max_batch, NULL);
	if (trn_cuda_model_init(&m->c, cpu, &mlp_cuda_ops, max_batch, floats, err) != 0) {
		mlp_cuda_free(&m->c.base);
		return NULL;
	}
	carve(m, mode, max_batch, m->c.arena);
	m->c.ahead.x_row = m->dims[0];     /* batches copied ahead carry x */
	m->c.base.act_offload = mode;
	m->c.base.act_bytes_none = carve(m, TRN_OFFLOAD_NONE, max_batch, NULL) * (long)sizeof(float);
	int n_blocks = m->n_layers - 1;
	if (mode == TRN_OFFLOAD_CPU && n_blocks > 0) {
		long region[MLP_MAX_LAYERS];
		for (int j = 0; j < n_blocks; j++)
			region[j] = block_floats(m, j);
		if (trn_act_offload_init(&m->off, n_blocks, region, m->slot[0], m->slot[1],
		                         &trn_cuda_copier, TRN_PARAM_OFFLOAD_CHANNELS) != 0) {
			mlp_cuda_free(&m->c.base);
			trn_err_set(err, "model: out of memory for the activation offload's host store");
			return NULL;
		}
		m->c.base.act_host_bytes = m->off.host_floats * (long)sizeof(float);
	}
	return &m->c.base;
}
