/* tests/unit/test_watchdog.c - trainer/watchdog.c: spikes count only once the
 * window is full; the threshold just below and just above; nan and inf;
 * max_rollbacks 0 fails at once, N fails on the event after N rollbacks; a
 * rollback empties the window; spike_factor 0 ignores spikes but not nan;
 * the spiking loss stays out of the average; the sum does not drift; the
 * config checks of a struct built by hand; a short or absent why. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "trainer/watchdog.h"

static int init(struct trn_watchdog *w, int max_rollbacks, double spike_factor, long window)
{
	struct trn_spec_watchdog cfg = { .max_rollbacks = max_rollbacks,
	                                 .spike_factor = spike_factor, .window = window };
	struct trn_err err = { 0 };
	int rc = trn_watchdog_init(w, &cfg, &err);
	CHECK_MSG(rc == 0, "init: %s", err.text);
	return rc;
}

/* n steps of the same loss from *step on, each of them OK. */
static void feed(struct trn_watchdog *w, long *step, double loss, int n)
{
	char why[256];
	for (int i = 0; i < n; i++, (*step)++)
		if (!CHECK_MSG(trn_watchdog_check(w, *step, loss, why, sizeof why) == TRN_WATCH_OK,
		               "step %ld, loss %g: %s", *step, loss, why))
			return;
}

