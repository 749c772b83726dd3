/* pool.c - worker pool. Handlers may block; I/O threads never run them. */
#include "pool.h"
#include "clock.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdlib.h>

#define IDLE_EXIT_MS 30000 /* a worker beyond the minimum idle this long exits */

typedef struct job {
    tm_pool_fn fn;
    void *arg;
    struct job *next;
} job;

struct tm_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* jobs queued, or closing */
    pthread_cond_t gone_cv; /* a worker exited */
    job *head, *tail;
    unsigned queued;
    int closing;
    unsigned min, max;
    unsigned n;             /* workers alive */
    unsigned idle;          /* workers waiting for a job */
};

/* Take the next job, waiting; NULL when this worker should exit. */
static job *next_job(tm_pool *p)
{
    while (!p->head && !p->closing) {
        p->idle++;
        struct timespec dl = tm_deadline_ms(IDLE_EXIT_MS);
        int rc = pthread_cond_timedwait(&p->cv, &p->mu, &dl);
        p->idle--;
        if (rc != 0 && !p->head && p->n > p->min)
            return NULL;
    }
    job *j = p->head;
    if (j) {
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        p->queued--;
    }
    return j;
}

/* The pool whose worker this thread is (NULL: not a worker). */
static _Thread_local const tm_pool *t_pool;

int tm_pool_is_worker(const tm_pool *p)
{
    return p && t_pool == p;
}

static void *worker(void *arg)
{
    tm_pool *p = arg;
    t_pool = p;
    pthread_mutex_lock(&p->mu);
    job *j;
    while ((j = next_job(p)) != NULL) {
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->mu);
    }
    p->n--;
    pthread_cond_broadcast(&p->gone_cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Start one more worker (detached: tm_pool_free waits for the count).
 * Caller holds p->mu. */
static int spawn_locked(tm_pool *p)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, worker, p);
    pthread_attr_destroy(&a);
    if (rc != 0)
        return TIDEMARK_EIO;
    p->n++;
    return 0;
}

int tm_pool_new_range(unsigned min, unsigned max, tm_pool **out)
{
    if (max == 0)
        max = 1;
    if (min > max)
        min = max;
    tm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return TIDEMARK_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    tm_cond_init_monotonic(&p->cv);
    pthread_cond_init(&p->gone_cv, NULL);
    p->min = min;
    p->max = max;
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < (min ? min : 1); i++)
        if (spawn_locked(p) != 0)
            break;
    int ok = p->n > 0;
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        tm_pool_free(p);
        return TIDEMARK_EIO;
    }
    *out = p;
    return 0;
}

int tm_pool_new(unsigned nthreads, tm_pool **out)
{
    return tm_pool_new_range(nthreads, nthreads, out);
}

int tm_pool_submit(tm_pool *p, tm_pool_fn fn, void *arg)
{
    job *j = malloc(sizeof *j);
    if (!j)
        return TIDEMARK_ENOMEM;
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->closing) {
        pthread_mutex_unlock(&p->mu);
        free(j);
        return TIDEMARK_ECLOSED;
    }
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->queued++;
    /* Grow when the queue outnumbers the idle workers: a job must not
     * wait behind handlers that block. A failed spawn only means it waits. */
    if (p->queued > p->idle && p->n < p->max)
        spawn_locked(p);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void tm_pool_free(tm_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->closing = 1;
    pthread_cond_broadcast(&p->cv);
    while (p->n > 0)
        pthread_cond_wait(&p->gone_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->gone_cv);
    free(p);
}
