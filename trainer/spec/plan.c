/* trainer/spec/plan.c - see plan.h. The items follow what train.c, dp.c and
 * optim.c allocate; tests/integration/test_plan.py holds a run's measured
 * peak against the plan. */
#include "plan.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/data.h"
#include "kernels/cuda_sizes.h"
#include "kernels/quant8.h"
#include "trainer/model.h"
#include "trainer/opt_offload.h"

static const char *const item_names[TRN_PLAN_N] = {
	[TRN_PLAN_PARAMS] = "params",
	[TRN_PLAN_GRADS] = "grads",
	[TRN_PLAN_PARAMS16] = "params16",
	[TRN_PLAN_GRAD_SHARD] = "grad_shard",
	[TRN_PLAN_MASTER] = "master",
	[TRN_PLAN_OPTIMIZER] = "optimizer",
	[TRN_PLAN_GRAD_HOST] = "grad_host",
	[TRN_PLAN_PARAM_STAGING] = "param_stage",
	[TRN_PLAN_ACTIVATIONS] = "activations",
	[TRN_PLAN_ACT_OFFLOAD] = "act_offload",
	[TRN_PLAN_PARAM_OFFLOAD] = "param_offload",
	[TRN_PLAN_HOST_COPY] = "host_copy",
	[TRN_PLAN_CHECKPOINT] = "checkpoint",
	[TRN_PLAN_DATA] = "data",
	[TRN_PLAN_WORKSPACE] = "workspace",
	[TRN_PLAN_RUNTIME] = "runtime",
	[TRN_PLAN_LOADER] = "loader",
};

/* The GPU's choices follow from the spec alone (never larchd's or
 * larch-train's environment), so that larch plan and the run agree. */
void trn_gpt_gpu_layout(const struct trn_spec_model *model, enum trn_dtype compute,
                        int nondeterministic, struct trn_gpt_gpu_layout *out)
{
	out->a16 = compute != TRN_DTYPE_FP32;
	out->flash = out->a16 && model->heads > 0 &&
	             model->dim == model->heads * TRN_FLASH_HEAD_SIZE;
	out->gelu_fused = out->a16;
	out->flash_dq_atomic = out->flash && nondeterministic ? 128 : 0;
}

int trn_gpu_weights16(enum trn_dtype compute, int params_offloaded)
{
	return compute != TRN_DTYPE_FP32 && !params_offloaded;
}

int trn_gpu_gemm_tune(int nondeterministic)
{
	return nondeterministic ? TRN_GPU_GEMM_TUNE_CANDIDATES : 0;
}

const char *trn_plan_item_name(enum trn_plan_item item)
{
	return item >= 0 && item < TRN_PLAN_N ? item_names[item] : "?";
}

/* Bytes of one stored element: 16-bit values are held in floats on the
 * CPU, and on a GPU too but for a 16-bit GPT's activations (below). */
static double elem_bytes(enum trn_dtype dt, int gpus)
{
	(void)dt;
	(void)gpus;
	return 4.0;
}

/* The optimizer's state over a range of len floats: m and/or v, fp32 or
 * int8 codes with one fp32 scale per block of each tensor (optim_q8.c). */
static double optimizer_bytes(const struct trn_spec_optimizer *o, const struct trn_model *m,
                              long lo, long hi)
{
	int n_state = (o->type != TRN_OPT_SGD || o->momentum > 0) +
	              (o->type == TRN_OPT_ADAMW || o->type == TRN_OPT_LAMB);
	double len = (double)(hi - lo);
	if (o->state_dtype != TRN_DTYPE_INT8)
		return n_state * 4.0 * len;
	long blocks = 0;
	for (int i = 0; i < m->n_params; i++) {
		long a = m->params[i].offset, b = a + m->params[i].numel;
		a = a > lo ? a : lo;
		b = b < hi ? b : hi;
		if (b > a)
			blocks += (b - a + KERN_Q8_BLOCK - 1) / KERN_Q8_BLOCK;
	}
	return n_state * (len + 4.0 * (double)blocks);
}

/* TRN_PLAN_TOO_LARGE when a micro-batch's buffers would overflow the
 * model's counts (far past any machine), else 0. ds may be a zeroed shape:
 * then the data's widths are left out (a GPT's need none). */
