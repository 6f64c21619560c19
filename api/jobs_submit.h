/* api/jobs_submit.h - the submit-time checks that POST /v1/jobs
 * (api/jobs_post.c) and POST /v1/sweeps (api/sweeps_post.c) share. */
#ifndef LARCH_API_JOBS_SUBMIT_H
#define LARCH_API_JOBS_SUBMIT_H

#include "jobs_hooks.h"
#include "request.h"
#include "trainer/spec/spec.h"

/* The memory preflight (trainer/spec/plan.h) of a validated spec, given
 * the data's shape as the submit's preflight learned it (shape_json, may
 * be NULL: then there is no plan). Returns 0 to go on, or 1 with the 422
 * replied and its result in *ret. hooks->memory_limits must be set. */
int api_jobs_check_memory(struct api_request *req, const struct api_jobs_hooks *hooks,
                          const struct trn_spec *spec, const char *shape_json,
                          enum MHD_Result *ret);

/* 400 invalid_spec, detail {"field": field}, the message from fmt. */
enum MHD_Result api_reply_invalid_field(struct api_request *req, const char *field,
                                        const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
