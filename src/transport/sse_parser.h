/*
 * sse_parser.h - Server-Sent Events parser (client side).
 *
 * Implements the "event stream interpretation" of the HTML Living Standard
 * (https://html.spec.whatwg.org/multipage/server-sent-events.html) on bytes,
 * incrementally: input may be fed in chunks split anywhere, including inside
 * a CRLF pair or inside the leading UTF-8 byte order mark, and gives exactly
 * the same callbacks as feeding it whole.
 *
 *  - Lines end with CRLF, LF or CR. One leading BOM (EF BB BF) is stripped.
 *  - ":..." lines are comments; "field:value" (one leading space of the value
 *    dropped); a line without ':' is a field with an empty value.
 *  - data: appends value + LF to the data buffer; event: sets the type;
 *    id: sets the last-event-id buffer unless the value contains a NUL
 *    (such a block's event is flagged bad_id);
 *    retry: all-ASCII-digit values set the reconnection time; other fields
 *    are ignored. Field names are case-sensitive.
 *  - A blank line commits the last-event-id buffer as the stream's last event
 *    id, then dispatches the event unless the data buffer is empty (one
 *    trailing LF removed, type "message" by default) and clears data and type.
 *  - At the end of a stream an unterminated event (and line) is discarded.
 *
 * Memory is bounded: a line longer than max_line bytes or an event whose
 * data would exceed max_data bytes fails with TIDEMARK_ERANGE, and the parser
 * then refuses input until tm_sse_parser_finish() or tm_sse_parser_reset().
 *
 * Callbacks must not call tm_sse_parser_feed/finish/reset/free on the parser
 * that invokes them; tm_sse_parser_last_id() is allowed. Pointers passed to
 * callbacks are valid only during the call.
 */
#ifndef TM_SSE_PARSER_H
#define TM_SSE_PARSER_H
#include <stddef.h>

/* Defaults used when tm_sse_parser_new() gets 0 for a limit. */
#define TM_SSE_DEFAULT_MAX_LINE ((size_t)1 << 20) /* 1 MiB */
#define TM_SSE_DEFAULT_MAX_DATA ((size_t)1 << 20) /* 1 MiB */

/* One dispatched event. */
typedef struct tm_sse_event {
    const char *type;  /* event type; "message" when none was given */
    const char *id;    /* stream's last event id; NULL if no id: was ever committed.
                        * "" when the server cleared it with an empty id: */
    const char *data;  /* data, NUL-terminated (may also contain NUL bytes) */
    size_t data_len;   /* bytes of data, at most max_data */
    int own_id;        /* 1: this event's block had its own id: field; 0: id is
                        * inherited from an earlier block */
    int bad_id;        /* 1: this event's block had an id: field that was ignored
                        * because its value contains a NUL byte (id is then the
                        * inherited one): a client must not take the event as
                        * the continuation of that older id */
} tm_sse_event;

/* Callbacks; every member may be NULL, and so may the struct itself. */
typedef struct tm_sse_callbacks {
    /* An event was dispatched. A nonzero return stops parsing: the feed
     * returns that value and the parser refuses input until finish/reset. */
    int (*on_event)(void *ud, const tm_sse_event *ev);
    /* A valid retry: field was read (milliseconds, saturating at ULONG_MAX). */
    void (*on_retry)(void *ud, unsigned long ms);
    /* A comment line; text follows the ':' with one leading space removed.
     * text is NOT NUL-terminated. */
    void (*on_comment)(void *ud, const char *text, size_t len);
    /* The stream's last event id changed (only at a blank line, i.e. when an
     * id: is committed, also for blocks that dispatch no event, such as
     * "id: 7\n\n"). Called before on_event of the same block. */
    void (*on_id)(void *ud, const char *id);
    /* A block with an id: field and no data: line ("id: 7\n\n"): committed,
     * not dispatched. For tools that must see every block (tidemark-check). */
    void (*on_id_only)(void *ud, const char *id);
} tm_sse_callbacks;

typedef struct tm_sse_parser tm_sse_parser;

/* Create a parser. max_line bounds a line (without its terminator), max_data
 * the data of one event; 0 selects the TM_SSE_DEFAULT_* value. cb is copied.
 * Returns 0, TIDEMARK_EINVAL (out NULL) or TIDEMARK_ENOMEM. */
int tm_sse_parser_new(size_t max_line, size_t max_data, const tm_sse_callbacks *cb, void *ud,
                      tm_sse_parser **out);

/* Feed len bytes of the stream. Returns 0; TIDEMARK_ERANGE (line or data
 * limit exceeded) or TIDEMARK_ENOMEM; or the nonzero return of on_event,
 * which stops parsing at that event. Any failure is sticky: later feeds
 * return it again without reading input, until finish or reset. */
int tm_sse_parser_feed(tm_sse_parser *p, const char *buf, size_t len);

/* End of stream: discard the unterminated line and event (including an id:
 * not yet committed by a blank line) and make the parser ready for the next
 * stream (reconnection), keeping the last event id. Returns 0 if the stream
 * was parsed without failure, else the sticky failure code. */
int tm_sse_parser_finish(tm_sse_parser *p);

/* The stream's last event id (what to send as Last-Event-ID when it is
 * non-NULL and non-empty), or NULL if none was ever committed. Valid until
 * the next feed/finish/reset/free. */
const char *tm_sse_parser_last_id(const tm_sse_parser *p);

/* Clear the parser for a new stream, including any sticky failure; like
 * tm_sse_parser_finish() but without reporting. The last event id is kept. */
void tm_sse_parser_reset(tm_sse_parser *p);

/* Free the parser (NULL is fine). */
void tm_sse_parser_free(tm_sse_parser *p);

#endif
