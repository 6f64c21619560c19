/* trainer/watchdog.h - the numerics watchdog: a nan or inf loss, or a loss
 * spike, asks for a rollback instead of ending the run.
 *
 * The trainer shows it every step's loss (once the ranks agreed on it). A
 * loss that is not finite, or, with spike detection on (spike_factor > 0),
 * a loss above spike_factor x the moving average of the last `window`
 * accepted losses (checked only once that window is full), is an event. An
 * event asks the caller to roll back to the last checkpoint (or to the
 * initial weights), skip the batches from there up to and including the
 * offending step's, and go on; after max_rollbacks rollbacks the next event
 * fails the run. PaLM and OPT restarted past loss spikes by hand.
 *
 * Plain data and arithmetic: no I/O, no knowledge of checkpoints or data.
 * The moving average never holds an event's loss; its sum is kept in double
 * and recomputed from the ring once per window, so it does not drift.
 */
#ifndef LARCH_TRAINER_WATCHDOG_H
#define LARCH_TRAINER_WATCHDOG_H

#include <stddef.h>

#include "err.h"
#include "spec/spec.h"

struct trn_watchdog {
	struct trn_spec_watchdog cfg;  /* a copy of the spec's section */
	double *ring;                  /* the last cfg.window accepted losses (owned);
	                                  NULL when spike detection is off */
	long count;                    /* losses in the ring, at most cfg.window */
	long next;                     /* the slot the next loss goes to */
	double sum;                    /* of the losses in the ring */
	int rollbacks;                 /* rollbacks done so far */
};

enum trn_watch {
	TRN_WATCH_OK,                  /* the loss joined the moving average */
	TRN_WATCH_ROLLBACK,            /* roll back, then call trn_watchdog_rolled_back */
	TRN_WATCH_FAIL                 /* no rollbacks left: fail the run */
};

/* Copies cfg (borrowed) into w. Returns 0, or -1 with err set when out of
 * memory or when cfg is out of the spec's ranges (a struct built by hand). */
int trn_watchdog_init(struct trn_watchdog *w, const struct trn_spec_watchdog *cfg,
                      struct trn_err *err);

/* Frees the ring; w may then be initialised again. */
void trn_watchdog_release(struct trn_watchdog *w);

/* Looks at step's loss (step as the run reports it). OK: the loss joins the
 * moving average. ROLLBACK: why (len bytes, always NUL-terminated when len >
 * 0) says what was seen: "step 812: the loss is nan", "step 812: loss 9.7 is
 * 4.09x its moving average 2.37 over 100 steps"; the loss does not join the
 * average. FAIL: why is the reason to fail the run with, the same text and
 * "; 3 rollbacks already (watchdog.max_rollbacks): giving up" (with
 * max_rollbacks 0: "; no rollbacks allowed (watchdog.max_rollbacks is 0):
 * giving up"). */
enum trn_watch trn_watchdog_check(struct trn_watchdog *w, long step, double loss,
                                  char *why, size_t len);

/* After a rollback: counts it and empties the moving average (the losses
 * after the rollback start a new window). */
void trn_watchdog_rolled_back(struct trn_watchdog *w);

#endif
