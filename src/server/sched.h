/*
 * sched.h - fair admission of handler calls to the worker pool.
 *
 * A handler may block for as long as it likes, so one client could fill
 * every worker with slow calls and stall everyone else. The scheduler caps
 * how many handlers run at once for one session and for one source address
 * (and in all), queues the rest per session, and, as slots free up, starts
 * the waiting sessions' calls round-robin. A session's queue is bounded by
 * admission: the caller asks tm_sched_would_refuse before it commits to a
 * call (and answers 429), so a submitted call always runs.
 */
#ifndef TM_SCHED_H
#define TM_SCHED_H
#include "../base/pool.h"

typedef struct tm_sched tm_sched;

typedef struct tm_sched_limits {
    unsigned per_session; /* running at once for one session (0: no cap) */
    unsigned per_address; /* running at once for one source address (0: no cap) */
    unsigned total;       /* running at once in all (0: no cap) */
    unsigned queue;       /* waiting per session: tm_sched_would_refuse beyond (0: no cap) */
} tm_sched_limits;

/* OUT out: a scheduler feeding pool (borrowed; it must outlive out). */
int tm_sched_new(tm_pool *pool, const tm_sched_limits *lim, tm_sched **out);
/* Run fn(arg) on the pool once session and address are under their caps.
 * address "" is never capped (the server's own work, e.g. recovery).
 * TIDEMARK_ECLOSED: the pool is closing (fn will not run). */
int tm_sched_submit(tm_sched *s, const char *session, const char *address, tm_pool_fn fn,
                    void *arg);
/* 1 if n more calls of session would exceed its queue bound now. */
int tm_sched_would_refuse(tm_sched *s, const char *session, unsigned n);
/* Calls running now (for metrics and tests). */
unsigned tm_sched_running(tm_sched *s);
/* Free; every submitted call must have run (free the pool first). */
void tm_sched_free(tm_sched *s);

#endif
