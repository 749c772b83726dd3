/* store.c - backend-independent store entry points. */
#include "store.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

int tm_store_init_base(tm_store *st, const struct tm_store_ops *ops)
{
    st->ops = ops;
    st->listener = NULL;
    st->listener_ud = NULL;
    return tm_random_hex(st->epoch, TM_EPOCH_LEN / 2);
}

int tm_store_open(const char *uri, const tm_store_options *opt, tm_store **out)
{
    tm_store_options def = {0};
    if (!opt)
        opt = &def;
    if (!uri || strcmp(uri, "memory") == 0 || strcmp(uri, "memory:") == 0)
        return tm_store_memory_open(opt, out);
    return TIDEMARK_ENOTSUP;
}

void tm_store_set_listener(tm_store *st, tm_commit_listener fn, void *ud)
{
    st->listener = fn;
    st->listener_ud = ud;
}

void tm_store_close(tm_store *st)
{
    if (st)
        st->ops->close(st);
}

const char *tm_store_epoch(const tm_store *st) { return st->epoch; }

void tm_store_notify_commit(tm_store *st, const char *session, const char *stream, uint64_t seq)
{
    if (st->listener)
        st->listener(st->listener_ud, session, stream, seq);
}

int tm_store_session_create(tm_store *st, const tm_session_rec *rec)
{
    return st->ops->session_create(st, rec);
}

int tm_store_session_get(tm_store *st, const char *id, tm_session_rec *out)
{
    return st->ops->session_get(st, id, out);
}

int tm_store_session_touch(tm_store *st, const char *id, int64_t now_ms)
{
    return st->ops->session_touch(st, id, now_ms);
}

int tm_store_session_delete(tm_store *st, const char *id)
{
    return st->ops->session_delete(st, id);
}

void tm_session_rec_clear(tm_session_rec *rec)
{
    free(rec->id);
    free(rec->protocol_version);
    free(rec->client);
    memset(rec, 0, sizeof *rec);
}

int tm_store_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX])
{
    return st->ops->stream_open(st, session, name, out);
}

int tm_store_append(tm_store *st, const char *session, const char *stream, const void *data,
                    size_t len, unsigned flags, tm_append_cb cb, void *ud)
{
    return st->ops->append(st, session, stream, data, len, flags, cb, ud);
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

int tm_store_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1])
{
    return st->ops->event_epoch(st, session, stream, seq, out);
}
