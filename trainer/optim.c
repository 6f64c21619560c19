/* trainer/optim.c - see optim.h. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/optimizer.h"

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
	memset(o, 0, sizeof *o);
	o->cfg = *cfg;
	o->params = params;
	o->n_params = n_params;
	o->n_floats = n_floats;

	int want_m = cfg->type != TRN_OPT_SGD || cfg->momentum > 0;
	int want_v = cfg->type == TRN_OPT_ADAMW || cfg->type == TRN_OPT_LAMB;
	int layerwise = cfg->type == TRN_OPT_LARS || cfg->type == TRN_OPT_LAMB;

	if (want_m && !(o->m = calloc((size_t)n_floats, sizeof(float))))
		goto oom;
	if (want_v && !(o->v = calloc((size_t)n_floats, sizeof(float))))
		goto oom;
	o->decay = calloc((size_t)n_params, 1);
	o->adapt = calloc((size_t)n_params, 1);
	o->trust = calloc((size_t)n_params, sizeof(float));
	if (!o->decay || !o->adapt || !o->trust)
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
	return trn_err_set(err, "optimizer: out of memory for the state of %ld parameters", n_floats);
}

void trn_optim_release(struct trn_optim *o)
{
	free(o->m);
	free(o->v);
	free(o->decay);
	free(o->adapt);
	free(o->trust);
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

/* SGD and AdamW treat every element alike but for the weight decay, so they
 * run as one pass over each run of adjacent tensors that share it: one pass
 * over the whole buffer when no tensor is excluded from decay. The kernels
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
		long off = o->params[i].offset;
		long n = o->params[j - 1].offset + o->params[j - 1].numel - off;
		float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
		float *mp = o->m ? o->m + off : NULL, *vp = o->v ? o->v + off : NULL;
		if (c->type == TRN_OPT_SGD)
			kern_sgd_update_cpu(w + off, mp, g + off, n, (float)lr, (float)c->momentum, wd,
			                    c->nesterov);
		else
			kern_adamw_update_cpu(w + off, mp, vp, g + off, n, (float)lr, (float)c->beta1,
			                      (float)c->beta2, (float)c->eps, wd, (float)bc1, (float)bc2);
		for (int k = i; k < j; k++)
			o->trust[k] = 1.0f;
		i = j;
	}
}

void trn_optim_step(struct trn_optim *o, float *w, const float *g, double lr)
{
	const struct trn_spec_optimizer *c = &o->cfg;
	o->t++;
	/* the kernels take the betas as floats: correct for the betas they use */
	double bc1 = 1.0 - pow((double)(float)c->beta1, (double)o->t);
	double bc2 = 1.0 - pow((double)(float)c->beta2, (double)o->t);

	if (c->type == TRN_OPT_SGD || c->type == TRN_OPT_ADAMW) {
		step_elementwise(o, w, g, lr, bc1, bc2);
		return;
	}
	for (int i = 0; i < o->n_params; i++) {
		const struct trn_param *p = &o->params[i];
		float *wp = w + p->offset;
		const float *gp = g + p->offset;
		float *mp = o->m ? o->m + p->offset : NULL;
		float *vp = o->v ? o->v + p->offset : NULL;
		float wd = o->decay[i] ? (float)c->weight_decay : 0.0f;
		double ratio = 1.0;

		switch (c->type) {
		case TRN_OPT_SGD:
		case TRN_OPT_ADAMW:
			break;                 /* step_elementwise */
		case TRN_OPT_LARS:
			if (o->adapt[i])
				ratio = lars_ratio(c->trust_coef, sqrt(kern_sumsq_cpu(wp, p->numel)),
				                   sqrt(kern_sumsq_cpu(gp, p->numel)), wd);
			kern_lars_update_cpu(wp, mp, gp, p->numel, (float)(lr * ratio),
			                     (float)c->momentum, wd);
			break;
		case TRN_OPT_LAMB: {
			double un2 = kern_lamb_moments_cpu(mp, vp, gp, wp, p->numel, (float)c->beta1,
			                                   (float)c->beta2, (float)c->eps, wd,
			                                   (float)bc1, (float)bc2);
			if (o->adapt[i]) {
				double wn = sqrt(kern_sumsq_cpu(wp, p->numel)), un = sqrt(un2);
				ratio = wn > 0 && un > 0 ? wn / un : 1.0;
			}
			kern_lamb_apply_cpu(wp, mp, vp, p->numel, (float)(lr * ratio), (float)c->eps, wd,
			                    (float)bc1, (float)bc2);
			break;
		}
		}
		o->trust[i] = (float)ratio;
	}
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
