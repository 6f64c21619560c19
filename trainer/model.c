/* trainer/model.c - the models' blocks' weights and gradients as forward
 * and backward reach them (staged with offload.params "cpu"), and
 * dispatch. The parameter table and the layouts are
 * trainer/spec/model_layout.c's. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "options.h"
#include "param_offload.h"
#include "spec/gpt_layout.h"
#include "spec/mlp_layout.h"

/* ---- blocks and offload.params ---------------------------------------------------- */

void trn_model_fwd_start(struct trn_model *m)
{
	if (m->param_off)
		trn_param_offload_fwd_start(m->param_off);
}

/* (a GPU model computes on its device copies, w_dev and g_dev) */
const float *trn_model_block_fwd(struct trn_model *m, int b)
{
	if (m->param_off)
		return trn_param_offload_fwd(m->param_off, b);
	return (m->w_dev ? m->w_dev : m->w) + trn_model_block_off(m, b);
}

const float *trn_model_block_bwd(struct trn_model *m, int b, float **grads)
{
	if (m->param_off)
		return trn_param_offload_bwd_begin(m->param_off, b, grads);
	*grads = (m->g_dev ? m->g_dev : m->g) + trn_model_block_off(m, b);
	return (m->w_dev ? m->w_dev : m->w) + trn_model_block_off(m, b);
}

/* Hands block b's parameters, whose gradients have reached g, to the hook
 * in the order backward finished them (the reverse of the table's). */
static void block_landed(struct trn_model *m, int b)
{
	if (b < 0 || !m->grad_ready)
		return;
	int first = trn_model_block_param(m, b);
	for (int p = first + m->block_params - 1; p >= first; p--)
		m->grad_ready(m->grad_ready_ctx, p);
}

void trn_model_block_grad_ready(struct trn_model *m, int b, int param)
{
	if (!m->param_off) {
		trn_model_grad_ready(m, param);
		return;
	}
	/* rounded in the staging, which the copy out takes to g as it is */
	float *grads = m->param_off->gslot[b % 2];
	trn_model_round(m, grads + (m->params[param].offset - trn_model_block_off(m, b)),
	                m->params[param].numel);
}

const float *trn_model_grad_of(const struct trn_model *m, int param)
{
	int b = m->streamed ? trn_model_block_of(m, param) : -1;
	if (b < 0)
		return m->g + m->params[param].offset;
	const float *win = trn_param_offload_window(m->param_off, b);
	return win ? win + (m->params[param].offset - trn_model_block_off(m, b)) : NULL;
}

void trn_model_grads_ready_as_they_are(struct trn_model *m)
{
	for (int p = m->n_params - 1; p >= 0; p--) {
		int b = m->streamed ? trn_model_block_of(m, p) : -1;
		if (b < 0) {
			trn_model_grad_ready(m, p);
			continue;
		}
		if (p == trn_model_block_param(m, b) + m->block_params - 1)   /* the block's first handed out */
			trn_param_offload_zero_window(m->param_off, b);
		if (m->grad_ready)
			m->grad_ready(m->grad_ready_ctx, p);
	}
}

void trn_model_block_bwd_end(struct trn_model *m, int b)
{
	if (m->param_off)
		block_landed(m, trn_param_offload_bwd_end(m->param_off, b));
}

void trn_model_blocks_bwd_done(struct trn_model *m)
{
	if (m->param_off)
		block_landed(m, trn_param_offload_bwd_finish(m->param_off));
}

/* ---- construction and dispatch ------------------------------------------------------ */

struct trn_model *trn_model_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                int max_batch, struct trn_err *err)
{
	return trn_model_build(spec, ds, max_batch, trn_mlp_new, trn_gpt_new, 0, err);
}

struct trn_model *trn_model_host_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                        int max_batch, struct trn_err *err)
{
	struct trn_model *m = trn_model_layout(spec, ds, max_batch, err);
	/* the layout is the CPU model's struct without its activations */
	if (m)
		m->ops = spec->model.type == TRN_MODEL_MLP ? &trn_mlp_ops : &trn_gpt_ops;
	return m;
}

struct trn_model *trn_model_new_on(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, int cuda_device,
                                   const struct trn_options *opts, struct trn_err *err)
{
	if (cuda_device < 0)
		return trn_model_new(spec, ds, max_batch, err);
	if (max_batch < 1) {
		trn_err_set(err, "model: micro-batch must be at least 1 (got %d)", max_batch);
		return NULL;
	}
	const struct trn_options none = { 0 };
	if (!opts)
		opts = &none;
	struct kern_cuda_opts kopts = { .sync = opts->cuda_sync,
	                                .kernel_picks = opts->cuda_kernel_picks };
	const struct trn_cuda_backend *be = trn_cuda_backend_load(opts->cuda_backend, err);
	return be ? be->model_new(spec, ds, max_batch, cuda_device, &kopts, err) : NULL;
}

void trn_model_cuda_tune_dir(const char *job_dir)
{
	struct trn_err err = { 0 };
	const struct trn_cuda_backend *be = trn_cuda_backend_get(&err);
	if (be && be->gemm_tune_dir)
		be->gemm_tune_dir(job_dir);
}

