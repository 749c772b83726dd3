/* stdio_hub.c - the stdio adapter's streams and its one pump (stdio_hub.h).
 *
 * Lock order: hub (h->mu) -> stream (s->mu) -> whatever the source takes
 * (the feed reads the store). A source is pulled and its stream freed with
 * no hub lock held: freeing runs the feed's end, which may end other
 * streams through the hub.
 */
#include "stdio_hub.h"
#include "../base/lock.h"
#include "../base/buf.h"
#include "../base/log.h"
#include "../base/map.h"
#include "../transport/sse_parser.h"
#include "../transport/stdio.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sjob {
    struct sstream *s;          /* a stream to pull, or: */
    void (*fn)(void *ud);       /* deferred work */
    void *ud;
    struct sjob *next;
} sjob;

typedef struct sstream {
    tm_shub *h;
    char key[TM_SRC_KEY_MAX];
    tm_source src;
    tm_shub_reader rd;
    tm_sse_parser *p;
    pthread_mutex_t mu; /* the source's: pulls, signals, the flags below */
    int ending;         /* asked to end once its source says so (a resume may take over) */
    int end_now;        /* end without asking the source for more */
    int stop;           /* the reader refused more */
    sjob job;           /* its place in the queue (h->mu) */
    int queued;         /* job is in the queue (h->mu) */
} sstream;

struct tm_shub {
    pthread_mutex_t mu; /* guards map, the queue, stopping */
    pthread_cond_t cv;
    tm_map *map;        /* key -> sstream, the live ones */
    sjob *head, *tail;  /* work for the pump, in order */
    int stopping;
    int joined;
    pthread_t pump;
};

/* ---- the queue (h->mu held) ------------------------------------------------- */

static void push(tm_shub *h, sjob *j)
{
    TM_ASSERT_HELD(&h->mu);
    j->next = NULL;
    if (h->tail)
        h->tail->next = j;
    else
        h->head = j;
    h->tail = j;
    pthread_cond_signal(&h->cv);
}

static sjob *pop(tm_shub *h)
{
    TM_ASSERT_HELD(&h->mu);
    sjob *j = h->head;
    if (j && !(h->head = j->next))
        h->tail = NULL;
    return j;
}

static void unqueue(tm_shub *h, sjob *j)
{
    TM_ASSERT_HELD(&h->mu);
    sjob *prev = NULL;
    for (sjob *q = h->head; q; prev = q, q = q->next)
        if (q == j) {
            if (prev)
                prev->next = q->next;
            else
                h->head = q->next;
            if (h->tail == q)
                h->tail = prev;
            return;
        }
}

/* s is to be pulled (again): queued once, however often it is woken. */
static void ready(tm_shub *h, sstream *s)
{
    if (!s->queued) {
        s->queued = 1;
        push(h, &s->job);
    }
}

/* ---- one stream --------------------------------------------------------------- */

static int on_event(void *ud, const tm_sse_event *ev)
{
    sstream *s = ud;
    /* Priming events (no data) and named ones (tidemark-durable, gap) are
     * HTTP's resumption aids; over stdio only the messages go out. */
    if (ev->data_len == 0 || strcmp(ev->type, "message") != 0)
        return 0;
    return s->rd.on_message(s->rd.ud, ev->data, ev->data_len) ? 1 : 0;
}

