/* service/slurm_array.h - Slurm job arrays as the Slurm executor writes
 * and reads them (executor_slurm_array.c).
 *
 * A sweep's children go to Slurm as one job array: task k of the array is
 * the child of sweep index k. sbatch's --array takes an index list with an
 * optional limit of tasks running at once ("0-3,5%2"); squeue's ArrayTaskID
 * says which tasks a row stands for: one ("4"), or, for tasks still pending
 * together, a list of the same form ("5-9%2", "5,7-9").
 */
#ifndef LARCH_SERVICE_SLURM_ARRAY_H
#define LARCH_SERVICE_SLURM_ARRAY_H

#include <stddef.h>

/* The --array value for tasks[0..n) (ascending, distinct, >= 0) with at most
 * max_parallel running at once (0: no limit): runs of consecutive tasks as
 * "a-b", joined by ",", then "%max_parallel". 0, or -1 when it does not fit
 * in len or n is 0. */
int slurm_array_spec(const int *tasks, int n, int max_parallel, char *out, size_t len);

/* 1 when squeue's ArrayTaskID field `tasks` ("4", "5-9%2", "5,7-9") names
 * task, else 0 (also for "N/A" and anything malformed). */
int slurm_array_has(const char *tasks, long task);

/* Splits a Slurm id "123_4" into its array job id (copied into array_id) and
 * task. 0, or -1 when sid is not of that form. */
int slurm_array_sid(const char *sid, char *array_id, size_t len, long *task);

#endif