int trn_model_cuda_built(void)
{
#ifdef LARCH_HAVE_CUDA
	return 1;
#else
	return 0;
#endif
}

int trn_model_cuda_list(FILE *out, const struct trn_options *opts)
{
	struct trn_err err = { 0 };
	const struct trn_cuda_backend *be =
		trn_cuda_backend_load(opts ? opts->cuda_backend : NULL, &err);
	if (!be) {
		fprintf(out, "cuda: none (%s)\n", err.text);
		return 0;
	}
	return be->print_devices(out);
}

void trn_model_weights_changed(struct trn_model *m)
{
	m->w_version++;
}

void trn_model_weights_streamed(struct trn_model *m)
{
	m->w_streamed_at = ++m->w_version;
}

void trn_model_range_changed(struct trn_model *m, long off, long n)
{
	if (m->ops->range_changed && n > 0)
		m->ops->range_changed(m, off, n);
}

int trn_model_stages_batches(const struct trn_model *m)
{
	return m->ops->stage_batch != NULL;
}

void trn_model_stage_batch(struct trn_model *m, const struct trn_batch *b)
{
	if (m->ops->stage_batch)
		m->ops->stage_batch(m, b);
}

void trn_model_tensor_changed(struct trn_model *m, int p)
{
	trn_model_range_changed(m, m->params[p].offset, m->params[p].numel);
}

int trn_model_set_resident(struct trn_model *m)
{
	if (!m->device || !m->ops->zero_device_grads || !m->ops->pull_weights ||
	    !m->ops->publish_master)
		return -1;
	m->resident = 1;
	return 0;
}

void trn_model_publish_master(struct trn_model *m, const float *master_dev)
{
	m->ops->publish_master(m, master_dev);
	m->w_device_newer = 1;
}

void trn_model_device_weights_changed(struct trn_model *m)
{
	m->w_device_newer = 1;
	if (m->ops->device_weights_changed)
		m->ops->device_weights_changed(m);
}

void trn_model_pull_weights(struct trn_model *m)
{
	if (m->resident && m->w_device_newer) {
		m->ops->pull_weights(m);
		m->w_device_newer = 0;
	}
}


double trn_model_forward(struct trn_model *m, const struct trn_batch *b, struct trn_fwd_stats *st)
{
	double loss = m->ops->forward(m, b, st);
	m->bwd_scale_next = 0.0f;
	return loss;
}

void trn_model_expect_backward(struct trn_model *m, float scale)
{
	m->bwd_scale_next = scale;
}

void trn_model_backward(struct trn_model *m, const struct trn_batch *b, float scale)
{
	m->ops->backward(m, b, scale);
}

void trn_model_init_weights(struct trn_model *m, uint64_t seed)
{
	m->ops->init_weights(m, seed);
}

void trn_model_zero_grad(struct trn_model *m)
{
	if (m->resident) {            /* the gradients are the device's */
		m->ops->zero_device_grads(m);
		return;
	}
	if (m->streamed) {                /* the resident tensors': the blocks' are not kept */
		memset(m->g, 0, sizeof(float) * (size_t)trn_model_block_off(m, 0));
		long end = trn_model_blocks_end(m);
		memset(m->g + end, 0, sizeof(float) * (size_t)(m->n_floats - end));
	} else if (!m->g_overwritten) {
		memset(m->g, 0, sizeof(float) * (size_t)m->n_floats);
	}
	m->g_zeroed = 1;
	m->grads_held = 0;
	if (m->param_off)
		trn_param_offload_grads_zeroed(m->param_off);
}

void trn_model_more_micro(struct trn_model *m, int more)
{
	m->more_micro = more != 0;
}

/* trn_model_score over either the logits or each row's top-1 index */
static double score(const float *logits, const int *top1, const float *losses,
                    const int32_t *targets, long rows, int classes, struct trn_fwd_stats *st)
{
	double sum = 0;
	long correct = 0, counted = 0;
	for (long r = 0; r < rows; r++) {
		if (targets[r] < 0)
			continue;
		sum += losses[r];
		counted++;
		if (!st)
			continue;
		int best = 0;
		if (top1) {
			best = top1[r];
		} else {
			const float *row = logits + r * classes;
			for (int j = 1; j < classes; j++)
				if (row[j] > row[best])
					best = j;
		}
		correct += best == targets[r];
	}
	if (st) {
		st->loss_sum += sum;
		st->correct += correct;
		st->count += counted;
	}
	return counted ? sum / (double)counted : 0.0;
}

double trn_model_score(const float *logits, const float *losses, const int32_t *targets,
                       long rows, int classes, struct trn_fwd_stats *st)
{
	return score(logits, NULL, losses, targets, rows, classes, st);
}

double trn_model_score_top1(const int *top1, const float *losses, const int32_t *targets,
                            long rows, struct trn_fwd_stats *st)
{
	return score(NULL, top1, losses, targets, rows, 0, st);
}
