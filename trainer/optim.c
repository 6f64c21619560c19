/* trainer/optim.c - see optim.h. */
#include "optim_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "kernels/optimizer.h"
#include "kernels/precision.h"

static void *cpu_alloc_zeroed(size_t bytes)
{
	return calloc(bytes ? bytes : 1, 1);
}

static void cpu_zero(void *p, size_t bytes)
{
	memset(p, 0, bytes);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}

const struct trn_optim_kernels trn_optim_cpu_kernels = {
	.name = "cpu",
	.sumsq = kern_sumsq_cpu,
	.scale = kern_scale_cpu,
	.nonfinite = kern_nonfinite_cpu,
	.sgd = kern_sgd_update_cpu,
	.adamw = kern_adamw_update_cpu,
	.lars = kern_lars_update_cpu,
	.lamb_moments = kern_lamb_moments_cpu,
	.lamb_apply = kern_lamb_apply_cpu,
	.sgd_q8 = kern_sgd_update_q8_cpu,
	.adamw_q8 = kern_adamw_update_q8_cpu,
	.lars_q8 = kern_lars_update_q8_cpu,
	.lamb_norm_q8 = kern_lamb_norm_q8_cpu,
	.lamb_q8 = kern_lamb_update_q8_cpu,
	.alloc_zeroed = cpu_alloc_zeroed,
	.release = free,
	.zero = cpu_zero,
	.to_host = cpu_copy,
	.from_host = cpu_copy,
};

const struct trn_optim_kernels *trn_optim_kernels_of(const struct trn_model *m)
{
	if (m->device) {               /* the backend that made the model is loaded */
		const struct trn_cuda_backend *be = trn_cuda_backend_get(NULL);
		if (be)
			return be->optim;
	}
	return &trn_optim_cpu_kernels;
}

int trn_name_matches(const char *name, const char (*patterns)[TRN_PATTERN_MAX + 1], int n)
{
	for (int i = 0; i < n; i++)
		if (patterns[i][0] && strstr(name, patterns[i]))
			return 1;
	return 0;
}

int trn_optim_init(struct trn_optim *o, const struct trn_spec_optimizer *cfg,
                   const struct trn_param *params, int n_params, long n_floats,
                   struct trn_err *err)
{
	return trn_optim_init_shard(o, cfg, params, n_params, n_floats, 0, n_floats, NULL, err);
}

int trn_optim_init_shard(struct trn_optim *o, const struct trn_spec_optimizer *cfg,
                         const struct trn_param *params, int n_params, long n_floats,
                         long lo, long hi, struct trn_comm *comm, struct trn_err *err)
{
	memset(o, 0, sizeof *o);
	o->k = &trn_optim_cpu_kernels;
	o->cfg = *cfg;
	o->params = params;
	o->n_params = n_params;
	o->n_floats = n_floats;
	o->lo = lo;
	o->hi = hi;
	o->comm = comm && comm->size > 1 ? comm : NULL;
	long len = hi - lo;

	int want_m = cfg->type != TRN_OPT_SGD || cfg->momentum > 0;
	int want_v = cfg->type == TRN_OPT_ADAMW || cfg->type == TRN_OPT_LAMB;
	int layerwise = cfg->type == TRN_OPT_LARS || cfg->type == TRN_OPT_LAMB;
	o->n_state = want_m + want_v;

	if (cfg->state_dtype == TRN_DTYPE_INT8 && o->n_state) {
		if (trn_optim_q8_init(o, want_m, want_v, err) != 0) {
			trn_optim_release(o);
			return -1;
		}
	} else {
		/* +1: a rank's range may be empty, and calloc(0) may give NULL */
		if (want_m && !(o->m = calloc((size_t)len + 1, sizeof(float))))
			goto oom;
		if (want_v && !(o->v = calloc((size_t)len + 1, sizeof(float))))
			goto oom;
	}
	o->decay = calloc((size_t)n_params, 1);
	o->adapt = calloc((size_t)n_params, 1);
	o->trust = calloc((size_t)n_params, sizeof(float));
	o->norms = calloc(2 * (size_t)n_params, sizeof(double));
	if (!o->decay || !o->adapt || !o->trust || !o->norms)
		goto oom;
	for (int i = 0; i < n_params; i++) {
		const char *name = params[i].name;
		o->decay[i] = cfg->weight_decay > 0 &&
			!trn_name_matches(name, cfg->exclude_from_weight_decay,
			                  cfg->n_exclude_from_weight_decay);
		o->adapt[i] = layerwise &&
			!trn_name_matches(name, cfg->exclude_from_adaptation,
			                  cfg->n_exclude_from_adaptation);
		o->trust[i] = 1.0f;
	}
	return 0;
oom:
	trn_optim_release(o);
	return trn_err_set(err, "optimizer: out of memory for the state of %ld parameters", len);
}

