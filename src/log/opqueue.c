/* opqueue.c - see opqueue.h. */
#include "opqueue.h"
#include "../base/clock.h"
#include "tidemark/tidemark.h"

int tm_opqueue_init(tm_opqueue *q)
{
    *q = (tm_opqueue){0};
    int rc = pthread_mutex_init(&q->mu, NULL) || tm_cond_init_monotonic(&q->work_cv) ||
             pthread_cond_init(&q->done_cv, NULL);
    return rc ? TIDEMARK_ENOMEM : 0;
}

void tm_opqueue_destroy(tm_opqueue *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work_cv);
    pthread_cond_destroy(&q->done_cv);
}

/* This thread's hold: on the queue's list while it lasts (opqueue.h). */
static _Thread_local tm_opqueue *held_q;
static _Thread_local int held_depth;
static _Thread_local tm_ophold held_me;

void tm_opqueue_push(tm_opqueue *q, tm_qop *o)
{
    o->next = NULL;
    pthread_mutex_lock(&q->mu);
    o->ctr = ++q->next_ctr;
    if (q->tail)
        q->tail->next = o;
    else
        q->head = o;
    q->tail = o;
    /* A hold keeps back at most TM_HOLD_MAX_OPS: past that, what was
     * queued goes to the writer and the hold goes on from the next op. */
    if (held_q == q && o->ctr - held_me.from + 1 >= TM_HOLD_MAX_OPS)
        held_me.from = o->ctr + 1;
    pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->mu);
}

void tm_opqueue_hold(tm_opqueue *q)
{
    if (held_q == q) {
        held_depth++;
        return;
    }
    if (held_q) /* another queue's hold is not ours to stack; ignore */
        return;
    pthread_mutex_lock(&q->mu);
    held_me.from = q->next_ctr + 1; /* ops from here on wait for the release */
    held_me.next = q->holds;
    q->holds = &held_me;
    pthread_mutex_unlock(&q->mu);
    held_q = q;
    held_depth = 1;
}

static void unhold(tm_opqueue *q)
{
    held_q = NULL;
    held_depth = 0;
    pthread_mutex_lock(&q->mu);
    for (tm_ophold **pp = &q->holds; *pp; pp = &(*pp)->next)
        if (*pp == &held_me) {
            *pp = held_me.next;
            break;
        }
    if (q->head)
        pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->mu);
}

void tm_opqueue_release(tm_opqueue *q)
{
    if (held_q == q && --held_depth == 0)
        unhold(q);
}

int tm_opqueue_wait(tm_opqueue *q, tm_qop *o)
{
    if (held_q == q)
        unhold(q); /* its op would wait for the hold: let go first */
    pthread_mutex_lock(&q->mu);
    while (!o->done)
        pthread_cond_wait(&q->done_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    return o->status;
}

/* The first queue position a hold keeps back (UINT64_MAX: none). Under mu. */
static uint64_t held_from(const tm_opqueue *q)
{
    uint64_t from = UINT64_MAX;
    for (const tm_ophold *h = q->holds; h; h = h->next)
        if (h->from < from)
            from = h->from;
    return from;
}

tm_qop *tm_opqueue_take(tm_opqueue *q, size_t max, int64_t wake_ms, size_t *n, int *stop)
{
    pthread_mutex_lock(&q->mu);
    while ((!q->head || q->head->ctr >= held_from(q)) && !q->stopping) {
        if (wake_ms <= 0) {
            pthread_cond_wait(&q->work_cv, &q->mu);
            continue;
        }
        int64_t now = tm_now_ms();
        if (now >= wake_ms)
            break;
        struct timespec ts = tm_deadline_ms(wake_ms - now);
        pthread_cond_timedwait(&q->work_cv, &q->mu, &ts);
    }
    uint64_t limit = q->stopping ? UINT64_MAX : held_from(q);
    tm_qop *batch = q->head, *last = NULL;
    size_t k = 0;
    for (tm_qop *o = batch; o && o->ctr < limit && (max == 0 || k < max); o = o->next, k++)
        last = o;
    if (last) {
        q->head = last->next;
        if (!q->head)
            q->tail = NULL;
        last->next = NULL;
    } else {
        batch = NULL;
    }
    *n = k;
    *stop = q->stopping && !batch;
    pthread_mutex_unlock(&q->mu);
    return batch;
}

void tm_opqueue_settle(tm_opqueue *q, tm_qop *batch, void (*release)(tm_qop *o, void *ud),
                       void *ud)
{
    pthread_mutex_lock(&q->mu);
    for (tm_qop *o = batch, *next; o; o = next) {
        next = o->next;
        o->next = NULL;
        if (o->ctr > q->settled)
            q->settled = o->ctr;
        if (o->sync)
            o->done = 1; /* the waiter frees it */
        else
            release(o, ud);
    }
    pthread_cond_broadcast(&q->done_cv);
    pthread_mutex_unlock(&q->mu);
}

void tm_opqueue_stop(tm_opqueue *q)
{
    pthread_mutex_lock(&q->mu);
    q->stopping = 1;
    pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->mu);
}

void tm_opqueue_wait_settled(tm_opqueue *q, uint64_t mark)
{
    if (held_q == q)
        unhold(q); /* what it waits for may be held back by this very hold */
    pthread_mutex_lock(&q->mu);
    while (q->settled + 1 < mark && !q->stopping)
        pthread_cond_wait(&q->done_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

uint64_t tm_opqueue_mark(tm_opqueue *q)
{
    pthread_mutex_lock(&q->mu);
    uint64_t m = q->next_ctr + 1;
    pthread_mutex_unlock(&q->mu);
    return m;
}