static void test_window_fills_before_spikes_count(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 3, 2.0, 4))
		return;
	feed(&w, &step, 1.0, 3);
	/* three losses in a window of four: a 100x loss is not yet a spike */
	CHECK_INT_EQ(trn_watchdog_check(&w, step++, 100.0, why, sizeof why), TRN_WATCH_OK);
	CHECK_STR_EQ(why, "");
	/* now full: 1, 1, 1, 100 -> average 25.75 */
	CHECK_INT_EQ(trn_watchdog_check(&w, step++, 51.0, why, sizeof why), TRN_WATCH_OK);
	/* 1, 1, 100, 51 -> 38.25; 77 > 2 x 38.25 */
	CHECK_INT_EQ(trn_watchdog_check(&w, 7, 77.0, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 7: loss 77 is 2.01x its moving average 38.25 over 4 steps");
	trn_watchdog_release(&w);
}

/* A window of 2s and factor 3: 6 is not a spike, the next double above it is. */
static void test_threshold(void)
{
	const double losses[] = { nextafter(6.0, 0), 6.0, nextafter(6.0, 7) };
	const enum trn_watch want[] = { TRN_WATCH_OK, TRN_WATCH_OK, TRN_WATCH_ROLLBACK };
	for (int i = 0; i < 3; i++) {
		struct trn_watchdog w;
		char why[256];
		long step = 1;
		if (init(&w, 5, 3.0, 10))
			return;
		feed(&w, &step, 2.0, 10);
		CHECK_MSG(trn_watchdog_check(&w, 812, losses[i], why, sizeof why) == want[i],
		          "loss %.17g: %s", losses[i], why);
		if (want[i] == TRN_WATCH_ROLLBACK)
			CHECK_STR_EQ(why, "step 812: loss 6 is 3x its moving average 2 over 10 steps");
		else
			CHECK_STR_EQ(why, "");
		trn_watchdog_release(&w);
	}
}

/* The spiking loss stays out of the average: after a rollback is refused
 * (FAIL), the same spike seen again still fails the same way. */
static void test_spike_not_averaged(void)
{
	struct trn_watchdog w;
	char a[256], b[256];
	long step = 1;
	if (init(&w, 0, 2.0, 5))
		return;
	feed(&w, &step, 1.0, 5);
	CHECK_INT_EQ(trn_watchdog_check(&w, 6, 10.0, a, sizeof a), TRN_WATCH_FAIL);
	CHECK_INT_EQ(trn_watchdog_check(&w, 6, 10.0, b, sizeof b), TRN_WATCH_FAIL);
	CHECK_STR_EQ(b, a);
	CHECK_INT_EQ(w.count, 5);
	CHECK(w.sum == 5.0);
	/* and a normal loss after it averages with the five ones alone */
	CHECK_INT_EQ(trn_watchdog_check(&w, 6, 1.5, a, sizeof a), TRN_WATCH_OK);
	CHECK(w.sum == 5.5);
	trn_watchdog_release(&w);
}

static void test_nan_and_inf(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 10, 2.0, 3))
		return;
	/* at once, before the window is full */
	CHECK_INT_EQ(trn_watchdog_check(&w, step, NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 1: the loss is nan");
	CHECK_INT_EQ(trn_watchdog_check(&w, step, -NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 1: the loss is nan");
	CHECK_INT_EQ(trn_watchdog_check(&w, 2, INFINITY, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 2: the loss is inf");
	CHECK_INT_EQ(trn_watchdog_check(&w, 3, -INFINITY, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 3: the loss is -inf");
	CHECK_INT_EQ(w.count, 0);              /* none of them joined the average */
	CHECK(w.sum == 0);
	/* with a full window too */
	feed(&w, &step, 1.0, 3);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK(w.sum == 3.0);
	CHECK_INT_EQ(w.rollbacks, 0);          /* counted by rolled_back, not by check */
	trn_watchdog_release(&w);
}

static void test_no_rollbacks_fails_at_once(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 0, 0, 100))               /* the defaults */
		return;
	CHECK(w.ring == NULL);                 /* spike detection off: no window kept */
	feed(&w, &step, 2.5, 811);
	CHECK_INT_EQ(trn_watchdog_check(&w, 812, NAN, why, sizeof why), TRN_WATCH_FAIL);
	CHECK_STR_EQ(why, "step 812: the loss is nan; no rollbacks allowed "
	             "(watchdog.max_rollbacks is 0): giving up");
	trn_watchdog_release(&w);

	if (init(&w, 0, 4.0, 2))
		return;
	step = 1;
	feed(&w, &step, 0.5, 2);
	CHECK_INT_EQ(trn_watchdog_check(&w, 3, 2.5, why, sizeof why), TRN_WATCH_FAIL);
	CHECK_STR_EQ(why, "step 3: loss 2.5 is 5x its moving average 0.5 over 2 steps; no rollbacks "
	             "allowed (watchdog.max_rollbacks is 0): giving up");
	trn_watchdog_release(&w);
}

static void test_counting_to_fail(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 3, 2.0, 100))
		return;
	for (int i = 0; i < 3; i++) {
		feed(&w, &step, 2.37, 100);
		CHECK_INT_EQ(trn_watchdog_check(&w, step, NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
		trn_watchdog_rolled_back(&w);
		CHECK_INT_EQ(w.rollbacks, i + 1);
	}
	feed(&w, &step, 2.37, 100);
	CHECK_INT_EQ(trn_watchdog_check(&w, 812, 9.7, why, sizeof why), TRN_WATCH_FAIL);
	CHECK_STR_EQ(why, "step 812: loss 9.7 is 4.09x its moving average 2.37 over 100 steps; "
	             "3 rollbacks already (watchdog.max_rollbacks): giving up");
	CHECK_INT_EQ(w.rollbacks, 3);
	trn_watchdog_release(&w);

	/* one rollback: singular */
	if (init(&w, 1, 0, 100))
		return;
	CHECK_INT_EQ(trn_watchdog_check(&w, 5, NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
	trn_watchdog_rolled_back(&w);
	CHECK_INT_EQ(trn_watchdog_check(&w, 9, INFINITY, why, sizeof why), TRN_WATCH_FAIL);
	CHECK_STR_EQ(why, "step 9: the loss is inf; 1 rollback already (watchdog.max_rollbacks): "
	             "giving up");
	trn_watchdog_release(&w);
}

static void test_window_reset_after_rollback(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 5, 2.0, 4))
		return;
	feed(&w, &step, 1.0, 4);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, 5.0, why, sizeof why), TRN_WATCH_ROLLBACK);
	trn_watchdog_rolled_back(&w);
	CHECK_INT_EQ(w.count, 0);
	CHECK(w.sum == 0);
	/* a new window: the old average (1) no longer counts, and no spike is
	 * seen until four new losses are in */
	feed(&w, &step, 5.0, 3);
	CHECK_INT_EQ(trn_watchdog_check(&w, step++, 50.0, why, sizeof why), TRN_WATCH_OK);
	/* 5, 5, 5, 50: average 16.25 */
	CHECK_INT_EQ(trn_watchdog_check(&w, step, 32.5, why, sizeof why), TRN_WATCH_OK);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, 200.0, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_INT_EQ(w.rollbacks, 1);
	trn_watchdog_release(&w);
}

static void test_spikes_off(void)
{
	struct trn_watchdog w;
	char why[256];
	long step = 1;
	if (init(&w, 2, 0, 3))
		return;
	feed(&w, &step, 1.0, 10);
	feed(&w, &step, 1e30, 1);              /* no spike detection */
	feed(&w, &step, 1.0, 1);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, NAN, why, sizeof why), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(why, "step 13: the loss is nan");
	trn_watchdog_rolled_back(&w);
	trn_watchdog_rolled_back(&w);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, -INFINITY, why, sizeof why), TRN_WATCH_FAIL);
	trn_watchdog_release(&w);
}

