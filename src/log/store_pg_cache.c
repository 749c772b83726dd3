/*
 * store_pg_cache.c - the streams' hints' keys, and the tail of the streams
 * this node writes, kept in memory so that its own readers (a POST's answer, a stream being watched)
 * do not ask the database for events it has just committed.
 *
 * Invariants (all under c_mu):
 *  - a stream's ring holds only events this node's writer committed, the
 *    bytes and epoch it committed, consecutive seqs ending at ring_last;
 *  - the ring answers for the stream only while `cached`, ring_last ==
 *    known (no commit this node saw is missing from it) and the listener is
 *    subscribed: another node's commit to the stream is then told to this
 *    node (tm_pg_cache_foreign), which drops the ring before readers are
 *    woken, so no reader is told "nothing more" past another node's event
 *    it was not woken for. A lost wake-up (the listener reconnecting, a
 *    "*" notification) or the writer's lost connection drops every ring;
 *  - the rings' bytes together stay under RING_BYTES_MAX; an event that
 *    does not fit (or one over RING_EVENT_MAX) leaves its stream uncached
 *    until its next event.
 * The database stays the authority: anything the ring cannot answer is read
 * there, exactly as without it.
 */
#include "store_pg_int.h"
#include "../base/lock.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

char *tm_pg_cache_key(const char *session, const char *name)
{
    size_t a = strlen(session), b = strlen(name);
    char *k = malloc(a + b + 2);
    if (k) {
        memcpy(k, session, a);
        k[a] = '\x1f';
        memcpy(k + a + 1, name, b + 1);
    }
    return k;
}

static size_t ev_cost(const pg_cev *e) { return sizeof *e + e->len; }

static pg_cev *ring_at(const pstream *s, unsigned i)
{
    return &s->ring[(s->ring_at + i) % RING_EVENTS];
}

/* Free the ring's events; `cached` and ring_last are left as they are. */
static void ring_empty(pgstore *p, pstream *s)
{
    for (unsigned i = 0; i < s->ring_n; i++) {
        pg_cev *e = ring_at(s, i);
        p->ring_bytes -= ev_cost(e);
        free(e->data);
    }
    free(s->ring);
    s->ring = NULL;
    s->ring_n = s->ring_at = 0;
}

void tm_pg_cache_drop(pgstore *p, pstream *s)
{
    TM_ASSERT_HELD(&p->c_mu);
    ring_empty(p, s);
    s->cached = 0;
}

void tm_pg_hint_free(pgstore *p, pstream *s)
{
    TM_ASSERT_HELD(&p->c_mu);
    if (s)
        ring_empty(p, s);
    free(s);
}

void tm_pg_cache_put(pgstore *p, pstream *s, uint64_t seq, const char *epoch, const void *data,
                     size_t len)
{
    TM_ASSERT_HELD(&p->c_mu);
    if (s->cached && s->ring_last + 1 != seq)
        tm_pg_cache_drop(p, s); /* not the next one: begin again from this one */
    pg_cev e = {.seq = seq, .len = len};
    size_t el = strlen(epoch);
    if (len > RING_EVENT_MAX || el > TM_EPOCH_LEN ||
        p->ring_bytes + ev_cost(&e) > RING_BYTES_MAX ||
        (!s->ring && !(s->ring = calloc(RING_EVENTS, sizeof *s->ring))) ||
        !(e.data = tm_memdup(data, len))) {
        tm_pg_cache_drop(p, s);
        return;
    }
    memcpy(e.epoch, epoch, el + 1);
    if (s->ring_n == RING_EVENTS) { /* the oldest goes */
        pg_cev *old = ring_at(s, 0);
        p->ring_bytes -= ev_cost(old);
        free(old->data);
        s->ring_at = (s->ring_at + 1) % RING_EVENTS;
        s->ring_n--;
    }
    *ring_at(s, s->ring_n++) = e;
    p->ring_bytes += ev_cost(&e);
    s->ring_last = seq;
    s->cached = 1;
}

void tm_pg_cache_foreign(pgstore *p, const char *session, const char *stream)
{
    char *k = tm_pg_cache_key(session, stream);
    pthread_mutex_lock(&p->c_mu);
    pstream *s = k ? tm_map_get(p->streams, k) : NULL;
    if (s)
        tm_pg_cache_drop(p, s);
    pthread_mutex_unlock(&p->c_mu);
    free(k);
}

