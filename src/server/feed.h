/*
 * feed.h - what an SSE connection of a session's stream sends: the stream's
 * committed events framed with their ids (<epoch>-<stream>-<seq>), replay
 * then live without overlap or gap (one loop: "events after the last seq I
 * sent"), a typed "event: gap" when retention trimmed events it had not
 * sent, the durable head under emit-early, and the end. The transport asks
 * for bytes (tm_source); the feed reads the store.
 */
#ifndef TM_FEED_H
#define TM_FEED_H
#include "server_int.h"

typedef struct tm_feed_opts {
    const char *session;
    const char *stream;
    uint64_t after_seq;     /* send events with seq > after_seq */
    uint64_t replay_until;  /* events up to here count as replayed (metrics) */
    unsigned retry_ms;      /* 0: no "retry:" line */
    const char *prelude;    /* raw SSE bytes sent first (a gap event), or NULL */
    size_t prelude_len;
    int announce_durable;   /* emit-early: "event: tidemark-durable" as the durable
                               head passes what was sent */
    int defer;              /* a POST's call stream: nothing sent before its first
                               event; whole by then, one response with its length
                               (tm_source.has_events). Not found before its
                               first event, it waits: its opening may not be
                               durable yet, or was lost, and then its calls'
                               last words (tm_feed_fail) come */
    /* Called once when the connection ends (2026-07-28 streams): completed
     * is 1 when the stream was closed and everything in it was sent. */
    void (*on_end)(void *ud, int completed);
    void *end_ud;
} tm_feed_opts;

/* Answer r with the stream. TIDEMARK_EBUSY, without answering, when a live
 * connection holds it. */
int tm_feed_attach(tidemark_server_t *srv, tm_req *r, const tm_feed_opts *o);
/* The store committed on session/stream (the commit listener): wake its reader. */
void tm_feed_wake(tidemark_server_t *srv, const char *session, const char *stream);
/* End the connection of session/stream once events up to after_seq are
 * sent (server-initiated close): the client resumes with GET. */
void tm_feed_close_after(tidemark_server_t *srv, const char *session, const char *stream,
                         uint64_t after_seq);
/* Nothing more of session/stream can be written: send data (one message,
 * as an SSE event without an id) once caught up, then end. */
void tm_feed_fail(tidemark_server_t *srv, const char *session, const char *stream,
                  const char *data, size_t len);
/* 1 if a connection is attached to a stream of the session. */
int tm_feed_session_attached(tidemark_server_t *srv, const char *session);
/* End every connection attached to a stream of the session. */
void tm_feed_end_session(tidemark_server_t *srv, const char *session);

#endif
