/* trainer/probe.h - larch-train --probe: what larchd learns of a job's
 * input files before it accepts the job, run as the job's user, off
 * larchd's HTTP threads, with a deadline.
 *
 * The probe checks every file the spec names through the opener (input.h),
 * in a fixed order: the data files (idx: data.train.images,
 * data.train.labels, data.val.images, data.val.labels; tokens_u16:
 * data.train, data.val; text: data.path), then init.from; then it reads
 * the data's shape (trn_dataset_shape: headers and label files, never the
 * data itself), opens init.from's header (trn_ckpt_open_input), and checks
 * that the train split holds one global batch. It writes nothing and puts
 * no byte of a file in its answer.
 *
 * With base_dir (the job's directory under larchd, which does not exist
 * yet) a relative path is taken as the job will take it: trn_input_rebase.
 * Named data sets are never confined.
 */
#ifndef LARCH_TRAINER_PROBE_H
#define LARCH_TRAINER_PROBE_H

#include <jansson.h>

#include "spec/input.h"
#include "spec/spec.h"

/* The answer as a new JSON object:
 *   {"ok": true, "shape": <trn_dataset_shape_to_json>}
 *   {"ok": false, "field": "data.train", "message": "data.train: ...",
 *    "kind": "missing"}
 * field is the spec field at fault (the message's prefix); the message is
 * the whole error, as the trainer would give it; "kind" (only then) says
 * the path names nothing on this host, which for a job run elsewhere (Slurm)
 * need not be an error. An init that names a job's checkpoint (init.job)
 * is larchd's to check: the probe passes it by. Borrows spec and inputs;
 * base_dir may be NULL. NULL only when out of memory. */
json_t *trn_probe(const struct trn_spec *spec, const struct trn_input_policy *inputs,
                  const char *base_dir);

/* The answer for an error the probe met before it had a spec (the spec
 * did not parse): field from the message's prefix ("spec" when it has
 * none). A new reference, NULL when out of memory. */
json_t *trn_probe_failure(const char *message);

#endif