static int sizes_plannable(const struct trn_spec *s, const struct trn_dataset *ds, long micro,
                           struct trn_err *err)
{
	if (micro > 1L << 30) {
		trn_err_set(err, "memory: a micro-batch of %ld is too large to plan", micro);
		return TRN_PLAN_TOO_LARGE;
	}
	/* the model's layout counts floats in longs: keep its largest buffers
	 * (attention's B x heads x T x T, the logits, the widest layer) and
	 * their sums far from overflowing, for any spec the validator takes */
	const struct trn_spec_model *ms = &s->model;
	double widest = ds->dim > ds->n_classes ? ds->dim : ds->n_classes;
	if (ms->type == TRN_MODEL_GPT) {
		double v = ms->vocab ? ms->vocab : 65536.0, t = ms->seq;
		widest = t * (4.0 * ms->dim > v ? 4.0 * ms->dim : v);
		if ((double)ms->heads * t * t > widest)
			widest = (double)ms->heads * t * t;
	} else {
		for (int i = 0; i < ms->n_hidden; i++)
			widest = ms->hidden[i] > widest ? ms->hidden[i] : widest;
	}
	if ((double)micro * widest > 0x1p48) {
		trn_err_set(err, "memory: a micro-batch of %ld needs buffers of %.3g floats: far "
		            "more than any machine has", micro, (double)micro * widest);
		return TRN_PLAN_TOO_LARGE;
	}
	return 0;
}

int trn_plan_too_large(const struct trn_spec *s, struct trn_err *err)
{
	struct trn_dataset none;
	memset(&none, 0, sizeof none);
	return sizes_plannable(s, &none, s->batch.micro, err);
}

/* The process's own memory: a fixed part and the BLAS's packing buffers,
 * which grow with the largest operand of a GEMM (a weight, or a micro-
 * batch's activations at their widest) up to TRN_PLAN_BLAS_BYTES. */
static double runtime_bytes(const struct trn_spec *s, const struct trn_dataset *ds,
                            const struct trn_model *m, long micro)
{
	double widest = 0;
	for (int i = 0; i < m->n_params; i++)
		widest = (double)m->params[i].numel > widest ? (double)m->params[i].numel : widest;
	const struct trn_spec_model *ms = &s->model;
	double act;
	if (ms->type == TRN_MODEL_GPT) {
		double v = ms->vocab ? ms->vocab : 65536.0;
		act = (double)micro * ms->seq * (4.0 * ms->dim > v ? 4.0 * ms->dim : v);
	} else {
		double w = ds->dim > ds->n_classes ? ds->dim : ds->n_classes;
		for (int i = 0; i < ms->n_hidden; i++)
			w = ms->hidden[i] > w ? ms->hidden[i] : w;
		act = (double)micro * w;
	}
	double blas = 4.0 * (act > widest ? act : widest);
	return TRN_PLAN_RUNTIME_BYTES + (blas < TRN_PLAN_BLAS_BYTES ? blas : TRN_PLAN_BLAS_BYTES);
}

/* The bytes the loader reads whole before it converts them: an idx data
 * set's images and labels (data_idx.c), on top of the data's floats. */
static double loader_bytes(const struct trn_spec *s, const struct trn_dataset *ds)
{
	if (s->data.format != TRN_DATA_IDX || ds->task != TRN_TASK_CLASSIFY)
		return 0;
	return (double)(ds->train.n + ds->val.n) * ((double)ds->dim + 1.0);
}

/* What the items depend on besides the spec and the model's layout. */
struct plan_in {
	const struct trn_spec *s;
	const struct trn_dataset *ds;
	const struct trn_model *m;
	long micro, n;
	int gpus, opt_off, poff, resident;
	enum trn_dtype dt;
	double eb;                         /* bytes of a stored element (elem_bytes) */
	double held;                       /* floats of the params' working copy */
	struct trn_gpt_gpu_layout lay;
	int act16;                         /* the activations are 16-bit values */
};

