/*
 * source.h - the bytes of one event stream, pulled by whatever carries
 * them (an SSE connection over HTTP, JSON lines over stdio). The producer
 * (the server's feed) knows the store, not the transport; the transport
 * asks for more only when it has sent what it holds, so a stream is
 * produced on demand, as fast as its reader takes it.
 */
#ifndef TM_SOURCE_H
#define TM_SOURCE_H
#include "../base/buf.h"

/* pull appends whole SSE events (or retry lines, comments) to out and
 * returns:
 *   TM_SRC_MORE  it appended something: send it, then ask again;
 *   TM_SRC_WAIT  nothing now: ask again after a wake (by the stream's key)
 *                or a signal;
 *   TM_SRC_END   the stream is done: end it once out is sent.
 * The transport calls pull with the stream's lock held (so pull must not
 * block for long and must not call back into the transport). free
 * releases ud once the stream is gone. */
enum { TM_SRC_MORE = 1, TM_SRC_WAIT = 0, TM_SRC_END = -1 };
typedef struct tm_source {
    int (*pull)(void *ud, tm_buf *out);
    void (*free)(void *ud);
    void *ud;
    /* NULL, or: whether pull has given any of the stream's events (not
     * just a head). A transport may hold everything, headers included,
     * until it has (at the latest at the first wake, or the end): a stream
     * that has ended by then can go out as one response (HTTP: up to
     * 64 KiB, with its length). For a POST's call stream, whose first
     * events are durable at its first commit. */
    int (*has_events)(void *ud);
} tm_source;

/* A stream's key ("<session>/<stream>"): at most one live reader each. */
#define TM_SRC_KEY_MAX 256

#endif
