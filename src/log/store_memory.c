/*
 * store_memory.c - in-memory store backend (durability "none").
 * One mutex guards everything; an append commits immediately, then its
 * callback and the commit listener run on the caller's thread, unlocked.
 */
#include "store.h"
#include "../base/map.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mevent {
    char *data;
    size_t len;
} mevent;

typedef struct mstream {
    mevent *ev;       /* ev[off .. off+n) hold seqs first .. head */
    size_t off, n, cap;
    uint64_t first;   /* seq of ev[off] (first retained) */
    uint64_t head;
    int closed;
    char trimmed_epoch[TM_EPOCH_LEN + 1];
} mstream;

typedef struct msession {
    tm_session_rec rec;
    tm_map *streams; /* name -> mstream */
    uint64_t next_r;
} msession;

typedef struct mstore {
    tm_store base;
    pthread_mutex_t mu;
    tm_map *sessions;
    tm_store_options opt;
} mstore;

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

static void free_stream(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    mstream *s = v;
    for (size_t i = 0; i < s->n; i++)
        free(s->ev[s->off + i].data);
    free(s->ev);
    free(s);
}

static void free_session(msession *s)
{
    tm_map_each(s->streams, free_stream, NULL);
    tm_map_free(s->streams);
    tm_session_rec_clear(&s->rec);
    free(s);
}

static void free_session_cb(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free_session(v);
}

static void m_close(tm_store *st)
{
    mstore *m = (mstore *)st;
    tm_map_each(m->sessions, free_session_cb, NULL);
    tm_map_free(m->sessions);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int m_session_create(tm_store *st, const tm_session_rec *rec)
{
    mstore *m = (mstore *)st;
    msession *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->rec.id = dupstr(rec->id);
    s->rec.protocol_version = dupstr(rec->protocol_version);
    s->rec.client = dupstr(rec->client);
    s->rec.created_ms = rec->created_ms;
    s->rec.last_seen_ms = rec->last_seen_ms;
    s->streams = tm_map_new();
    s->next_r = 1;
    if (!s->rec.id || !s->streams) {
        free_session(s);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_lock(&m->mu);
    int rc = tm_map_get(m->sessions, rec->id) ? TIDEMARK_EEXIST : tm_map_put(m->sessions, rec->id, s);
    pthread_mutex_unlock(&m->mu);
    if (rc)
        free_session(s);
    return rc;
}

static int m_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    mstore *m = (mstore *)st;
    int rc = 0;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, id);
    if (!s) {
        rc = TIDEMARK_ENOTFOUND;
    } else {
        out->id = dupstr(s->rec.id);
        out->protocol_version = dupstr(s->rec.protocol_version);
        out->client = dupstr(s->rec.client);
        out->created_ms = s->rec.created_ms;
        out->last_seen_ms = s->rec.last_seen_ms;
        if (!out->id)
            rc = TIDEMARK_ENOMEM;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc)
        tm_session_rec_clear(out);
    return rc;
}

static int m_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, id);
    if (s)
        s->rec.last_seen_ms = now_ms;
    pthread_mutex_unlock(&m->mu);
    return s ? 0 : TIDEMARK_ENOTFOUND;
}

static int m_session_delete(tm_store *st, const char *id)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_del(m->sessions, id);
    pthread_mutex_unlock(&m->mu);
    if (!s)
        return TIDEMARK_ENOTFOUND;
    free_session(s);
    return 0;
}

/* Caller holds the lock. */
static mstream *find_stream(mstore *m, const char *session, const char *stream)
{
    msession *s = tm_map_get(m->sessions, session);
    return s ? tm_map_get(s->streams, stream) : NULL;
}

static int m_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX])
{
    mstore *m = (mstore *)st;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, session);
    if (!s) {
        rc = TIDEMARK_ENOTFOUND;
        goto out;
    }
    char nm[TM_STREAM_MAX];
    if (name)
        snprintf(nm, sizeof nm, "%s", name);
    else
        snprintf(nm, sizeof nm, "r%llu", (unsigned long long)s->next_r++);
    mstream *ms = tm_map_get(s->streams, nm);
    if (!ms) {
        ms = calloc(1, sizeof *ms);
        if (!ms) {
            rc = TIDEMARK_ENOMEM;
            goto out;
        }
        ms->first = 1;
        if ((rc = tm_map_put(s->streams, nm, ms)) != 0) {
            free(ms);
            goto out;
        }
    } else {
        ms->closed = 0; /* a reopened standalone stream continues its seqs */
    }
    snprintf(out, TM_STREAM_MAX, "%s", nm);
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static void trim(mstore *m, mstream *s)
{
    uint64_t keep = m->opt.retain_events;
    if (!keep)
        return;
    while (s->n > keep) {
        free(s->ev[s->off].data);
        s->off++;
        s->n--;
        s->first++;
        snprintf(s->trimmed_epoch, sizeof s->trimmed_epoch, "%s", m->base.epoch);
    }
    if (s->off > 64 && s->off > s->n) {
        memmove(s->ev, s->ev + s->off, s->n * sizeof *s->ev);
        s->off = 0;
    }
}

