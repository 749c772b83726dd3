/*
 * Lock rules stated in code, as SQLite's assert(sqlite3_mutex_held(...)):
 * a function that assumes its caller holds mu begins with TM_ASSERT_HELD(mu).
 * Builds without NDEBUG (Debug: the ASan+UBSan test build) check that
 * mu is locked; a pthread mutex does not say by which thread, so the check
 * catches a caller that holds nothing, not one thread relying on another's
 * lock. NDEBUG builds check nothing.
 */
#ifndef TM_BASE_LOCK_H
#define TM_BASE_LOCK_H

#include <assert.h>
#include <pthread.h>

#ifdef NDEBUG
#define TM_ASSERT_HELD(mu) ((void)0)
#else
/* Whether mu is locked now. A default mutex's trylock by its owner, or by
 * another thread while the owner holds it, fails with EBUSY. */
static inline int tm_mutex_locked(pthread_mutex_t *mu)
{
    if (pthread_mutex_trylock(mu) != 0)
        return 1;
    pthread_mutex_unlock(mu);
    return 0;
}
#define TM_ASSERT_HELD(mu) assert(tm_mutex_locked(mu))
#endif

#endif
