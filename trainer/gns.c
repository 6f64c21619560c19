/* trainer/gns.c - the gradient noise scale; see gns.h. */
#include "gns.h"

void trn_gns_init(struct trn_gns *g, const struct trn_spec_metrics *m, long micro, long accum,
                  int ranks)
{
	*g = (struct trn_gns){ .every = m->gns_every, .ema = m->gns_ema,
	                       .b_big = micro * accum * ranks };
	if (m->gns_every <= 0)
		g->source = TRN_GNS_NONE;
	else if (ranks > 1)
		g->source = TRN_GNS_RANK, g->b_small = micro * accum;
	else if (accum > 1)
		g->source = TRN_GNS_MICRO, g->b_small = micro;
	else
		g->source = TRN_GNS_NONE;
}

int trn_gns_due(const struct trn_gns *g, long step)
{
	return g->source != TRN_GNS_NONE && step % g->every == 0;
}

void trn_gns_estimate(double b_small, double sq_small, double b_big, double sq_big, double *g2,
                      double *trace)
{
	*g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small);
	*trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big);
}

void trn_gns_add(struct trn_gns *g, double sq_small, double sq_big, struct trn_gns_point *out)
{
	trn_gns_estimate((double)g->b_small, sq_small, (double)g->b_big, sq_big, &out->g2,
	                 &out->trace);
	g->n++;
	g->g2_avg = g->ema * g->g2_avg + (1.0 - g->ema) * out->g2;
	g->tr_avg = g->ema * g->tr_avg + (1.0 - g->ema) * out->trace;
	g->weight = g->ema * g->weight + (1.0 - g->ema);     /* 1 - ema^n */
	out->g2_smooth = g->g2_avg / g->weight;
	out->trace_smooth = g->tr_avg / g->weight;
	out->has_gns = out->g2_smooth > 0;
	out->gns = out->has_gns ? out->trace_smooth / out->g2_smooth : 0.0;
}

void trn_gns_print(const struct trn_gns *g, FILE *out)
{
	if (g->every <= 0) {
		fprintf(out, "gns: not measured (metrics.gns_every 0)\n");
		return;
	}
	if (g->source == TRN_GNS_NONE) {
		fprintf(out, "gns: not measured: one rank and one micro-batch a step give a single "
		        "batch size\n");
		return;
	}
	fprintf(out, "gns: every %ld step%s, B_small %ld (%s) against B_big %ld, moving average "
	        "%g\n", g->every, g->every == 1 ? "" : "s", g->b_small,
	        g->source == TRN_GNS_RANK ? "each rank's gradient" : "the first micro-batch",
	        g->b_big, g->ema);
}