/* The model's own: params, grads, their 16-bit and host copies. */
static void model_items(struct trn_plan *p, const struct plan_in *in)
{
	const struct trn_spec *s = in->s;
	const struct trn_model *m = in->m;
	long n = in->n;
	int gpus = in->gpus, poff = in->poff;
	enum trn_dtype dt = in->dt;
	double eb = in->eb, held = in->held;
	p->bytes[TRN_PLAN_PARAMS] = eb * held;
	p->bytes[TRN_PLAN_GRADS] = eb * held;
	/* a 16-bit model on a GPU that holds all its parameters keeps them as
	 * 16-bit values too, for its GEMMs; gpt's token embedding with its rows
	 * padded as the logits' are (model_cuda.h) */
	if (gpus && trn_gpu_weights16(dt, poff)) {
		double pad = 0;
		if (s->model.type == TRN_MODEL_GPT) {
			long v = m->params[0].shape[0];
			pad = (double)(trn_gpt_logits_rows(v) - v) * (double)s->model.dim;
		}
		p->bytes[TRN_PLAN_PARAMS16] = 2.0 * ((double)n + pad);
	}
	/* a GPU model's host side: the params and grads (unless they are the
	 * offload's) and the stage that adds a backward's gradients into them */
	if (gpus) {
		p->bytes[TRN_PLAN_HOST_COPY] = (poff ? 0.0 : 8.0 * (double)n) +
		                               4.0 * (held < TRN_GRAD_STAGE_FLOATS ? held
		                                                                   : TRN_GRAD_STAGE_FLOATS);
		/* (micro-batches add up on the device, trn_model_more_micro: the
		 * step's sum goes to g once, needing no stage) */
	}
}

/* The optimizer's: gradient shard, master weights, the offload's host
 * buffers, the state, and what a checkpoint gathers. */
static void optimizer_items(struct trn_plan *p, const struct plan_in *in)
{
	const struct trn_spec *s = in->s;
	const struct trn_model *m = in->m;
	long n = in->n;
	int gpus = in->gpus, poff = in->poff, opt_off = in->opt_off, resident = in->resident;
	enum trn_dtype dt = in->dt;
	double eb = in->eb;
	if (p->zero)
		p->bytes[TRN_PLAN_GRAD_SHARD] = 4.0 * (double)p->shard;
	/* fp32 master weights, unless they are the parameters themselves (fp32
	 * compute where those are the host's: no optimizer offload, or
	 * offloaded parameters). offload.optimizer cpu adds the host's copy of
	 * the gradients and two staging buffers of parallel.bucket_mb, unless
	 * it works in place: on the params' host copies (offloaded, or a GPU
	 * model's), or the update follows backward (it reads the model's
	 * gradients itself) */
	/* (a GPU model with offloaded params rounds 16-bit ones as it reads them
	 * from master weights: model.h's w_master) */
	int master = (dt != TRN_DTYPE_FP32 && !(gpus && poff)) || (opt_off && !poff);
	if (master)
		p->bytes[TRN_PLAN_MASTER] = 4.0 * (double)p->shard;
	if (opt_off && !trn_opt_offload_works_in_place(poff, trn_spec_streams_update(s), gpus > 0)) {
		p->bytes[TRN_PLAN_GRAD_HOST] = 4.0 * (double)p->shard;
		p->bytes[TRN_PLAN_PARAM_STAGING] = 2.0 * eb * (double)trn_opt_offload_stage_floats(
			p->shard, s->parallel.bucket_bytes / (long)sizeof(float));
	}
	p->bytes[TRN_PLAN_OPTIMIZER] = optimizer_bytes(&s->optimizer, m, 0, p->shard);
	/* checkpoints: rank 0 gathers the master weights with ZeRO, and the
	 * whole optimizer state; a resident run brings both from the device */
	double ckpt = 0;
	if (master && (p->zero || resident))
		ckpt += 4.0 * (double)n;
	if (p->zero || resident)
		ckpt += optimizer_bytes(&s->optimizer, m, 0, n);
	p->bytes[TRN_PLAN_CHECKPOINT] = ckpt;
}

/* The activations kept as mode keeps them (the model's walk counted act
 * and host bytes of floats): *dev at the micro-batch, *host the host's store
 * of them. */
