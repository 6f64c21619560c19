/* db/checkpoints.h - the checkpoints a job has written (one per step).
 *
 * Ownership: inputs are borrowed; a db_checkpoint_list owns its items
 * (release with db_checkpoint_list_release, which accepts a zeroed list).
 */
#ifndef LARCH_DB_CHECKPOINTS_H
#define LARCH_DB_CHECKPOINTS_H

#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

struct db_checkpoint {
	int64_t step;
	char *path;              /* owned in lists; borrowed in db_checkpoints_add */
	int64_t bytes;
	char sha256[65];         /* lower-case hex */
	int64_t time_ms;         /* 0 = now in db_checkpoints_add */
};

/* Records a checkpoint; a second one for the same step replaces the first
 * (a resumed run rewrote it). DB_NOT_FOUND if the job does not exist,
 * DB_INVALID for a missing path or a sha256 that is not 64 hex digits. */
int db_checkpoints_add(struct db *db, int64_t job, const struct db_checkpoint *ck,
                       struct db_err *err);

struct db_checkpoint_list {
	struct db_checkpoint *items;   /* owned, by step */
	size_t n;
};

/* The job's checkpoints by step; owner NULL = any, else another's job is not found. */
int db_checkpoints_list(struct db *db, int64_t job, const char *owner,
                        struct db_checkpoint_list *out, struct db_err *err);
void db_checkpoint_list_release(struct db_checkpoint_list *list);

#endif
