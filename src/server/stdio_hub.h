/*
 * stdio_hub.h - the streams of the stdio adapter (stdio.c): the server's
 * hub (request.h) without a network. One pump thread pulls every stream
 * that was woken (a commit of its store stream, a signal, an end) and
 * hands each of its events' data to the stream's reader, and runs the
 * adapter's other output in order with it; nothing else writes, so a
 * client slow to read holds up the pump only (never a worker or the
 * store's writer). A stream is produced on demand: pulled again only once
 * what it gave was handed on.
 */
#ifndef TM_STDIO_HUB_H
#define TM_STDIO_HUB_H
#include "request.h"

typedef struct tm_shub tm_shub;

/* Who reads one stream: on_message gets each event's data (a message of
 * type "message" with data; nonzero stops the stream), on_end runs once,
 * after the source was freed, on the pump thread. */
typedef struct tm_shub_reader {
    int (*on_message)(void *ud, const char *data, size_t len);
    void (*on_end)(void *ud);
    void *ud;
} tm_shub_reader;

extern const tm_hub_ops tm_shub_ops; /* impl: the tm_shub */

/* A hub with its pump thread running. OUT *out. */
int tm_shub_new(tm_shub **out);
/* Attach src under key for rd (request.h reply_stream): TIDEMARK_EBUSY
 * when a live stream holds key, TIDEMARK_ECLOSED once stopped. On success
 * the hub owns src. */
int tm_shub_attach(tm_shub *h, const char *key, const tm_source *src, const tm_shub_reader *rd);
/* End the stream under exactly key without pulling more (a cancelled
 * request). */
void tm_shub_end_key(tm_shub *h, const char *key);
/* Run fn(ud) on the pump thread, after what was queued before (once
 * stopped: here, at once). */
void tm_shub_defer(tm_shub *h, void (*fn)(void *ud), void *ud);
/* End every stream, run what was deferred, join the pump (idempotent). */
void tm_shub_stop(tm_shub *h);
void tm_shub_free(tm_shub *h);

#endif
