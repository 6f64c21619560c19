/* trainer/model.c - the parameter table shared by the models, their
 * blocks' weights and gradients (staged with offload.params "cpu"), and
 * dispatch. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "param_offload.h"

/* ---- blocks and offload.params ---------------------------------------------------- */

static int block_param(const struct trn_model *m, int b)
{
	return m->block_first + b * m->block_params;
}

/* first float of block b in w and g */
static long block_off(const struct trn_model *m, int b)
{
	return m->params[block_param(m, b)].offset;
}

static long block_floats(const struct trn_model *m, int b)
{
	const struct trn_param *last = &m->params[block_param(m, b) + m->block_params - 1];
	return last->offset + last->numel - block_off(m, b);
}

void trn_model_set_blocks(struct trn_model *m, int n_blocks, int first_param, int block_params)
{
	m->n_blocks = n_blocks;
	m->block_first = first_param;
	m->block_params = block_params;
}

long trn_model_block_range(const struct trn_model *m, int b, long *floats)
{
	*floats = block_floats(m, b);
	return block_off(m, b);
}

long trn_model_largest_block(const struct trn_model *m)
{
	long most = 0;
	for (int b = 0; b < m->n_blocks; b++)
		most = block_floats(m, b) > most ? block_floats(m, b) : most;
	return most;
}

int trn_model_block_of(const struct trn_model *m, int p)
{
	int rel = p - m->block_first;
	if (m->n_blocks < 1 || rel < 0 || rel >= m->n_blocks * m->block_params)
		return -1;
	return rel / m->block_params;
}

/* One past the last float of the blocks (block_off(m, 0) their first). */
static long blocks_end(const struct trn_model *m)
{
	return block_off(m, m->n_blocks - 1) + block_floats(m, m->n_blocks - 1);
}

/* g: zeroed floats, or streamed, a mapping whose pages over the blocks'
 * interior are no memory at all and unreadable (a stray touch faults: the
 * tests would see it), those of the resident tensors at either end zeroed
 * and writable. 0, or -1 when out of memory. */
static int alloc_grads(struct trn_model *m)
{
	size_t bytes = sizeof(float) * (size_t)m->n_floats;
	if (!m->streamed || m->n_blocks < 1) {
		m->g = calloc((size_t)m->n_floats, sizeof(float));
		return m->g ? 0 : -1;
	}
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t map = (bytes + page - 1) / page * page;
	void *p = mmap(NULL, map, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	size_t head = (sizeof(float) * (size_t)block_off(m, 0) + page - 1) / page * page;
	size_t tail = sizeof(float) * (size_t)blocks_end(m) / page * page;
	if (tail <= head)
		head = tail = map;             /* blocks within a page or two: all backed */
	if ((head && mprotect(p, head, PROT_READ | PROT_WRITE) != 0) ||
	    (map > tail && mprotect((char *)p + tail, map - tail, PROT_READ | PROT_WRITE) != 0)) {
		munmap(p, map);
		return -1;
	}
	m->g = p;
	m->g_map_bytes = map;
	return 0;
}

static void free_grads(struct trn_model *m)
{
	if (m->g_map_bytes && m->g)
		munmap(m->g, m->g_map_bytes);
	else
		free(m->g);
	m->g = NULL;
	m->g_map_bytes = 0;
}

/* Sizes the staging of mode and, unless layout_only, sets the engine up. */
static int setup_param_offload(struct trn_model *m, enum trn_offload mode, int layout_only)
{
	long *off = malloc(sizeof *off * (size_t)(m->n_blocks + 1));
	long *floats = malloc(sizeof *floats * (size_t)(m->n_blocks + 1));
	int rc = off && floats ? 0 : -1;
	long in_blocks = 0;
	for (int b = 0; rc == 0 && b < m->n_blocks; b++) {
		off[b] = block_off(m, b);
		floats[b] = block_floats(m, b);
		in_blocks += floats[b];
	}
	m->param_offload = mode;
	m->param_resident_floats = m->n_floats - in_blocks;
	if (rc == 0 && mode == TRN_OFFLOAD_CPU) {
		m->param_stage_floats = 2 * trn_param_offload_slot_floats(m->n_blocks, floats);
		if (!layout_only) {
			m->param_off = calloc(1, sizeof *m->param_off);
			rc = m->param_off ? trn_param_offload_init(m->param_off, m->n_blocks, off, floats,
			                                           m->w, m->streamed ? NULL : m->g,
			                                           NULL) : -1;
		}
	}
	free(off);
	free(floats);
	return rc;
}

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
	return (m->w_dev ? m->w_dev : m->w) + block_off(m, b);
}

const float *trn_model_block_bwd(struct trn_model *m, int b, float **grads)
{
	if (m->param_off)
		return trn_param_offload_bwd_begin(m->param_off, b, grads);
	*grads = (m->g_dev ? m->g_dev : m->g) + block_off(m, b);
	return (m->w_dev ? m->w_dev : m->w) + block_off(m, b);
}

/* Hands block b's parameters, whose gradients have reached g, to the hook
 * in the order backward finished them (the reverse of the table's). */
static void block_landed(struct trn_model *m, int b)
{
	if (b < 0 || !m->grad_ready)
		return;
	for (int p = block_param(m, b) + m->block_params - 1; p >= block_param(m, b); p--)
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
	trn_model_round(m, grads + (m->params[param].offset - block_off(m, b)),
	                m->params[param].numel);
}

