/* tests/unit/test_gns.c - trainer/gns.c: where the small batch comes from
 * for each layout (and when nothing is measured), which steps are measured,
 * the estimators on norms built from known |G|^2 and tr(S), the moving
 * averages' bias correction against the weighted mean restated here, and
 * the spec's defaults. The estimates against per-example gradients of a
 * real run are tests/numeric/test_gns.py's. */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "trainer/gns.h"
#include "trainer/spec/spec.h"

static int near(double got, double want)
{
	return fabs(got - want) <= 1e-12 * (fabs(want) > 1 ? fabs(want) : 1);
}

static void test_sources(void)
{
	struct trn_spec_metrics m = { .gns_every = 1, .gns_ema = 0.95 };
	struct trn_gns g;
	trn_gns_init(&g, &m, 8, 4, 1);
	CHECK(g.source == TRN_GNS_MICRO);
	CHECK_INT_EQ(g.b_small, 8);
	CHECK_INT_EQ(g.b_big, 32);
	trn_gns_init(&g, &m, 8, 2, 2);
	CHECK(g.source == TRN_GNS_RANK);
	CHECK_INT_EQ(g.b_small, 16);
	CHECK_INT_EQ(g.b_big, 32);
	trn_gns_init(&g, &m, 8, 1, 4);     /* ranks without accumulation */
	CHECK(g.source == TRN_GNS_RANK);
	CHECK_INT_EQ(g.b_small, 8);
	trn_gns_init(&g, &m, 32, 1, 1);    /* one batch size */
	CHECK(g.source == TRN_GNS_NONE);
	CHECK(!trn_gns_due(&g, 1));
	m.gns_every = 0;
	trn_gns_init(&g, &m, 8, 4, 2);
	CHECK(g.source == TRN_GNS_NONE);
	CHECK(!trn_gns_due(&g, 5));
}

static void test_due(void)
{
	struct trn_spec_metrics m = { .gns_every = 3, .gns_ema = 0.5 };
	struct trn_gns g;
	trn_gns_init(&g, &m, 4, 2, 1);
	int due[10], want[10] = { 0, 0, 1, 0, 0, 1, 0, 0, 1, 0 };
	for (int s = 1; s <= 10; s++)
		due[s - 1] = trn_gns_due(&g, s);
	for (int i = 0; i < 10; i++)
		CHECK_MSG(due[i] == want[i], "step %d: due %d, want %d", i + 1, due[i], want[i]);
}

/* Norms that E|G_B|^2 = |G|^2 + tr(S)/B gives exactly come back as |G|^2
 * and tr(S); with the sizes swapped they do not. */
static void test_estimate(void)
{
	static const double cases[][4] = {   /* |G|^2, tr(S), B_small, B_big */
		{ 2.0, 64.0, 8, 32 }, { 0.01, 300.0, 16, 1024 }, { 5.0, 0.5, 1, 2 },
		{ 0.0, 10.0, 64, 128 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double g2 = cases[i][0], tr = cases[i][1], bs = cases[i][2], bb = cases[i][3];
		double ys = g2 + tr / bs, yb = g2 + tr / bb, eg2, etr;
		trn_gns_estimate(bs, ys, bb, yb, &eg2, &etr);
		CHECK_MSG(near(eg2, g2) && near(etr, tr), "case %zu: %g %g, want %g %g", i, eg2, etr,
		          g2, tr);
		trn_gns_estimate(bb, ys, bs, yb, &eg2, &etr);
		CHECK_MSG(etr < 0, "case %zu: swapped sizes give tr(S) %g", i, etr);
	}
}

/* Each smoothed figure is the mean of the estimates so far weighted by
 * ema^(n - i), normalised: the first is the estimate itself. */
static void test_moving_average(void)
{
	struct trn_spec_metrics m = { .gns_every = 1, .gns_ema = 0.9 };
	struct trn_gns g;
	trn_gns_init(&g, &m, 8, 4, 1);
	uint64_t seed = 11;
	double g2s[40], trs[40];
	for (int n = 0; n < 40; n++) {
		double g2 = 1.0 + check_rand_uniform(&seed, -0.5f, 0.5f);
		double tr = 40.0 + check_rand_uniform(&seed, -10.0f, 10.0f);
		g2s[n] = g2;
		trs[n] = tr;
		struct trn_gns_point p;
		trn_gns_add(&g, g2 + tr / 8, g2 + tr / 32, &p);
		CHECK_MSG(near(p.g2, g2) && near(p.trace, tr), "measurement %d: raw %g %g", n, p.g2,
		          p.trace);
		double sw = 0, sg = 0, st = 0;
		for (int i = 0; i <= n; i++) {
			double w = pow(0.9, n - i);
			sw += w;
			sg += w * g2s[i];
			st += w * trs[i];
		}
		CHECK_MSG(fabs(p.g2_smooth - sg / sw) <= 1e-9 && fabs(p.trace_smooth - st / sw) <= 1e-9,
		          "measurement %d: smoothed %g %g, want %g %g", n, p.g2_smooth,
		          p.trace_smooth, sg / sw, st / sw);
		CHECK(p.has_gns && near(p.gns, p.trace_smooth / p.g2_smooth));
	}
	CHECK_INT_EQ(g.n, 40);
}

/* ema 0: each measurement as it is; a |G|^2 that is not positive gives no
 * noise scale. */
static void test_unsmoothed_and_negative(void)
{
	struct trn_spec_metrics m = { .gns_every = 1, .gns_ema = 0.0 };
	struct trn_gns g;
	trn_gns_init(&g, &m, 2, 1, 2);
	struct trn_gns_point p;
	trn_gns_add(&g, 3.0 + 8.0 / 2, 3.0 + 8.0 / 4, &p);
	CHECK(near(p.g2_smooth, 3.0) && near(p.trace_smooth, 8.0) && p.has_gns);
	CHECK(near(p.gns, 8.0 / 3.0));
	trn_gns_add(&g, 1.0, 2.0, &p);     /* the big batch's norm above the small one's */
	CHECK(p.g2_smooth > 0 && p.trace_smooth < 0);
	trn_gns_add(&g, 5.0, 1.0, &p);     /* (4 x 1 - 2 x 5) / 2 = -3 */
	CHECK(near(p.g2_smooth, -3.0) && !p.has_gns);
}

static void test_spec_defaults(void)
{
	static const char *text =
		"{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, \"data\": {\"name\": \"fashion-mnist\"},"
		" \"batch\": {\"global\": 8}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
		" \"steps\": 10%s}";
	char buf[512];
	struct trn_spec spec;
	struct trn_err err = { 0 };
	snprintf(buf, sizeof buf, text, "");
	CHECK_MSG(trn_spec_from_string(&spec, buf, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(spec.metrics.gns_every, TRN_GNS_EVERY_DEFAULT);
	CHECK(spec.metrics.gns_ema == TRN_GNS_EMA_DEFAULT);
	trn_spec_release(&spec);
	snprintf(buf, sizeof buf, text, ", \"metrics\": {\"gns_every\": 0, \"gns_ema\": 0}");
	CHECK_MSG(trn_spec_from_string(&spec, buf, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(spec.metrics.gns_every, 0);
	CHECK(spec.metrics.gns_ema == 0.0);
	trn_spec_release(&spec);
}

int main(void)
{
	CHECK_RUN(test_sources);
	CHECK_RUN(test_due);
	CHECK_RUN(test_estimate);
	CHECK_RUN(test_moving_average);
	CHECK_RUN(test_unsmoothed_and_negative);
	CHECK_RUN(test_spec_defaults);
	return check_finish();
}
