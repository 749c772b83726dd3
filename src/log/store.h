/*
 * store.h - the event log interface (DESIGN.md §4). One interface, several
 * backends (memory now; SQLite, Redis later) selected by a URI.
 *
 * Rules every backend keeps:
 *  - append() assigns the seq inside the commit; an event becomes visible
 *    to read() and to the commit listener only once durable at the
 *    configured level (commit-then-emit).
 *  - seqs are dense per stream, from 1.
 *  - trimming records what was trimmed (first_retained and the epoch of the
 *    last trimmed event), so a gap is known exactly.
 *  - the store is thread-safe.
 */
#ifndef TM_STORE_H
#define TM_STORE_H
#include "event_id.h"
#include <stddef.h>
#include <stdint.h>

typedef struct tm_store tm_store;

typedef struct tm_event {
    uint64_t seq;
    const char *epoch; /* valid during the callback only */
    const char *data;  /* message bytes as stored; valid during the callback only */
    size_t len;
} tm_event;

typedef struct tm_stream_bounds {
    uint64_t first_retained; /* head+1 when nothing is retained */
    uint64_t head;           /* highest durable seq, 0 if none */
    int closed;              /* no event will follow head */
    char trimmed_epoch[TM_EPOCH_LEN + 1]; /* epoch of seq first_retained-1, "" if none */
} tm_stream_bounds;

/* A session as stored. Strings are owned by the record (tm_session_rec_clear). */
typedef struct tm_session_rec {
    char *id;
    char *protocol_version;
    char *client;       /* JSON text: initialize params (clientInfo, capabilities) */
    int64_t created_ms;
    int64_t last_seen_ms;
} tm_session_rec;

/* Called after an append is durable (status 0, seq assigned) or failed. */
typedef void (*tm_append_cb)(void *ud, int status, uint64_t seq);
/* Called for every durable event of every stream, after its append callback. */
typedef void (*tm_commit_listener)(void *ud, const char *session, const char *stream, uint64_t seq);
/* Called by read() for each event in order. Return nonzero to stop. */
typedef int (*tm_event_visitor)(void *ud, const tm_event *ev);

typedef struct tm_store_options {
    uint64_t retain_events; /* per-stream count limit, 0 = unlimited */
} tm_store_options;

#define TM_APPEND_FINAL 1u /* the stream ends with this event */

struct tm_store_ops {
    const char *name;
    void (*close)(tm_store *st);
    int (*session_create)(tm_store *st, const tm_session_rec *rec);
    int (*session_get)(tm_store *st, const char *id, tm_session_rec *out);
    int (*session_touch)(tm_store *st, const char *id, int64_t now_ms);
    int (*session_delete)(tm_store *st, const char *id);
    int (*stream_open)(tm_store *st, const char *session, const char *name, char out[TM_STREAM_MAX]);
    int (*append)(tm_store *st, const char *session, const char *stream, const void *data,
                  size_t len, unsigned flags, tm_append_cb cb, void *ud);
    int (*close_stream)(tm_store *st, const char *session, const char *stream);
    int (*read)(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                size_t max_events, tm_event_visitor fn, void *ud);
    int (*bounds)(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
    int (*event_epoch)(tm_store *st, const char *session, const char *stream, uint64_t seq,
                       char out[TM_EPOCH_LEN + 1]);
};

/* Common header of every backend object. */
struct tm_store {
    const struct tm_store_ops *ops;
    char epoch[TM_EPOCH_LEN + 1];
    tm_commit_listener listener;
    void *listener_ud;
};

/* Open a store by URI: "memory". Returns 0 or a negative code. */
int tm_store_open(const char *uri, const tm_store_options *opt, tm_store **out);
/* Set the listener told of every durable event. Call before use. */
void tm_store_set_listener(tm_store *st, tm_commit_listener fn, void *ud);
/* Close and free. */
void tm_store_close(tm_store *st);
/* Current writer epoch (16 hex digits). */
const char *tm_store_epoch(const tm_store *st);

/* Create a session. TIDEMARK_EEXIST if the id is taken. */
int tm_store_session_create(tm_store *st, const tm_session_rec *rec);
/* Load a session; OUT rec must be released with tm_session_rec_clear(). */
int tm_store_session_get(tm_store *st, const char *id, tm_session_rec *out);
int tm_store_session_touch(tm_store *st, const char *id, int64_t now_ms);
/* Delete a session with all its streams. */
int tm_store_session_delete(tm_store *st, const char *id);
void tm_session_rec_clear(tm_session_rec *rec);

/* Open a stream of a session. name "g" opens (or reopens) the standalone
 * stream; NULL creates the next POST stream "r<n>". OUT out: its name. */
int tm_store_stream_open(tm_store *st, const char *session, const char *name,
                         char out[TM_STREAM_MAX]);
/* Append one event (message bytes, stored and replayed as is). cb may run on
 * another thread, possibly before append() returns. */
int tm_store_append(tm_store *st, const char *session, const char *stream, const void *data,
                    size_t len, unsigned flags, tm_append_cb cb, void *ud);
/* Mark a stream ended without a further event. */
int tm_store_close_stream(tm_store *st, const char *session, const char *stream);
/* Visit up to max_events durable events with seq > after_seq, in order. */
int tm_store_read(tm_store *st, const char *session, const char *stream, uint64_t after_seq,
                  size_t max_events, tm_event_visitor fn, void *ud);
/* Durable bounds of a stream. TIDEMARK_ENOTFOUND if the session has no such stream. */
int tm_store_bounds(tm_store *st, const char *session, const char *stream, tm_stream_bounds *out);
/* Epoch under which seq was written (from the event or the trim record).
 * TIDEMARK_ENOTFOUND when neither is known. */
int tm_store_event_epoch(tm_store *st, const char *session, const char *stream, uint64_t seq,
                         char out[TM_EPOCH_LEN + 1]);

/* Backend constructors. */
int tm_store_memory_open(const tm_store_options *opt, tm_store **out);

/* For backends: deliver the commit notification. */
void tm_store_notify_commit(tm_store *st, const char *session, const char *stream, uint64_t seq);
/* For backends: initialise the common header with a fresh random epoch. */
int tm_store_init_base(tm_store *st, const struct tm_store_ops *ops);

#endif
