/* tests/unit/test_loss_scale.c - trainer/loss_scale.c: the scaler built from
 * parsed specs (defaults, static, none for fp32 and bf16); dynamic growth
 * after exactly growth_interval clean steps, halving and skipping on a
 * non-finite gradient, the floor at 1 and the ceiling at 2^32; static mode;
 * a long scripted run against the rules restated in the test. */
#include <stdio.h>

#include "check.h"
#include "trainer/loss_scale.h"
#include "trainer/spec/spec.h"

/* A scaler from a spec whose "precision" is the given JSON object text. */
static int from_spec(struct trn_loss_scale *ls, const char *precision)
{
	char text[1024];
	snprintf(text, sizeof text,
	         "{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, \"data\": {\"name\": \"fashion-mnist\"},"
	         " \"batch\": {\"global\": 8}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	         " \"steps\": 10, \"precision\": %s}", precision);
	struct trn_spec spec;
	struct trn_err err = { 0 };
	if (trn_spec_from_string(&spec, text, &err) != 0) {
		printf("  spec: %s\n", err.text);
		return -1;
	}
	trn_loss_scale_init(ls, &spec.precision);
	trn_spec_release(&spec);
	return 0;
}

static struct trn_loss_scale dynamic(double init, long interval)
{
	struct trn_spec_precision p = { .compute = TRN_DTYPE_FP16, .dynamic_loss_scale = 1,
	                                .init_scale = init, .growth_interval = interval };
	struct trn_loss_scale ls;
	trn_loss_scale_init(&ls, &p);
	return ls;
}

static void test_from_spec(void)
{
	struct trn_loss_scale ls;
	CHECK(from_spec(&ls, "{\"compute\": \"fp16\"}") == 0);
	CHECK_INT_EQ(ls.mode, TRN_LOSS_SCALE_DYNAMIC);
	CHECK(ls.scale == 65536.0);
	CHECK_INT_EQ(ls.growth_interval, 2000);
	CHECK_INT_EQ(ls.clean_steps, 0);
	CHECK_INT_EQ(ls.skipped, 0);

	CHECK(from_spec(&ls, "{\"compute\": \"fp16\", \"init_scale\": 1024, \"growth_interval\": 5}") == 0);
	CHECK_INT_EQ(ls.mode, TRN_LOSS_SCALE_DYNAMIC);
	CHECK(ls.scale == 1024.0);
	CHECK_INT_EQ(ls.growth_interval, 5);

	CHECK(from_spec(&ls, "{\"compute\": \"fp16\", \"loss_scale\": 128}") == 0);
	CHECK_INT_EQ(ls.mode, TRN_LOSS_SCALE_STATIC);
	CHECK(ls.scale == 128.0);
	CHECK_STR_EQ(trn_loss_scale_mode_name(ls.mode), "static");

	/* bf16 and fp32 need no scaling, whatever loss_scale says */
	CHECK(from_spec(&ls, "{\"compute\": \"bf16\"}") == 0);
	CHECK_INT_EQ(ls.mode, TRN_LOSS_SCALE_NONE);
	CHECK(ls.scale == 1.0);
	CHECK(from_spec(&ls, "{\"compute\": \"fp32\", \"loss_scale\": 128}") == 0);
	CHECK_INT_EQ(ls.mode, TRN_LOSS_SCALE_NONE);
	CHECK(ls.scale == 1.0);
	CHECK_STR_EQ(trn_loss_scale_mode_name(ls.mode), "none");
	CHECK_STR_EQ(trn_loss_scale_mode_name(TRN_LOSS_SCALE_DYNAMIC), "dynamic");
}

static void test_growth_after_interval(void)
{
	struct trn_loss_scale ls = dynamic(1024, 3);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK(ls.scale == 1024.0); /* not one step early */
	CHECK_INT_EQ(ls.clean_steps, 2);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK(ls.scale == 2048.0); /* the third clean step doubles it */
	CHECK_INT_EQ(ls.clean_steps, 0);
	for (int i = 0; i < 3; i++)
		trn_loss_scale_update(&ls, 0);
	CHECK(ls.scale == 4096.0); /* and three more double it again */
	CHECK_INT_EQ(ls.skipped, 0);
}

static void test_overflow_halves_and_skips(void)
{
	struct trn_loss_scale ls = dynamic(65536, 3);
	trn_loss_scale_update(&ls, 0);
	trn_loss_scale_update(&ls, 0);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 1), 0);
	CHECK(ls.scale == 32768.0);
	CHECK_INT_EQ(ls.skipped, 1);
	CHECK_INT_EQ(ls.clean_steps, 0); /* the run of clean steps starts again */
	trn_loss_scale_update(&ls, 0);
	trn_loss_scale_update(&ls, 0);
	CHECK(ls.scale == 32768.0);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 7), 0); /* any non-zero flag */
	CHECK(ls.scale == 16384.0);
	CHECK_INT_EQ(ls.skipped, 2);
	for (int i = 0; i < 3; i++)
		CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK(ls.scale == 32768.0);
	CHECK_INT_EQ(ls.skipped, 2);
}

