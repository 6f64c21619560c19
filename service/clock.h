/* service/clock.h - larchd's clocks in milliseconds, one definition for
 * every file of the service.
 *
 * svc_mono_ms: CLOCK_MONOTONIC, for deadlines, intervals and timeouts.
 * svc_mono_coarse_ms: CLOCK_MONOTONIC_COARSE (a tick's resolution, a few
 * ms, at a fraction of the cost), for cache ages read on every request.
 * svc_wall_ms: CLOCK_REALTIME, for times stored or shown (Unix ms).
 */
#ifndef LARCH_SERVICE_CLOCK_H
#define LARCH_SERVICE_CLOCK_H

#include <stdint.h>

int64_t svc_mono_ms(void);
int64_t svc_mono_coarse_ms(void);
int64_t svc_wall_ms(void);

#endif
