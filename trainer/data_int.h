/* trainer/data_int.h - what data.c, data_idx.c and data_tokens.c share; not
 * part of the trainer's interface (that is data.h).
 *
 * Each format loader fills ds->train and ds->val (holding out val_fraction of
 * train when no val files are given) and the fields of ds its task uses.
 * On failure it returns -1 with err set and may leave ds partly filled; the
 * caller releases it. Every file is opened with trn_input_open, and no
 * message holds bytes read from a file that failed to parse (magic numbers,
 * header fields): only what is wrong, the path and sizes.
 */
#ifndef LARCH_TRAINER_DATA_INT_H
#define LARCH_TRAINER_DATA_INT_H

#include "data.h"

/* inputs: how files are opened (input.h); NULL for a named data set */
int trn_data_idx_load(struct trn_dataset *ds, const struct trn_spec *spec,
                      const struct trn_input_policy *inputs, struct trn_err *err);
int trn_data_tokens_load(struct trn_dataset *ds, const struct trn_spec *spec,
                         const struct trn_input_policy *inputs, struct trn_err *err);
/* The shapes (trn_dataset_shape): idx from the image headers and the label
 * files; tokens from the headers (tokens_u16) or the sizes (text). */
int trn_data_idx_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                       const struct trn_input_policy *inputs, struct trn_err *err);
int trn_data_tokens_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                          const struct trn_input_policy *inputs, struct trn_err *err);

/* How many of n units (samples or tokens) the fraction holds out: rounded,
 * at least one when fraction > 0. The caller checks what remains. */
long trn_data_holdout(long n, double fraction);

#endif
