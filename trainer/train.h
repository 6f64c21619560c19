/* trainer/train.h - the training run: data, model, optimizer, schedule,
 * checkpoints and reports, driven step by step.
 *
 * The job dir holds spec.json (the effective spec), metrics.jsonl,
 * result.json and checkpoints/. Exit codes (what larch-train returns):
 */
#ifndef LARCH_TRAINER_TRAIN_H
#define LARCH_TRAINER_TRAIN_H

#include "input.h"
#include "spec.h"

enum trn_exit {
	TRN_EXIT_OK = 0,               /* completed */
	TRN_EXIT_FAILED = 1,           /* a run-time error (data, I/O, memory) */
	TRN_EXIT_USAGE = 2,            /* bad command line or spec, or a spec this build cannot run */
	TRN_EXIT_INTERRUPTED = 3,      /* SIGUSR1/SIGTERM/SIGINT: checkpoint written, resumable */
	TRN_EXIT_DIVERGED = 4,         /* the loss became inf or NaN */
};

enum trn_resume {
	TRN_RESUME_AUTO,               /* continue from the newest checkpoint if there is one */
	TRN_RESUME_REQUIRE,            /* --resume: fail unless there is one */
};

struct trn_train_opts {
	const char *job_dir;
	enum trn_resume resume;
	int threads;                   /* 0 = default (OMP_NUM_THREADS or the CPUs we may use) */
	int quiet;                     /* no progress lines */
	const char *device;            /* "cpu", "cuda", or NULL: cuda when the spec asks for GPUs
	                                  (resources.gpus_per_node > 0) */
	const struct trn_input_policy *inputs;  /* how data files and init.from are opened
	                                  (--data-root, --confine-data); NULL: unconfined */
};

/* Runs spec to the end (or to a stop signal) and returns an enum trn_exit.
 * Errors are printed to stderr and recorded in result.json. */
int trn_train(const struct trn_spec *spec, const struct trn_train_opts *opts);

/* Asks the run to checkpoint and stop at the next step boundary.
 * Async-signal-safe: meant to be called from a signal handler. */
void trn_train_request_stop(int signo);

#endif
