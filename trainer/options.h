/* trainer/options.h - larch-train's run settings that are not spec fields:
 * one table (name, type, default, range, help; Redis's standardConfig,
 * larchd's service/config.c) filled once in main, from the command line,
 * else the environment, else the default; printed once in the run's
 * header; passed down as struct trn_options (the kernels get their part as
 * arguments: kern_blas_init's choice, kern_optim_set_isa).
 *
 * A zeroed struct trn_options is the defaults, so that tests and tools may
 * build one with designated initializers. A row's value lives in the
 * struct's field of the row's type: a string (const char *, borrowed from
 * argv or the environment, or one of the row's choices), an int or a
 * switch (int 0/1).
 *
 * The GPU backend's rows (cuda_*) are read here with the others, checked
 * before any device is touched, and handed to the backend through
 * trn_model_new_on (model.h); the kernels get theirs as struct
 * kern_cuda_opts. Rows for other backends are added the same way: a field,
 * a row, and the code that reads the field.
 */
#ifndef LARCH_TRAINER_OPTIONS_H
#define LARCH_TRAINER_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "spec/input.h"

struct trn_options {
	const char *job_dir;           /* where the run's files go; NULL: runs/<spec name> */
	int resume;                    /* 1: fail unless there is a checkpoint to resume */
	int threads;                   /* kernels' and BLAS's; 0: OMP_NUM_THREADS, else the CPUs */
	int quiet;                     /* no progress lines */
	const char *device;            /* "cpu", "cuda"; NULL: cuda when the spec asks for GPUs */
	const char *blas;              /* the CBLAS library; NULL: the build's candidates */
	const char *openblas_coretype; /* NULL: the kernel family of this CPU's features */
	const char *cpu_isa;           /* the optimizer's loops; NULL or "auto": the widest */
	int comm_timeout_s;            /* srun's tasks' rendezvous; 0: TRN_COMM_TIMEOUT_S */
	const char *comm_host;         /* the host rank 0 publishes; NULL: its hostname */
	const char *cuda_backend;      /* the GPU backend's library file (cuda_backend.h); NULL:
	                                  liblarch_trainer_cuda.so beside liblarch_trainer.so */
	int cuda_sync;                 /* wait for each GPU kernel at its launch, so that a
	                                  fault is reported at its launch site */
	const char *cuda_kernel_picks; /* the same-bits variants' picks ("KEY=N ..." as a run
	                                  prints them) or "default" (every op's default,
	                                  untimed); NULL: timed (kernels/cuda_opts.h) */

	/* not rows: set by main from --data-root and --confine-data */
	const struct trn_input_policy *inputs;   /* NULL: unconfined; borrowed */

	/* where each row's value came from (enum trn_option_source), by row */
	unsigned char source[16];
};

enum trn_option_type { TRN_OPTION_STR, TRN_OPTION_INT, TRN_OPTION_BOOL };

enum trn_option_source { TRN_OPTION_DEFAULT, TRN_OPTION_ENV, TRN_OPTION_FLAG };

struct trn_option {
	const char *name;              /* as the run's header prints it */
	const char *flag;              /* the command line's "--threads", or NULL */
	const char *env;               /* the environment's variable, or NULL */
	enum trn_option_type type;
	size_t offset;                 /* of the field in struct trn_options */
	long lo, hi;                   /* TRN_OPTION_INT's range */
	const char *const *choices;    /* a TRN_OPTION_STR's values (NULL-terminated), or NULL:
	                                  any text */
	const char *dflt;              /* the default as printed */
	const char *help;
	/* a TRN_OPTION_STR's further check of its text (NULL: none): 0, or -1
	 * with err naming `what` (the flag or the variable) */
	int (*check)(const char *what, const char *text, char *err, size_t errlen);
};

/* The rows, and how many (*n). Static storage. */
const struct trn_option *trn_options_table(int *n);

/* The row named name, or by its flag ("--threads"); NULL for none. */
const struct trn_option *trn_option_find(const char *name);

/* Sets row's field from the command line's text (NULL for a switch given
 * without a value: on). 0, or -1 with err ("--threads: must be an integer
 * in [1, 4096] (got \"x\")"). */
int trn_options_set_flag(struct trn_options *o, const struct trn_option *row,
                         const char *text, char *err, size_t errlen);

/* Fills every row not set from the command line from its environment
 * variable, where set. 0, or -1 with err naming the variable. */
int trn_options_from_env(struct trn_options *o, char *err, size_t errlen);

/* One line per row, "  threads 4 (--threads)", after a heading line. */
void trn_options_print(FILE *f, const struct trn_options *o);

#endif
