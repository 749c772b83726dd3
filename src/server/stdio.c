/*
 * stdio.c - one client over stdio (tidemark_server_run_stdio).
 *
 * The request path (post.c, job.c, modern.c, feed.c) answers HTTP requests;
 * rather than copying it, the stdio side feeds it: the server listens on a
 * loopback port under an endpoint path of 128 random bits (nothing else on
 * the host can guess it), and each line read from in_fd is POSTed there as
 * one HTTP client would send it. Every answer - a JSON body, or the events
 * of the SSE stream a call or a listener is answered with - is written to
 * out_fd as one line. So both eras, the store, the records, recovery,
 * cancellation and listeners behave exactly as over HTTP.
 *
 * - 2025 era: the first initialize makes the process's one session (a
 *   second is refused); its Mcp-Session-Id and protocol version go on every
 *   later POST, and the session's standalone GET stream carries the
 *   server's requests and notifications that belong to no call. The
 *   client's answers to them are POSTed like any message.
 * - 2026-07-28 era: a request carrying _meta's protocol version is POSTed
 *   with the headers that mirror its body (MCP-Protocol-Version,
 *   Mcp-Method, Mcp-Name). notifications/cancelled for such a request
 *   cancels its exchange (a closed connection is how HTTP cancels).
 * - A line that is not a message (not JSON, too long, a NUL byte) is
 *   answered with a JSON-RPC error whose id is null and whose data.reason
 *   says why, and logged; the next line is read as usual.
 * Threads: the caller's thread reads in_fd; the HTTP client's I/O thread
 * writes out_fd (the writer serialises lines); a watcher thread turns
 * SIGINT/SIGTERM or tidemark_server_stop into the end of the read. No
 * json_t is shared: a message crosses to the I/O thread as its serialized
 * body plus a deep copy of its id, and the registry's tool schemas are
 * read from a copy (tm_registry_copy).
 */
#include "server_int.h"
#include "era.h"
#include "../transport/stdio.h"
#include "../transport/http_client.h"
#include "../transport/sse_parser.h"
#include "../base/buf.h"
#include "../base/log.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <gnutls/gnutls.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SB_URL_MAX 160
#define SB_INIT_WAIT_MS 60000

typedef struct sb {
    tidemark_server_t *srv;
    tm_stdio_writer *wr;
    tm_hc *hc;
    char url[SB_URL_MAX];
    pthread_mutex_t mu;       /* guards everything below */
    pthread_cond_t cv;
    char sid[TM_SESSION_ID_LEN + 1]; /* the 2025 session, once initialized */
    char pv[32];              /* its protocol version */
    int init;                 /* 0 none, 1 initialize running, 2 session made */
    int inflight;             /* exchanges not ended */
    int owed;                 /* of them, requests whose answer is owed (not listeners) */
    tm_map *live;             /* id key -> exchange (modern requests: cancel) */
    int wake[2];              /* the reader's cancel pipe */
    atomic_int quit;
} sb;

typedef struct xch {
    sb *b;
    json_t *id;               /* the request's id (NULL: notification, response, GET) */
    char idkey[TM_ID_KEY_MAX];
    int is_init, registered, sse, answered, owed;
    long status;
    char sid[TM_SESSION_ID_LEN + 1];
    tm_sse_parser *p;
    tm_buf body;
    uint64_t xid;
} xch;

static void sb_kick(sb *b)
{
    atomic_store(&b->quit, 1);
    ssize_t w = write(b->wake[1], "x", 1);
    (void)w; /* a full pipe already wakes the reader */
}

/* Write one message to the client. A gone client ends the serving. */
static int sb_emit(sb *b, const json_t *msg)
{
    int rc = tm_stdio_write(b->wr, msg);
    if (rc == TIDEMARK_ECLOSED || rc == TIDEMARK_ETIMEDOUT || rc == TIDEMARK_EIO)
        sb_kick(b);
    else if (rc)
        TM_WARN("stdio: a message could not be written: %s", tidemark_strerror(rc));
    return rc;
}

