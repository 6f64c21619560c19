/* trainer/gns.h - the gradient noise scale, measured online.
 *
 * McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training",
 * appendix A): with |G_s|^2 and |G_b|^2 the squared norms of the mean
 * gradient over B_s and B_b > B_s examples drawn from the same data,
 *
 *   E|G_B|^2 = |G|^2 + tr(S) / B
 *
 * (G the true gradient, S the per-example gradients' covariance), so
 *
 *   |G|^2 ~ (B_b |G_b|^2 - B_s |G_s|^2) / (B_b - B_s)
 *   tr(S) ~ (|G_s|^2 - |G_b|^2) / (1/B_s - 1/B_b)
 *
 * are unbiased, each step's pair alike. Each is smoothed on its own by an
 * exponential moving average (factor metrics.gns_ema per measurement,
 * bias-corrected as Adam's moments are, so the first measurement is itself)
 * and the simple noise scale is their ratio, B_simple = tr(S) / |G|^2.
 * Drawn without replacement from N examples (an epoch's permutation) the
 * same two estimates are unbiased for N/(N-1) tr(S) and |G|^2 - tr(S)/(N-1)
 * (S the population covariance): tests/numeric/test_gns.py checks this.
 *
 * The big batch is the step's: its gradient, averaged over the ranks and
 * unscaled, whose squared norm the step computes anyway (train/grad_norm).
 * The small one (the source):
 *   - several ranks: each rank's own gradient (micro x accum examples)
 *     before the reduction, its squared norm summed bucket by bucket as dp.c
 *     issues each bucket's reduction and averaged over the ranks;
 *   - one rank, accum > 1: the first micro-batch's. The gradient buffer
 *     adds the micro-batches up in place, so each one's own contribution is
 *     not kept; but the buffer holds exactly the first one's after the first
 *     backward, whose norm needs no copy. (The norms of the running sums
 *     after later micro-batches, |S_a|^2 = |g_1 + .. + g_a|^2, are not
 *     independent estimates of one size: E|S_a|^2 - E|S_a-1|^2 =
 *     (2a - 1)|G|^2 + tr(S)/B_micro, so their differences are not |g_a|^2.)
 *     One micro-batch of each step is a noisier small batch than all of
 *     them would be; the moving average takes that out.
 *   - one rank, one micro-batch: a single batch size, nothing to measure;
 *     nothing is reported.
 * A step skipped by fp16's loss scaler is not measured.
 */
#ifndef LARCH_TRAINER_GNS_H
#define LARCH_TRAINER_GNS_H

#include <stdio.h>

#include "spec/spec.h"

enum trn_gns_source {
	TRN_GNS_NONE,                  /* one batch size (or metrics.gns_every 0) */
	TRN_GNS_MICRO,                 /* one rank: the first micro-batch */
	TRN_GNS_RANK,                  /* several ranks: each rank's gradient */
};

struct trn_gns {
	enum trn_gns_source source;
	long every;                    /* steps between measurements */
	double ema;                    /* smoothing factor per measurement, [0, 1) */
	long b_small, b_big;           /* examples in the small and the big batch */
	long n;                        /* measurements so far */
	double g2_avg, tr_avg;         /* the moving averages, not yet bias-corrected */
	double weight;                 /* 1 - ema^n: their bias correction */
	double spent_s;                /* the caller's: time in the small batches' norms */
};

/* One measurement: the step's estimates and the smoothed figures. */
struct trn_gns_point {
	double g2, trace;              /* this step's unbiased estimates */
	double g2_smooth, trace_smooth;
	double gns;                    /* trace_smooth / g2_smooth */
	int has_gns;                   /* 0 while g2_smooth <= 0 (noise swamps |G|^2) */
};

/* Where the small batch comes from for a run of micro x accum on ranks,
 * and the spec's settings. */
void trn_gns_init(struct trn_gns *g, const struct trn_spec_metrics *m, long micro, long accum,
                  int ranks);

/* Whether step (from 1) is measured. */
int trn_gns_due(const struct trn_gns *g, long step);

/* The unbiased |G|^2 and tr(S) from the squared norms of the mean gradient
 * over b_small and over b_big examples (b_small != b_big). */
void trn_gns_estimate(double b_small, double sq_small, double b_big, double sq_big, double *g2,
                      double *trace);

/* Adds a step's measurement: sq_small the squared norm of the small
 * batch's mean gradient (averaged over the ranks with TRN_GNS_RANK),
 * sq_big the big one's. */
void trn_gns_add(struct trn_gns *g, double sq_small, double sq_big, struct trn_gns_point *out);

/* The plan's line: what is measured, or why nothing is. */
void trn_gns_print(const struct trn_gns *g, FILE *out);

#endif