static void activation_bytes(const struct plan_in *in, enum trn_offload mode, double act,
                             double host_store, double *dev, double *host)
{
	const struct trn_spec *s = in->s;
	long micro = in->micro;
	*dev = act / 4.0 * in->eb;
	*host = host_store / 4.0 * in->eb;
	if (!in->act16)
		return;
	/* a 16-bit GPT on a GPU stores its activations in 2 bytes, but for the
	 * fp32 statistics and one fp32 [B, NH, T, T] for attention's scores and
	 * their gradient (model_gpt_cuda.c), the same walk over the buffers as
	 * the CPU's */
	double att = (double)micro * s->model.heads * s->model.seq * s->model.seq;
	*dev = act / 2.0 + 2.0 * att;
	*host = host_store / 2.0;
	if (!in->lay.flash)
		return;
	/* the fused attention: each kept block holds its rows' fp32 log-sum-exp
	 * in place of the 16-bit [T, T], and there is no fp32 scratch (the 2
	 * bytes of it the walk counted, and the 2 added above) */
	int layers = s->model.layers;
	double kept = mode == TRN_OFFLOAD_RECOMPUTE ? (layers > 0)
	              : mode == TRN_OFFLOAD_CPU ? 2 * (layers > 0) : layers;
	double lse = 4.0 * micro * s->model.heads * s->model.seq;
	*dev += kept * (lse - 2.0 * att) - 4.0 * att;
	/* and the backward's fp32 dq, when it adds it atomically */
	if (in->lay.flash_dq_atomic)
		*dev += 4.0 * micro * s->model.seq * s->model.dim;
	if (mode == TRN_OFFLOAD_CPU)
		*host += layers * (lse - 2.0 * att);
}

/* The activations at the micro-batch, the host's store of them, and what
 * they would be kept whole (for the report's note). */
static void activation_items(struct trn_plan *p, const struct plan_in *in)
{
	const struct trn_model *m = in->m;
	double none_host;
	activation_bytes(in, in->s->offload.activations, (double)m->act_bytes,
	                 (double)m->act_host_bytes, &p->bytes[TRN_PLAN_ACTIVATIONS],
	                 &p->bytes[TRN_PLAN_ACT_OFFLOAD]);
	activation_bytes(in, TRN_OFFLOAD_NONE, (double)m->act_bytes_none, 0, &p->act_none_bytes,
	                 &none_host);
	p->act16 = in->act16;
}

/* The data, a GPU's workspaces and the process's own memory. */
static void fixed_items(struct trn_plan *p, const struct plan_in *in)
{
	const struct trn_spec *s = in->s;
	const struct trn_model *m = in->m;
	const struct trn_dataset *ds = in->ds;
	long micro = in->micro;
	double sample = ds->task == TRN_TASK_CLASSIFY ? (double)ds->dim * 4 + 4
	                                              : (double)s->model.seq * 8;
	p->bytes[TRN_PLAN_DATA] = trn_dataset_bytes(ds) + sample * (double)micro;
	/* a GPU's fixed cost: the GEMM libraries' workspaces (cuBLASLt's alone
	 * where every GEMM goes through it: trn_gpu_gemm_tune); and the batch's
	 * int rows (targets, tokens, the argmax; the next batch's targets and
	 * tokens, or its inputs) (model_cuda.c) */
	if (in->gpus) {
		int tokens = ds->task != TRN_TASK_CLASSIFY;
		double rows = tokens ? (double)micro * s->model.seq : (double)micro;
		int lt_only = s->model.type == TRN_MODEL_GPT && in->lay.flash &&
		              trn_gpu_gemm_tune(s->precision.nondeterministic);
		p->bytes[TRN_PLAN_WORKSPACE] = (double)(lt_only ? KERN_CUBLASLT_WORKSPACE_BYTES
		                                                : KERN_CUDA_WORKSPACE_BYTES) +
		                               4.0 * rows * (tokens ? 5 : 4) +
		                               (tokens ? 0.0 : 4.0 * (double)micro * ds->dim);
	}
	p->bytes[TRN_PLAN_RUNTIME] = runtime_bytes(s, ds, m, micro);
}

/* Which items are the host's and which the device's, the totals, and the
 * loader's part. */
