/* store.c - backend-independent store entry points: open by URI, and each
 * operation handed to the backend (store_base.c has what backends share). */
#include "store.h"
#include "../common/sqlite_util.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

int tm_store_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    tm_store_options def = {0};
    if (!opt)
        opt = &def;
    if (!uri || strcmp(uri, "memory") == 0 || strcmp(uri, "memory:") == 0)
        return tm_store_memory_open(opt, out);
    if (strncmp(uri, "sqlite:", 7) == 0 && uri[7])
        return tm_store_sqlite_open(uri + 7, opt, out);
    if (strncmp(uri, "redis://", 8) == 0)
        return tm_store_redis_open(uri, opt, out);
    if (strncmp(uri, "postgresql://", 13) == 0 || strncmp(uri, "postgres://", 11) == 0)
        return tm_store_pg_open(uri, opt, out);
    return TIDEMARK_ENOTSUP;
}

void tm_store_set_listener(tm_store *st, tm_commit_listener fn, void *ud)
{
    st->listener = fn;
    st->listener_ud = ud;
}

int tm_store_publish(tm_store *st, const char *channel, const void *data, size_t len)
{
    int rc = st->ops->publish ? st->ops->publish(st, channel, data, len) : 0;
    tm_store_notify_bus(st, channel, data, len); /* this node: no round trip */
    return rc;
}

int tm_store_shared(const tm_store *st) { return st->ops->request_claim != NULL; }

int tm_store_begins_later(const tm_store *st) { return st->ops->request_begin_later != NULL; }

int tm_store_request_mine(tm_store *st, const char *session, const char *key)
{
    return st->ops->request_mine ? st->ops->request_mine(st, session, key) : 1;
}

int tm_store_request_adopt(tm_store *st, const char *session, const char *key)
{
    return st->ops->request_adopt ? st->ops->request_adopt(st, session, key) : 0;
}

int tm_store_request_claim(tm_store *st, const char *session, const char *key)
{
    return st->ops->request_claim ? st->ops->request_claim(st, session, key) : 0;
}

void tm_store_close(tm_store *st)
{
    if (st)
        st->ops->close(st);
}

const char *tm_store_epoch(const tm_store *st) { return st->epoch; }

int tm_store_session_create(tm_store *st, const tm_session_rec *rec)
{
    return st->ops->session_create(st, rec);
}

int tm_store_session_create_queued(tm_store *st, const tm_session_rec *rec)
{
    return st->ops->session_create_queued ? st->ops->session_create_queued(st, rec)
                                          : TIDEMARK_ENOTSUP;
}

int tm_store_can_queue_session_create(const tm_store *st)
{
    return st && st->ops->session_create_queued != NULL;
}

int tm_store_queued(const tm_store *st)
{
    return st && st->ops->mark != NULL; /* a queue position exists only with a queue */
}

int tm_store_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    return st->ops->session_get(st, id, out);
}

int tm_store_session_request_get(tm_store *st, const char *id, const char *key, tm_session_rec *sess,
                                 tm_request_rec *req, int *req_rc)
{
    memset(req, 0, sizeof *req);
    *req_rc = 1;
    int rc = st->ops->session_request_get ? st->ops->session_request_get(st, id, key, sess, req, req_rc)
                                          : st->ops->session_get(st, id, sess);
    if (rc && *req_rc == 0)
        tm_request_rec_clear(req);
    if (rc)
        *req_rc = 1;
    else if (!st->ops->session_request_get)
        *req_rc = st->ops->request_get(st, id, key, req);
    return rc;
}

int tm_store_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    return st->ops->session_touch(st, id, now_ms);
}

int tm_store_session_delete(tm_store *st, const char *id)
{
    return st->ops->session_delete(st, id);
}

int tm_store_session_delete_queued(tm_store *st, const char *id)
{
    return st->ops->session_delete_queued ? st->ops->session_delete_queued(st, id)
                                          : st->ops->session_delete(st, id);
}

json_t *tm_session_rec_attrs(const tm_session_rec *rec)
{
    if (rec->attrs_obj)
        return json_incref(rec->attrs_obj);
    return rec->attrs ? json_loads(rec->attrs, 0, NULL) : NULL;
}

int tm_store_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX])
{
    if (name && strcmp(name, "g") != 0) /* POST streams are only ever created */
        return TIDEMARK_EINVAL;
    return st->ops->stream_open(st, session, name, out);
}

int tm_store_append(tm_store *st, const char *session, const char *stream, const void *data,
                    size_t len, unsigned flags, tm_append_cb cb, void *ud)
{
    tm_append_req r = {.session = session, .stream = stream, .data = data, .len = len,
                       .flags = flags, .cb = cb, .cb_ud = ud};
    return tm_store_append_ex(st, &r);
}

int tm_store_append_ex(tm_store *st, const tm_append_req *req)
{
    int rc = st->ops->append_ex(st, req);
    if (rc == 0)
        tm_counter_inc(st->m.appended);
    return rc;
}

int tm_store_request_get(tm_store *st, const char *session, const char *key, tm_request_rec *out)
{
    return st->ops->request_get(st, session, key, out);
}

int tm_store_request_begin(tm_store *st, const tm_request_rec *rec, int wait_durable)
{
    return st->ops->request_begin(st, rec, wait_durable);
}