static void sb_emit_error(sb *b, json_t *id, int code, const char *message, const char *reason)
{
    json_t *e = tm_jsonrpc_error(id, code, message, reason, NULL);
    if (e && sb_emit(b, e) != 0)
        TM_DEBUG("stdio: error for the client not written");
    json_decref(e);
}

/* A message from the server for the client: its id filled in when the
 * server did not know it (an HTTP-level refusal), then written. */
static int x_deliver(xch *x, json_t *msg)
{
    if (x->id && json_is_object(msg) && json_object_get(msg, "jsonrpc") &&
        !json_object_get(msg, "method")) {
        json_t *id = json_object_get(msg, "id");
        if ((!id || json_is_null(id)) && json_object_set(msg, "id", x->id) != 0)
            TM_WARN("stdio: out of memory (an answer keeps its null id)");
        if (json_equal(json_object_get(msg, "id"), x->id))
            x->answered = 1;
    }
    if (json_is_array(msg))
        x->answered = 1;
    return sb_emit(x->b, msg);
}

static int x_on_event(void *ud, const tm_sse_event *ev)
{
    xch *x = ud;
    if (ev->data_len == 0)
        return 0; /* a priming event */
    json_t *msg = json_loadb(ev->data, ev->data_len, JSON_ALLOW_NUL, NULL);
    if (!msg) {
        TM_WARN("stdio: an event of the server's stream is not JSON");
        return 0;
    }
    int rc = x_deliver(x, msg);
    json_decref(msg);
    return rc == TIDEMARK_ECLOSED ? rc : 0;
}

static void x_on_headers(void *ud, long status, const char *ctype, const char *session_id)
{
    xch *x = ud;
    x->status = status;
    x->sse = ctype && strncmp(ctype, "text/event-stream", 17) == 0;
    if (x->is_init && session_id)
        snprintf(x->sid, sizeof x->sid, "%s", session_id);
    if (x->sse && !x->p) {
        tm_sse_callbacks cb = {.on_event = x_on_event};
        if (tm_sse_parser_new(0, TM_STDIO_DEFAULT_MAX, &cb, x, &x->p) != 0)
            x->p = NULL;
    }
}

static int x_on_data(void *ud, const char *buf, size_t len)
{
    xch *x = ud;
    if (x->sse)
        return x->p ? tm_sse_parser_feed(x->p, buf, len) : TIDEMARK_ENOMEM;
    return tm_buf_add(&x->body, buf, len);
}

static void x_free(xch *x)
{
    json_decref(x->id);
    tm_sse_parser_free(x->p);
    tm_buf_free(&x->body);
    free(x);
}

static void sb_open_get(sb *b);

/* An initialize ended: the session is made (and its stream opened) or not. */
static void x_init_done(xch *x, const json_t *resp)
{
    sb *b = x->b;
    const char *pv = json_string_value(
        json_object_get(json_object_get(resp, "result"), "protocolVersion"));
    pthread_mutex_lock(&b->mu);
    int made = x->sid[0] && pv;
    if (made) {
        snprintf(b->sid, sizeof b->sid, "%s", x->sid);
        snprintf(b->pv, sizeof b->pv, "%s", pv);
    }
    b->init = made ? 2 : 0;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (made)
        sb_open_get(b);
}

static void x_on_done(void *ud, int rc, long status, const char *error)
{
    xch *x = ud;
    sb *b = x->b;
    json_t *resp = NULL;
    if (!x->sse && x->body.len) {
        resp = json_loadb(x->body.data, x->body.len, JSON_ALLOW_NUL, NULL);
        if (resp && x_deliver(x, resp) != 0)
            TM_DEBUG("stdio: an answer was not written");
    }
    if (x->is_init)
        x_init_done(x, resp);
    json_decref(resp);
    if (x->id && !x->answered && rc != TIDEMARK_ECANCELED && !atomic_load(&b->quit)) {
        TM_WARN("stdio: a request ended without an answer (HTTP %ld, %s)", status,
                error ? error : "no body");
        sb_emit_error(b, x->id, TM_RPC_INTERNAL_ERROR, "The request ended without an answer",
                      "no_answer");
    }
    pthread_mutex_lock(&b->mu);
    if (x->registered && tm_map_get(b->live, x->idkey) == x)
        tm_map_del(b->live, x->idkey);
    b->inflight--;
    b->owed -= x->owed;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    x_free(x);
}

