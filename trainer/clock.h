/* trainer/clock.h - the trainer's one clock. */
#ifndef LARCH_TRAINER_CLOCK_H
#define LARCH_TRAINER_CLOCK_H

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for intervals and
 * deadlines, never for wall time. */
double trn_now(void);

#endif
