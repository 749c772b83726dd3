/*
 * http_server.h - Streamable HTTP server plumbing on libmicrohttpd.
 *
 * The transport knows HTTP and SSE, not MCP and not the store: it hands each
 * complete request to a handler, which answers exactly once, from any
 * thread, with a plain body or with an SSE stream whose bytes come from a
 * source (tm_http_source). Stream connections sleep (MHD suspend) until
 * they are woken by key.
 */
#ifndef TM_HTTP_SERVER_H
#define TM_HTTP_SERVER_H
#include "../base/buf.h"
#include "../base/metrics.h"
#include "source.h"
#include <stddef.h>
#include <stdint.h>

typedef struct tm_http tm_http;
typedef struct tm_http_req tm_http_req;

typedef struct tm_http_config {
    const char *host;        /* numeric IPv4/IPv6 address to bind */
    unsigned port;           /* 0 = pick a free port */
    /* A body over this is answered 413 with too_large_body, then the
     * connection closes: a declared Content-Length before any of the body
     * is read, a chunked body as soon as it passes the limit. The handler
     * never sees such a request. */
    size_t max_body;
    unsigned io_threads;     /* MHD polling threads */
    unsigned keepalive_ms;   /* SSE comment interval; also finds dead peers */
    unsigned max_connections;      /* open connections in all (0: 16384) */
    unsigned max_per_address;      /* open connections from one address (0: 4096) */
    unsigned request_deadline_ms;  /* request line to end of body (0: 30000) */
    unsigned idle_timeout_ms;      /* no request in progress, no stream (0: 120000) */
    const char *busy_body;   /* JSON answered with 503 to a connection over a
                                limit (then closed); NULL: empty */
    /* The request line and headers (query arguments and cookies included,
     * and TM_HTTP_HEADER_COST per field) a request may have (0:
     * TM_HTTP_MAX_HEADER_BYTES);
     * larger gets 431 with headers_body, then the connection closes. Each
     * connection has a libmicrohttpd pool of this + TM_HTTP_POOL_RESERVE
     * (the answer's headers and its send buffer), allocated while it is
     * open: with 10,000 SSE streams the pool is most of their memory. A
     * request libmicrohttpd cannot even read into it gets libmicrohttpd's
     * own 431 (an HTML body). */
    unsigned max_header_bytes;
    const char *headers_body; /* JSON answered with 431; NULL: empty */
    const char *too_large_body; /* JSON answered with 413; NULL: empty */
    /* JSON answered with 400 to a chunked body with a chunk size no body
     * can have (over INT64_MAX, say ffffffffffffffff), seen before its
     * bytes: then the connection closes. NULL: empty. */
    const char *bad_chunk_body;
    /* HTTPS through libmicrohttpd's GnuTLS: PEM files, read by tm_http_new.
     * tls_cert_file and tls_key_file both set (TLS) or neither (plain HTTP).
     * tls_client_ca_file (needs TLS): every request must come on a
     * connection whose client certificate one of these CAs signed; others
     * are answered 403 (the connection then closes). Over TLS a connection
     * over a limit is closed without the 503 (it would go out in clear). */
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_client_ca_file;
    /* Connections and streams open, refused, dropped, bad framing are
     * registered here (NULL: none); it must outlive the server. */
    tm_metrics *metrics;
} tm_http_config;

#define TM_HTTP_MAX_HEADER_BYTES 8192 /* max_header_bytes' default */
#define TM_HTTP_HEADER_COST 64    /* per header field: libmicrohttpd's record of it */
#define TM_HTTP_POOL_RESERVE 2048 /* per connection, beyond max_header_bytes */

/* Called once per complete request on an I/O thread. Must not block. */
typedef void (*tm_http_handler)(void *ud, tm_http_req *req);

/* Bind the listening socket (errors say why: "address already in use" is
 * TIDEMARK_EBUSY; a TLS file that cannot be read, or a half TLS
 * configuration, TIDEMARK_EINVAL). No thread runs yet, so the caller can publish h before
 * any callback can use it. OUT h. */
int tm_http_new(const tm_http_config *cfg, tm_http_handler fn, void *ud, tm_http **h);
/* Start the I/O threads and the ticker: requests flow from here on. */
int tm_http_listen(tm_http *h);
/* The bound port. */
unsigned tm_http_port(const tm_http *h);
/* Stop: end every stream, stop the threads, close the listener. Every
 * request handed to the handler must have been answered before. h stays
 * valid (tm_http_wake is then a no-op) until tm_http_free, so callers whose
 * other threads may still wake streams (the store's writer) free it after
 * those stopped. */