static const tm_hx_cb x_cb = {.on_headers = x_on_headers, .on_data = x_on_data,
                              .on_done = x_on_done};

/* "Name: value" into out; 0 or TIDEMARK_ERANGE. */
static int hdr_line(char *out, size_t n, const char *name, const char *value)
{
    int w = snprintf(out, n, "%s: %s", name, value);
    return w < 0 || (size_t)w >= n ? TIDEMARK_ERANGE : 0;
}

typedef struct hdrs {
    char l[24][1024];
    const char *v[25];
    size_t n;
} hdrs;

static int hdrs_add(hdrs *h, const char *name, const char *value)
{
    if (h->n >= 24)
        return TIDEMARK_ERANGE;
    int rc = hdr_line(h->l[h->n], sizeof h->l[h->n], name, value);
    if (rc == 0)
        h->v[h->n] = h->l[h->n], h->n++;
    return rc;
}

/* "Name: =?base64?...?=" (any text survives the sentinel form). */
static int hdrs_add_b64(hdrs *h, const char *name, const char *value, size_t len)
{
    if (h->n >= 24)
        return TIDEMARK_ERANGE;
    gnutls_datum_t in = {(unsigned char *)value, (unsigned)len}, enc = {NULL, 0};
    if (gnutls_base64_encode2(&in, &enc) < 0)
        return TIDEMARK_ENOMEM;
    char *o = h->l[h->n];
    int w = snprintf(o, sizeof h->l[h->n], "%s: =?base64?%.*s?=", name, (int)enc.size,
                     (const char *)enc.data);
    gnutls_free(enc.data);
    if (w < 0 || (size_t)w >= sizeof h->l[h->n])
        return TIDEMARK_ERANGE;
    h->v[h->n] = o, h->n++;
    return 0;
}

/* Mcp-Param-<suffix> for every argument the tool's schema annotates with
 * x-mcp-header (the properties chain, as era.c checks it). */
