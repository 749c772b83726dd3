/* pool.c - worker pool. Handlers may block; I/O threads never run them. */
#include "pool.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdlib.h>

typedef struct job {
    tm_pool_fn fn;
    void *arg;
    struct job *next;
} job;

struct tm_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    unsigned pending;
    int closing;
    unsigned n;
    pthread_t *threads;
};

static void *worker(void *arg)
{
    tm_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !p->closing)
            pthread_cond_wait(&p->cv, &p->mu);
        job *j = p->head;
        if (!j) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->mu);
        p->pending--;
        pthread_mutex_unlock(&p->mu);
    }
}

int tm_pool_new(unsigned nthreads, tm_pool **out)
{
    tm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return TIDEMARK_ENOMEM;
    p->threads = calloc(nthreads ? nthreads : 1, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (unsigned i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0)
            break;
        p->n++;
    }
    if (p->n == 0) {
        tm_pool_free(p);
        return TIDEMARK_EIO;
    }
    *out = p;
    return 0;
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
    p->pending++;
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
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}
