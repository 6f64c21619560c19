/* api/sweeps_get.c - GET /v1/sweeps/{id}: the sweep, its state and counts,
 * and every child with its axis values, state and target figures (best
 * value of the target metric; steps, examples and seconds to the target).
 * A user sees only their own sweeps (another's is 404). */
#include "handlers.h"
#include "jobs_common.h"
#include "sweeps_common.h"

enum MHD_Result api_sweeps_get(struct api_request *req)
{
	enum MHD_Result ret;
	struct db *db;
	int64_t id;
	if (api_sweep_request_or_reply(req, &db, &id, &ret))
		return ret;
	return api_reply_sweep(req, 200, id);
}
