/*
 * exchange.c - the HTTP exchanges of a request.
 *
 * The callbacks at the top run on the I/O thread and only record what
 * arrived (under c->mu) and wake the request's driver; everything that
 * reads what arrived - the SSE parser, the validator, the application's
 * callbacks - runs on the driver, from tm_exchange_read().
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- on the I/O thread ------------------------------------------------------------ */

static void x_sent(void *ud)
{
    rq *r = ud;
    tidemark_client_t *c = r->c;
    pthread_mutex_lock(&c->mu);
    r->io.connected = 1;
    if (!r->io.is_get)
        r->sent = 1; /* from now on the server may have received it */
    if (r->listen) {
        c->standalone_open = 1; /* requested: servers may hold the headers back */
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static void x_headers(void *ud, long status, const char *ctype, const char *sid)
{
    rq *r = ud;
    tidemark_client_t *c = r->c;
    int sse = ctype && strncasecmp(ctype, "text/event-stream", 17) == 0;
    pthread_mutex_lock(&c->mu);
    r->io.headers = 1;
    r->io.status = status;
    r->io.sse = sse;
    if (r->listen && !(status == 200 && sse)) {
        c->standalone_open = 0;
        pthread_cond_broadcast(&c->cv);
    }
    if (sid && !c->session && !r->modern) /* c->session is read and freed by other threads: only under c->mu */
        c->session = strdup(sid); /* NULL when memory is short: the next answer brings it again */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&c->mu);
}

static int x_data(void *ud, const char *buf, size_t len)
{
    rq *r = ud;
    tidemark_client_t *c = r->c;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (r->io.abandon) {
        rc = 1;
    } else if (r->io.in.len >= TM_CLIENT_INBOX_MAX) {
        r->io.paused = 1; /* the driver is behind: resumed once it took the inbox */
        rc = TM_HX_PAUSE;
    } else if (tm_buf_add(&r->io.in, buf, len) != 0) {
        rc = 1;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void x_header_line(void *ud, const char *line, size_t len)
{
    static const char name[] = "www-authenticate:";
    rq *r = ud;
    if (len <= sizeof name - 1 || strncasecmp(line, name, sizeof name - 1) != 0)
        return;
    tidemark_client_t *c = r->c;
    pthread_mutex_lock(&c->mu);
    if (!r->io.www_auth) /* the first challenge is the one read */
        r->io.www_auth = strndup(line + sizeof name - 1, len - (sizeof name - 1));
    pthread_mutex_unlock(&c->mu);
}

static void x_done(void *ud, int rc, long status, const char *error)
{
    rq *r = ud;
    tidemark_client_t *c = r->c;
    pthread_mutex_lock(&c->mu);
    if (r->listen) {
        c->standalone_open = 0;
        pthread_cond_broadcast(&c->cv);
    }
    r->io.done = 1;
    r->io.rc = rc;
    r->io.end_status = status;
    snprintf(r->io.error, sizeof r->io.error, "%s", error ? error : "");
    r->x = 0; /* last: the driver may free r once x is 0 */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&c->mu);
}

static const tm_hx_cb rq_callbacks = {x_sent, x_headers, x_data, x_done, x_header_line};

/* ---- starting and ending exchanges (on the driver) -------------------------------------- */

/* Headers for an exchange into h (r NULL: a message of no request).
 * Returns whether a session id went with them; negative when memory ran out. */
static int make_headers(tidemark_client_t *c, rq *r, const char *accept, const char *last_id,
                        tm_hdrs *h)
{
    int with_session = 0, rc = 0;
    char line[512];
    h->n = 0;
    h->v[0] = NULL;
    rc |= tm_hdrs_add(h, accept);
    if (strcmp(accept, "Accept: text/event-stream") != 0)
        rc |= tm_hdrs_add(h, "Content-Type: application/json");
    pthread_mutex_lock(&c->mu);
    int modern = r ? r->modern : c->modern;
    line[0] = '\0';
    if (c->session && !modern) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", c->session);
        with_session = 1;
    }
    char pv[128] = "";
    if (c->proto || modern)
        snprintf(pv, sizeof pv, "MCP-Protocol-Version: %s",
                 c->proto ? c->proto : TIDEMARK_CLIENT_MODERN_VERSION);
    pthread_mutex_unlock(&c->mu);
    if (line[0])
        rc |= tm_hdrs_add(h, line);
    if (pv[0])
        rc |= tm_hdrs_add(h, pv);
    pthread_mutex_lock(&c->mu);
    char *auth = NULL;
    if (c->auth_token && asprintf(&auth, "Authorization: Bearer %s", c->auth_token) < 0)
        auth = NULL, rc |= TIDEMARK_ENOMEM;
    pthread_mutex_unlock(&c->mu);
    if (auth)
        rc |= tm_hdrs_add(h, auth);
    free(auth);
    if (last_id && !modern) {
        snprintf(line, sizeof line, "Last-Event-ID: %s", last_id);
        rc |= tm_hdrs_add(h, line);
    }
    if (modern && r && r->msg)
        rc |= tm_modern_headers(c, r, h);
    return rc ? TIDEMARK_ENOMEM : with_session;
}

/* Fresh state for r's next exchange. */
static void exchange_reset(tidemark_client_t *c, rq *r, int is_get)
{
    r->status = 0;
    r->sse = 0;
    r->is_get = is_get;
    r->progressed = 0;
    r->abandoned = 0;
    tm_buf_reset(&r->body);
    tm_buf_reset(&r->chunk);
    pthread_mutex_lock(&c->mu);
    tm_buf_reset(&r->io.in);
    r->io.is_get = is_get;
    r->io.connected = r->io.headers = r->io.paused = r->io.abandon = r->io.done = 0;
    r->io.status = r->io.end_status = 0;
    r->io.sse = r->io.rc = 0;
    r->io.error[0] = '\0';
    free(r->io.www_auth);
    r->io.www_auth = NULL;
    pthread_mutex_unlock(&c->mu);
    r->auth_status = 0;
}

/* Start r's exchange; r->x is set before any callback can clear it. */
static int start_exchange(tidemark_client_t *c, rq *r, const tm_hx_req *req)
{
    pthread_mutex_lock(&c->mu);
    r->x = UINT64_MAX; /* "starting": not 0, so waiters wait */
    pthread_mutex_unlock(&c->mu);
    uint64_t xid = 0;
    int rc = tm_hc_start(c->hc, req, &rq_callbacks, r, &xid);
    pthread_mutex_lock(&c->mu);
    if (rc)
        r->x = 0;
    else if (r->x == UINT64_MAX)
        r->x = xid;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tm_is_tools_call(json_t *msg)
{
    const char *method = json_string_value(json_object_get(msg, "method"));
    return method && strcmp(method, "tools/call") == 0;
}

int tm_start_post(tidemark_client_t *c, rq *r)
{
    if (r->modern && tm_modern_meta(c, r) != 0)
        return TIDEMARK_ENOMEM;
    size_t len;
    char *body = tm_jsonrpc_dump(r->msg, &len);
    if (!body)
        return TIDEMARK_ENOMEM;
    tm_hdrs h;
    exchange_reset(c, r, 0);
    int hs = make_headers(c, r, "Accept: application/json, text/event-stream", NULL, &h);
    if (hs < 0) {
        tm_hdrs_free(&h);
        free(body);
        return hs;
    }
    r->had_session = hs;
    /* A call goes out once per decision of ours: never on a reused
     * connection, where libcurl would re-send it by itself after a cut. */
    tm_hx_req req = {.method = "POST", .url = c->url, .headers = h.v, .body = body, .body_len = len,
                     .fresh_connection = tm_is_tools_call(r->msg)};
    int rc = start_exchange(c, r, &req);
    tm_hdrs_free(&h);
    free(body);
    return rc;
}

int tm_start_get(tidemark_client_t *c, rq *r)
{
    tm_hdrs h;
    exchange_reset(c, r, 1);
    int hs = make_headers(c, r, "Accept: text/event-stream", r->have_id ? r->last_id : NULL, &h);
    r->had_session = hs > 0;
    tm_hx_req req = {.method = "GET", .url = c->url, .headers = h.v};
    int rc = hs < 0 ? hs : start_exchange(c, r, &req);
    tm_hdrs_free(&h);
    return rc;
}

/* A fire-and-forget POST: only its outcome is logged (on the I/O thread). */
static void f_done(void *ud, int rc, long status, const char *error)
{
    (void)ud;
    if (rc || status >= 300)
        TM_WARN("posting a response to the server failed (status %ld%s%s)", status,
                error ? ": " : "", error ? error : "");
}

int tm_post_message(tidemark_client_t *c, json_t *msg)
{
    size_t len;
    char *body = tm_jsonrpc_dump(msg, &len);
    if (!body)
        return TIDEMARK_ENOMEM;
    tm_hdrs h;
    int hs = make_headers(c, NULL, "Accept: application/json, text/event-stream", NULL, &h);
    tm_hx_req req = {.method = "POST", .url = c->url, .headers = h.v, .body = body, .body_len = len,
                     .timeout_ms = c->cfg.timeout_ms};
    static const tm_hx_cb cb = {.on_done = f_done};
    int rc = hs < 0 ? hs : tm_hc_start(c->hc, &req, &cb, NULL, NULL);
    tm_hdrs_free(&h);
    free(body);
    return rc;
}

void tm_end_exchange(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    r->io.abandon = 1;
    if (r->x && r->x != UINT64_MAX)
        tm_hc_cancel(c->hc, r->x);
    while (r->x) {
        struct timespec ts = tm_deadline_ms(100);
        (void)pthread_cond_timedwait(&r->cv, &c->mu, &ts); /* x is checked again */
    }
    pthread_mutex_unlock(&c->mu);
}

/* Stop reading r's exchange: its end still comes (cancelled). */
static void abandon(tidemark_client_t *c, rq *r)
{
    r->abandoned = 1;
    pthread_mutex_lock(&c->mu);
    r->io.abandon = 1;
    if (r->x && r->x != UINT64_MAX)
        tm_hc_cancel(c->hc, r->x);
    pthread_mutex_unlock(&c->mu);
}

/* ---- reading what arrived (on the driver) ------------------------------------------------ */

int tm_exchange_pending_locked(const rq *r)
{
    return r->io.headers || r->io.in.len || r->io.done == 1;
}

/* What the I/O thread left, taken at once (the bytes into r->chunk). */
typedef struct xtake {
    int headers, sse, paused, done, rc, connected;
    long status, end_status;
    uint64_t x;
    char error[160];
} xtake;

static void take_locked(rq *r, xtake *t)
{
    t->headers = r->io.headers;
    r->io.headers = 0;
    t->status = r->io.status;
    t->sse = r->io.sse;
    tm_buf spare = r->chunk; /* empty: read to its end last time */
    r->chunk = r->io.in;
    r->io.in = spare;
    t->paused = r->io.paused;
    r->io.paused = 0;
    t->done = r->io.done == 1;
    if (t->done)
        r->io.done = 2;
    t->rc = r->io.rc;
    t->end_status = r->io.end_status;
    t->connected = r->io.connected;
    memcpy(t->error, r->io.error, sizeof t->error);
    t->x = r->x;
}

/* Response headers: an event stream gets a parser (kept across its
 * reconnects: it holds the last event id). */
static int on_headers(rq *r, long status, int sse)
{
    r->status = status;
    r->sse = sse;
    if (!sse)
        return 0;
    if (!r->parser) {
        int rc = tm_sse_parser_new(0, 0, &tm_client_sse_callbacks, r, &r->parser);
        if (rc) {
            tm_rq_fail(r, rc, "out_of_memory", "cannot read the event stream", NULL);
            return rc;
        }
    } else {
        tm_sse_parser_reset(r->parser);
    }
    tm_held_clear(r); /* a new connection says again what is durable */
    r->early = 0;
    r->durable = 0;
    return 0;
}

/* Body bytes: into the SSE parser (which dispatches events) or the body.
 * Returns nonzero to stop reading the exchange. */
static int on_bytes(rq *r, const char *buf, size_t len)
{
    if (r->sse && r->status == 200)
        return r->parser && tm_sse_parser_feed(r->parser, buf, len) != 0;
    return tm_buf_add(&r->body, buf, len) != 0;
}

static void exchange_over(tidemark_client_t *c, rq *r, const xtake *t);

void tm_exchange_read(tidemark_client_t *c, rq *r)
{
    xtake t;
    pthread_mutex_lock(&c->mu);
    take_locked(r, &t);
    pthread_mutex_unlock(&c->mu);
    if (t.headers && !r->abandoned && on_headers(r, t.status, t.sse) != 0)
        abandon(c, r);
    if (r->chunk.len && !r->abandoned && on_bytes(r, r->chunk.data, r->chunk.len) != 0)
        abandon(c, r);
    tm_buf_reset(&r->chunk);
    if (t.paused && !r->abandoned && t.x && t.x != UINT64_MAX)
        tm_hc_unpause(c->hc, t.x);
    if (t.done)
        exchange_over(c, r, &t);
}

/* ---- the end of an exchange (on the driver) ---------------------------------------------- */

static void x_session_lost(tidemark_client_t *c, rq *r)
{
    json_t *e = NULL;
    tm_client_error(&e, TM_RPC_SESSION_NOT_FOUND, "session_lost",
                    "the server no longer knows the session", NULL);
    pthread_mutex_lock(&c->mu);
    c->session_lost = 1;
    tm_rq_finish_locked(r, TIDEMARK_ENOTFOUND, e);
    pthread_mutex_unlock(&c->mu);
    r->final = 1; /* nothing of the session can be resumed */
}

/* A 404 to a request that carried no session: nothing at the URL speaks MCP. */
static void x_no_endpoint(tidemark_client_t *c, rq *r, long status)
{
    char msg[512];
    snprintf(msg, sizeof msg, "no MCP endpoint at %s (HTTP %ld)", c->url, status);
    tm_rq_fail_final(r, TIDEMARK_ENOTFOUND, "no_endpoint", msg,
                     json_pack("{s:s,s:i}", "url", c->url, "status", (int)status));
}

/* A JSON answer to r's POST: its response, or an error without one. */
static void x_json_answer(tidemark_client_t *c, rq *r)
{
    json_t *v = json_loadb(r->body.data, r->body.len, 0, NULL);
    tm_buf_reset(&r->body);
    if (v)
        tm_deliver(c, r, v);
    json_decref(v);
    pthread_mutex_lock(&c->mu);
    if (r->phase != RQ_DONE)
        tm_rq_finish_locked(r, TIDEMARK_EPROTO, NULL);
    pthread_mutex_unlock(&c->mu);
}

static void x_http_error(tidemark_client_t *c, rq *r, long status)
{
    json_t *v = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, NULL);
    tm_buf_reset(&r->body);
    json_t *err = json_incref(json_object_get(v, "error"));
    json_decref(v);
    if (!err) {
        char msg[128];
        snprintf(msg, sizeof msg, "the server answered HTTP %ld", status);
        tm_client_error(&err, TM_RPC_INTERNAL_ERROR, "http_error", msg,
                        json_pack("{s:i}", "status", (int)status));
    }
    pthread_mutex_lock(&c->mu);
    tm_rq_finish_locked(r, TIDEMARK_EPEER, err);
    pthread_mutex_unlock(&c->mu);
    /* A 4xx refused the request itself: final. A 5xx may come from a proxy
     * with no server behind it, or from a server that recorded nothing: the
     * call stays outstanding, and a resume sends it again (under its key or
     * id, so it runs once). A refused resume (GET) may be retried anyway. */
    r->final = !r->is_get && status < 500;
}

/* A resume answered with a body that is not an event stream: whatever it
 * says carries no id, so nothing proves it continues the stream. */
static void x_not_a_stream(rq *r, long status)
{
    TM_WARN("stream %s: continuity_lost: the resume from %s was answered %ld without an event "
            "stream", r->stream_key, r->last_id, status);
    tm_buf_reset(&r->body);
    tm_rq_fail(r, TIDEMARK_EPROTO, "continuity_lost", "the resume was answered without an event stream",
               json_pack("{s:s,s:i}", "last_event_id", r->last_id, "status", (int)status));
}

/* A resume refused only because the server still holds the stream on an
 * earlier connection (typically that of a killed client, until the server
 * notices its peer is gone): transient, and a GET repeats nothing. */
static int still_attached(rq *r, long status)
{
    if (!r->is_get || status != 409 || !r->body.len)
        return 0;
    json_t *v = json_loadb(r->body.data, r->body.len, 0, NULL);
    const char *why = json_string_value(
        json_object_get(json_object_get(json_object_get(v, "error"), "data"), "reason"));
    int yes = why && strcmp(why, "stream_attached") == 0;
    json_decref(v);
    return yes;
}

/* A 2xx answer with a body that is not an event stream. */
static void x_plain_answer(tidemark_client_t *c, rq *r, long status)
{
    if (r->is_get && r->have_id) {
        x_not_a_stream(r, status);
    } else if (!r->is_get) {
        x_json_answer(c, r);
    } else {
        pthread_mutex_lock(&c->mu); /* a listen answered without a stream: it ends */
        tm_rq_finish_locked(r, 0, json_object());
        pthread_mutex_unlock(&c->mu);
    }
}

/* The stream ended (or was cut, or is still held elsewhere) before the
 * response: reconnect, within the attempt budget. */
static void x_cut(tidemark_client_t *c, rq *r)
{
    tm_buf_reset(&r->body);
    if (r->parser && tm_sse_parser_finish(r->parser) != 0)
        TM_DEBUG("stream %s: the cut stream ended inside an event or a line", r->stream_key);
    pthread_mutex_lock(&c->mu);
    r->phase = RQ_RECONNECT;
    pthread_mutex_unlock(&c->mu);
}

/* What an exchange that never reached a connection says, kept for the
 * request's error should it end that way. */
static void note_reachability(rq *r, const xtake *t)
{
    r->unreachable = t->rc != 0 && t->rc != TIDEMARK_ECANCELED && !t->connected;
    if (r->unreachable)
        snprintf(r->unreachable_why, sizeof r->unreachable_why, "%s",
                 t->error[0] ? t->error : "no connection");
}

static void exchange_over(tidemark_client_t *c, rq *r, const xtake *t)
{
    int rc = r->abandoned && t->rc == TIDEMARK_ECANCELED ? TIDEMARK_EIO : t->rc;
    long status = t->end_status;
    note_reachability(r, t);
    pthread_mutex_lock(&c->mu);
    int done = r->phase == RQ_DONE;
    pthread_mutex_unlock(&c->mu);
    if (done)
        return;
    if ((status == 401 || status == 403) && !r->sse) {
        pthread_mutex_lock(&c->mu); /* authorization is for the driver to attempt */
        free(r->auth_challenge);
        r->auth_challenge = r->io.www_auth;
        r->io.www_auth = NULL;
        pthread_mutex_unlock(&c->mu);
        r->auth_status = status;
        x_http_error(c, r, status);
        return;
    }
    if (status == 404 && !r->sse && r->modern && r->body.len) {
        x_http_error(c, r, status); /* a modern server's -32601: the method, not the URL */
        return;
    }
    if (status == 404 && !r->sse) {
        if (r->had_session)
            x_session_lost(c, r);
        else
            x_no_endpoint(c, r, status);
        return;
    }
    int ok2xx = !r->sse && rc == 0 && status >= 200 && status < 300;
    int expects_answer = r->msg && json_object_get(r->msg, "id") && json_object_get(r->msg, "method");
    if (ok2xx && !expects_answer && !r->is_get) {
        /* A POST carrying a notification or a response is accepted by any
         * 2xx; a body, if any, means nothing. */
        pthread_mutex_lock(&c->mu);
        tm_rq_finish_locked(r, 0, json_object());
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* An answer has a body. A 202 or an empty 2xx is none: libcurl reports
     * a response cut inside its headers as a complete 200 with no body
     * (measured, 7.88), so it is taken as the cut it may be. */
    if (ok2xx && status != 202 && r->body.len > 0) {
        x_plain_answer(c, r, status);
        return;
    }
    if (!r->sse && status >= 400 && !still_attached(r, status)) {
        x_http_error(c, r, status);
        return;
    }
    x_cut(c, r);
}
