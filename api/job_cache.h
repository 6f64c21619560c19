/* api/job_cache.h - GET /v1/jobs/{id}'s answers, kept while the database
 * is unchanged.
 *
 * Pollers ask for the same job again and again; a database read costs more
 * than the rest of the request. An entry is a job's reply body and owner,
 * stamped with the db_generation (db/db.h) read before the job was: it
 * answers only while the generation is still that one, i.e. no write of
 * larchd has ended since, so a cached body is never older than the
 * database. Direct-mapped by job id; safe on many threads at once. */
#ifndef LARCH_API_JOB_CACHE_H
#define LARCH_API_JOB_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct api_job_cache;

/* NULL when out of memory (the endpoint then reads the db every time). */
struct api_job_cache *api_job_cache_new(void);
void api_job_cache_free(struct api_job_cache *cache);

/* A hit: 1, *body a malloc'd NUL-terminated copy (the caller's), *len its
 * length, owner (owner_size bytes) the job's owner. 0: not there, or made
 * under another generation. */
int api_job_cache_get(struct api_job_cache *cache, int64_t id, uint64_t generation, char **body,
                      size_t *len, char *owner, size_t owner_size);

/* Keeps a copy of body (len bytes) for job id, read under generation. */
void api_job_cache_put(struct api_job_cache *cache, int64_t id, uint64_t generation,
                       const char *body, size_t len, const char *owner);

#endif