static int params_headers(hdrs *h, const json_t *schema, const json_t *args, int depth)
{
    const char *k;
    json_t *p;
    if (depth > 8 || !json_is_object(args))
        return 0;
    json_object_foreach(json_object_get(schema, "properties"), k, p) {
        const json_t *val = json_object_get(args, k);
        const char *suffix = json_string_value(json_object_get(p, "x-mcp-header"));
        char name[160], num[32];
        int rc = 0;
        if (!val || json_is_null(val))
            continue;
        if (!suffix) {
            rc = params_headers(h, p, val, depth + 1);
        } else {
            snprintf(name, sizeof name, "Mcp-Param-%s", suffix);
            double d = json_is_real(val) ? json_real_value(val) : 0;
            if (json_is_string(val))
                rc = hdrs_add_b64(h, name, json_string_value(val), json_string_length(val));
            else if (json_is_boolean(val))
                rc = hdrs_add(h, name, json_is_true(val) ? "true" : "false");
            else if (json_is_integer(val) || (json_is_real(val) && d > -9.2e18 && d < 9.2e18)) {
                snprintf(num, sizeof num, "%lld",
                         json_is_integer(val) ? (long long)json_integer_value(val) : (long long)d);
                rc = hdrs_add(h, name, num);
            }
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Mcp-Name (tools/call, prompts/get, resources/read) and a tool's
 * Mcp-Param-* headers. */
static int name_headers(sb *b, hdrs *h, const char *method, const json_t *params)
{
    int tool = strcmp(method, "tools/call") == 0;
    const json_t *v = json_object_get(params, strcmp(method, "resources/read") == 0 ? "uri" : "name");
    if ((!tool && strcmp(method, "prompts/get") != 0 && strcmp(method, "resources/read") != 0) ||
        !json_is_string(v))
        return 0;
    int rc = hdrs_add_b64(h, "Mcp-Name", json_string_value(v), json_string_length(v));
    tm_reg_entry e;
    /* A copy: the registry's value is the server threads' too (see x_new). */
    if (rc || !tool || tm_registry_copy(b->srv->reg, TM_REG_TOOL, json_string_value(v), &e) != 0)
        return rc;
    rc = params_headers(h, json_object_get(e.desc, "inputSchema"),
                        json_object_get(params, "arguments"), 0);
    json_decref(e.desc);
    return rc;
}

/* The headers of a POST of msg: a 2026-07-28 request's mirror of its body,
 * or the 2025 session's. */
static int post_headers(sb *b, const json_t *msg, int modern, hdrs *h)
{
    int rc = hdrs_add(h, "Content-Type", "application/json");
    if (rc == 0)
        rc = hdrs_add(h, "Accept", "application/json, text/event-stream");
    if (rc == 0 && modern) {
        const char *method = json_string_value(json_object_get(msg, "method"));
        rc = hdrs_add(h, "MCP-Protocol-Version", tm_era_body_version(msg));
        if (rc == 0 && method)
            rc = hdrs_add(h, "Mcp-Method", method);
        if (rc == 0 && method)
            rc = name_headers(b, h, method, json_object_get(msg, "params"));
    } else if (rc == 0) {
        pthread_mutex_lock(&b->mu);
        if (b->init == 2)
            rc = hdrs_add(h, "Mcp-Session-Id", b->sid);
        if (rc == 0 && b->init == 2)
            rc = hdrs_add(h, "MCP-Protocol-Version", b->pv);
        pthread_mutex_unlock(&b->mu);
    }
    h->v[h->n] = NULL;
    return rc;
}

/* Start one exchange for x (owned from here on). */
static int sb_start(sb *b, xch *x, const tm_hx_req *req)
{
    pthread_mutex_lock(&b->mu);
    b->inflight++;
    b->owed += x->owed;
    pthread_mutex_unlock(&b->mu);
    int rc = tm_hc_start(b->hc, req, &x_cb, x, &x->xid);
    if (rc) {
        pthread_mutex_lock(&b->mu);
        b->inflight--;
        b->owed -= x->owed;
        pthread_mutex_unlock(&b->mu);
        x_free(x);
    }
    return rc;
}

/* The exchange's id is its own deep copy, not a reference into the read
 * message: the I/O thread uses and frees it while the reader frees the
 * message. A value whose reference count two threads change is a data race
 * (jansson.h's json_incref/json_decref read the count with a plain load, and
 * the last decref of a child runs unseen inside libjansson). */
static xch *x_new(sb *b, const json_t *id)
{
    xch *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->b = b;
    x->id = id ? json_deep_copy(id) : NULL;
    if (id && !x->id) {
        free(x);
        return NULL;
    }
    tm_buf_init(&x->body, TM_STDIO_DEFAULT_MAX);
    return x;
}

/* The session's standalone stream: the server's requests and
 * notifications outside any call. */
static void sb_open_get(sb *b)
{
    hdrs h = {0};
    pthread_mutex_lock(&b->mu);
    int rc = hdrs_add(&h, "Accept", "text/event-stream");
    if (rc == 0)
        rc = hdrs_add(&h, "Mcp-Session-Id", b->sid);
    if (rc == 0)
        rc = hdrs_add(&h, "MCP-Protocol-Version", b->pv);
    pthread_mutex_unlock(&b->mu);
    h.v[h.n] = NULL;
    xch *x = rc == 0 ? x_new(b, NULL) : NULL;
    tm_hx_req req = {.method = "GET", .url = b->url, .headers = h.v};
    if (!x || sb_start(b, x, &req) != 0)
        TM_WARN("stdio: the session's stream could not be opened");
}

/* POST msg (borrowed). The id of a request is what an answer is owed to;
 * a modern request is kept by id so notifications/cancelled can end it. */
static int sb_post(sb *b, const json_t *msg, const json_t *id, int modern, int is_init)
{
    hdrs h = {0};
    int rc = post_headers(b, msg, modern, &h);
    char *body = rc == 0 ? tm_jsonrpc_dump(msg, NULL) : NULL;
    xch *x = body ? x_new(b, id) : NULL;
    if (!x) {
        free(body);
        return rc ? rc : TIDEMARK_ENOMEM;
    }
    x->is_init = is_init;
    const char *method = json_string_value(json_object_get(msg, "method"));
    x->owed = id && method && strcmp(method, "subscriptions/listen") != 0;
    if (modern && id && tm_jsonrpc_id_key(id, x->idkey, sizeof x->idkey) == 0) {
        pthread_mutex_lock(&b->mu);
        x->registered = !tm_map_get(b->live, x->idkey) && tm_map_put(b->live, x->idkey, x) == 0;
        pthread_mutex_unlock(&b->mu);
    }
    tm_hx_req req = {.method = "POST", .url = b->url, .headers = h.v, .body = body,
                     .body_len = strlen(body), .fresh_connection = 1};
    int registered = x->registered;
    char key[TM_ID_KEY_MAX];
    snprintf(key, sizeof key, "%s", x->idkey);
    rc = sb_start(b, x, &req); /* x is the exchange's from here on */
    free(body);
    if (rc && registered) {
        pthread_mutex_lock(&b->mu);
        tm_map_del(b->live, key);
        pthread_mutex_unlock(&b->mu);
    }
    return rc;
}

/* notifications/cancelled of a modern request: end its exchange (as a
 * closed connection ends it on HTTP). 1 when it was one. */
static int sb_cancel_modern(sb *b, const json_t *params)
{
    char key[TM_ID_KEY_MAX];
    const json_t *rid = json_object_get(params, "requestId");
    if (!rid || tm_jsonrpc_id_key(rid, key, sizeof key) != 0)
        return 0;
    pthread_mutex_lock(&b->mu);
    xch *x = tm_map_get(b->live, key);
    uint64_t xid = x ? x->xid : 0;
    pthread_mutex_unlock(&b->mu);
    if (xid)
        tm_hc_cancel(b->hc, xid);
    return xid != 0;
}

static int init_settled(const sb *b)
{
    return b->init != 1;
}

static int nothing_owed(const sb *b)
{
    return b->owed <= 0;
}

/* Wait (under mu, at most ms) until done(b) or a stop. 0 or TIDEMARK_ETIMEDOUT. */
static int sb_wait(sb *b, int ms, int (*done)(const sb *))
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    while (!done(b) && !atomic_load(&b->quit) && rc == 0)
        rc = pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    rc = done(b) ? 0 : TIDEMARK_ETIMEDOUT;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* initialize: the process's one session. Later messages wait for it. */
static int sb_initialize(sb *b, const json_t *msg, const json_t *id)
{
    pthread_mutex_lock(&b->mu);
    int had = b->init;
    if (!had)
        b->init = 1;
    pthread_mutex_unlock(&b->mu);
    if (had) {
        sb_emit_error(b, (json_t *)id, TM_RPC_INVALID_REQUEST,
                      "Invalid Request: this stdio server's session is already initialized",
                      "already_initialized");
        return 0;
    }
    int rc = sb_post(b, msg, id, 0, 1);
    if (rc) {
        pthread_mutex_lock(&b->mu);
        b->init = 0;
        pthread_mutex_unlock(&b->mu);
        return rc;
    }
    if (sb_wait(b, SB_INIT_WAIT_MS, init_settled) != 0 && !atomic_load(&b->quit))
        TM_WARN("stdio: initialize not answered in %d ms", SB_INIT_WAIT_MS);
    return 0;
}

/* One message read from the client. */
static int sb_message(sb *b, const json_t *msg)
{
    if (json_is_array(msg))
        return sb_post(b, msg, NULL, 0, 0); /* a 2025-03-26 batch */
    const json_t *idv = json_object_get(msg, "id");
    const char *method = json_string_value(json_object_get(msg, "method"));
    const json_t *id = idv && !json_is_null(idv) ? idv : NULL;
    int modern = tm_era_modern(NULL, msg);
    if (method && id && !modern && strcmp(method, "initialize") == 0)
        return sb_initialize(b, msg, id);
    if (method && !id && strcmp(method, "notifications/cancelled") == 0 &&
        sb_cancel_modern(b, json_object_get(msg, "params")))
        return 0;
    if (method && id)
        return sb_post(b, msg, id, modern, 0);
    pthread_mutex_lock(&b->mu);
    int have = b->init == 2;
    pthread_mutex_unlock(&b->mu);
    if (!have && !modern) { /* a notification or answer without a session to go to */
        TM_DEBUG("stdio: %s dropped: no session", method ? method : "a response");
        return 0;
    }
    return sb_post(b, msg, NULL, modern, 0);
}

/* A line that is no message: answered without an id, logged, skipped. */
static void sb_bad_line(sb *b, tm_stdio_reader *rd, int rc)
{
    const char *why = tm_stdio_reader_why(rd);
    TM_WARN("stdio: line refused (%s%s%s)", why, *tm_stdio_reader_detail(rd) ? ": " : "",
            tm_stdio_reader_detail(rd));
    int code = rc == TIDEMARK_ERANGE || strcmp(why, "not_a_message") == 0 ? TM_RPC_INVALID_REQUEST
                                                                         : TM_RPC_PARSE_ERROR;
    const char *text = rc == TIDEMARK_ERANGE ? "Invalid Request: the line is over the message limit"
                       : code == TM_RPC_PARSE_ERROR ? "Parse error"
                                                    : "Invalid Request: not a JSON-RPC message";
    sb_emit_error(b, NULL, code, text, why);
}

/* Read until end of input, a stop, or a gone client. */
static int sb_read_loop(sb *b, tm_stdio_reader *rd)
{
    for (;;) {
        json_t *msg = NULL;
        int rc = tm_stdio_read(rd, &msg);
        if (atomic_load(&b->quit)) {
            json_decref(msg);
            return 0;
        }
        if (rc == TIDEMARK_ERANGE || rc == TIDEMARK_EPROTO) {
            sb_bad_line(b, rd, rc);
            continue;
        }
        if (rc == TIDEMARK_ECLOSED || rc == TIDEMARK_ECANCELED)
            return 0;
        if (rc)
            return rc;
        rc = sb_message(b, msg);
        const json_t *id = json_object_get(msg, "id");
        if (rc) /* its headers do not fit, out of memory, stopping */
            TM_WARN("stdio: a message could not be handed on: %s", tidemark_strerror(rc));
        if (rc && id && !json_is_null(id) && json_object_get(msg, "method"))
            sb_emit_error(b, (json_t *)id, TM_RPC_INTERNAL_ERROR, tidemark_strerror(rc),
                          rc == TIDEMARK_ERANGE ? "header_too_long" : "internal_error");
        json_decref(msg);
    }
}

/* End of input: the answers still owed are waited for (bounded: a call
 * waiting for the client's answer can no longer get one). */
static void sb_drain(sb *b, int ms)
{
    if (sb_wait(b, ms, nothing_owed) != 0 && !atomic_load(&b->quit))
        TM_WARN("stdio: input ended with request(s) unanswered after %d ms", ms);
}

typedef struct watch {
    sb *b;
    sigset_t set;
    atomic_int done;
} watch;

/* SIGINT/SIGTERM or tidemark_server_stop end the read. */
static void *watcher(void *arg)
{
    watch *w = arg;
    while (!atomic_load(&w->done)) {
        struct timespec ts = {0, 100 * 1000000L};
        int sig = sigtimedwait(&w->set, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM)
            TM_INFO("signal %d: stopping", sig);
        if (sig == SIGINT || sig == SIGTERM || !atomic_load(&w->b->srv->running)) {
            sb_kick(w->b);
            break;
        }
    }
    return NULL;
}

/* The loopback endpoint the stdio side feeds: a free port, a random path. */
static int sb_bind_loopback(tidemark_server_t *srv)
{
    char hex[33], path[40];
    int rc = tm_random_hex(hex, 16);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "/stdio-%s", hex);
    char *p = strdup(path), *h = strdup("127.0.0.1");
    if (!p || !h) {
        free(p);
        free(h);
        return TIDEMARK_ENOMEM;
    }
    free(srv->path);
    free(srv->host);
    srv->path = p;
    srv->host = h;
    srv->cfg.port = 0;
    if (srv->hosts) { /* the Host our own requests carry */
        for (char **e = srv->hosts; *e; e++)
            free(*e);
        free(srv->hosts);
        srv->hosts = NULL;
    }
    return 0;
}

static int sb_init(sb *b, tidemark_server_t *srv, int out_fd)
{
    memset(b, 0, sizeof *b);
    b->srv = srv;
    b->wake[0] = b->wake[1] = -1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (!(b->live = tm_map_new()))
        return TIDEMARK_ENOMEM;
    if (pipe(b->wake) != 0)
        return TIDEMARK_EIO;
    int rc = tm_stdio_writer_new(out_fd, 0, 0, &b->wr);
    if (rc == 0)
        rc = tm_hc_new(&b->hc);
    if (rc == 0)
        snprintf(b->url, sizeof b->url, "http://127.0.0.1:%u%s", tidemark_server_port(srv),
                 srv->path);
    return rc;
}

static void sb_fini(sb *b)
{
    atomic_store(&b->quit, 1);
    tm_hc_free(b->hc); /* every exchange ends (cancelled) before this returns */
    tm_stdio_writer_free(b->wr);
    tm_map_free(b->live);
    for (int i = 0; i < 2; i++)
        if (b->wake[i] >= 0)
            close(b->wake[i]);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

/* Serve with the server started: read until the end, then let go. */
static int sb_serve(tidemark_server_t *srv, int in_fd, int out_fd, const sigset_t *set)
{
    sb b;
    tm_stdio_reader *rd = NULL;
    int rc = sb_init(&b, srv, out_fd);
    if (rc == 0)
        rc = tm_stdio_reader_new(in_fd, 0, b.wake[0], &rd);
    watch w = {.b = &b, .set = *set};
    pthread_t wt;
    int wstarted = rc == 0 && pthread_create(&wt, NULL, watcher, &w) == 0;
    if (rc == 0 && !wstarted)
        rc = TIDEMARK_ENOMEM;
    if (rc == 0) {
        TM_INFO("serving one client on stdio");
        rc = sb_read_loop(&b, rd);
        sb_drain(&b, 10000);
    }
    atomic_store(&w.done, 1);
    sb_kick(&b);
    if (wstarted)
        pthread_join(wt, NULL);
    tm_stdio_reader_free(rd);
    if (b.live)
        sb_fini(&b);
    return rc;
}

int tidemark_server_run_stdio(tidemark_server_t *srv, int in_fd, int out_fd)
{
    if (!srv || in_fd < 0 || out_fd < 0)
        return TIDEMARK_EINVAL;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* the server's threads inherit it */
    int rc = atomic_load(&srv->running) ? TIDEMARK_EBUSY : 0;
    if (rc == 0 && (srv->auth || srv->tls_cert)) {
        /* Both are HTTP's: a stdio client is the process that started us. */
        TM_ERROR("stdio: authorization and TLS apply to HTTP only; not with stdio");
        rc = TIDEMARK_EINVAL;
    }
    if (rc == 0)
        rc = sb_bind_loopback(srv);
    if (rc == 0)
        rc = tidemark_server_start(srv);
    if (rc == 0)
        rc = sb_serve(srv, in_fd, out_fd, &set);
    tidemark_server_stop(srv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
