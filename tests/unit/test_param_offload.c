/* tests/unit/test_param_offload.c - trainer/param_offload.c: the schedule of
 * parameter offload. For 0 to 7 blocks of different sizes, with resident
 * floats between them, three steps of two micro-batches each, the host
 * weights changing between steps as an optimizer's would: forward and
 * backward find every block's current weights in the slot they are handed,
 * block l + 1's weights are in flight (not yet in) while block l computes,
 * backward's gradient slot holds what the host holds for the block (zeros
 * on a step's first micro-batch), a block's gradients reach the host only
 * when the next block ends (the block bwd_end reports), and the host ends
 * each step with the sum of both micro-batches; the resident floats are
 * never touched. The copy counters say what went over. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "trainer/param_offload.h"

#define MAX_BLOCKS 8
#define GAP 5                      /* resident floats before each block */
#define MICRO 2
#define RESIDENT -7.0f

static float weight(int step, int l, long i)
{
	return (float)(step * 100000 + l * 1000) + (float)(i % 997);
}

/* micro-batch a's gradient of block l, small integers: sums are exact */
static float contribution(int step, int a, int l, long i)
{
	return (float)((step + 1) * (a + 1) + l + i % 13);
}

static int weights_ok(const float *x, long n, int step, int l)
{
	for (long i = 0; i < n; i++)
		if (x[i] != weight(step, l, i))
			return 0;
	return 1;
}

/* the host's (or a slot's) gradient of block l after micro-batches [0, upto) */
static int grads_ok(const float *x, long n, int step, int upto, int l)
{
	for (long i = 0; i < n; i++) {
		float want = 0;
		for (int a = 0; a < upto; a++)
			want += contribution(step, a, l, i);
		if (x[i] != want)
			return 0;
	}
	return 1;
}

static int resident_ok(const float *x, int n_blocks, const long *off)
{
	for (int l = 0; l < n_blocks; l++)
		for (long i = off[l] - GAP; i < off[l]; i++)
			if (x[i] != RESIDENT)
				return 0;
	return 1;
}

static void run_blocks(int n_blocks)
{
	long off[MAX_BLOCKS], floats[MAX_BLOCKS], largest = 0, total = 0, sum = 0;
	for (int l = 0; l < n_blocks; l++) {
		floats[l] = 40 + 29 * ((l * 3) % 7);   /* sizes differ, not in order */
		off[l] = total + GAP;
		total = off[l] + floats[l];
		sum += floats[l];
		largest = floats[l] > largest ? floats[l] : largest;
	}
	float *w = malloc(sizeof(float) * (size_t)(total + 1));
	float *g = malloc(sizeof(float) * (size_t)(total + 1));
	struct trn_param_offload o;
	CHECK(w && g);
	CHECK_INT_EQ(trn_param_offload_init(&o, n_blocks, off, floats, w, g, NULL), 0);
	CHECK_INT_EQ(o.slot_floats, largest);
	CHECK_INT_EQ(trn_param_offload_slot_floats(n_blocks, floats), largest);
	for (long i = 0; i < total; i++)
		w[i] = g[i] = RESIDENT;

	for (int step = 0; step < 3; step++) {
		/* the optimizer's step: new host weights; zero_grad */
		for (int l = 0; l < n_blocks; l++)
			for (long i = 0; i < floats[l]; i++) {
				w[off[l] + i] = weight(step, l, i);
				g[off[l] + i] = 0;
			}
		trn_param_offload_grads_zeroed(&o);
		for (int a = 0; a < MICRO; a++) {
			trn_param_offload_fwd_start(&o);
			for (int l = 0; l < n_blocks; l++) {
				const float *x = trn_param_offload_fwd(&o, l);
				CHECK(x == o.wslot[l % 2]);
				CHECK_MSG(weights_ok(x, floats[l], step, l),
				          "%d blocks, step %d: forward got stale weights for block %d",
				          n_blocks, step, l);
				if (l + 1 < n_blocks) {
					/* prefetched, and not in until waited for */
					CHECK_INT_EQ(o.wcopy[(l + 1) % 2].n, floats[l + 1]);
					CHECK(l == 0 || weights_ok(o.wslot[(l + 1) % 2], floats[l - 1], step, l - 1));
				}
			}
			for (int l = n_blocks - 1; l >= 0; l--) {
				float *gr;
				const float *x = trn_param_offload_bwd_begin(&o, l, &gr);
				CHECK(x == o.wslot[l % 2] && gr == o.gslot[l % 2]);
				CHECK_MSG(weights_ok(x, floats[l], step, l),
				          "%d blocks, step %d: backward got stale weights for block %d",
				          n_blocks, step, l);
				if (l > 0 && l - 1 < n_blocks - 2)
					CHECK_INT_EQ(o.wcopy[(l - 1) % 2].n, floats[l - 1]);
				CHECK_MSG(grads_ok(gr, floats[l], step, a, l),
				          "%d blocks, step %d, micro %d: block %d's staged gradients are not "
				          "the host's", n_blocks, step, a, l);
				for (long i = 0; i < floats[l]; i++)
					gr[i] += contribution(step, a, l, i);
				int landed = trn_param_offload_bwd_end(&o, l);
				CHECK_INT_EQ(landed, l + 1 < n_blocks ? l + 1 : -1);
				if (landed >= 0)
					CHECK(grads_ok(g + off[landed], floats[landed], step, a + 1, landed));
				/* on its way out, not there yet */
				CHECK(grads_ok(g + off[l], floats[l], step, a, l));
			}
			CHECK_INT_EQ(trn_param_offload_bwd_finish(&o), n_blocks ? 0 : -1);
			for (int l = 0; l < n_blocks; l++)
				CHECK_MSG(grads_ok(g + off[l], floats[l], step, a + 1, l),
				          "%d blocks, step %d, micro %d: block %d's host gradients are wrong",
				          n_blocks, step, a, l);
			CHECK_INT_EQ(o.gcopy[0].n + o.gcopy[1].n + o.wcopy[0].n + o.wcopy[1].n, 0);
		}
		CHECK(resident_ok(w, n_blocks, off) && resident_ok(g, n_blocks, off));
	}
	/* per micro-batch every block in for forward, all but the last two again
	 * for backward; gradients in on all but a step's first micro-batch, out
	 * on all */
	long back = 0;
	for (int l = 0; l < n_blocks - 2; l++)
		back += floats[l];
	CHECK_INT_EQ(o.w_in, 3 * MICRO * (sum + back));
	CHECK_INT_EQ(o.g_in, 3 * (MICRO - 1) * sum);
	CHECK_INT_EQ(o.g_out, 3 * MICRO * sum);
	trn_param_offload_release(&o);
	free(w);
	free(g);
}

