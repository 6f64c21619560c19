/* trainer/spec/gpt_layout.h - what a GPT holds and where: its parameter
 * table and its activations' layout, shared by trainer/model_gpt.c (which
 * computes with them) and gpt_layout.c (the layout alone, for the memory
 * plan: trn_gpt_layout). Not part of the trainer's interface (model.h). */
#ifndef LARCH_TRAINER_SPEC_GPT_LAYOUT_H
#define LARCH_TRAINER_SPEC_GPT_LAYOUT_H

#include "trainer/act_offload.h"
#include "trainer/model.h"

/* parameter indices within one block, in table order */
enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB,
       P_FCPW, P_FCPB, P_PER_BLOCK };
_Static_assert(P_PER_BLOCK == TRN_GPT_BLOCK_PARAMS, "a block's parameters");

/* What backward needs of one block: its input and what it computes from
 * it. The block's output is the next block's input (gpt.top for the last). */
struct gpt_block_acts {
	float *x;                          /* [B,T,C] the block's input */
	float *ln1, *ln1_mean, *ln1_rstd;  /* [B,T,C], [B,T], [B,T] */
	float *qkv;                        /* [B,T,3C] */
	float *atty;                       /* [B,T,C] attention output before the projection */
	float *att;                        /* [B,NH,T,T] */
	float *res2;                       /* [B,T,C] residual after attention */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fch, *fch_gelu;             /* [B,T,4C] */
};

struct gpt {
	struct trn_model base;             /* first: a struct trn_model * is a struct gpt * */
	int L, NH, C, T, V;
	int B;                             /* rows (samples) in the last forward */
	float *arena;                      /* every activation and scratch buffer */
	/* none: one per block; recompute: one, the scratch, whose x points into
	 * inputs; cpu: two, the staging slots */
	struct gpt_block_acts *blocks;
	float *inputs;                     /* recompute: [L][B,T,C] every block's input */
	struct trn_act_offload off;        /* cpu */
	float *top;                        /* [B,T,C] the last block's output */
	float *lnf, *lnf_mean, *lnf_rstd;
	float *logits;                     /* [B,T,V] */
	float *losses, *lse;               /* [B,T] */
	/* shared scratch: attproj/fcproj outputs in forward, gradients in backward */
	float *tmp_c;                      /* [B,T,C] */
	float *dres, *dln, *dbig, *dqkv, *datty;
	float *datt;                       /* [B,NH,T,T] */
	float *dlogits;                    /* [B,T,V] */
	long rel[P_PER_BLOCK];             /* a block's parameters from its first, in floats */
};

/* block l's parameter which (P_*) in the table */
#define GPT_BLOCK_PARAM(l, which) (2 + (l) * P_PER_BLOCK + (which))

/* Sets g (zeroed, its base.ops set) up for spec and ds at micro-batch
 * max_batch: the dimensions, the parameter table, blocks (one per block
 * spec's offload.activations keeps: not laid out), the activation sizes
 * (base.act_bytes, act_bytes_none, act_host_bytes) and flops; nothing
 * allocated for the weights or the activations. 0, or -1 with err set;
 * either way trn_gpt_layout_release frees what it made. */
int trn_gpt_layout_init(struct gpt *g, const struct trn_spec *spec, const struct trn_dataset *ds,
                        int max_batch, struct trn_err *err);
void trn_gpt_layout_release(struct gpt *g);
/* Lays every activation buffer of mode out in arena (NULL: only counts);
 * returns the floats. */
long trn_gpt_carve(struct gpt *g, enum trn_offload mode, long B, float *arena);
/* The floats of each block's activations with offload.activations "cpu"
 * (its host store's); a new array of g->L, NULL when out of memory. */
long *trn_gpt_block_floats(const struct gpt *g, long B);

/* The CPU GPT's operations (model_gpt.c), which also work on its layout
 * (trn_model_host_layout). */
extern const struct trn_model_ops trn_gpt_ops;

#endif