const float *trn_model_grad_of(const struct trn_model *m, int param)
{
	int b = m->streamed ? trn_model_block_of(m, param) : -1;
	if (b < 0)
		return m->g + m->params[param].offset;
	const float *win = trn_param_offload_window(m->param_off, b);
	return win ? win + (m->params[param].offset - block_off(m, b)) : NULL;
}

void trn_model_grads_ready_as_they_are(struct trn_model *m)
{
	for (int p = m->n_params - 1; p >= 0; p--) {
		int b = m->streamed ? trn_model_block_of(m, p) : -1;
		if (b < 0) {
			trn_model_grad_ready(m, p);
			continue;
		}
		if (p == block_param(m, b) + m->block_params - 1)   /* the block's first handed out */
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

static struct trn_model *build(const struct trn_spec *spec, const struct trn_dataset *ds,
                               int max_batch, int layout_only, struct trn_err *err)
{
	if (max_batch < 1) {
		trn_err_set(err, "model: micro-batch must be at least 1 (got %d)", max_batch);
		return NULL;
	}
	struct trn_model *m = NULL;
	switch (spec->model.type) {
	case TRN_MODEL_MLP:
		if (ds->task != TRN_TASK_CLASSIFY) {
			trn_err_set(err, "model.type: mlp needs image data (data.format idx)");
			return NULL;
		}
		m = trn_mlp_new(spec, ds, max_batch, layout_only, err);
		break;
	case TRN_MODEL_GPT:
		if (ds->task != TRN_TASK_TOKENS) {
			trn_err_set(err, "model.type: gpt needs token data (data.format tokens_u16 or text)");
			return NULL;
		}
		m = trn_gpt_new(spec, ds, max_batch, layout_only, err);
		break;
	default:
		trn_err_set(err, "model.type: unknown model type");
		return NULL;
	}
	if (!m)
		return NULL;
	m->dtype = spec->precision.compute;
	m->streamed = trn_spec_streams_update(spec) && spec->offload.params == TRN_OFFLOAD_CPU &&
	              m->n_blocks > 0;
	if (m->streamed && !layout_only) {   /* the constructor's g, for one without blocks */
		free_grads(m);
		if (alloc_grads(m) != 0) {
			trn_model_free(m);
			trn_err_set(err, "model: out of address space for the gradients");
			return NULL;
		}
	}
	if (setup_param_offload(m, spec->offload.params, layout_only) != 0) {
		trn_model_free(m);
		trn_err_set(err, "model: out of memory for the parameter staging");
		return NULL;
	}
	return m;
}

struct trn_model *trn_model_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                int max_batch, struct trn_err *err)
{
	return build(spec, ds, max_batch, 0, err);
}

struct trn_model *trn_model_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, struct trn_err *err)
{
	return build(spec, ds, max_batch, 1, err);
}

struct trn_model *trn_model_new_on(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, int cuda_device, struct trn_err *err)
{
	if (cuda_device < 0)
		return trn_model_new(spec, ds, max_batch, err);
	if (max_batch < 1) {
		trn_err_set(err, "model: micro-batch must be at least 1 (got %d)", max_batch);
		return NULL;
	}
	const struct trn_cuda_backend *be = trn_cuda_backend_get(err);
	return be ? be->model_new(spec, ds, max_batch, cuda_device, err) : NULL;
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

int trn_model_cuda_list(FILE *out)
{
	struct trn_err err = { 0 };
	const struct trn_cuda_backend *be = trn_cuda_backend_get(&err);
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

void trn_model_free(struct trn_model *m)
{
	if (m)
		m->ops->free(m);
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
		memset(m->g, 0, sizeof(float) * (size_t)block_off(m, 0));
		memset(m->g + blocks_end(m), 0, sizeof(float) * (size_t)(m->n_floats - blocks_end(m)));
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

const struct trn_param *trn_model_param(const struct trn_model *m, const char *name)
{
	for (int i = 0; i < m->n_params; i++)
		if (strcmp(m->params[i].name, name) == 0)
			return &m->params[i];
	return NULL;
}

int trn_model_add_param(struct trn_model *m, const char *name, int ndim, const int *shape)
{
	struct trn_param *grown = realloc(m->params, sizeof *grown * (size_t)(m->n_params + 1));
	if (!grown)
		return -1;
	m->params = grown;
	struct trn_param *p = &m->params[m->n_params];
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->ndim = ndim;
	p->numel = 1;
	for (int i = 0; i < ndim; i++) {
		p->shape[i] = shape[i];
		p->numel *= shape[i];
	}
	p->offset = m->n_floats;
	m->n_floats += p->numel;
	return m->n_params++;
}

int trn_model_alloc(struct trn_model *m)
{
	m->w = calloc((size_t)m->n_floats, sizeof(float));
	return m->w && alloc_grads(m) == 0 ? 0 : -1;
}

void trn_model_release(struct trn_model *m)
{
	if (m->param_off)
		trn_param_offload_release(m->param_off);
	free(m->param_off);
	m->param_off = NULL;
	free(m->params);
	free(m->w);
	free_grads(m);
	m->params = NULL;
	m->w = NULL;
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
