/* trainer/model_mlp_cuda.c - the MLP classifier on the GPU: model_mlp.c's
 * forward and backward, op for op, with the kernels' CUDA versions on
 * device copies of the parameters (trainer/model_cuda.h). ReLU is applied
 * in place (its output tells backward where its input was positive), GELU
 * keeps its input; two gradient buffers swap roles from the top layer down.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/gelu_cuda.h"
#include "kernels/matmul_cuda.h"
#include "kernels/relu_cuda.h"
#include "kernels/softmax_xent_cuda.h"
#include "model_cuda.h"

#define MLP_MAX_LAYERS (TRN_MAX_HIDDEN + 1)

struct mlp_cuda {
	struct trn_cuda_model c;           /* first */
	int n_layers;
	int dims[MLP_MAX_LAYERS + 1];
	enum trn_act act;
	int n;                             /* rows in the last forward */
	float *x;                          /* [B, dims[0]] the input rows */
	float *pre[MLP_MAX_LAYERS], *post[MLP_MAX_LAYERS];
	float *dpre, *dpost;               /* [B, widest] */
	float *losses, *lse;
	int *ready;
};

static long carve(struct mlp_cuda *m, long B, float *base)
{
	long used = 0, widest = 0;
#define TAKE(ptr, n) do { if (base) (ptr) = base + used; used += ((n) + 63) / 64 * 64; } while (0)
	TAKE(m->x, B * m->dims[0]);
	for (int i = 0; i < m->n_layers; i++) {
		long len = B * m->dims[i + 1];
		int hidden = i + 1 < m->n_layers;
		TAKE(m->pre[i], len);
		if (hidden && m->act == TRN_ACT_GELU)
			TAKE(m->post[i], len);
		else if (base)
			m->post[i] = m->pre[i];
		if (m->dims[i] > widest)
			widest = m->dims[i];
		if (m->dims[i + 1] > widest)
			widest = m->dims[i + 1];
	}
	TAKE(m->dpre, B * widest);
	TAKE(m->dpost, B * widest);
	TAKE(m->losses, B);
	TAKE(m->lse, B);
#undef TAKE
	return used;
}

static float *wd(struct mlp_cuda *m, int p) { return m->c.w_dev + m->c.base.params[p].offset; }
static float *gd(struct mlp_cuda *m, int p) { return m->c.g_dev + m->c.base.params[p].offset; }

static const float *layer_input(const struct mlp_cuda *m, int i)
{
	return i == 0 ? m->x : m->post[i - 1];
}

static double mlp_cuda_forward(struct trn_model *base, const struct trn_batch *b,
                               struct trn_fwd_stats *st)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	int n = b->n;
	m->n = n;
	trn_cuda_model_sync_weights(&m->c);
	trn_cuda_model_gemms(&m->c);
	kern_cuda_upload(m->x, b->x, sizeof(float) * (size_t)n * (size_t)m->dims[0]);
	kern_cuda_upload(m->c.targets_dev, b->targets, sizeof(int) * (size_t)n);
	for (int i = 0; i < m->n_layers; i++) {
		long len = (long)n * m->dims[i + 1];
		kern_matmul_fwd_cuda(m->pre[i], layer_input(m, i), wd(m, 2 * i), wd(m, 2 * i + 1), n,
		                     m->dims[i], m->dims[i + 1]);
		trn_cuda_model_round(&m->c, m->pre[i], len);   /* as model_mlp.c rounds */
		if (i + 1 == m->n_layers)
			break;
		if (m->act == TRN_ACT_GELU) {
			kern_gelu_fwd_cuda(m->post[i], m->pre[i], len);
			trn_cuda_model_round(&m->c, m->post[i], len);
		} else {
			kern_relu_fwd_cuda(m->post[i], m->pre[i], len);
		}
	}
	int classes = m->dims[m->n_layers];
	const float *logits = m->pre[m->n_layers - 1];
	kern_softmax_xent_fwd_cuda(m->losses, m->lse, logits, m->c.targets_dev, n, classes);
	return trn_cuda_model_score(&m->c, m->losses, logits, classes, b->targets, n, classes,
	                            st);
}

static void mlp_cuda_backward(struct trn_model *base, const struct trn_batch *b, float scale)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	(void)b;
	int n = m->n, last = m->n_layers - 1;
	float *dout = m->dpre, *dinp = m->dpost;
	trn_cuda_model_gemms(&m->c);
	trn_cuda_model_grads_begin(&m->c);
	kern_softmax_xent_bwd_set_cuda(dout, scale / (float)n, m->pre[last], m->lse,
	                               m->c.targets_dev, n, m->dims[last + 1]);
	trn_cuda_model_round(&m->c, dout, (long)n * m->dims[last + 1]);
	for (int i = last; i >= 0; i--) {
		if (i < last) {
			long len = (long)n * m->dims[i + 1];
			if (m->act == TRN_ACT_GELU) {
				kern_gelu_bwd_set_cuda(dout, m->pre[i], dout, len);
				trn_cuda_model_round(&m->c, dout, len);
			} else {    /* pre[i] holds relu's output: > 0 exactly where its input was */
				kern_relu_bwd_set_cuda(dout, m->pre[i], dout, len);
			}
		}
		kern_matmul_bwd_set_cuda(i > 0 ? dinp : NULL, gd(m, 2 * i), gd(m, 2 * i + 1), dout,
		                         layer_input(m, i), wd(m, 2 * i), n, m->dims[i],
		                         m->dims[i + 1]);
		if (i > 0) {
			trn_cuda_model_round(&m->c, dinp, (long)n * m->dims[i]);
			float *t = dout;
			dout = dinp;
			dinp = t;
		}
	}
	trn_cuda_model_grads_out(&m->c, m->ready);
}

static void mlp_cuda_init_weights(struct trn_model *base, uint64_t seed)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
	trn_model_init_weights(m->c.cpu, seed);
}

static void mlp_cuda_free(struct trn_model *base)
{
	struct mlp_cuda *m = (struct mlp_cuda *)base;
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
	.device_memory = trn_cuda_model_device_memory,
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
	long floats = carve(m, max_batch, NULL);
	if (trn_cuda_model_init(&m->c, cpu, &mlp_cuda_ops, max_batch, floats, err) != 0) {
		mlp_cuda_free(&m->c.base);
		return NULL;
	}
	carve(m, max_batch, m->c.arena);
	return &m->c.base;
}
