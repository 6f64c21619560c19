/* service/clock.c - see clock.h. */
#include "clock.h"

#include <time.h>

static int64_t ms_of(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t svc_mono_ms(void)
{
	return ms_of(CLOCK_MONOTONIC);
}

int64_t svc_mono_coarse_ms(void)
{
	return ms_of(CLOCK_MONOTONIC_COARSE);
}

int64_t svc_wall_ms(void)
{
	return ms_of(CLOCK_REALTIME);
}