static void place_items(struct trn_plan *p, const struct plan_in *in)
{
	const struct trn_spec *s = in->s;
	const struct trn_dataset *ds = in->ds;
	int gpus = in->gpus, resident = in->resident;
	for (int i = 0; i < TRN_PLAN_N; i++) {
		/* on a GPU: the model's working copies, its activations and, when it
		 * steps there, the optimizer's items (with ZeRO-1 over a device
		 * communicator, the gradient shard too) */
		int dev = i == TRN_PLAN_PARAMS || i == TRN_PLAN_GRADS || i == TRN_PLAN_PARAMS16 ||
		          i == TRN_PLAN_ACTIVATIONS ||
		          i == TRN_PLAN_WORKSPACE ||
		          (resident && (i == TRN_PLAN_MASTER || i == TRN_PLAN_OPTIMIZER ||
		                        i == TRN_PLAN_GRAD_SHARD));
		int host = !gpus || !dev;
		p->on_host[i] = host;
		if (host)
			p->host_bytes += p->bytes[i];
		else
			p->device_bytes += p->bytes[i];
	}
	/* the data is loaded before anything else but the runtime is there:
	 * while it loads, the files' bytes sit beside the data; after, the
	 * rest. Whichever is more, counted once. */
	double later = p->host_bytes - p->bytes[TRN_PLAN_DATA] - p->bytes[TRN_PLAN_RUNTIME];
	double loader = loader_bytes(s, ds) - later;
	p->bytes[TRN_PLAN_LOADER] = loader > 0 ? loader : 0;
	p->host_bytes += p->bytes[TRN_PLAN_LOADER];
}

/* resident: whether a GPU run steps on the device, -1 for what the spec
 * alone says (trn_plan_make_run). */
static int plan_with(struct trn_plan *p, const struct trn_spec *s, const struct trn_dataset *ds,
                     long micro, int resident, struct trn_err *err)
{
	memset(p, 0, sizeof *p);
	if (micro < 1)
		micro = s->batch.micro;
	int rc = sizes_plannable(s, ds, micro, err);
	if (rc)
		return rc;
	struct trn_model *m = trn_model_layout(s, ds, (int)micro, err);
	if (!m)
		return -1;
	int ranks = s->parallel.ranks, gpus = s->resources.gpus_per_node;
	int nodes = s->resources.nodes > 0 ? s->resources.nodes : 1;
	enum trn_dtype dt = s->precision.compute;
	long n = m->n_floats;
	p->ranks = ranks;
	p->zero = s->parallel.zero_stage >= 1 && ranks > 1;
	p->gpus = gpus;
	p->ranks_per_node = (ranks + nodes - 1) / nodes;
	p->micro = micro;
	p->n_params = n;
	/* rank 0's range, the largest (dp.c cuts n into ranks parts, the first
	 * n % ranks of them one float longer) */
	p->shard = p->zero ? (n + ranks - 1) / ranks : n;

	struct plan_in in = { .s = s, .ds = ds, .m = m, .micro = micro, .n = n, .gpus = gpus,
	                      .dt = dt, .eb = elem_bytes(dt, gpus),
	                      .opt_off = s->offload.optimizer == TRN_OFFLOAD_CPU,
	                      .poff = m->param_offload == TRN_OFFLOAD_CPU };
	/* one rank on a GPU with nothing offloaded steps on the device (its
	 * state fp32 or int8: train.c); any other GPU run steps on the host,
	 * unless the run says it found a device communicator */
	in.resident = gpus && (resident >= 0 ? resident : ranks == 1 && !in.opt_off && !in.poff);
	/* offload.params cpu: each a working copy of two blocks' staging, plus
	 * the resident tensors on a GPU, and the host copies of both */
	in.held = (double)n;
	if (in.poff) {
		in.held = (double)(m->param_stage_floats + (gpus ? m->param_resident_floats : 0));
		/* streamed (the update follows backward): of the gradients, the
		 * resident tensors' and two windows of a block each */
		double grads = m->streamed ? (double)(m->param_resident_floats + m->param_stage_floats)
		                           : (double)n;
		p->bytes[TRN_PLAN_PARAM_OFFLOAD] = in.eb * ((double)n + grads);
	}
	trn_gpt_gpu_layout(&s->model, dt, s->precision.nondeterministic, &in.lay);
	in.act16 = gpus && s->model.type == TRN_MODEL_GPT && in.lay.a16;
	p->compute = dt;
	p->act_offload = m->act_offload;
	p->param_offload = m->param_offload;
	p->opt_offload = s->offload.optimizer;
	p->n_state = (s->optimizer.type != TRN_OPT_SGD || s->optimizer.momentum > 0) +
	             (s->optimizer.type == TRN_OPT_ADAMW || s->optimizer.type == TRN_OPT_LAMB);
	p->state_int8 = s->optimizer.state_dtype == TRN_DTYPE_INT8 && p->n_state;
	p->resident = in.resident;
	p->streamed = trn_spec_streams_update(s);
	model_items(p, &in);
	optimizer_items(p, &in);
	activation_items(p, &in);
	fixed_items(p, &in);
	trn_model_free(m);
	place_items(p, &in);
	return 0;
}