void tm_http_stop(tm_http *h);
void tm_http_free(tm_http *h);

/* Request accessors; strings stay valid until the reply is sent. */
const char *tm_http_req_method(const tm_http_req *r);
const char *tm_http_req_path(const tm_http_req *r);
/* Header value (case-insensitive name) or NULL. Valid in the handler only. */
const char *tm_http_req_header(const tm_http_req *r, const char *name);
/* Every header field, in one pass: fn(ud, name, value) for each (valid
 * in the call only). */
void tm_http_req_each_header(const tm_http_req *r,
                             void (*fn)(void *ud, const char *name, const char *value), void *ud);
/* Something of the handler's kept with the request: free_fn(ud) runs when
 * the request is gone (its answer sent, or its connection closed). */
void tm_http_req_keep(tm_http_req *r, void *ud, void (*free_fn)(void *ud));
const char *tm_http_req_body(const tm_http_req *r, size_t *len);
/* NULL, or why the request's framing is ambiguous (tm_http_framing_check):
 * a request smuggling risk behind a proxy. Such a request reaches the
 * handler before its body is read; answer it 400 (the connection then
 * closes, nothing after it on the connection is read). */
const char *tm_http_req_framing_error(const tm_http_req *r);
/* 1 if the request came over TLS. */
int tm_http_req_tls(const tm_http_req *r);
/* The peer's numeric address ("127.0.0.2", "::1"). */
const char *tm_http_req_peer(const tm_http_req *r);
/* Add a response header before replying. Copies both strings. Out of
 * memory, the request is answered 500 instead (a session id or Allow
 * header is part of the answer: never sent without it). */
void tm_http_req_add_header(tm_http_req *r, const char *name, const char *value);

/* Answer with a complete body (copied). Exactly once per request. */
void tm_http_reply(tm_http_req *r, unsigned status, const char *content_type, const char *body,
                   size_t len);

/* The bytes of one SSE connection: a source (source.h), pulled on an I/O
 * thread each time the connection has sent everything it holds; WAIT
 * sleeps until tm_http_wake(key) or tm_http_signal. The names below are
 * the transport's for the same thing. */
typedef tm_source tm_http_source;
enum { TM_HTTP_MORE = TM_SRC_MORE, TM_HTTP_WAIT = TM_SRC_WAIT, TM_HTTP_END = TM_SRC_END };

#define TM_HTTP_KEY_MAX TM_SRC_KEY_MAX

/* Answer with an SSE stream fed by src, attached under key (at most one
 * live connection per key; a connection whose stream ended, that was asked
 * to end, or whose peer is gone is taken over). On success the connection
 * owns src (src->free runs when it goes); on failure the caller still does.
 * TIDEMARK_EBUSY, without answering, when a live connection holds key. */
int tm_http_reply_source(tm_http_req *r, const char *key, const tm_http_source *src);

/* Something new may be there for the connection under key: wake it. */
void tm_http_wake(tm_http *h, const char *key);
/* Run fn(src->ud, arg) on the connection under key with its lock held,
 * then wake it; fn returning nonzero marks the connection as ending (a
 * resume may take its key over at once). TIDEMARK_ENOTFOUND: none. */
int tm_http_signal(tm_http *h, const char *key, int (*fn)(void *src_ud, void *arg), void *arg);
/* End every connection whose key starts with prefix ("" = all) once what
 * it holds is sent. */
void tm_http_end(tm_http *h, const char *prefix);

/* One header field as libmicrohttpd recorded it. */
typedef struct tm_http_field {
    const char *name, *value;
    int folded; /* its line was continued on the next (obs-fold) */
} tm_http_field;

/* The framing rule alone (RFC 9112 sections 5 and 6, request smuggling),
 * for tests and fuzzing: NULL when the request's fields frame it one way
 * only, else the reason, the first of:
 *   "obs_fold"                    a field continued on a line starting
 *                                 with a space or tab;
 *   "invalid_field_name"          a name empty or not a token (whitespace
 *                                 before the colon);
 *   "repeated_host", "repeated_content_length",
 *   "repeated_transfer_encoding"  the field twice (names in any case);
 *   "content_length_with_transfer_encoding";
 *   "invalid_transfer_encoding"   a value other than "chunked" (any case,
 *                                 nothing around it);
 *   "invalid_content_length"      a value other than 1 to 19 digits. */
const char *tm_http_framing_check(const tm_http_field *fields, size_t n);

#endif