static void test_floor_and_ceiling(void)
{
	struct trn_loss_scale ls = dynamic(4, 2000);
	double want[] = { 2, 1, 1, 1 };
	for (int i = 0; i < 4; i++) {
		CHECK_INT_EQ(trn_loss_scale_update(&ls, 1), 0); /* still skipped at the floor */
		CHECK_MSG(ls.scale == want[i], "after %d overflows: scale %g, want %g", i + 1, ls.scale,
		          want[i]);
	}
	CHECK_INT_EQ(ls.skipped, 4);

	ls = dynamic(1.5, 2000); /* a scale above 1 stops at 1 */
	trn_loss_scale_update(&ls, 1);
	CHECK(ls.scale == 1.0);
	ls = dynamic(0.25, 2000); /* one below 1 does not go up on an overflow */
	trn_loss_scale_update(&ls, 1);
	CHECK(ls.scale == 0.25);

	ls = dynamic(TRN_LOSS_SCALE_MAX, 1);
	trn_loss_scale_update(&ls, 0);
	CHECK(ls.scale == TRN_LOSS_SCALE_MAX);
	ls = dynamic(3e9, 1);
	trn_loss_scale_update(&ls, 0);
	CHECK(ls.scale == TRN_LOSS_SCALE_MAX);
	trn_loss_scale_update(&ls, 1);
	CHECK(ls.scale == TRN_LOSS_SCALE_MAX / 2);
}

static void test_static(void)
{
	struct trn_spec_precision p = { .compute = TRN_DTYPE_FP16, .dynamic_loss_scale = 0,
	                                .loss_scale = 128, .init_scale = 65536, .growth_interval = 2 };
	struct trn_loss_scale ls;
	trn_loss_scale_init(&ls, &p);
	for (int i = 0; i < 10; i++)
		CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK(ls.scale == 128.0); /* never grows */
	CHECK_INT_EQ(ls.clean_steps, 10);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 1), 0); /* skips, */
	CHECK(ls.scale == 128.0);                         /* but keeps the scale */
	CHECK_INT_EQ(ls.skipped, 1);
	CHECK_INT_EQ(ls.clean_steps, 0);
}

static void test_none(void)
{
	struct trn_spec_precision p = { .compute = TRN_DTYPE_BF16, .dynamic_loss_scale = 1,
	                                .init_scale = 65536, .growth_interval = 1 };
	struct trn_loss_scale ls;
	trn_loss_scale_init(&ls, &p);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 1), 1);
	CHECK_INT_EQ(trn_loss_scale_update(&ls, 0), 1);
	CHECK(ls.scale == 1.0);
	CHECK_INT_EQ(ls.skipped, 0);
}

/* 10,000 steps with overflows in bursts, against the rules written out
 * here, with a short interval so that the scale goes up and down often. */
static void test_scripted_run(void)
{
	struct trn_loss_scale ls = dynamic(8, 7);
	double scale = 8;
	double highest = scale, lowest = scale;
	long clean = 0, skipped = 0, mismatches = 0;
	uint64_t rng = 5;
	for (int step = 0; step < 10000; step++) {
		int inf = check_rand_u64(&rng) % 100 < (uint64_t)(step % 500 < 50 ? 60 : 3);
		int apply = trn_loss_scale_update(&ls, inf);
		if (inf) {
			skipped++;
			clean = 0;
			scale = scale / 2 >= 1 ? scale / 2 : 1;
		} else if (++clean == 7) {
			clean = 0;
			scale = scale * 2 <= 4294967296.0 ? scale * 2 : 4294967296.0;
		}
		highest = scale > highest ? scale : highest;
		lowest = scale < lowest ? scale : lowest;
		if (apply != !inf || ls.scale != scale || ls.clean_steps != clean || ls.skipped != skipped)
			if (mismatches++ < 3)
				printf("  step %d: apply %d scale %g clean %ld skipped %ld, want %d %g %ld %ld\n",
				       step, apply, ls.scale, ls.clean_steps, ls.skipped, !inf, scale, clean,
				       skipped);
	}
	CHECK_INT_EQ(mismatches, 0);
	/* the run went down to the floor and up well past the start */
	CHECK(lowest == 1.0);
	CHECK(highest >= 1024.0);
}

int main(void)
{
	CHECK_RUN(test_from_spec);
	CHECK_RUN(test_growth_after_interval);
	CHECK_RUN(test_overflow_halves_and_skips);
	CHECK_RUN(test_floor_and_ceiling);
	CHECK_RUN(test_static);
	CHECK_RUN(test_none);
	CHECK_RUN(test_scripted_run);
	return check_finish();
}
