/* trainer/watchdog.c - see watchdog.h. */
#include "watchdog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int trn_watchdog_init(struct trn_watchdog *w, const struct trn_spec_watchdog *cfg,
                      struct trn_err *err)
{
	memset(w, 0, sizeof *w);
	if (cfg->max_rollbacks < 0 || cfg->max_rollbacks > TRN_WATCHDOG_ROLLBACKS_MAX)
		return trn_err_set(err, "watchdog.max_rollbacks: must be an integer in [0, %d] "
		                   "(got %d)", TRN_WATCHDOG_ROLLBACKS_MAX, cfg->max_rollbacks);
	if (!(cfg->spike_factor == 0 || (cfg->spike_factor > 1 && isfinite(cfg->spike_factor))))
		return trn_err_set(err, "watchdog.spike_factor: must be 0 (no spike detection) or a "
		                   "number > 1 (got %g)", cfg->spike_factor);
	if (cfg->window < 1 || cfg->window > TRN_WATCHDOG_WINDOW_MAX)
		return trn_err_set(err, "watchdog.window: must be an integer in [1, %ld] (got %ld)",
		                   (long)TRN_WATCHDOG_WINDOW_MAX, cfg->window);
	w->cfg = *cfg;
	if (cfg->spike_factor == 0)
		return 0;
	w->ring = malloc(sizeof *w->ring * (size_t)cfg->window);
	if (!w->ring)
		return trn_err_set(err, "watchdog: out of memory for a window of %ld losses",
		                   cfg->window);
	return 0;
}

void trn_watchdog_release(struct trn_watchdog *w)
{
	free(w->ring);
	w->ring = NULL;
	w->count = w->next = 0;
	w->sum = 0;
}

/* Adds an accepted loss to the moving average. The sum is recomputed from the
 * ring each time the ring wraps, so rounding cannot pile up over a long run. */
static void accept(struct trn_watchdog *w, double loss)
{
	if (!w->ring)
		return;
	if (w->count == w->cfg.window)
		w->sum -= w->ring[w->next];
	else
		w->count++;
	w->ring[w->next] = loss;
	w->sum += loss;
	if (++w->next < w->cfg.window)
		return;
	w->next = 0;
	w->sum = 0;
	for (long i = 0; i < w->count; i++)
		w->sum += w->ring[i];
}

/* What was seen, into why; 1 for an event, 0 for a loss to accept. */
static int event(const struct trn_watchdog *w, long step, double loss, char *why, size_t len)
{
	if (isnan(loss)) {
		snprintf(why, len, "step %ld: the loss is nan", step);
		return 1;
	}
	if (isinf(loss)) {
		snprintf(why, len, "step %ld: the loss is %s", step, loss > 0 ? "inf" : "-inf");
		return 1;
	}
	if (!w->ring || w->count < w->cfg.window)
		return 0;
	double avg = w->sum / (double)w->count;
	if (!(loss > w->cfg.spike_factor * avg))
		return 0;
	snprintf(why, len, "step %ld: loss %.4g is %.3gx its moving average %.4g over %ld steps",
	         step, loss, loss / avg, avg, w->count);
	return 1;
}

enum trn_watch trn_watchdog_check(struct trn_watchdog *w, long step, double loss,
                                  char *why, size_t len)
{
	char seen[256];
	if (len)
		why[0] = '\0';
	if (!event(w, step, loss, seen, sizeof seen)) {
		accept(w, loss);
		return TRN_WATCH_OK;
	}
	if (w->rollbacks < w->cfg.max_rollbacks) {
		if (len)
			snprintf(why, len, "%s", seen);
		return TRN_WATCH_ROLLBACK;
	}
	if (len && w->cfg.max_rollbacks == 0)
		snprintf(why, len, "%s; no rollbacks allowed (watchdog.max_rollbacks is 0): giving up",
		         seen);
	else if (len)
		snprintf(why, len, "%s; %d rollback%s already (watchdog.max_rollbacks): giving up",
		         seen, w->rollbacks, w->rollbacks == 1 ? "" : "s");
	return TRN_WATCH_FAIL;
}

void trn_watchdog_rolled_back(struct trn_watchdog *w)
{
	w->rollbacks++;
	w->count = w->next = 0;
	w->sum = 0;
}
