/* trainer/train.h - the training run: data, model, optimizer, schedule,
 * checkpoints and reports, driven step by step.
 *
 * The job dir holds spec.json (the effective spec), metrics.jsonl,
 * result.json and checkpoints/. Exit codes (what larch-train returns):
 */
#ifndef LARCH_TRAINER_TRAIN_H
#define LARCH_TRAINER_TRAIN_H

#include "options.h"
#include "spec/spec.h"

enum trn_exit {
	TRN_EXIT_OK = 0,               /* completed */
	TRN_EXIT_FAILED = 1,           /* a run-time error (data, I/O, memory) */
	TRN_EXIT_USAGE = 2,            /* bad command line or spec, or a spec this build cannot run */
	TRN_EXIT_INTERRUPTED = 3,      /* SIGUSR1/SIGTERM/SIGINT: checkpoint written, resumable */
	TRN_EXIT_DIVERGED = 4,         /* the loss became inf or NaN */
};

/* Runs spec to the end (or to a stop signal) and returns an enum trn_exit;
 * opts (borrowed) must have a job_dir.
 * Errors are printed to stderr and recorded in result.json. */
int trn_train(const struct trn_spec *spec, const struct trn_options *opts);

/* Asks the run to checkpoint and stop at the next step boundary.
 * Async-signal-safe: meant to be called from a signal handler. */
void trn_train_request_stop(int signo);

#endif
