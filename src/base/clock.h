/* clock.h - monotonic and wall time helpers. */
#ifndef TM_CLOCK_H
#define TM_CLOCK_H
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

#endif