/* The data's shape, remembered for the files it was read from as long as
 * they are unchanged (size and mtime): larchd plans every submit, and most
 * name the same data set, whose label files would be read each time. */
static pthread_mutex_t shape_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int valid;
	struct trn_spec_data data;
	int seq;
	struct stat st[4];
	struct trn_dataset ds;
} shape_cache;

static void stat_or_zero(const char *path, struct stat *st)
{
	memset(st, 0, sizeof *st);
	if (*path)
		stat(path, st);
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int data_shape(struct trn_dataset *ds, const struct trn_spec *spec, struct trn_err *err)
{
	const struct trn_spec_data *d = &spec->data;
	const char *paths[4] = { d->train, d->train_labels, d->val, d->val_labels };
	struct stat st[4];
	for (int i = 0; i < 4; i++)
		stat_or_zero(paths[i], &st[i]);
	pthread_mutex_lock(&shape_lock);
	int hit = shape_cache.valid && shape_cache.seq == spec->model.seq &&
	          memcmp(&shape_cache.data, d, sizeof *d) == 0;
	for (int i = 0; hit && i < 4; i++)
		hit = same_file(&shape_cache.st[i], &st[i]);
	if (hit)
		*ds = shape_cache.ds;
	pthread_mutex_unlock(&shape_lock);
	if (hit)
		return 0;
	if (trn_dataset_shape(ds, spec, NULL, err) != 0)
		return -1;
	pthread_mutex_lock(&shape_lock);
	shape_cache.valid = 1;
	shape_cache.data = spec->data;
	shape_cache.seq = spec->model.seq;
	memcpy(shape_cache.st, st, sizeof st);
	shape_cache.ds = *ds;
	pthread_mutex_unlock(&shape_lock);
	return 0;
}

int trn_plan_make_shape(struct trn_plan *p, const struct trn_spec *spec,
                        const struct trn_dataset *shape, long micro, struct trn_err *err)
{
	return plan_with(p, spec, shape, micro, -1, err);
}

int trn_plan_make_run(struct trn_plan *p, const struct trn_spec *spec,
                      const struct trn_dataset *shape, int on_gpu, int resident,
                      struct trn_err *err)
{
	struct trn_spec run = *spec;       /* (read only: nothing of it is released) */
	int gpus = spec->resources.gpus_per_node;
	run.resources.gpus_per_node = on_gpu ? (gpus > 0 ? gpus : 1) : 0;
	return plan_with(p, &run, shape, 0, on_gpu && resident, err);
}

int trn_plan_make(struct trn_plan *p, const struct trn_spec *spec, long micro,
                  struct trn_err *err)
{
	struct trn_dataset ds;
	if (data_shape(&ds, spec, err) != 0)
		return -1;
	return trn_plan_make_shape(p, spec, &ds, micro, err);
}

int trn_plan_fits(const struct trn_plan *p, double host_limit, double device_limit)
{
	return (host_limit <= 0 || p->host_bytes * p->ranks_per_node <= host_limit) &&
	       (device_limit <= 0 || p->device_bytes <= device_limit);
}

long trn_plan_max_micro_shape(const struct trn_spec *spec, const struct trn_dataset *shape,
                              double host_limit, double device_limit, struct trn_err *err)
{
	struct trn_plan p;
	/* memory grows with the micro-batch: the largest that fits by bisection */
	long lo = 0, hi = spec->batch.micro;
	while (lo < hi) {
		long mid = lo + (hi - lo + 1) / 2;
		int rc = plan_with(&p, spec, shape, mid, -1, err);
		if (rc == TRN_PLAN_TOO_LARGE) {
			hi = mid - 1;
			continue;
		}
		if (rc != 0)
			return -1;
		if (trn_plan_fits(&p, host_limit, device_limit))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

long trn_plan_max_micro(const struct trn_spec *spec, double host_limit, double device_limit,
                        struct trn_err *err)
{
	struct trn_dataset ds;
	if (data_shape(&ds, spec, err) != 0)
		return -1;
	return trn_plan_max_micro_shape(spec, &ds, host_limit, device_limit, err);
}

double trn_plan_peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	char line[256];
	double kib = 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmHWM:", 6) == 0) {
			kib = strtod(line + 6, NULL);
			break;
		}
	fclose(f);
	return kib * 1024.0;
}
