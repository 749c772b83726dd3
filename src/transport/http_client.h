/*
 * http_client.h - HTTP exchanges on one I/O thread (libcurl multi).
 *
 * Any thread starts an exchange; the I/O thread runs every exchange at once
 * and calls its callbacks (on the I/O thread): headers once, body bytes as
 * they arrive, done exactly once. Callbacks must not block for long: they
 * hand the bytes to another thread, and pause the transfer (TM_HX_PAUSE)
 * while that thread is behind.
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
    /* Body bytes. Return 0 (taken), TM_HX_PAUSE (not taken: the transfer
     * pauses and the same bytes come again after tm_hc_unpause) or any other
     * nonzero value to abort the exchange. */
    int (*on_data)(void *ud, const char *buf, size_t len);
    /* The exchange ended: rc 0 (complete) or a negative code (TIDEMARK_EIO
     * for a failed/cut connection, TIDEMARK_ECANCELED, TIDEMARK_ETIMEDOUT).
     * error: what went wrong, for people ("Connection refused", "Could not
     * resolve host: x"), or NULL when rc is 0; valid during the call. */
    void (*on_done)(void *ud, int rc, long status, const char *error);
    /* Each response header line as received, "Name: value" without the
     * line end (may be NULL): for headers the transport does not read
     * itself (WWW-Authenticate, Location). Before on_headers. */
    void (*on_header_line)(void *ud, const char *line, size_t len);
} tm_hx_cb;

/* on_data's answer for "not now": the transfer is paused. */
#define TM_HX_PAUSE 2

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

/* Start the I/O thread. OUT hc. Servers reached over https are verified
 * against the system's CAs (peer and host name); tm_hc_new_tls names
 * others. */
int tm_hc_new(tm_hc **hc);

typedef struct tm_hc_tls {
    const char *ca_file;   /* PEM CAs to verify servers against (NULL: the system's) */
    const char *cert_file; /* PEM client certificate (mutual TLS), with key_file; or NULL */
    const char *key_file;
} tm_hc_tls;
/* tm_hc_new with TLS settings (copied; tls NULL: as tm_hc_new). Verification
 * cannot be turned off. TIDEMARK_EINVAL: a certificate without its key. */
int tm_hc_new_tls(const tm_hc_tls *tls, tm_hc **hc);
/* Start an exchange; callbacks get ud. OUT xid (optional): its id, never 0,
 * never reused, for tm_hc_cancel. */
int tm_hc_start(tm_hc *hc, const tm_hx_req *req, const tm_hx_cb *cb, void *ud, uint64_t *xid);
/* Abort an exchange if it has not ended (its on_done runs with ECANCELED).
 * Cannot fail: it flags the exchange for the I/O thread; an exchange that
 * already ended is left alone. */
void tm_hc_cancel(tm_hc *hc, uint64_t xid);
/* Resume a transfer its on_data paused (TM_HX_PAUSE): the bytes it was
 * offered come again. Cannot fail, like tm_hc_cancel. */
void tm_hc_unpause(tm_hc *hc, uint64_t xid);
/* Abort everything, stop the thread, free. */
void tm_hc_free(tm_hc *hc);

#endif
