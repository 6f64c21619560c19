/* api/sweeps_common.h - what the sweep endpoints (api/sweeps_*.c) share:
 * the {id} of the path, the sweep object of docs/api.md and its state. */
#ifndef LARCH_API_SWEEPS_COMMON_H
#define LARCH_API_SWEEPS_COMMON_H

#include <stdint.h>

#include "buf.h"
#include "db/sweeps.h"
#include "request.h"

/* The path's {id} as a sweep number; anything that is not a sweep id as the
 * server writes it is 404, as a sweep that does not exist. */
int api_sweep_id_or_reply(struct api_request *req, int64_t *id, enum MHD_Result *ret);
/* The start of every /v1/sweeps/{id}... handler: the database, the sweep id
 * and no query parameter at all (api_id_request_or_reply). Which sweeps the
 * caller may see is the db calls' owner scope (api_owner_scope). */
int api_sweep_request_or_reply(struct api_request *req, struct db **db, int64_t *id,
                               enum MHD_Result *ret);

/* The sweep's state, derived from its children's counts (docs/api.md):
 * "QUEUED", "RUNNING", "COMPLETED", "FAILED" or "CANCELLED" (static). */
const char *api_sweep_state(const struct db_sweep *s);

/* Writes the sweep object; with children (n of them), also "children": one
 * object per child with its target figures. */
void api_sweep_write(struct api_buf *b, const struct db_sweep *s,
                     const struct db_sweep_child *children, size_t n);

/* For a batch_scaling sweep, writes ,"study":{...} (api/sweeps_study.c)
 * from its children; nothing for any other sweep. */
void api_sweep_study_write(struct api_buf *b, const struct db_sweep *s,
                           const struct db_sweep_child *children, size_t n);

/* Reads the sweep with its children (owner-scoped as the principal is) and
 * replies it with status. */
enum MHD_Result api_reply_sweep(struct api_request *req, unsigned status, int64_t id);

#endif