/* A buffer of bytes in k's memory for the host buffer old (none for none);
 * *ok cleared when k is out of memory. */
static void *alloc_like(const struct trn_optim_kernels *k, const void *old, size_t bytes, int *ok)
{
	if (!old)
		return NULL;
	void *p = k->alloc_zeroed(bytes);
	*ok &= p != NULL;
	return p;
}

/* to takes old's bytes; old is released (o's kernels); returns to */
static void *take(const struct trn_optim *o, const struct trn_optim_kernels *k, void *to,
                  void *old, size_t bytes)
{
	if (!old)
		return NULL;
	k->from_host(to, old, bytes);
	o->k->release(old);
	return to;
}

int trn_optim_move_to(struct trn_optim *o, const struct trn_optim_kernels *k,
                      struct trn_err *err)
{
	if (k == o->k)
		return 0;
	struct trn_optim_q8 *q = o->q8;
	if (q && (o->lo != 0 || o->hi != o->n_floats))
		return trn_err_set(err, "optimizer.state_dtype: int8 state of a ZeRO shard is kept in "
		                   "host memory");
	/* int8 codes with a byte to spare and scales with a float to spare, as
	 * trn_optim_q8_init allocates them */
	size_t len = (size_t)(o->hi - o->lo), f32 = sizeof(float) * len;
	size_t scales = q ? sizeof(float) * ((size_t)q->n_blocks + 1) : 0;
	int ok = 1;
	void *m = alloc_like(k, o->m, f32, &ok), *v = alloc_like(k, o->v, f32, &ok);
	void *mq = q ? alloc_like(k, q->m, len + 1, &ok) : NULL;
	void *vq = q ? alloc_like(k, q->v, len + 1, &ok) : NULL;
	void *ms = q ? alloc_like(k, q->ms, scales, &ok) : NULL;
	void *vs = q ? alloc_like(k, q->vs, scales, &ok) : NULL;
	if (!ok) {
		void *made[] = { m, v, mq, vq, ms, vs };
		for (size_t i = 0; i < sizeof made / sizeof made[0]; i++)
			if (made[i])
				k->release(made[i]);
		return trn_err_set(err, "optimizer: out of %s memory for the state of %ld parameters",
		                   k->name, o->hi - o->lo);
	}
	o->m = take(o, k, m, o->m, f32);
	o->v = take(o, k, v, o->v, f32);
	if (q) {
		q->m = take(o, k, mq, q->m, len + 1);
		q->v = take(o, k, vq, q->v, len + 1);
		q->ms = take(o, k, ms, q->ms, scales);
		q->vs = take(o, k, vs, q->vs, scales);
	}
	o->k = k;
	return 0;
}

void trn_optim_release(struct trn_optim *o)
{
	const struct trn_optim_kernels *k = o->k ? o->k : &trn_optim_cpu_kernels;
	if (o->m)
		k->release(o->m);
	if (o->v)
		k->release(o->v);
	free(o->decay);
	free(o->adapt);
	free(o->trust);
	free(o->norms);
	trn_optim_q8_free(o->q8, k);
	o->q8 = NULL;
	o->norms = NULL;
	o->m = o->v = NULL;
	o->decay = o->adapt = NULL;
	o->trust = NULL;
}

/* LARS local lr (You et al. 2017): trust * ||w|| / (||g|| + wd * ||w||), or 1
 * when a norm is zero (fresh zero-initialised tensors, zero gradients). */
static double lars_ratio(double trust, double wn, double gn, double wd)
{
	if (wn <= 0 || gn <= 0)
		return 1.0;
	return trust * wn / (gn + wd * wn);
}

void trn_optim_reset(struct trn_optim *o)
{
	size_t len = (size_t)(o->hi - o->lo);
	struct trn_optim_q8 *q = o->q8;
	if (o->m)
		o->k->zero(o->m, sizeof(float) * len);
	if (o->v)
		o->k->zero(o->v, sizeof(float) * len);
	if (q && q->m) {
		o->k->zero(q->m, len);
		o->k->zero(q->ms, sizeof(float) * (size_t)q->n_blocks);
	}
	if (q && q->v) {
		o->k->zero(q->v, len);
		o->k->zero(q->vs, sizeof(float) * (size_t)q->n_blocks);
	}
	o->t = 0;
}