static void test_every_block_in_and_out(void)
{
	for (int n = 0; n < MAX_BLOCKS; n++)
		run_blocks(n);
}

/* Without fwd_start the slots keep the old step's weights: the schedule
 * really does forget them there, and a forward that skipped it would
 * compute with stale weights. */
static void test_fwd_start_forgets_the_slots(void)
{
	long off[3] = { 0, 8, 16 }, floats[3] = { 8, 8, 8 };
	float w[24], g[24] = { 0 };
	struct trn_param_offload o;
	for (int i = 0; i < 24; i++)
		w[i] = 1.0f;
	CHECK_INT_EQ(trn_param_offload_init(&o, 3, off, floats, w, g, NULL), 0);
	trn_param_offload_fwd_start(&o);
	for (int l = 0; l < 3; l++)
		trn_param_offload_fwd(&o, l);
	for (int i = 0; i < 24; i++)
		w[i] = 2.0f;
	float *gr;
	CHECK(trn_param_offload_bwd_begin(&o, 2, &gr)[0] == 1.0f);   /* what forward used */
	trn_param_offload_bwd_end(&o, 2);
	trn_param_offload_bwd_finish(&o);
	CHECK(trn_param_offload_fwd(&o, 2)[0] == 1.0f);              /* stale */
	trn_param_offload_fwd_start(&o);
	CHECK(trn_param_offload_fwd(&o, 0)[0] == 2.0f);
	CHECK(trn_param_offload_fwd(&o, 1)[0] == 2.0f);
	CHECK(trn_param_offload_fwd(&o, 2)[0] == 2.0f);
	trn_param_offload_release(&o);
}

/* Streamed (no host gradients): each backward's slot starts from zero even
 * after a first micro-batch, a block's gradients reach its window only when
 * the next block ends, stay there until the block after that ends, and the
 * window of a block that computed nothing can be zeroed. */
static void test_streamed_gradients_go_to_the_windows(void)
{
	enum { L = 5 };
	long off[L], floats[L], total = 0;
	for (int l = 0; l < L; l++) {
		floats[l] = 30 + 17 * ((l * 2) % 5);
		off[l] = total + GAP;
		total = off[l] + floats[l];
	}
	float *w = malloc(sizeof(float) * (size_t)total);
	struct trn_param_offload o;
	CHECK(w);
	for (long i = 0; i < total; i++)
		w[i] = RESIDENT;
	CHECK_INT_EQ(trn_param_offload_init(&o, L, off, floats, w, NULL, NULL), 0);
	CHECK(o.gout[0] && o.gout[1]);
	for (int step = 0; step < 2; step++) {
		trn_param_offload_grads_zeroed(&o);
		for (int a = 0; a < 2; a++) {       /* a second backward starts from zero too */
			trn_param_offload_fwd_start(&o);
			for (int l = 0; l < L; l++)
				trn_param_offload_fwd(&o, l);
			for (int l = L - 1; l >= 0; l--) {
				float *gr;
				trn_param_offload_bwd_begin(&o, l, &gr);
				CHECK_MSG(grads_ok(gr, floats[l], step, 0, l),
				          "step %d, micro %d: block %d's slot does not start from zero", step,
				          a, l);
				for (long i = 0; i < floats[l]; i++)
					gr[i] += contribution(step, a, l, i);
				int landed = trn_param_offload_bwd_end(&o, l);
				CHECK(!trn_param_offload_window(&o, l));        /* on its way out */
				if (landed < 0)
					continue;
				const float *win = trn_param_offload_window(&o, landed);
				CHECK(win == o.gout[landed % 2]);
				int ok = 1;
				for (long i = 0; i < floats[landed]; i++)
					ok &= win[i] == contribution(step, a, landed, i);
				CHECK_MSG(ok, "step %d, micro %d: block %d's window is not its gradients",
				          step, a, landed);
			}
			CHECK_INT_EQ(trn_param_offload_bwd_finish(&o), 0);
			const float *win = trn_param_offload_window(&o, 0);
			CHECK(win && win[3] == contribution(step, a, 0, 3));
			CHECK(!trn_param_offload_window(&o, 2));        /* block 0's window now */
		}
	}
	CHECK_INT_EQ(o.g_in, 0);
	const float *z = trn_param_offload_zero_window(&o, 3);
	CHECK(z == o.gout[1] && z[0] == 0.0f && z[floats[3] - 1] == 0.0f);
	CHECK(trn_param_offload_window(&o, 3) == z);
	trn_param_offload_release(&o);
	free(w);
}

int main(void)
{
	CHECK_RUN(test_every_block_in_and_out);
	CHECK_RUN(test_streamed_gradients_go_to_the_windows);
	CHECK_RUN(test_fwd_start_forgets_the_slots);
	return check_finish();
}
