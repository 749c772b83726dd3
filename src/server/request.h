/*
 * request.h - a request to the MCP endpoint as the server core sees it,
 * whatever carried it, and how it is answered.
 *
 * An adapter (http.c: libmicrohttpd; stdio.c: JSON lines) parses what it
 * received once, into a tm_req: the method, the session, the protocol
 * version, the MCP headers the core checks and the body. The core reads
 * only these fields (never the transport) and answers through r->ops,
 * exactly once: a complete body, or a stream of events it produces on
 * demand (a source, ../transport/source.h). Streams live in the adapter's
 * hub under a key ("<session>/<stream>"), where the store's commits wake
 * them (tm_hub).
 */
#ifndef TM_REQUEST_H
#define TM_REQUEST_H
#include "../transport/source.h"
#include <stddef.h>

typedef struct tm_req tm_req;

typedef struct tm_req_ops {
    /* A header for the answer (copies both). An adapter without headers
     * keeps what it needs of them (stdio: the session id initialize made). */
    void (*add_header)(tm_req *r, const char *name, const char *value);
    /* Answer with a complete body (copied; content_type NULL with no body).
     * r is the adapter's again once this is called. */
    void (*reply)(tm_req *r, unsigned status, const char *content_type, const char *body,
                  size_t len);
    /* Answer with the stream src produces, attached under key (at most one
     * live reader per key; one that ended or whose reader is gone is taken
     * over). On success the adapter owns src (src->free runs when the
     * stream goes) and r; TIDEMARK_EBUSY, unanswered, when a live reader
     * holds key; another error, unanswered, src still the caller's. */
    int (*reply_stream)(tm_req *r, const char *key, const tm_source *src);
} tm_req_ops;

typedef enum tm_req_method { TM_REQ_POST, TM_REQ_GET, TM_REQ_DELETE } tm_req_method;

/* The transport has no headers (stdio): a 2026-07-28 request's header
 * checks (era.c) have nothing to compare the body with and are not made;
 * the body alone is the request. */
#define TM_REQ_BODY_ONLY 1u

/* One Mcp-Param-<suffix> header. */
typedef struct tm_req_param {
    const char *suffix;
    const char *value;
} tm_req_param;

#define TM_REQ_PARAMS_MAX 16 /* Mcp-Param-* headers kept (more: the rest are absent) */

/* Every string is the adapter's, valid until r is answered (NULL: absent). */
struct tm_req {
    const tm_req_ops *ops;
    tm_req_method method;
    unsigned flags;                /* TM_REQ_* */
    const char *session_id;        /* Mcp-Session-Id */
    const char *protocol_version;  /* MCP-Protocol-Version */
    const char *last_event_id;     /* Last-Event-ID */
    const char *authorization;     /* Authorization */
    const char *content_type, *accept;
    const char *mcp_method, *mcp_name; /* Mcp-Method, Mcp-Name */
    const char *traceparent;       /* traceparent (W3C trace context) */
    tm_req_param params[TM_REQ_PARAMS_MAX];
    size_t nparams;
    const char *peer;              /* the client's numeric address (NULL: not a network peer) */
    const char *body;
    size_t body_len;
};

/* The value of the MCP header name (case-insensitive: MCP-Protocol-Version,
 * Mcp-Method, Mcp-Name, Mcp-Param-*) as parsed, or NULL. */
const char *tm_req_header(const tm_req *r, const char *name);

static inline void tm_req_add_header(tm_req *r, const char *name, const char *value)
{
    r->ops->add_header(r, name, value);
}

static inline void tm_req_reply(tm_req *r, unsigned status, const char *content_type,
                                const char *body, size_t len)
{
    r->ops->reply(r, status, content_type, body, len);
}

static inline int tm_req_reply_stream(tm_req *r, const char *key, const tm_source *src)
{
    return r->ops->reply_stream(r, key, src);
}

/* Where the streams of an adapter live: the store's commits wake them by
 * key (tm_feed_wake), the server asks one to end or runs fn on its source
 * with its lock held. */
typedef struct tm_hub_ops {
    void (*wake)(void *impl, const char *key);
    /* fn(src_ud, arg) under the stream's lock, then a wake; fn nonzero
     * marks it ending. TIDEMARK_ENOTFOUND: no stream under key. */
    int (*signal)(void *impl, const char *key, int (*fn)(void *src_ud, void *arg), void *arg);
    /* End every stream whose key starts with prefix once what it holds is
     * sent. */
    void (*end)(void *impl, const char *prefix);
    /* End every stream and attach no more (the server stops; before its
     * store closes: a stream's source reads it). */
    void (*stop)(void *impl);
} tm_hub_ops;

typedef struct tm_hub {
    const tm_hub_ops *ops;
    void *impl;
} tm_hub;

#endif
