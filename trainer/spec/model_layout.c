/* trainer/spec/model_layout.c - what a model holds, without computing
 * anything: the parameter table shared by the models, their blocks, the
 * parameter staging's sizes (model.h), and the layout-only models the
 * memory plan counts (trn_model_layout). The forward and backward passes
 * are trainer/model.c's and the model files'. */
#include "trainer/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trainer/param_offload.h"

/* ---- blocks and offload.params ---------------------------------------------------- */

int trn_model_block_param(const struct trn_model *m, int b)
{
	return m->block_first + b * m->block_params;
}

long trn_model_block_off(const struct trn_model *m, int b)
{
	return m->params[trn_model_block_param(m, b)].offset;
}

static long block_floats(const struct trn_model *m, int b)
{
	const struct trn_param *last = &m->params[trn_model_block_param(m, b) + m->block_params - 1];
	return last->offset + last->numel - trn_model_block_off(m, b);
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
	return trn_model_block_off(m, b);
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

long trn_model_blocks_end(const struct trn_model *m)
{
	return trn_model_block_off(m, m->n_blocks - 1) + block_floats(m, m->n_blocks - 1);
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
	size_t head = (sizeof(float) * (size_t)trn_model_block_off(m, 0) + page - 1) / page * page;
	size_t tail = sizeof(float) * (size_t)trn_model_blocks_end(m) / page * page;
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
		off[b] = trn_model_block_off(m, b);
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

/* ---- construction ----------------------------------------------------------------- */

/* Whether spec's model can be built for ds at max_batch (the data's task
 * the model's); 0, or -1 with err set. */
static int check_data(const struct trn_spec *spec, const struct trn_dataset *ds, int max_batch,
                      struct trn_err *err)
{
	if (max_batch < 1)
		return trn_err_set(err, "model: micro-batch must be at least 1 (got %d)", max_batch);
	switch (spec->model.type) {
	case TRN_MODEL_MLP:
		if (ds->task != TRN_TASK_CLASSIFY)
			return trn_err_set(err, "model.type: mlp needs image data (data.format idx)");
		return 0;
	case TRN_MODEL_GPT:
		if (ds->task != TRN_TASK_TOKENS)
			return trn_err_set(err, "model.type: gpt needs token data (data.format tokens_u16 "
			                   "or text)");
		return 0;
	default:
		return trn_err_set(err, "model.type: unknown model type");
	}
}

/* Completes a constructor's m (takes it; NULL passes through): the compute
 * dtype, streaming, the parameter staging (sized only, when layout_only).
 * Returns m, or NULL with err set (m freed). */
static struct trn_model *finish(struct trn_model *m, const struct trn_spec *spec, int layout_only,
                                struct trn_err *err)
{
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

struct trn_model *trn_model_build(const struct trn_spec *spec, const struct trn_dataset *ds,
                                  int max_batch, trn_model_ctor mlp, trn_model_ctor gpt,
                                  int layout_only, struct trn_err *err)
{
	if (check_data(spec, ds, max_batch, err) != 0)
		return NULL;
	trn_model_ctor make = spec->model.type == TRN_MODEL_MLP ? mlp : gpt;
	return finish(make(spec, ds, max_batch, err), spec, layout_only, err);
}

struct trn_model *trn_model_layout(const struct trn_spec *spec, const struct trn_dataset *ds,
                                   int max_batch, struct trn_err *err)
{
	return trn_model_build(spec, ds, max_batch, trn_mlp_layout, trn_gpt_layout, 1, err);
}

void trn_model_free(struct trn_model *m)
{
	if (m)
		m->ops->free(m);
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
