/* trainer/act_offload.h - activation offload (offload.activations "cpu"):
 * the activations a model saves for backward leave the model's working
 * memory block by block during forward, for a host store, and come back
 * one block ahead of backward.
 *
 * The model's working memory for them is two staging slots of one block
 * each; block l always goes through slot l % 2. Forward computes block l in
 * the slot trn_act_offload_fwd_begin hands out (it first waits for the copy
 * of block l - 2 out of that slot) and says when the block is complete
 * (trn_act_offload_fwd_end), which starts copying it out. Backward asks for
 * block l (trn_act_offload_bwd_begin), which starts bringing block l - 1
 * into the other slot and waits until block l is in. The last two blocks of
 * a forward are still in the slots when backward starts with them: they are
 * never copied out, and the host store holds the others.
 *
 * Copies go through a copy engine with one copy in flight per slot and an
 * explicit wait before a slot is written or read again: on a GPU, a copy
 * stream and one event per slot (trainer/copier.h; the host store then
 * page-locked). The CPU engine performs a copy at its wait point, the
 * latest moment at which an asynchronous engine could have finished it, so
 * a missing wait leaves stale activations behind (and wrong gradients in
 * the tests) instead of going unnoticed.
 */
#ifndef LARCH_TRAINER_ACT_OFFLOAD_H
#define LARCH_TRAINER_ACT_OFFLOAD_H

#include "copier.h"

enum trn_copy_dir { TRN_COPY_NONE, TRN_COPY_OUT, TRN_COPY_IN };

/* The copy in flight through one staging slot. */
struct trn_act_copy {
	enum trn_copy_dir dir;
	float *dst;
	const float *src;
	long n;                        /* floats */
};

struct trn_act_offload {
	int n_blocks;
	long *floats;                  /* [n_blocks] saved activations of each block, owned */
	long *host_off;                /* [n_blocks] offset into host; -1: stays in its slot */
	float *slot[2];                /* staging, each as large as the largest block (borrowed) */
	float *host;                   /* the offload store, owned */
	long host_floats;
	int held[2];                   /* the block a slot holds (or is receiving), -1 none */
	struct trn_act_copy copy[2];
	long floats_out, floats_in;    /* copied so far */
	const struct trn_copier *copier; /* NULL: the CPU engine */
	int chan0;                     /* the copier's channels chan0 and chan0 + 1: the slots' */
};

/* Sets o up for n_blocks blocks of floats[l] floats each (copied), staged in
 * slot0 and slot1 (borrowed: the model's memory, each as large as the
 * largest block), copies through copier's channels chan0 and chan0 + 1
 * (copier NULL: the CPU engine). Allocates the host store. 0, or -1 when
 * out of memory (o can then be released). */
int trn_act_offload_init(struct trn_act_offload *o, int n_blocks, const long *floats,
                         float *slot0, float *slot1, const struct trn_copier *copier,
                         int chan0);
void trn_act_offload_release(struct trn_act_offload *o);
/* The host store's size in floats for n_blocks blocks of floats[l] each
 * (what trn_act_offload_init allocates). */
long trn_act_offload_host_floats(int n_blocks, const long *floats);

/* Forward: the slot block l is to be computed in, once the copy of block
 * l - 2 out of it is done. */
int trn_act_offload_fwd_begin(struct trn_act_offload *o, int l);
/* Forward: block l's activations are complete; copies them out unless
 * they stay in their slot for backward. */
void trn_act_offload_fwd_end(struct trn_act_offload *o, int l);
/* Backward: the slot holding block l, once it is in; starts bringing block
 * l - 1 into the other slot. */
int trn_act_offload_bwd_begin(struct trn_act_offload *o, int l);

#endif
