/* clock.h - monotonic and wall time helpers. */
#ifndef TM_CLOCK_H
#define TM_CLOCK_H
#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Monotonic milliseconds. */
int64_t tm_now_ms(void);
/* Monotonic microseconds. */
int64_t tm_now_us(void);
/* Wall-clock milliseconds since the Unix epoch. */
int64_t tm_wall_ms(void);
/* Absolute CLOCK_MONOTONIC deadline ms from now, for pthread_cond_timedwait. */
struct timespec tm_deadline_ms(int64_t ms);
/* Initialise cv to time its waits on CLOCK_MONOTONIC (the clock of
 * tm_deadline_ms). Returns 0 or an errno value. */
int tm_cond_init_monotonic(pthread_cond_t *cv);

#endif
