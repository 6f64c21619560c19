/* service/accounting_internal.h - for service/accounting*.c only: the Slurm
 * commands accounting_slurm.c runs for accounting.c (threads, snapshot,
 * hooks). Each takes the command timeout in ms and returns 0, or -1 with
 * msg saying what failed (lower case). */
#ifndef LARCH_SERVICE_ACCOUNTING_INTERNAL_H
#define LARCH_SERVICE_ACCOUNTING_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "accounting.h"

struct db;

/* `scontrol show config`: *on = 1 when AccountingStorageType is slurmdbd's
 * (else why says what it is), cluster = ClusterName. */
int svc_acct_slurm_probe(int timeout_ms, int *on, char *cluster, size_t cluster_len,
                         char *why, size_t why_len, char *msg, size_t len);

/* The accounts of cluster as a new JSON array (svc_acct_parse_accounts);
 * fair share left out (null) when sshare fails, with *no_fairshare set. */
int svc_acct_slurm_accounts(int timeout_ms, const char *cluster, json_t **accounts,
                            int *no_fairshare, char *msg, size_t len);

/* sacct's jobs that ended in [from_ms, to_ms] into db; *seen how many
 * sacct listed, *added the new ones. */
int svc_acct_slurm_usage(int timeout_ms, struct db *db, int64_t from_ms, int64_t to_ms,
                         size_t *seen, size_t *added, char *msg, size_t len);

/* sacctmgr -i modify ... set ...: 0 with cmd the command line (for the
 * audit entry) and *changed (0: Slurm said "Nothing modified"); -1 with
 * *status 400 (refused) or 503 (unreachable) and msg. */
int svc_acct_slurm_set(int timeout_ms, const char *cluster, const struct api_acct_limits *in,
                       int *changed, char *cmd, size_t cmd_len, unsigned *status, char *msg,
                       size_t len);

#endif