double trn_optim_state_bytes(const struct trn_optim *o)
{
	double len = (double)(o->hi - o->lo);
	if (o->q8)
		return o->n_state * (len + 4.0 * (double)o->q8->n_blocks);
	return o->n_state * 4.0 * len;
}

long trn_optim_piece(const struct trn_optim *o, int i, long *a)
{
	const struct trn_param *p = &o->params[i];
	long s = p->offset > o->lo ? p->offset : o->lo;
	long e = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
	*a = s - o->lo;
	return e > s ? e - s : 0;
}

/* SGD and AdamW treat every element alike but for the weight decay, so they
 * run as one pass over each run of adjacent tensors that share it: one pass
 * over the whole range when no tensor is excluded from decay. The kernels
 * apply the same per-element formula however the buffer is cut, so the
 * result is the same as tensor by tensor. */
static void step_elementwise(struct trn_optim *o, float *w, const float *g, double lr,
                             double bc1, double bc2)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	for (int i = 0; i < o->n_params;) {
		int j = i + 1;
		while (j < o->n_params && o->decay[j] == o->decay[i] &&
		       o->params[j].offset == o->params[j - 1].offset + o->params[j - 1].numel)
			j++;
		long first, last, n = 0;
		for (int k = i; k < j; k++) {
			long a, len = trn_optim_piece(o, k, &a);
			if (!len)
				continue;
			if (!n)
				first = a;
			last = a + len;
			n = last - first;
			o->trust[k] = 1.0f;
		}
		if (n) {
			float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
			float *mp = o->m ? o->m + first : NULL, *vp = o->v ? o->v + first : NULL;
			if (c->type == TRN_OPT_SGD)
				o->k->sgd(w + first, mp, g + first, n, (float)lr,
				                    (float)c->momentum, wd, c->nesterov);
			else
				o->k->adamw(w + first, mp, vp, g + first, n, (float)lr,
				                      (float)c->beta1, (float)c->beta2, (float)c->eps, wd,
				                      (float)bc1, (float)bc2);
		}
		i = j;
	}
}

/* The per-tensor partial norms summed over the ranks (nothing to do when
 * this optimizer has the whole buffer). */
static int sum_norms(struct trn_optim *o, struct trn_err *err)
{
	if (!o->comm)
		return 0;
	return trn_comm_allreduce_f64(o->comm, o->norms, 2L * o->n_params, err);
}

void trn_optim_begin(struct trn_optim *o)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	o->t++;
	/* the kernels take the betas as floats: correct for the betas they use */
	o->bc1 = 1.0 - pow((double)(float)c->beta1, (double)o->t);
	o->bc2 = 1.0 - pow((double)(float)c->beta2, (double)o->t);
	if (o->q8)
		trn_optim_q8_begin(o);
}

int trn_optim_end(struct trn_optim *o, struct trn_err *err)
{
	return o->q8 ? trn_optim_q8_finish(o, err) : 0;
}

/* Below, w and g are tensor i's part of the range, its n floats from range
 * coordinate a (trn_optim_piece). */

/* SGD or AdamW on tensor i's part, n > 0. */
static void tensor_elementwise(struct trn_optim *o, int i, float *w, const float *g, long a,
                               long n, double lr)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
	if (o->q8)
		trn_optim_q8_update(o, i, w, g, (float)lr, wd, (float)o->bc1, (float)o->bc2);
	else if (c->type == TRN_OPT_SGD)
		o->k->sgd(w, o->m ? o->m + a : NULL, g, n, (float)lr, (float)c->momentum, wd,
		          c->nesterov);
	else
		o->k->adamw(w, o->m + a, o->v + a, g, n, (float)lr, (float)c->beta1, (float)c->beta2,
		            (float)c->eps, wd, (float)o->bc1, (float)o->bc2);
	o->trust[i] = 1.0f;
}

/* LARS and LAMB pass 1 over tensor i's part: what its trust ratio needs,
 * ||w||^2 and ||g||^2 (LARS) or ||w||^2 and ||u||^2 after the moment update
 * (LAMB), into norms[2i], norms[2i + 1]; n may be 0 here. */
