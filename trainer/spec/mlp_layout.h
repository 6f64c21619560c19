/* trainer/spec/mlp_layout.h - what an MLP holds and where: its parameter
 * table and its activations' layout, shared by trainer/model_mlp.c (which
 * computes with them) and mlp_layout.c (the layout alone, for the memory
 * plan: trn_mlp_layout). Not part of the trainer's interface (model.h). */
#ifndef LARCH_TRAINER_SPEC_MLP_LAYOUT_H
#define LARCH_TRAINER_SPEC_MLP_LAYOUT_H

#include "trainer/act_offload.h"
#include "trainer/model.h"

#define MLP_MAX_LAYERS (TRN_MAX_HIDDEN + 1)

struct mlp {
	struct trn_model base;         /* first: a struct trn_model * is a struct mlp * */
	int n_layers;
	int dims[MLP_MAX_LAYERS + 1];  /* dims[0] input, dims[i + 1] output of layer i */
	enum trn_act act;
	float *arena;                  /* every activation and scratch buffer */
	float *pre[MLP_MAX_LAYERS];    /* layer outputs before the activation [B, dims[i+1]] */
	float *post[MLP_MAX_LAYERS];   /* after the activation (hidden layers only); for ReLU
	                                  the same buffer as pre[i], applied in place */
	float *slot[2];                /* "cpu": staging, where pre and post of hidden layers point */
	struct trn_act_offload off;    /* "cpu" */
	int widest;                    /* the widest layer's inputs or outputs */
	float *dpre, *dpost;           /* gradient scratch, sized for the widest layer */
	float *losses, *lse;           /* [B] */
	int n;                         /* rows in the last forward */
};

/* Sets m (zeroed, its base.ops set) up for spec and ds at micro-batch
 * max_batch: the layers, the parameter table (a block per layer), the
 * activation sizes (base.act_bytes, act_bytes_none, act_host_bytes) and
 * flops; nothing allocated for the weights or the activations. 0, or -1
 * with err set; either way trn_mlp_layout_release frees what it made. */
int trn_mlp_layout_init(struct mlp *m, const struct trn_spec *spec, const struct trn_dataset *ds,
                        int max_batch, struct trn_err *err);
void trn_mlp_layout_release(struct mlp *m);
/* Lays every activation buffer of mode out in one arena for B rows. With
 * arena NULL it only counts; the same walk then hands out the pointers, so
 * the two cannot disagree. Returns the floats. */
long trn_mlp_carve(struct mlp *m, enum trn_offload mode, long B, float *arena);
/* floats of hidden layer j's saved activations at max_batch rows */
long trn_mlp_block_floats(const struct mlp *m, int j);

/* The CPU MLP's operations (model_mlp.c), which also work on its layout
 * (trn_model_host_layout). */
extern const struct trn_model_ops trn_mlp_ops;

#endif
