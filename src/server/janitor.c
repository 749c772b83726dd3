/*
 * janitor.c - the server's background threads: the janitor expires idle
 * sessions; the recoverer finishes, again and again, what no live call owns
 * (requests of nodes whose lease lapsed, on a shared store; calls whose
 * response could not be written, once the store takes writes again).
 */
#include "server_int.h"
#include "feed.h"
#include "tasks.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/clock.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif

static void expired(void *ud, const char *id)
{
    tidemark_server_t *srv = ud;
    pthread_mutex_lock(&srv->mu);
    tm_sess *s = tm_map_del(srv->sessions, id);
    if (s)
        tm_gauge_add(srv->m.sessions_open, -1);
    pthread_mutex_unlock(&srv->mu);
    if (s) {
        tm_sess_close(s);
        tm_sess_observe_end(srv, s);
        tm_sess_unref(s);
    }
    tm_feed_end_session(srv, id);
    tm_sess_bound_drop(srv, id);
    TM_INFO("session %s expired (idle)", TM_SID(id));
}

typedef struct held_list {
    tm_sess **v;
    size_t n, cap;
} held_list;

static void hold_one(const char *k, void *v, void *ud)
{
    (void)k;
    held_list *l = ud;
    if (l->n < l->cap)
        l->v[l->n++] = tm_sess_ref(v);
}

/* A session with a call running or a stream attached is not idle: touch
 * it. The sessions are taken (referenced) under the server's lock and
 * looked at outside it: with 100,000 sessions the visit held the lock that
 * every request takes for 50-70 ms a second. */
static void touch_busy(tidemark_server_t *srv, int64_t now)
{
    held_list l = {0};
    pthread_mutex_lock(&srv->mu);
    l.cap = tm_map_count(srv->sessions);
    l.v = l.cap ? malloc(l.cap * sizeof *l.v) : NULL;
    if (l.v)
        tm_map_each(srv->sessions, hold_one, &l);
    pthread_mutex_unlock(&srv->mu);
    for (size_t i = 0; i < l.n; i++) {
        tm_sess *s = l.v[i];
        pthread_mutex_lock(&s->mu);
        int busy = tm_map_count(s->calls) > 0;
        pthread_mutex_unlock(&s->mu);
        if (busy || tm_feed_session_attached(srv, s->id))
            if (tm_store_session_touch(srv->store, s->id, now) != 0)
                TM_DEBUG("a busy session's touch failed: it may expire early");
        tm_sess_unref(s);
    }
    free(l.v);
}

/* Give freed memory back to the system once TRIM_FREED more bytes are
 * free in the heap than at their lowest since the last trim. glibc keeps
 * what is freed in the middle of its heaps: after 200 streams of 10,000
 * events ended, RSS stayed 100+ MB above the start until a malloc_trim(0)
 * (it gives back free pages anywhere in the heaps, not only at the top;
 * M_TRIM_THRESHOLD only concerns the top). The free total still counts
 * pages given back, hence the low mark rather than the total. Runs on the
 * janitor's thread; mallinfo2 and malloc_trim lock one arena at a time. */
#define TRIM_FREED (8u << 20)
static void give_back(size_t *low)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    size_t free_now = mallinfo2().fordblks;
    if (free_now < *low)
        *low = free_now;
    if (free_now - *low < TRIM_FREED)
        return;
    malloc_trim(0);
    *low = mallinfo2().fordblks;
#else
    (void)low;
#endif
}

/* Expire idle sessions (--session-ttl), let idle loaded ones go from
 * memory (TM_SESS_CACHE_MAX). */
static void *janitor_main(void *arg)
{
    tidemark_server_t *srv = arg;
    int64_t ttl_ms = (int64_t)srv->cfg.session_ttl_seconds * 1000;
    int64_t period = ttl_ms && ttl_ms / 4 < 1000 ? (ttl_ms / 4 > 50 ? ttl_ms / 4 : 50) : 1000;
    size_t low = SIZE_MAX; /* give_back's low mark of free heap bytes */
    pthread_mutex_lock(&srv->jan_mu);
    while (srv->jan_running) {
        struct timespec ts = tm_deadline_ms(period);
        pthread_cond_timedwait(&srv->jan_cv, &srv->jan_mu, &ts);
        if (!srv->jan_running)
            break;
        pthread_mutex_unlock(&srv->jan_mu);
        tm_sess_evict_idle(srv);
        give_back(&low);
        if (!ttl_ms) {
            pthread_mutex_lock(&srv->jan_mu);
            continue;
        }
        touch_busy(srv, tm_wall_ms());
        tm_modern_pool_touch(srv, tm_wall_ms());
        int rc = tm_store_sessions_expire(srv->store, tm_wall_ms() - ttl_ms, expired, srv);
        if (rc)
            TM_WARN("session expiry: %s (tried again in %lld ms)", tidemark_strerror(rc),
                    (long long)period);
        pthread_mutex_lock(&srv->jan_mu);
    }
    pthread_mutex_unlock(&srv->jan_mu);
    return NULL;
}

/* Finish, again and again, not only at start-up: the requests of nodes
 * whose lease lapsed (stores shared by nodes), and calls whose response
 * could not be written (once the store takes writes again). */
#define RECOVER_EVERY_MS 500
static void *recoverer_main(void *arg)
{
    tidemark_server_t *srv = arg;
    pthread_mutex_lock(&srv->jan_mu);
    while (srv->rec_running) {
        struct timespec ts = tm_deadline_ms(RECOVER_EVERY_MS);
        pthread_cond_timedwait(&srv->jan_cv, &srv->jan_mu, &ts);
        if (!srv->rec_running)
            break;
        pthread_mutex_unlock(&srv->jan_mu);
        int rc = tm_store_shared(srv->store) ? tm_recover(srv) : 0;
        if (rc)
            TM_DEBUG("periodic recovery: %s", tidemark_strerror(rc));
        tm_recover_failed(srv);
        tm_modern_reap(srv, 0);
        tm_tasks_tick(srv); /* tasks.h: cancellations asked on other nodes */
        pthread_mutex_lock(&srv->jan_mu);
    }
    pthread_mutex_unlock(&srv->jan_mu);
    return NULL;
}

void tm_background_start(tidemark_server_t *srv)
{
    srv->rec_running = 1;
    if (pthread_create(&srv->recoverer, NULL, recoverer_main, srv) != 0) {
        srv->rec_running = 0;
        TM_ERROR("cannot start the recovery thread");
    }
    {
        srv->jan_running = 1;
        if (pthread_create(&srv->janitor, NULL, janitor_main, srv) != 0) {
            srv->jan_running = 0;
            TM_ERROR("cannot start the session expiry thread");
        }
    }
}

static void stop_thread(tidemark_server_t *srv, int *running, pthread_t t)
{
    if (!*running)
        return;
    pthread_mutex_lock(&srv->jan_mu);
    *running = 0;
    pthread_cond_broadcast(&srv->jan_cv);
    pthread_mutex_unlock(&srv->jan_mu);
    pthread_join(t, NULL);
}

void tm_background_stop(tidemark_server_t *srv)
{
    stop_thread(srv, &srv->rec_running, srv->recoverer);
    stop_thread(srv, &srv->jan_running, srv->janitor);
}
