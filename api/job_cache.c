/* api/job_cache.c - the job reply cache; see job_cache.h. */
#include "job_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 1024          /* a power of two */
#define STRIPES 16          /* locks, each over SLOTS / STRIPES slots */
#define OWNER_MAX 72

struct slot {
	int64_t id;             /* 0: empty */
	uint64_t generation;
	char *body;             /* owned, NUL-terminated */
	size_t len;
	char owner[OWNER_MAX];
};

struct api_job_cache {
	pthread_mutex_t lock[STRIPES];
	struct slot slot[SLOTS];
};

struct api_job_cache *api_job_cache_new(void)
{
	struct api_job_cache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_init(&c->lock[i], NULL);
	return c;
}

void api_job_cache_free(struct api_job_cache *c)
{
	if (!c)
		return;
	for (int i = 0; i < SLOTS; i++)
		free(c->slot[i].body);
	for (int i = 0; i < STRIPES; i++)
		pthread_mutex_destroy(&c->lock[i]);
	free(c);
}

static size_t index_of(int64_t id)
{
	return (size_t)((uint64_t)id & (SLOTS - 1));
}

int api_job_cache_get(struct api_job_cache *c, int64_t id, uint64_t generation, char **body,
                      size_t *len, char *owner, size_t owner_size)
{
	size_t i = index_of(id);
	pthread_mutex_t *lock = &c->lock[i % STRIPES];
	struct slot *s = &c->slot[i];
	char *copy = NULL;
	pthread_mutex_lock(lock);
	if (s->id == id && s->generation == generation && s->body &&
	    (copy = malloc(s->len + 1)) != NULL) {
		memcpy(copy, s->body, s->len + 1);
		*len = s->len;
		snprintf(owner, owner_size, "%s", s->owner);
	}
	pthread_mutex_unlock(lock);
	*body = copy;
	return copy != NULL;
}

void api_job_cache_put(struct api_job_cache *c, int64_t id, uint64_t generation,
                       const char *body, size_t len, const char *owner)
{
	if (id <= 0 || strlen(owner) >= OWNER_MAX)
		return;
	char *copy = malloc(len + 1);
	if (!copy)
		return;
	memcpy(copy, body, len);
	copy[len] = '\0';
	size_t i = index_of(id);
	pthread_mutex_t *lock = &c->lock[i % STRIPES];
	struct slot *s = &c->slot[i];
	pthread_mutex_lock(lock);
	char *old = s->body;
	s->id = id;
	s->generation = generation;
	s->body = copy;
	s->len = len;
	memcpy(s->owner, owner, strlen(owner) + 1);
	pthread_mutex_unlock(lock);
	free(old);
}
