/* tests/unit/test_act_offload.c - trainer/act_offload.c: the schedule of
 * activation offload. A forward writes each block's pattern into the slot it
 * is handed, a backward checks that every block comes back intact in the
 * slot it is handed, for 0 to 7 blocks of different sizes, twice in a row;
 * the host store holds all but the last two blocks, each copied out once and
 * in once; block l - 1's copy in is in flight while block l is used. */
#include <stdlib.h>

#include "check.h"
#include "trainer/act_offload.h"

#define MAX_BLOCKS 8

static float pattern(int round, int l, long i)
{
	return (float)(round * 100000 + l * 1000) + (float)(i % 997);
}

static void fill(float *x, long n, int round, int l)
{
	for (long i = 0; i < n; i++)
		x[i] = pattern(round, l, i);
}

static int intact(const float *x, long n, int round, int l)
{
	for (long i = 0; i < n; i++)
		if (x[i] != pattern(round, l, i))
			return 0;
	return 1;
}

static void run_blocks(int n_blocks)
{
	long floats[MAX_BLOCKS], largest = 1, host = 0;
	for (int l = 0; l < n_blocks; l++) {
		floats[l] = 50 + 37 * ((l * 5) % 7);   /* sizes differ, not in order */
		largest = floats[l] > largest ? floats[l] : largest;
		if (l < n_blocks - 2)
			host += floats[l];
	}
	float *slot0 = malloc(sizeof(float) * (size_t)largest);
	float *slot1 = malloc(sizeof(float) * (size_t)largest);
	float *slots[2] = { slot0, slot1 };
	struct trn_act_offload o;
	CHECK(slot0 && slot1);
	CHECK_INT_EQ(trn_act_offload_init(&o, n_blocks, floats, slot0, slot1, NULL, 0), 0);
	CHECK_INT_EQ(o.host_floats, host);

	for (int round = 1; round <= 2; round++) {
		for (int l = 0; l < n_blocks; l++) {
			int s = trn_act_offload_fwd_begin(&o, l);
			CHECK_INT_EQ(s, l % 2);
			if (l > 0)   /* the previous block is still there: its output is this one's input */
				CHECK_MSG(intact(slots[(l - 1) % 2], floats[l - 1], round, l - 1),
				          "%d blocks: block %d changed under block %d", n_blocks, l - 1, l);
			fill(slots[s], floats[l], round, l);
			trn_act_offload_fwd_end(&o, l);
		}
		for (int l = n_blocks - 1; l >= 0; l--) {
			int s = trn_act_offload_bwd_begin(&o, l);
			CHECK_INT_EQ(s, l % 2);
			CHECK_MSG(intact(slots[s], floats[l], round, l),
			          "%d blocks, round %d: block %d did not come back intact", n_blocks, round, l);
			if (l >= 1 && l - 1 < n_blocks - 2)
				CHECK_INT_EQ(o.copy[(l - 1) % 2].dir, TRN_COPY_IN);
			for (long i = 0; i < floats[l]; i++)   /* backward's scratch use is not saved */
				slots[s][i] = -1.0f;
		}
		CHECK_INT_EQ(o.copy[0].dir, TRN_COPY_NONE);
		CHECK_INT_EQ(o.copy[1].dir, TRN_COPY_NONE);
		CHECK_INT_EQ(o.floats_out, round * host);
		CHECK_INT_EQ(o.floats_in, round * host);
	}
	trn_act_offload_release(&o);
	free(slot0);
	free(slot1);
}

static void test_every_block_comes_back(void)
{
	for (int n = 0; n < MAX_BLOCKS; n++)
		run_blocks(n);
}

int main(void)
{
	CHECK_RUN(test_every_block_comes_back);
	return check_finish();
}