static void drop_one(const char *k, void *v, void *ud)
{
    (void)k;
    tm_pg_cache_drop(ud, v);
}

void tm_pg_cache_forget_all(pgstore *p)
{
    pthread_mutex_lock(&p->c_mu);
    tm_map_each(p->streams, drop_one, p);
    pthread_mutex_unlock(&p->c_mu);
}

/* The stream's ring when it answers for the stream (c_mu held), else NULL. */
static pstream *current(pgstore *p, const char *session, const char *stream)
{
    TM_ASSERT_HELD(&p->c_mu);
    if (!atomic_load(&p->listening))
        return NULL;
    char *k = tm_pg_cache_key(session, stream);
    pstream *s = k ? tm_map_get(p->streams, k) : NULL;
    free(k);
    return s && s->cached && s->ring_last == s->known ? s : NULL;
}

/* Whether retention cannot have trimmed anything after `after` (it
 * trims in the database only, by age or by count). */
static int untrimmed(const pgstore *p, const pstream *s, uint64_t after)
{
    return p->opt.retain_ms == 0 && tm_retain_first_by_count(&p->opt, 1, s->known) <= after + 1;
}

/* Events copied out of the ring, so the visitor runs without c_mu. */
typedef struct ev_copy {
    tm_event *ev;
    char (*epoch)[TM_EPOCH_LEN + 1];
    size_t n;
} ev_copy;

static void copy_free(ev_copy *c)
{
    for (size_t i = 0; i < c->n; i++)
        free((void *)c->ev[i].data);
    free(c->ev);
    free(c->epoch);
}

/* Copy events after..(after + max) of s's ring. 0, or TIDEMARK_ENOMEM. */
static int copy_out(const pstream *s, uint64_t after, size_t max, ev_copy *c)
{
    uint64_t first = s->ring_last - s->ring_n + 1;
    size_t n = (size_t)(s->ring_last - after);
    n = n < max ? n : max;
    *c = (ev_copy){0};
    c->ev = calloc(n ? n : 1, sizeof *c->ev);
    c->epoch = calloc(n ? n : 1, sizeof *c->epoch);
    if (!c->ev || !c->epoch) {
        copy_free(c);
        return TIDEMARK_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const pg_cev *e = ring_at(s, (unsigned)(after + 1 + i - first));
        void *d = tm_memdup(e->data, e->len);
        if (!d) {
            copy_free(c);
            return TIDEMARK_ENOMEM;
        }
        memcpy(c->epoch[i], e->epoch, sizeof c->epoch[i]);
        c->ev[c->n++] = (tm_event){.seq = e->seq, .epoch = c->epoch[i], .data = d, .len = e->len};
    }
    return 0;
}

int tm_pg_cache_read(pgstore *p, const char *session, const char *stream, uint64_t after,
                     size_t max, tm_event_visitor fn, void *ud)
{
    ev_copy c = {0};
    int rc = 1;
    pthread_mutex_lock(&p->c_mu);
    pstream *s = current(p, session, stream);
    if (!s || !untrimmed(p, s, after))
        rc = 0;
    else if (after < s->ring_last && (s->ring_n == 0 || after + 1 < s->ring_last - s->ring_n + 1))
        rc = 0; /* older than the ring: the database has them */
    else if (after < s->ring_last && copy_out(s, after, max, &c) != 0)
        rc = 0;
    else if (s->closed && after + c.n >= s->ring_last)
        ring_empty(p, s); /* read to its end: nothing more will be asked of the ring */
    pthread_mutex_unlock(&p->c_mu);
    for (size_t i = 0; i < c.n && fn(ud, &c.ev[i]) == 0; i++)
        ;
    copy_free(&c);
    return rc;
}

int tm_pg_cache_bounds(pgstore *p, const char *session, const char *stream, tm_stream_bounds *out)
{
    pthread_mutex_lock(&p->c_mu);
    pstream *s = current(p, session, stream);
    /* what retention would have trimmed is only in the database */
    int ok = s && untrimmed(p, s, 0);
    if (ok) {
        memset(out, 0, sizeof *out);
        out->first_retained = 1;
        out->head = s->known;
        out->assigned = s->known + s->pending;
        out->closed = s->closed;
    }
    pthread_mutex_unlock(&p->c_mu);
    return ok;
}