int tm_store_request_begin_later(tm_store *st, const tm_request_rec *rec, void **ticket)
{
    *ticket = NULL;
    return st->ops->request_begin_later ? st->ops->request_begin_later(st, rec, ticket)
                                        : TIDEMARK_ENOTSUP;
}

int tm_store_request_begin_await(tm_store *st, void *ticket)
{
    return st->ops->request_begin_await(st, ticket);
}

int tm_store_requests_unfinished(tm_store *st, tm_request_visitor fn, void *ud)
{
    return st->ops->requests_unfinished(st, fn, ud);
}

int tm_store_exec_schema(tm_store *st, const char *sql)
{
    return st->ops->exec_schema(st, sql);
}

int tm_store_query(tm_store *st, const char *sql, const char *const *args, size_t nargs,
                   json_t **rows)
{
    return st->ops->query(st, sql, args, nargs, rows);
}

int tm_store_rows(tm_store *st, const char *table, json_t **rows)
{
    if (!tm_table_name_ok(table) || !rows)
        return TIDEMARK_EINVAL;
    return st->ops->rows(st, table, rows);
}

int tm_store_session_set_attr(tm_store *st, const char *id, const char *name, const char *value)
{
    if (!id || !name || !*name)
        return TIDEMARK_EINVAL;
    return st->ops->session_set_attr(st, id, name, value);
}

int tm_store_sessions_each(tm_store *st, int (*fn)(void *ud, const tm_session_rec *rec), void *ud)
{
    return st->ops->sessions_each(st, fn, ud);
}

typedef struct attr_filter {
    const char *const *names;
    size_t n;
    int (*fn)(void *ud, const tm_session_rec *rec);
    void *ud;
} attr_filter;

static int with_attr(void *ud, const tm_session_rec *rec)
{
    attr_filter *f = ud;
    json_t *a = rec->attrs ? json_loads(rec->attrs, 0, NULL) : NULL;
    int has = 0;
    for (size_t i = 0; a && !has && i < f->n; i++)
        has = json_object_get(a, f->names[i]) != NULL;
    json_decref(a);
    return has ? f->fn(f->ud, rec) : 0;
}

int tm_store_sessions_with_attr(tm_store *st, const char *const *names, size_t n,
                                int (*fn)(void *ud, const tm_session_rec *rec), void *ud)
{
    if (st->ops->sessions_with_attr)
        return st->ops->sessions_with_attr(st, names, n, fn, ud);
    attr_filter f = {names, n, fn, ud};
    return st->ops->sessions_each(st, with_attr, &f);
}

int tm_store_sessions_expire(tm_store *st, int64_t idle_before_ms,
                             void (*fn)(void *, const char *), void *ud)
{
    return st->ops->sessions_expire(st, idle_before_ms, fn, ud);
}

int tm_store_close_stream(tm_store *st, const char *session, const char *stream)
{
    return st->ops->close_stream(st, session, stream);
}

int tm_store_read(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                  size_t max_events, tm_event_visitor fn, void *ud)
{
    return st->ops->read(st, session, stream, after_seq, max_events, fn, ud);
}

int tm_store_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out)
{
    return st->ops->bounds(st, session, stream, out);
}

int tm_store_read_live(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                       size_t max_events, tm_event_visitor fn, void *ud)
{
    if (st->ops->read_live)
        return st->ops->read_live(st, session, stream, after_seq, max_events, fn, ud);
    return st->ops->read(st, session, stream, after_seq, max_events, fn, ud);
}

int tm_store_bounds_live(tm_store *st, const char *session, const char *stream,
                         tm_stream_bounds *out)
{
    if (st->ops->bounds_live)
        return st->ops->bounds_live(st, session, stream, out);
    return st->ops->bounds(st, session, stream, out);
}

int tm_store_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1])
{
    return st->ops->event_epoch(st, session, stream, seq, out);
}

int tm_store_sync(tm_store *st)
{
    return st->ops->sync(st);
}

uint64_t tm_store_mark(tm_store *st) { return st->ops->mark ? st->ops->mark(st) : 0; }

void tm_store_hold(tm_store *st)
{
    if (st && st->ops->hold)
        st->ops->hold(st, 1);
}

void tm_store_release(tm_store *st)
{
    if (st && st->ops->hold)
        st->ops->hold(st, 0);
}

void tm_store_wait_settled(tm_store *st, uint64_t mark)
{
    if (st->ops->wait_settled)
        st->ops->wait_settled(st, mark);
}

int tm_store_sync_since(tm_store *st, uint64_t mark)
{
    return st->ops->sync_since ? st->ops->sync_since(st, mark) : st->ops->sync(st);
}

int tm_store_kv_get(tm_store *st, const char *key, void *out, size_t cap, size_t *len)
{
    return st->ops->kv_get ? st->ops->kv_get(st, key, out, cap, len) : TIDEMARK_ENOTSUP;
}

int tm_store_kv_create(tm_store *st, const char *key, const void *val, size_t len)
{
    return st->ops->kv_create ? st->ops->kv_create(st, key, val, len) : TIDEMARK_ENOTSUP;
}

const char *tm_store_unavailable_reason(tm_store *st)
{
    return tm_store_pg_not_replicated(st) ? "store_not_replicated" : "store_unavailable";
}

int tm_store_writable(tm_store *st) { return st->ops->writable ? st->ops->writable(st) : 0; }
int tm_store_in_doubt(tm_store *st) { return st->ops->in_doubt ? st->ops->in_doubt(st) : 0; }