static int m_append(tm_store *st, const char *session, const char *stream, const void *data,
                    size_t len, unsigned flags, tm_append_cb cb, void *ud)
{
    mstore *m = (mstore *)st;
    char *copy = malloc(len + 1);
    if (!copy)
        return TIDEMARK_ENOMEM;
    memcpy(copy, data, len);
    copy[len] = '\0';
    int rc = 0;
    uint64_t seq = 0;
    pthread_mutex_lock(&m->mu);
    mstream *s = find_stream(m, session, stream);
    if (!s) {
        rc = TIDEMARK_ENOTFOUND;
    } else if (s->closed) {
        rc = TIDEMARK_ECLOSED;
    } else {
        if (s->off + s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 16;
            mevent *ev = realloc(s->ev, cap * sizeof *ev);
            if (!ev) {
                rc = TIDEMARK_ENOMEM;
                goto out;
            }
            s->ev = ev;
            s->cap = cap;
        }
        s->ev[s->off + s->n].data = copy;
        s->ev[s->off + s->n].len = len;
        s->n++;
        seq = ++s->head;
        copy = NULL;
        if (flags & TM_APPEND_FINAL)
            s->closed = 1;
        trim(m, s);
    }
out:
    pthread_mutex_unlock(&m->mu);
    free(copy);
    if (rc)
        return rc;
    if (cb)
        cb(ud, 0, seq);
    tm_store_notify_commit(st, session, stream, seq);
    return 0;
}

static int m_close_stream(tm_store *st, const char *session, const char *stream)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    mstream *s = find_stream(m, session, stream);
    uint64_t head = 0;
    if (s) {
        s->closed = 1;
        head = s->head;
    }
    pthread_mutex_unlock(&m->mu);
    if (!s)
        return TIDEMARK_ENOTFOUND;
    tm_store_notify_commit(st, session, stream, head);
    return 0;
}

static int m_read(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                  size_t max_events, tm_event_visitor fn, void *ud)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    mstream *s = find_stream(m, session, stream);
    if (!s) {
        pthread_mutex_unlock(&m->mu);
        return TIDEMARK_ENOTFOUND;
    }
    uint64_t seq = after_seq + 1 < s->first ? s->first : after_seq + 1;
    for (size_t k = 0; k < max_events && seq <= s->head; k++, seq++) {
        mevent *e = &s->ev[s->off + (seq - s->first)];
        tm_event ev = {.seq = seq, .epoch = m->base.epoch, .data = e->data, .len = e->len};
        if (fn(ud, &ev))
            break;
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static int m_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    mstream *s = find_stream(m, session, stream);
    if (s) {
        out->first_retained = s->first;
        out->head = s->head;
        out->closed = s->closed;
        memcpy(out->trimmed_epoch, s->trimmed_epoch, sizeof out->trimmed_epoch);
    }
    pthread_mutex_unlock(&m->mu);
    return s ? 0 : TIDEMARK_ENOTFOUND;
}

static int m_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1])
{
    mstore *m = (mstore *)st;
    int rc = TIDEMARK_ENOTFOUND;
    pthread_mutex_lock(&m->mu);
    mstream *s = find_stream(m, session, stream);
    if (s && seq >= s->first && seq <= s->head) {
        memcpy(out, m->base.epoch, TM_EPOCH_LEN + 1);
        rc = 0;
    } else if (s && seq + 1 == s->first && s->trimmed_epoch[0]) {
        memcpy(out, s->trimmed_epoch, TM_EPOCH_LEN + 1);
        rc = 0;
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static const struct tm_store_ops memory_ops = {
    .name = "memory",
    .close = m_close,
    .session_create = m_session_create,
    .session_get = m_session_get,
    .session_touch = m_session_touch,
    .session_delete = m_session_delete,
    .stream_open = m_stream_open,
    .append = m_append,
    .close_stream = m_close_stream,
    .read = m_read,
    .bounds = m_bounds,
    .event_epoch = m_event_epoch,
};

int tm_store_memory_open(const tm_store_options *opt, tm_store **out)
{
    mstore *m = calloc(1, sizeof *m);
    if (!m)
        return TIDEMARK_ENOMEM;
    int rc = tm_store_init_base(&m->base, &memory_ops);
    if (rc) {
        free(m);
        return rc;
    }
    m->opt = *opt;
    m->sessions = tm_map_new();
    if (!m->sessions) {
        free(m);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = &m->base;
    return 0;
}
