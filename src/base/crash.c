/* crash.c - see crash.h. Empty in production builds. */
#include "crash.h"

#ifdef TIDEMARK_CRASH_POINTS
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void tm_crash_point(const char *env, const char *point)
{
    static atomic_int hits;
    const char *spec = getenv(env);
    size_t n = strlen(point);
    if (!spec || strncmp(spec, point, n) != 0 || spec[n] != ':')
        return;
    if (atomic_fetch_add(&hits, 1) + 1 == atoi(spec + n + 1)) {
        fprintf(stderr, "tidemark: crash point %s reached\n", point);
        kill(getpid(), SIGKILL);
    }
}

void tm_test_delay(const char *env)
{
    const char *v = getenv(env);
    long ms = v ? atol(v) : 0;
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}
#else
typedef int tm_crash_unused; /* ISO C forbids an empty translation unit */
#endif