static void stream_free(sstream *s)
{
    if (s->src.free)
        s->src.free(s->src.ud);
    if (s->rd.on_end)
        s->rd.on_end(s->rd.ud);
    tm_sse_parser_free(s->p);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The stream ended: out of the hub (and the queue), then freed. */
static void finish(tm_shub *h, sstream *s)
{
    pthread_mutex_lock(&h->mu);
    if (tm_map_get(h->map, s->key) == s)
        tm_map_del(h->map, s->key);
    if (s->queued)
        unqueue(h, &s->job);
    s->queued = 0;
    pthread_mutex_unlock(&h->mu);
    stream_free(s);
}

/* Pull s until it waits or ends, handing each pull's events on before the
 * next pull (on demand: a slow reader slows the pulls). */
static void serve(tm_shub *h, sstream *s)
{
    tm_buf out;
    tm_buf_init(&out, 64u << 20);
    int st;
    do {
        pthread_mutex_lock(&s->mu);
        st = s->end_now || s->stop ? TM_SRC_END : s->src.pull(s->src.ud, &out);
        pthread_mutex_unlock(&s->mu);
        if (out.len && tm_sse_parser_feed(s->p, out.data, out.len) != 0) {
            pthread_mutex_lock(&s->mu);
            s->stop = 1; /* the reader is gone, or the stream is not SSE */
            pthread_mutex_unlock(&s->mu);
            st = TM_SRC_END;
        }
        tm_buf_reset(&out);
    } while (st == TM_SRC_MORE);
    tm_buf_free(&out);
    if (st == TM_SRC_END)
        finish(h, s);
}

static void *pump(void *arg)
{
    tm_shub *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->head && !h->stopping)
            pthread_cond_wait(&h->cv, &h->mu);
        sjob *j = pop(h);
        if (!j)
            break; /* stopping, nothing left */
        sstream *s = j->s;
        if (s)
            s->queued = 0;
        pthread_mutex_unlock(&h->mu);
        if (s) {
            serve(h, s);
        } else {
            j->fn(j->ud);
            free(j);
        }
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- the hub's operations ---------------------------------------------------- */

static void hub_wake(void *impl, const char *key)
{
    tm_shub *h = impl;
    pthread_mutex_lock(&h->mu);
    sstream *s = tm_map_get(h->map, key);
    if (s)
        ready(h, s);
    pthread_mutex_unlock(&h->mu);
}

static int hub_signal(void *impl, const char *key, int (*fn)(void *, void *), void *arg)
{
    tm_shub *h = impl;
    pthread_mutex_lock(&h->mu);
    sstream *s = tm_map_get(h->map, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        if (fn(s->src.ud, arg))
            s->ending = 1;
        pthread_mutex_unlock(&s->mu);
        ready(h, s);
    }
    pthread_mutex_unlock(&h->mu);
    return s ? 0 : TIDEMARK_ENOTFOUND;
}

typedef struct prefix {
    tm_shub *h;
    const char *p;
    size_t n;
} prefix;

static void end_matching(const char *key, void *val, void *ud)
{
    prefix *x = ud;
    sstream *s = val;
    if (strncmp(key, x->p, x->n) != 0)
        return;
    pthread_mutex_lock(&s->mu);
    s->ending = s->end_now = 1;
    pthread_mutex_unlock(&s->mu);
    ready(x->h, s);
}

static void hub_end(void *impl, const char *p)
{
    tm_shub *h = impl;
    prefix x = {h, p, strlen(p)};
    pthread_mutex_lock(&h->mu);
    tm_map_each(h->map, end_matching, &x);
    pthread_mutex_unlock(&h->mu);
}

void tm_shub_end_key(tm_shub *h, const char *key)
{
    pthread_mutex_lock(&h->mu);
    sstream *s = tm_map_get(h->map, key);
    if (s) {
        pthread_mutex_lock(&s->mu);
        s->ending = s->end_now = 1;
        pthread_mutex_unlock(&s->mu);
        ready(h, s);
    }
    pthread_mutex_unlock(&h->mu);
}

void tm_shub_stop(tm_shub *h)
{
    prefix all = {h, "", 0};
    pthread_mutex_lock(&h->mu);
    /* Every stream queued to end before the pump may see stopping: it
     * leaves only once the queue is empty, so it frees them all first. */
    tm_map_each(h->map, end_matching, &all);
    int join = !h->joined;
    h->stopping = 1;
    h->joined = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (join)
        pthread_join(h->pump, NULL);
}

static void hub_stop(void *impl)
{
    tm_shub_stop(impl);
}

const tm_hub_ops tm_shub_ops = {hub_wake, hub_signal, hub_end, hub_stop};

/* ---- attach, defer, life ------------------------------------------------------- */

/* Take key over from a stream that is no longer live (h->mu held): it ends
 * without being pulled again. TIDEMARK_EBUSY when it is live. */
static int take_over(tm_shub *h, const char *key)
{
    TM_ASSERT_HELD(&h->mu);
    sstream *old = tm_map_get(h->map, key);
    if (!old)
        return 0;
    pthread_mutex_lock(&old->mu);
    int live = !old->ending && !old->end_now && !old->stop;
    if (!live)
        old->end_now = 1;
    pthread_mutex_unlock(&old->mu);
    if (live)
        return TIDEMARK_EBUSY;
    tm_map_del(h->map, key);
    ready(h, old);
    return 0;
}

static sstream *stream_new(tm_shub *h, const char *key, const tm_source *src,
                           const tm_shub_reader *rd)
{
    if (strlen(key) >= TM_SRC_KEY_MAX)
        return NULL;
    sstream *s = calloc(1, sizeof *s);
    tm_sse_callbacks cb = {.on_event = on_event};
    if (!s || tm_sse_parser_new(0, TM_STDIO_DEFAULT_MAX, &cb, s, &s->p) != 0) {
        free(s);
        return NULL;
    }
    s->h = h;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->src = *src;
    s->rd = *rd;
    s->job.s = s;
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

int tm_shub_attach(tm_shub *h, const char *key, const tm_source *src, const tm_shub_reader *rd)
{
    sstream *s = stream_new(h, key, src, rd);
    if (!s)
        return TIDEMARK_ENOMEM;
    pthread_mutex_lock(&h->mu);
    int rc = h->stopping ? TIDEMARK_ECLOSED : take_over(h, key);
    if (rc == 0)
        rc = tm_map_put(h->map, s->key, s);
    if (rc == 0)
        ready(h, s); /* its first pull at once */
    pthread_mutex_unlock(&h->mu);
    if (rc) { /* not attached: src and rd stay the caller's */
        s->src.free = NULL;
        s->rd.on_end = NULL;
        stream_free(s);
    }
    return rc;
}

void tm_shub_defer(tm_shub *h, void (*fn)(void *ud), void *ud)
{
    sjob *j = calloc(1, sizeof *j);
    pthread_mutex_lock(&h->mu);
    int here = !j || h->stopping;
    if (!here) {
        *j = (sjob){.fn = fn, .ud = ud};
        push(h, j);
    }
    pthread_mutex_unlock(&h->mu);
    if (here) { /* stopped (or out of memory): in order no longer matters */
        free(j);
        fn(ud);
    }
}

int tm_shub_new(tm_shub **out)
{
    tm_shub *h = calloc(1, sizeof *h);
    if (!h || !(h->map = tm_map_new())) {
        free(h);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->pump, NULL, pump, h) != 0) {
        h->joined = 1;
        tm_shub_free(h);
        return TIDEMARK_ENOMEM;
    }
    *out = h;
    return 0;
}

void tm_shub_free(tm_shub *h)
{
    if (!h)
        return;
    tm_shub_stop(h);
    tm_map_free(h->map);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
