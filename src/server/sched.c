/*
 * sched.c - fair admission of handler calls (see sched.h).
 *
 * Lock order: the scheduler's lock, then the pool's (tm_pool_submit is
 * called under it). Jobs run with no scheduler lock held.
 */
#include "sched.h"
#include "../base/map.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADDR_MAX 64

typedef struct sjob sjob;
typedef struct squeue squeue;

struct sjob {
    tm_sched *s;
    tm_pool_fn fn;
    void *arg;
    squeue *q;
    char addr[ADDR_MAX];
    sjob *next;
};

/* One session's running count and waiting calls; in the ring while any wait. */
struct squeue {
    char key[80];
    unsigned running, queued;
    sjob *head, *tail;
    squeue *prev, *next; /* ring links, valid while in_ring */
    int in_ring;
};

typedef struct acount {
    unsigned running;
} acount;

struct tm_sched {
    pthread_mutex_t mu;
    tm_pool *pool;
    tm_sched_limits lim;
    tm_map *sessions;  /* key -> squeue, while running or queued */
    tm_map *addrs;     /* address -> acount, while running */
    squeue *ring;      /* next session to serve, NULL when none waits */
    unsigned total;
};

int tm_sched_new(tm_pool *pool, const tm_sched_limits *lim, tm_sched **out)
{
    tm_sched *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->pool = pool;
    s->lim = *lim;
    s->sessions = tm_map_new();
    s->addrs = tm_map_new();
    pthread_mutex_init(&s->mu, NULL);
    if (!s->sessions || !s->addrs) {
        tm_sched_free(s);
        return TIDEMARK_ENOMEM;
    }
    *out = s;
    return 0;
}

static void ring_add(tm_sched *s, squeue *q)
{
    if (q->in_ring)
        return;
    q->in_ring = 1;
    if (!s->ring) {
        q->prev = q->next = q;
        s->ring = q;
        return;
    }
    /* Join at the back: just before the next session to be served. */
    q->next = s->ring;
    q->prev = s->ring->prev;
    q->prev->next = q;
    s->ring->prev = q;
}

static void ring_remove(tm_sched *s, squeue *q)
{
    if (!q->in_ring)
        return;
    q->in_ring = 0;
    if (q->next == q) {
        s->ring = NULL;
    } else {
        q->prev->next = q->next;
        q->next->prev = q->prev;
        if (s->ring == q)
            s->ring = q->next;
    }
    q->prev = q->next = NULL;
}

/* Drop bookkeeping nobody needs any more. */
static void release(tm_sched *s, squeue *q, const char *addr)
{
    if (q->running == 0 && q->queued == 0) {
        ring_remove(s, q);
        tm_map_del(s->sessions, q->key);
        free(q);
    }
    if (addr[0]) {
        acount *a = tm_map_get(s->addrs, addr);
        if (a && a->running == 0)
            free(tm_map_del(s->addrs, addr));
    }
}

static int can_run(tm_sched *s, squeue *q, const char *addr)
{
    if (s->lim.total && s->total >= s->lim.total)
        return 0;
    if (s->lim.per_session && q->running >= s->lim.per_session)
        return 0;
    if (!addr[0] || !s->lim.per_address)
        return 1;
    acount *a = tm_map_get(s->addrs, addr);
    return !a || a->running < s->lim.per_address;
}

static void count(tm_sched *s, sjob *j, int delta)
{
    j->q->running += (unsigned)delta;
    s->total += (unsigned)delta;
    if (!j->addr[0])
        return;
    acount *a = tm_map_get(s->addrs, j->addr);
    if (!a && delta > 0 && (a = calloc(1, sizeof *a)) != NULL && tm_map_put(s->addrs, j->addr, a) != 0) {
        free(a);
        a = NULL;
    }
    if (a)
        a->running += (unsigned)delta;
}

static void trampoline(void *arg);

