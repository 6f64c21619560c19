/* tests/unit/test_exec_slurm_array.c - service/executor_slurm_array.c: the
 * --array lists written for a sweep, and squeue's ArrayTaskID fields read
 * back (one task, a pending range with its limit, lists). */
#include <string.h>

#include "check.h"
#include "service/slurm_array.h"

static void test_spec(void)
{
	char out[64];
	int all[] = { 0, 1, 2, 3 };
	CHECK(slurm_array_spec(all, 4, 2, out, sizeof out) == 0);
	CHECK(strcmp(out, "0-3%2") == 0);
	CHECK(slurm_array_spec(all, 4, 0, out, sizeof out) == 0);
	CHECK(strcmp(out, "0-3") == 0);
	int gaps[] = { 0, 2, 3, 4, 7 };
	CHECK(slurm_array_spec(gaps, 5, 3, out, sizeof out) == 0);
	CHECK(strcmp(out, "0,2-4,7%3") == 0);
	int one[] = { 5 };
	CHECK(slurm_array_spec(one, 1, 0, out, sizeof out) == 0);
	CHECK(strcmp(out, "5") == 0);
	CHECK(slurm_array_spec(one, 0, 0, out, sizeof out) == -1);
	CHECK(slurm_array_spec(gaps, 5, 3, out, 6) == -1);   /* does not fit */
}

static void test_has(void)
{
	CHECK(slurm_array_has("4", 4));
	CHECK(!slurm_array_has("4", 5));
	CHECK(!slurm_array_has("14", 4));
	CHECK(slurm_array_has("5-9%2", 5) && slurm_array_has("5-9%2", 9));
	CHECK(!slurm_array_has("5-9%2", 4) && !slurm_array_has("5-9%2", 10));
	CHECK(!slurm_array_has("5-9%2", 2));   /* the limit is no task */
	CHECK(slurm_array_has("5,7-9", 8) && !slurm_array_has("5,7-9", 6));
	CHECK(slurm_array_has("[2-4%2]", 3));
	CHECK(slurm_array_has("0-15:4", 8) && !slurm_array_has("0-15:4", 6));
	CHECK(!slurm_array_has("N/A", 0));
	CHECK(!slurm_array_has("", 0));
	CHECK(!slurm_array_has("9-5", 7));
}

static void test_sid(void)
{
	char a[24];
	long t = -1;
	CHECK(slurm_array_sid("123_4", a, sizeof a, &t) == 0 && strcmp(a, "123") == 0 && t == 4);
	CHECK(slurm_array_sid("123", a, sizeof a, &t) == -1);
	CHECK(slurm_array_sid("123_[5-9]", a, sizeof a, &t) == -1);
	CHECK(slurm_array_sid("_4", a, sizeof a, &t) == -1);
	CHECK(slurm_array_sid("12x_4", a, sizeof a, &t) == -1);
	CHECK(slurm_array_sid("123_4", a, 3, &t) == -1);
}

int main(void)
{
	CHECK_RUN(test_spec);
	CHECK_RUN(test_has);
	CHECK_RUN(test_sid);
	return check_finish();
}
