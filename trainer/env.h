/* trainer/env.h - the one reader of the environment.
 *
 * Settings are read once, from the command line or larchd's config file,
 * and passed down (options.h, service/config.c); what must stay in the
 * environment comes through here: the job protocol larchd sets
 * (LARCH_SERVER_URL, LARCH_JOB_ID, LARCH_JOB_TOKEN), the launchers'
 * variables (SLURM_*, OMPI_*, PMI*), the system's (HOME, PATH, COLUMNS) and
 * the environment rows of the trainer's options table. Plain C with no
 * dependencies, so that larchd, the larch CLI and larch-train all link it.
 *
 * An unset variable and an empty one read the same: unset. A value that
 * cannot be used is an error naming the variable:
 *   "LARCH_COMM_TIMEOUT: must be an integer in [1, 86400] (got \"soon\")"
 */
#ifndef LARCH_TRAINER_ENV_H
#define LARCH_TRAINER_ENV_H

#include <stddef.h>

/* name's value, or NULL when it is unset or empty. The environment's
 * storage: valid until the variable is changed. */
const char *trn_env_str(const char *name);

/* Whether name is set to a value that is not empty. */
int trn_env_has(const char *name);

/* name as a decimal integer in [lo, hi] into *out (dflt when unset):
 * 0, or -1 with a message in err (errlen bytes; err may be NULL) and *out
 * left at dflt. */
int trn_env_long(const char *name, long lo, long hi, long dflt, long *out, char *err,
                 size_t errlen);

/* name as a number in [lo, hi] (no inf or NaN), as trn_env_long. */
int trn_env_double(const char *name, double lo, double hi, double dflt, double *out, char *err,
                   size_t errlen);

/* name as a switch: 1, true, yes, on / 0, false, no, off; as trn_env_long. */
int trn_env_bool(const char *name, int dflt, int *out, char *err, size_t errlen);

/* name as one of the NULL-terminated names: its index into *out (dflt when
 * unset); as trn_env_long, the message listing the names. */
int trn_env_choice(const char *name, const char *const *names, int dflt, int *out, char *err,
                   size_t errlen);

/* The parsers behind them, for the same value given another way (a
 * command-line flag): what names the value in a message is `what`. */
int trn_parse_long(const char *what, const char *text, long lo, long hi, long *out, char *err,
                   size_t errlen);
int trn_parse_double(const char *what, const char *text, double lo, double hi, double *out,
                     char *err, size_t errlen);
int trn_parse_bool(const char *what, const char *text, int *out, char *err, size_t errlen);
int trn_parse_choice(const char *what, const char *text, const char *const *names, int *out,
                     char *err, size_t errlen);

#endif