/* Hand j to the pool, counted as running. Caller holds s->mu. */
static int start_locked(tm_sched *s, sjob *j)
{
    count(s, j, 1);
    int rc = tm_pool_submit(s->pool, trampoline, j);
    if (rc)
        count(s, j, -1);
    return rc;
}

/* Start waiting calls, one session at a time round-robin, while any may
 * run. Calls the pool refuses (closing) are returned in *inline_jobs to be
 * run by the caller's thread: a call always runs exactly once. */
static void dispatch_locked(tm_sched *s, sjob **inline_jobs)
{
    int started = 1;
    while (started && s->ring) {
        started = 0;
        squeue *q = s->ring;
        do {
            squeue *next = q->next;
            sjob *j = q->head;
            if (j && can_run(s, q, j->addr)) {
                q->head = j->next;
                if (!q->head)
                    q->tail = NULL;
                q->queued--;
                if (q->queued == 0)
                    ring_remove(s, q);
                s->ring = q->in_ring ? next : s->ring; /* the next session goes first next time */
                if (start_locked(s, j) != 0) {
                    count(s, j, 1); /* runs inline, still counted until it ends */
                    j->next = *inline_jobs;
                    *inline_jobs = j;
                }
                started = 1;
                break;
            }
            q = next;
        } while (s->ring && q != s->ring);
    }
}

static void run_job(sjob *j)
{
    tm_sched *s = j->s;
    j->fn(j->arg);
    pthread_mutex_lock(&s->mu);
    count(s, j, -1);
    release(s, j->q, j->addr);
    sjob *more = NULL;
    dispatch_locked(s, &more);
    pthread_mutex_unlock(&s->mu);
    free(j);
    while (more) {
        sjob *n = more->next;
        run_job(more);
        more = n;
    }
}

static void trampoline(void *arg) { run_job(arg); }

static squeue *queue_of(tm_sched *s, const char *session)
{
    squeue *q = tm_map_get(s->sessions, session);
    if (q)
        return q;
    q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    snprintf(q->key, sizeof q->key, "%s", session);
    if (tm_map_put(s->sessions, q->key, q) != 0) {
        free(q);
        return NULL;
    }
    return q;
}

int tm_sched_submit(tm_sched *s, const char *session, const char *address, tm_pool_fn fn, void *arg)
{
    sjob *j = calloc(1, sizeof *j);
    if (!j)
        return TIDEMARK_ENOMEM;
    j->s = s;
    j->fn = fn;
    j->arg = arg;
    snprintf(j->addr, sizeof j->addr, "%s", address ? address : "");
    pthread_mutex_lock(&s->mu);
    squeue *q = queue_of(s, session ? session : "");
    int rc = q ? 0 : TIDEMARK_ENOMEM;
    j->q = q;
    if (rc == 0 && q->queued == 0 && can_run(s, q, j->addr)) {
        rc = start_locked(s, j);
    } else if (rc == 0) {
        if (q->tail)
            q->tail->next = j;
        else
            q->head = j;
        q->tail = j;
        q->queued++;
        ring_add(s, q);
        j = NULL;
    }
    if (rc && q)
        release(s, q, "");
    pthread_mutex_unlock(&s->mu);
    if (rc)
        free(j);
    return rc;
}

int tm_sched_would_refuse(tm_sched *s, const char *session, unsigned n)
{
    if (!s->lim.queue)
        return 0;
    pthread_mutex_lock(&s->mu);
    squeue *q = tm_map_get(s->sessions, session);
    int r = q && q->queued + n > s->lim.queue;
    pthread_mutex_unlock(&s->mu);
    return r;
}

unsigned tm_sched_running(tm_sched *s)
{
    pthread_mutex_lock(&s->mu);
    unsigned n = s->total;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void tm_sched_free(tm_sched *s)
{
    if (!s)
        return;
    tm_map_free(s->sessions);
    tm_map_free(s->addrs);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