/* The sum does not drift: after a thousand losses around 1e12 have passed
 * through a window of 7 (a running sum alone would keep their rounding, an
 * ulp of 1e12 being 1.2e-4), a window of ones sums to exactly 7, and the
 * threshold is exactly 1.5 again. */
static void test_no_drift(void)
{
	struct trn_watchdog w;
	char why[256];
	uint64_t rng = 7;
	long step = 1;
	if (init(&w, 1, 1.5, 7))
		return;
	for (int i = 0; i < 1000; i++)
		feed(&w, &step, 1e12 * check_rand_uniform(&rng, 1.0f, 1.4f), 1);
	while (w.next != 0)
		feed(&w, &step, 1.0, 1);
	feed(&w, &step, 1.0, 7);
	CHECK_MSG(w.sum == 7.0, "sum %.17g, want 7", w.sum);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, nextafter(1.5, 2), why, sizeof why),
	             TRN_WATCH_ROLLBACK);
	CHECK_INT_EQ(trn_watchdog_check(&w, step, 1.5, why, sizeof why), TRN_WATCH_OK);
	trn_watchdog_release(&w);
}

static void test_config_checks(void)
{
	static const struct {
		struct trn_spec_watchdog cfg;
		const char *want;
	} cases[] = {
		{ { -1, 0, 100 }, "watchdog.max_rollbacks: must be an integer in [0, 1000] (got -1)" },
		{ { 1001, 0, 100 }, "watchdog.max_rollbacks: must be an integer in [0, 1000] (got 1001)" },
		{ { 0, 0.5, 100 }, "watchdog.spike_factor: must be 0 (no spike detection) or a number "
		                   "> 1 (got 0.5)" },
		{ { 0, 1, 100 }, "watchdog.spike_factor: must be 0 (no spike detection) or a number "
		                 "> 1 (got 1)" },
		{ { 0, -2, 100 }, "watchdog.spike_factor: must be 0 (no spike detection) or a number "
		                  "> 1 (got -2)" },
		{ { 0, 2, 0 }, "watchdog.window: must be an integer in [1, 100000] (got 0)" },
		{ { 0, 0, 100001 }, "watchdog.window: must be an integer in [1, 100000] (got 100001)" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct trn_watchdog w;
		struct trn_err err = { 0 };
		CHECK_INT_EQ(trn_watchdog_init(&w, &cases[i].cfg, &err), -1);
		CHECK_STR_EQ(err.text, cases[i].want);
		CHECK(w.ring == NULL);
		trn_watchdog_release(&w);          /* harmless after a failed init */
	}
	/* no room for why: the verdict still comes */
	struct trn_watchdog w;
	if (init(&w, 1, 0, 1))
		return;
	CHECK_INT_EQ(trn_watchdog_check(&w, 1, NAN, NULL, 0), TRN_WATCH_ROLLBACK);
	char small[12];
	CHECK_INT_EQ(trn_watchdog_check(&w, 1, NAN, small, sizeof small), TRN_WATCH_ROLLBACK);
	CHECK_STR_EQ(small, "step 1: the");
	trn_watchdog_release(&w);
	trn_watchdog_release(&w);              /* a second release is harmless */
}

int main(void)
{
	CHECK_RUN(test_window_fills_before_spikes_count);
	CHECK_RUN(test_threshold);
	CHECK_RUN(test_spike_not_averaged);
	CHECK_RUN(test_nan_and_inf);
	CHECK_RUN(test_no_rollbacks_fails_at_once);
	CHECK_RUN(test_counting_to_fail);
	CHECK_RUN(test_window_reset_after_rollback);
	CHECK_RUN(test_spikes_off);
	CHECK_RUN(test_no_drift);
	CHECK_RUN(test_config_checks);
	return check_finish();
}
