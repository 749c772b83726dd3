/*
 * http_client.h - HTTP exchanges on one I/O thread (libcurl multi).
 *
 * Any thread starts an exchange; the I/O thread runs every exchange at once
 * and calls its callbacks (on the I/O thread): headers once, body bytes as
 * they arrive, done exactly once. Callbacks must not block for long.
 */
#ifndef TM_HTTP_CLIENT_H
#define TM_HTTP_CLIENT_H
#include <stddef.h>
#include <stdint.h>

typedef struct tm_hc tm_hc;
typedef struct tm_hx tm_hx;

typedef struct tm_hx_cb {
    /* The request is about to go out on a connection (may be NULL). */
    void (*on_sent)(void *ud);
    /* Response headers are complete. content_type and session_id may be NULL. */
    void (*on_headers)(void *ud, long status, const char *content_type, const char *session_id);
    /* Body bytes. Return nonzero to abort the exchange. */
    int (*on_data)(void *ud, const char *buf, size_t len);
    /* The exchange ended: rc 0 (complete) or a negative code (TIDEMARK_EIO
     * for a failed/cut connection, TIDEMARK_ECANCELED, TIDEMARK_ETIMEDOUT). */
    void (*on_done)(void *ud, int rc, long status);
} tm_hx_cb;

typedef struct tm_hx_req {
    const char *method;          /* "GET", "POST", "DELETE" */
    const char *url;
    const char *const *headers;  /* NULL-terminated "Name: value" lines */
    const char *body;            /* copied; may be NULL */
    size_t body_len;
    long timeout_ms;             /* whole exchange; 0 = none (streams) */
    int fresh_connection;        /* never on a reused connection: libcurl re-sends a
                                    request whose reused connection died before any
                                    answer byte, which must not happen to a request
                                    that may not be sent twice */
} tm_hx_req;

/* Start the I/O thread. OUT hc. */
int tm_hc_new(tm_hc **hc);
/* Start an exchange; callbacks get ud. OUT xid (optional): its id, never 0,
 * never reused, for tm_hc_cancel. */
int tm_hc_start(tm_hc *hc, const tm_hx_req *req, const tm_hx_cb *cb, void *ud, uint64_t *xid);
/* Abort an exchange if it has not ended (its on_done runs with ECANCELED). */
void tm_hc_cancel(tm_hc *hc, uint64_t xid);
/* Abort everything, stop the thread, free. */
void tm_hc_free(tm_hc *hc);

#endif
