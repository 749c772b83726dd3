/*
 * store_memory.c - in-memory store backend (durability "none").
 * One mutex guards everything; an append commits immediately, then its
 * callback and the commit listener run on the caller's thread, unlocked.
 */
#include "store.h"
#include "../base/lock.h"
#include "../base/str.h"
#include "../common/sqlite_util.h"
#include "../base/clock.h"
#include "../base/map.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mevent {
    char *data;
    size_t len;
    int64_t created_ms;
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
    tm_session_rec rec; /* rec.attrs unused: see attrs */
    json_t *attrs;      /* object, or NULL: one change sets one member (re-serialising
                           them all per change made N subscriptions cost O(N^2)) */
    tm_map *streams;  /* name -> mstream */
    tm_map *requests; /* key -> tm_request_rec */
    uint64_t next_r;
} msession;

typedef struct mstore {
    tm_store base;
    pthread_mutex_t mu;
    tm_map *sessions;
    tm_store_options opt;
    sqlite3 *fx; /* effect database (application tables), in memory */
} mstore;

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

static void free_request(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    tm_request_rec_clear(v);
    free(v);
}

static void free_session(msession *s)
{
    tm_map_each(s->streams, free_stream, NULL);
    tm_map_free(s->streams);
    if (s->requests)
        tm_map_each(s->requests, free_request, NULL);
    tm_map_free(s->requests);
    tm_session_rec_clear(&s->rec);
    json_decref(s->attrs);
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
    tm_sqlite_close(m->fx);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int m_session_create(tm_store *st, const tm_session_rec *rec)
{
    mstore *m = (mstore *)st;
    msession *s = calloc(1, sizeof *s);
    if (!s)
        return TIDEMARK_ENOMEM;
    s->rec.id = tm_strdup(rec->id);
    s->rec.protocol_version = tm_strdup(rec->protocol_version);
    s->rec.client = tm_strdup(rec->client);
    s->rec.created_ms = rec->created_ms;
    s->rec.last_seen_ms = rec->last_seen_ms;
    s->streams = tm_map_new();
    s->requests = tm_map_new();
    s->next_r = 1;
    if (!s->rec.id || !s->streams || !s->requests) {
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

/* A copy of s's record (caller holds the lock). parsed: its attributes as
 * an object (a visit's), else as text. */
static int copy_record(const msession *s, tm_session_rec *out, int parsed)
{
    out->id = tm_strdup(s->rec.id);
    out->protocol_version = tm_strdup(s->rec.protocol_version);
    out->client = tm_strdup(s->rec.client);
    out->created_ms = s->rec.created_ms;
    out->last_seen_ms = s->rec.last_seen_ms;
    int some = s->attrs && json_object_size(s->attrs);
    if (some && parsed)
        out->attrs_obj = json_deep_copy(s->attrs);
    else if (some)
        out->attrs = json_dumps(s->attrs, JSON_COMPACT | JSON_SORT_KEYS);
    return !out->id || (some && !out->attrs && !out->attrs_obj) ? TIDEMARK_ENOMEM : 0;
}

/* OUT out: session id's record (parsed: see copy_record). */
static int get_record(mstore *m, const char *id, tm_session_rec *out, int parsed)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, id);
    int rc = s ? copy_record(s, out, parsed) : TIDEMARK_ENOTFOUND;
    pthread_mutex_unlock(&m->mu);
    if (rc)
        tm_session_rec_clear(out);
    return rc;
}

static int m_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    return get_record((mstore *)st, id, out, 0);
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

static int m_session_set_attr(tm_store *st, const char *id, const char *name, const char *value)
{
    mstore *m = (mstore *)st;
    json_t *v = NULL;
    if (value && !(v = json_loads(value, JSON_DECODE_ANY, NULL)))
        return TIDEMARK_EINVAL;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, id);
    if (s && !s->attrs)
        s->attrs = json_object();
    if (!s || !s->attrs) {
        rc = s ? TIDEMARK_ENOMEM : TIDEMARK_ENOTFOUND;
        json_decref(v);
    } else if (v) { /* set_new takes v, on failure too */
        rc = json_object_set_new(s->attrs, name, v) == 0 ? 0 : TIDEMARK_ENOMEM;
    } else {
        json_object_del(s->attrs, name);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

typedef struct ids_ctx {
    char **v;
    size_t n;
    const char *const *names; /* NULL: every session; else one with any of them */
    size_t n_names;
} ids_ctx;

static int has_any(const msession *s, const ids_ctx *c)
{
    for (size_t i = 0; s->attrs && i < c->n_names; i++)
        if (json_object_get(s->attrs, c->names[i]))
            return 1;
    return 0;
}

static void collect_id(const char *k, void *v, void *ud)
{
    ids_ctx *c = ud;
    if (c->names && !has_any(v, c))
        return;
    c->v[c->n] = tm_strdup(k);
    if (c->v[c->n])
        c->n++;
}

/* Copies the ids of the sessions c selects under the lock, then visits each
 * record without it. The attributes are looked up where they are kept, so a
 * fan-out neither writes out nor parses the record of a session it skips. */
static int visit(mstore *m, ids_ctx *c, int (*fn)(void *, const tm_session_rec *), void *ud)
{
    pthread_mutex_lock(&m->mu);
    c->v = calloc(tm_map_count(m->sessions) + 1, sizeof(char *));
    if (c->v)
        tm_map_each(m->sessions, collect_id, c);
    pthread_mutex_unlock(&m->mu);
    if (!c->v)
        return TIDEMARK_ENOMEM;
    int stop = 0;
    for (size_t i = 0; i < c->n; i++) {
        tm_session_rec rec;
        if (!stop && get_record(m, c->v[i], &rec, 1) == 0) { /* attributes not re-parsed */
            stop = fn(ud, &rec);
            tm_session_rec_clear(&rec);
        }
        free(c->v[i]);
    }
    free(c->v);
    return 0;
}

static int m_sessions_each(tm_store *st, int (*fn)(void *, const tm_session_rec *), void *ud)
{
    ids_ctx c = {0};
    return visit((mstore *)st, &c, fn, ud);
}

static int m_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                                int (*fn)(void *, const tm_session_rec *), void *ud)
{
    ids_ctx c = {.names = names, .n_names = n};
    return visit((mstore *)st, &c, fn, ud);
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
    TM_ASSERT_HELD(&m->mu);
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
    if (name) {
        snprintf(nm, sizeof nm, "%s", name);
    } else {
        nm[0] = 'r'; /* "r%llu", on every call */
        tm_u64_dec(nm + 1, s->next_r++);
    }
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
    uint64_t keep_from = tm_retain_first_by_count(&m->opt, s->first, s->head);
    int64_t cutoff = tm_retain_cutoff_ms(&m->opt, tm_wall_ms());
    while (s->n > 0 && (s->first < keep_from || s->ev[s->off].created_ms < cutoff)) {
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

/* A stream that ended keeps its events, not the room it grew for: a
 * session's finished calls each hold only what a durable store would keep
 * (issue 10: 1.1 KB per call for the life of the session). Lock held. */
static void shrink_closed(mstream *s)
{
    if (s->off) {
        memmove(s->ev, s->ev + s->off, s->n * sizeof *s->ev);
        s->off = 0;
    }
    if (s->cap > s->n) {
        mevent *ev = s->n ? realloc(s->ev, s->n * sizeof *ev) : NULL;
        if (ev || !s->n) {
            if (!s->n)
                free(s->ev);
            s->ev = ev;
            s->cap = s->n;
        }
    }
}

/* Run an effect inside a savepoint of the effect database; on failure it
 * leaves no trace. Caller holds the lock. */
static int run_effect(mstore *m, const tm_append_req *r)
{
    TM_ASSERT_HELD(&m->mu);
    struct tidemark_txn txn;
    tm_txn_sqlite_init(&txn, m->fx);
    if (sqlite3_exec(m->fx, "SAVEPOINT fx", NULL, NULL, NULL) != SQLITE_OK)
        return TIDEMARK_EIO;
    int rc = r->effect(r->effect_ud, &txn);
    if (rc)
        sqlite3_exec(m->fx, "ROLLBACK TO fx", NULL, NULL, NULL);
    sqlite3_exec(m->fx, "RELEASE fx", NULL, NULL, NULL);
    return rc;
}

static int m_append_ex(tm_store *st, const tm_append_req *r)
{
    mstore *m = (mstore *)st;
    int rc = 0;
    uint64_t seq = 0;
    char *copy = NULL;
    pthread_mutex_lock(&m->mu);
    msession *ses = tm_map_get(m->sessions, r->session);
    mstream *s = ses ? tm_map_get(ses->streams, r->stream) : NULL;
    if (!s) {
        rc = TIDEMARK_ENOTFOUND;
        goto out;
    }
    if (s->closed) {
        rc = TIDEMARK_ECLOSED;
        goto out;
    }
    const void *data = r->data;
    size_t len = r->len;
    if (r->effect && run_effect(m, r) != 0) {
        data = r->fallback;
        len = r->fallback_len;
    }
    copy = tm_memdup(data, len);
    if (!copy) {
        rc = TIDEMARK_ENOMEM;
        goto out;
    }
    if (s->off + s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4; /* most calls' streams hold a few events */
        mevent *ev = realloc(s->ev, cap * sizeof *ev);
        if (!ev) {
            rc = TIDEMARK_ENOMEM;
            goto out;
        }
        s->ev = ev;
        s->cap = cap;
    }
    s->ev[s->off + s->n] = (mevent){copy, len, tm_wall_ms()};
    s->n++;
    seq = ++s->head;
    if (r->flags & TM_APPEND_FINAL) {
        s->closed = 1;
        shrink_closed(s);
    }
    if (r->request_key) {
        tm_request_rec *q = tm_map_get(ses->requests, r->request_key);
        if (q) {
            free(q->response);
            q->response = tm_memdup(copy, len);
            if (q->response)
                q->response_len = len;
            q->state = TM_REQ_COMPLETED;
            q->updated_ms = tm_wall_ms();
        }
    }
    copy = NULL;
    trim(m, s);
out:
    pthread_mutex_unlock(&m->mu);
    free(copy);
    if (rc)
        return rc;
    if (r->cb) {
        tm_store_callback_batch_set(1); /* each append commits alone here */
        r->cb(r->cb_ud, 0, seq);
        tm_store_callback_batch_set(0);
    }
    tm_store_notify_commit(st, r->session, r->stream, seq);
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
        shrink_closed(s);
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
    if (after_seq >= s->head) { /* nothing after it (also keeps after_seq + 1 from wrapping) */
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    if (after_seq < s->first - 1) { /* trimmed under the reader: never skip silently */
        pthread_mutex_unlock(&m->mu);
        return TIDEMARK_ERANGE;
    }
    uint64_t seq = after_seq + 1;
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
        out->assigned = s->head;
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

static void rec_copy(const tm_request_rec *in, tm_request_rec *o)
{
    o->session = tm_strdup(in->session);
    o->key = tm_strdup(in->key);
    o->tool = tm_strdup(in->tool);
    o->stream = tm_strdup(in->stream);
    o->message = tm_strdup(in->message);
    o->response = in->response ? tm_memdup(in->response, in->response_len) : NULL;
    o->response_len = in->response_len;
    o->state = in->state;
    o->updated_ms = in->updated_ms;
}

static int m_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out)
{
    mstore *m = (mstore *)st;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, session);
    tm_request_rec *q = s ? tm_map_get(s->requests, key) : NULL;
    if (q)
        rec_copy(q, out);
    pthread_mutex_unlock(&m->mu);
    return q ? 0 : TIDEMARK_ENOTFOUND;
}

static int m_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    (void)wait_durable;
    mstore *m = (mstore *)st;
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    msession *s = tm_map_get(m->sessions, rec->session);
    if (!s) {
        rc = TIDEMARK_ENOTFOUND;
    } else if (tm_map_get(s->requests, rec->key)) {
        rc = TIDEMARK_EEXIST;
    } else {
        tm_request_rec *q = calloc(1, sizeof *q);
        if (!q) {
            rc = TIDEMARK_ENOMEM;
        } else {
            rec_copy(rec, q);
            q->state = TM_REQ_STARTED;
            q->updated_ms = tm_wall_ms();
            if ((rc = tm_map_put(s->requests, rec->key, q)) != 0) {
                tm_request_rec_clear(q);
                free(q);
            }
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud)
{
    /* A memory store never outlives its process: nothing is left behind. */
    (void)st;
    (void)fn;
    (void)ud;
    return 0;
}

static int m_exec_schema(tm_store *st, const char *sql)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    int rc = sqlite3_exec(m->fx, sql, NULL, NULL, NULL);
    pthread_mutex_unlock(&m->mu);
    return tm_sqlite_err(rc);
}

static int m_rows(tm_store *st, const char *table, json_t **rows)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    int rc = tm_sqlite_rows(m->fx, table, rows);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_query(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                   json_t **rows)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    int rc = tm_sqlite_query_json(m->fx, sql, args, nargs, rows);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

typedef struct expire_ctx {
    int64_t before;
    char **ids;
    size_t n;
} expire_ctx;

static void find_idle(const char *k, void *v, void *ud)
{
    expire_ctx *e = ud;
    msession *s = v;
    if (s->rec.last_seen_ms < e->before)
        e->ids[e->n++] = strdup(k);
}

static int m_sessions_expire(tm_store *st, int64_t before, void (*fn)(void *, const char *),
                             void *ud)
{
    mstore *m = (mstore *)st;
    pthread_mutex_lock(&m->mu);
    expire_ctx e = {before, calloc(tm_map_count(m->sessions) + 1, sizeof(char *)), 0};
    if (e.ids) {
        tm_map_each(m->sessions, find_idle, &e);
        for (size_t i = 0; i < e.n; i++) {
            msession *s = e.ids[i] ? tm_map_del(m->sessions, e.ids[i]) : NULL;
            if (s)
                free_session(s);
        }
    }
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < e.n; i++) {
        if (e.ids[i] && fn)
            fn(ud, e.ids[i]);
        free(e.ids[i]);
    }
    free(e.ids);
    return 0;
}

static int m_sync(tm_store *st)
{
    (void)st; /* every operation completed before it returned */
    return 0;
}

static const struct tm_store_ops memory_ops = {
    .name = "memory",
    .close = m_close,
    .session_create = m_session_create,
    .session_create_queued = m_session_create, /* in memory at once: nothing to wait for */
    .session_get = m_session_get,
    .session_touch = m_session_touch,
    .session_delete = m_session_delete,
    .stream_open = m_stream_open,
    .append_ex = m_append_ex,
    .request_get = m_request_get,
    .request_begin = m_request_begin,
    .requests_unfinished = m_requests_unfinished,
    .exec_schema = m_exec_schema,
    .query = m_query,
    .session_set_attr = m_session_set_attr,
    .sessions_each = m_sessions_each,
    .sessions_with_attr = m_sessions_with_attr,
    .rows = m_rows,
    .sessions_expire = m_sessions_expire,
    .sync = m_sync,
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
    int rc = tm_store_init_base(&m->base, &memory_ops, opt);
    if (rc) {
        free(m);
        return rc;
    }
    m->opt = *opt;
    m->sessions = tm_map_new();
    if (!m->sessions || sqlite3_open(":memory:", &m->fx) != SQLITE_OK ||
        sqlite3_exec(m->fx, TM_SQLITE_ROWS_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) {
        tm_map_free(m->sessions);
        tm_sqlite_close(m->fx);
        free(m);
        return TIDEMARK_ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    *out = &m->base;
    return 0;
}
