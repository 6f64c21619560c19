/* trainer/data_int.h - what data.c, data_idx.c and data_tokens.c share; not
 * part of the trainer's interface (that is data.h).
 *
 * Each format loader fills ds->train and ds->val (holding out val_fraction of
 * train when no val files are given) and the fields of ds its task uses.
 * On failure it returns -1 with err set and may leave ds partly filled; the
 * caller releases it.
 */
#ifndef LARCH_TRAINER_DATA_INT_H
#define LARCH_TRAINER_DATA_INT_H

#include "data.h"

int trn_data_idx_load(struct trn_dataset *ds, const struct trn_spec *spec, struct trn_err *err);
int trn_data_tokens_load(struct trn_dataset *ds, const struct trn_spec *spec, struct trn_err *err);
/* The shape of the idx data (trn_dataset_shape): headers and labels only. */
int trn_data_idx_shape(struct trn_dataset *ds, const struct trn_spec *spec, struct trn_err *err);

/* How many of n units (samples or tokens) the fraction holds out: rounded,
 * at least one when fraction > 0. The caller checks what remains. */
long trn_data_holdout(long n, double fraction);

#endif