static void tensor_norms(struct trn_optim *o, int i, const float *w, const float *g, long a,
                         long n)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	double *nw = &o->norms[2 * i], *ng = nw + 1;
	float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
	float bc1 = (float)o->bc1, bc2 = (float)o->bc2;
	*nw = *ng = 0;
	if (!n)
		return;
	if (c->type == TRN_OPT_LAMB && o->q8)
		*ng = trn_optim_q8_lamb_norm(o, i, w, g, wd, bc1, bc2);
	else if (c->type == TRN_OPT_LAMB)
		*ng = o->k->lamb_moments(o->m + a, o->v + a, g, w, n, (float)c->beta1,
		                         (float)c->beta2, (float)c->eps, wd, bc1, bc2);
	if (!o->adapt[i])
		return;
	*nw = o->k->sumsq(w, n);
	if (c->type == TRN_OPT_LARS)
		*ng = o->k->sumsq(g, n);
}

/* LARS and LAMB pass 2: tensor i's update with the ratio of its whole
 * tensor's norms (n may be 0: the ratio alone). */
static void tensor_apply(struct trn_optim *o, int i, float *w, const float *g, long a, long n,
                         double lr)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
	double wn = sqrt(o->norms[2 * i]), gn = sqrt(o->norms[2 * i + 1]);
	double ratio = 1.0;
	if (c->type == TRN_OPT_LARS) {
		if (o->adapt[i])
			ratio = lars_ratio(c->trust_coef, wn, gn, wd);
		if (n && o->q8)
			trn_optim_q8_update(o, i, w, g, (float)(lr * ratio), wd, 0, 0);
		else if (n)
			o->k->lars(w, o->m ? o->m + a : NULL, g, n, (float)(lr * ratio),
			           (float)c->momentum, wd);
	} else {
		if (o->adapt[i])
			ratio = wn > 0 && gn > 0 ? wn / gn : 1.0;
		if (n && o->q8)
			trn_optim_q8_update(o, i, w, g, (float)(lr * ratio), wd, (float)o->bc1,
			                    (float)o->bc2);
		else if (n)
			o->k->lamb_apply(w, o->m + a, o->v + a, n, (float)(lr * ratio), (float)c->eps, wd,
			                 (float)o->bc1, (float)o->bc2);
	}
	o->trust[i] = (float)ratio;
}

int trn_optim_step(struct trn_optim *o, float *w, const float *g, double lr,
                   struct trn_err *err)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	trn_optim_begin(o);
	if (c->type == TRN_OPT_SGD || c->type == TRN_OPT_ADAMW) {
		if (!o->q8) {
			step_elementwise(o, w, g, lr, o->bc1, o->bc2);
			return 0;
		}
		/* int8 blocks are cut per tensor: tensor by tensor */
		for (int i = 0; i < o->n_params; i++) {
			long a, n = trn_optim_piece(o, i, &a);
			if (n)
				tensor_elementwise(o, i, w + a, g + a, a, n, lr);
			else
				o->trust[i] = 1.0f;
		}
		return trn_optim_end(o, err);
	}
	/* pass 1 over this range's part of each tensor, summed over the ranks */
	for (int i = 0; i < o->n_params; i++) {
		long a, n = trn_optim_piece(o, i, &a);
		tensor_norms(o, i, n ? w + a : w, n ? g + a : g, a, n);
	}
	if (sum_norms(o, err) != 0)
		return -1;
	/* pass 2: the updates with whole-tensor ratios */
	for (int i = 0; i < o->n_params; i++) {
		long a, n = trn_optim_piece(o, i, &a);
		tensor_apply(o, i, n ? w + a : w, n ? g + a : g, a, n, lr);
	}
	return trn_optim_end(o, err);
}

void trn_optim_step_tensor(struct trn_optim *o, int i, float *w, const float *g, double lr)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	long a, n = trn_optim_piece(o, i, &a);
	if (c->type == TRN_OPT_SGD || c->type == TRN_OPT_ADAMW) {
		if (n)
			tensor_elementwise(o, i, w, g, a, n, lr);
		else
			o->trust[i] = 1.0f;
		return;
	}
	tensor_norms(o, i, w, g, a, n);
	tensor_apply(o, i, w, g, a, n, lr);
}

double trn_grad_norm(const float *g, long n)
{
	return sqrt(kern_sumsq_cpu(g, n));
}

double trn_clip_grad_norm(float *g, long n, double max_norm)
{
	double norm = trn_grad_norm(g, n);
	if (max_norm > 0 && norm > max_norm)
		kern_scale_cpu(g, n, (float)(max_norm / (norm + 1e-6)));
	return norm;
}
