/* trainer/param_offload.h - parameter offload (offload.params "cpu"): the
 * parameters and their gradients live in host memory; a block's weights
 * come to the model's working memory (a GPU's memory) only around the
 * block's compute, and its weight gradients leave it as soon as the block's
 * backward is done.
 *
 * A block is a run of consecutive parameters, floats [off, off + floats) of
 * the host weights w and gradients g (a transformer block of gpt, a layer
 * of the mlp). The working memory holds two weight slots and two gradient
 * slots of the largest block each; block l always goes through slots l % 2.
 *
 * Forward: trn_param_offload_fwd_start forgets what the weight slots held
 * (the host weights may have changed since: an optimizer step, a loaded
 * checkpoint) and starts bringing block 0 in; trn_param_offload_fwd(l)
 * waits until block l's weights are in and starts bringing block l + 1's
 * into the other slot, whose block is done (prefetch one block ahead).
 *
 * Backward walks the blocks down. trn_param_offload_bwd_begin(l) waits for
 * block l's weights (the last two blocks of a forward are still in their
 * slots), readies block l's gradient slot: zeroed while the host gradients
 * are known to be zero (the first micro-batch of a step;
 * trn_param_offload_grads_zeroed says so), else the host's accumulated
 * gradients of the block copied in, so that the model adds into the same
 * values in the same order as without offload; then starts bringing block
 * l - 1's weights (after that gradient copy on the one copy stream, which
 * block l's backward waits for).
 * trn_param_offload_bwd_end(l) waits for block l + 1's copy out (which ran
 * while block l computed) and starts copying block l's gradients out to g;
 * it returns the block whose gradients are now complete in g, so that the
 * model hands their parameters to data parallel only then.
 * trn_param_offload_bwd_finish waits for the last copy out.
 *
 * Streamed (the engine set up without host gradients, g NULL): the update
 * follows backward (trainer/opt_offload.h), so the host keeps no gradients
 * of the blocks. A block's gradients go out to one of two host windows
 * instead (window l % 2, as large as a slot), where the optimizer reads
 * them when bwd_end or bwd_finish returns the block, before the next
 * bwd_end reuses the window. Each backward's gradient slots start from zero:
 * there is no host sum to add to (one micro-batch a step).
 *
 * Copies go through a copy engine with one copy in flight per slot and an
 * explicit wait before a slot is read or written again (on a GPU, a copy
 * stream and an event per slot: trainer/copier.h). As
 * act_offload.h's, the CPU engine performs a copy at its wait point, the
 * latest moment at which an asynchronous engine could have finished it: a
 * missing wait leaves stale weights in a slot, or stale gradients in g, and
 * the tests see wrong bits.
 */
#ifndef LARCH_TRAINER_PARAM_OFFLOAD_H
#define LARCH_TRAINER_PARAM_OFFLOAD_H

#include "copier.h"

/* One copy in flight through a slot; n == 0: none. */
struct trn_param_copy {
	float *dst;
	const float *src;
	long n;                        /* floats */
	long *tally;                   /* the counter it adds n to when done */
	int to_host;                   /* dst is host memory (gradients going out) */
};

/* A copier's channels: 0 and 1 the weight slots' copies, 2 and 3 the
 * gradient slots'. */
#define TRN_PARAM_OFFLOAD_CHANNELS 4

struct trn_param_offload {
	int n_blocks;
	long *off, *floats;            /* [n_blocks] block l's floats in w and g, owned */
	float *w, *g;                  /* the host weights and gradients (borrowed: the model's);
	                                  g NULL: streamed */
	float *gout[2];                /* streamed: the host windows, owned */
	float *arena;                  /* the four slots, owned */
	float *wslot[2], *gslot[2];    /* each as large as the largest block */
	long slot_floats;
	int w_held[2];                 /* the block a weight slot holds or receives, -1 none */
	int g_held[2];                 /* the block a gradient slot holds or sends, -1 none */
	struct trn_param_copy wcopy[2], gcopy[2];
	const struct trn_copier *copier;       /* NULL: the CPU engine (copier.h) */
	/* rounds a block's weights in their slot as they arrive (the host holds
	 * fp32 master weights: model.h's w_master), or NULL */
	void (*round_in)(void *ctx, float *slot, long floats);
	void *round_ctx;
	int g_zero;                    /* the host gradients of every block are zero */
	long w_in, g_in, g_out;        /* floats copied so far */
};

/* The largest of floats[0 .. n_blocks) (one slot; 0 for no blocks). */
long trn_param_offload_slot_floats(int n_blocks, const long *floats);

/* Sets o up for n_blocks blocks at off[l] of floats[l] floats each (both
 * copied) of the host buffers w and g (borrowed; g NULL: streamed) and
 * allocates the slots (and the windows), through copier unless it is NULL
 * (borrowed; static in practice). 0, or -1 when out of memory (o can then
 * be released). */
int trn_param_offload_init(struct trn_param_offload *o, int n_blocks, const long *off,
                           const long *floats, float *w, float *g,
                           const struct trn_copier *copier);
void trn_param_offload_release(struct trn_param_offload *o);

/* The host gradients were just zeroed (the start of a step). */
void trn_param_offload_grads_zeroed(struct trn_param_offload *o);

/* Forward: see above. fwd returns block l's weights in their slot. */
void trn_param_offload_fwd_start(struct trn_param_offload *o);
const float *trn_param_offload_fwd(struct trn_param_offload *o, int l);

/* Backward: block l's weights in their slot, and in *grads its gradient
 * slot, holding what g holds for the block. */
const float *trn_param_offload_bwd_begin(struct trn_param_offload *o, int l, float **grads);
/* Block l's gradients are final for this backward: starts their copy out.
 * Returns the block whose gradients have now reached g, or -1. */
int trn_param_offload_bwd_end(struct trn_param_offload *o, int l);
/* The end of backward: waits for the last copy out; returns its block, or -1. */
int trn_param_offload_bwd_finish(struct trn_param_offload *o);

/* Streamed: block l's gradients in their window, once bwd_end or
 * bwd_finish returned l (until the next bwd_end); NULL when the window
 * holds another block's. */
const float *trn_param_offload_window(const struct trn_param_offload *o, int l);
/* Streamed: block l's window zeroed and holding l, for a backward that
 * computes nothing (no target counted); no copy may be in flight. */
const float *trn_param_offload_zero_window(struct trn_param_offload *o, int l);

#endif
