/*
 * stdio.c - one client over stdio (tidemark_server_run_stdio): the stdio
 * adapter of the request path (request.h). No socket: each line read is
 * parsed into a tm_req and handed to the core (tm_handle_request) on the
 * reading thread, as the HTTP adapter does on an I/O thread; the core
 * answers through this adapter's operations. An answer's body, and every
 * event of the stream a call or a listener is answered with, is written to
 * out_fd as one line, by the hub's pump (stdio_hub.h). So both eras, the
 * store, the records, recovery, cancellation and listeners behave exactly
 * as over HTTP.
 *
 * - 2025 era: the first initialize makes the process's one session (a
 *   second is refused); its id and protocol version go with every later
 *   request, and the session's standalone stream (a GET) carries the
 *   server's requests and notifications that belong to no call. The
 *   client's answers to them go to the core like any message.
 * - 2026-07-28 era: a request carrying _meta's protocol version is one with
 *   no headers (TM_REQ_BODY_ONLY): the body is the request.
 *   notifications/cancelled for such a request ends its stream (as a
 *   closed connection does on HTTP) or drops its answer.
 * - A line that is not a message (not JSON, too long, a NUL byte) is
 *   answered with a JSON-RPC error whose id is null and whose data.reason
 *   says why, and logged; the next line is read as usual.
 * Threads: the caller's thread reads in_fd and runs the core's handler; the
 * pump writes out_fd (answers from any thread are queued to it); a watcher
 * thread turns SIGINT/SIGTERM or tidemark_server_stop into the end of the
 * read. No json_t is shared between threads: a request is its serialized
 * body plus a deep copy of its id.
 */
#include "server_int.h"
#include "era.h"
#include "stdio_hub.h"
#include "../transport/stdio.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define SB_INIT_WAIT_MS 60000

typedef struct sb {
    tidemark_server_t *srv;
    tm_stdio_writer *wr;
    tm_shub *hub;
    pthread_mutex_t mu;       /* guards everything below */
    pthread_cond_t cv;
    char sid[TM_SESSION_ID_LEN + 1]; /* the 2025 session, once initialized */
    char pv[32];              /* its protocol version */
    int init;                 /* 0 none, 1 initialize running, 2 session made */
    int inflight;             /* requests not ended */
    int owed;                 /* of them, requests whose answer is owed (not listeners) */
    tm_map *live;             /* id key -> request (modern requests: cancel) */
    int wake[2];              /* the reader's cancel pipe */
    atomic_int quit;
} sb;

/* One request of the client: what the core sees (req, first) and answers. */
typedef struct xch {
    tm_req req;
    sb *b;
    json_t *id;               /* the request's id (NULL: notification, response, GET) */
    char idkey[TM_ID_KEY_MAX];
    int is_init, registered, owed, answered;
    int cancelled, streaming; /* under b->mu: notifications/cancelled; answered by a stream */
    char key[TM_SRC_KEY_MAX]; /* ... under this key */
    char made_sid[TM_SESSION_ID_LEN + 1]; /* initialize: the session it made */
    char sid[TM_SESSION_ID_LEN + 1];      /* req.session_id */
    char pv[32];                          /* req.protocol_version */
    unsigned status;          /* the answer, queued for the pump */
    char *answer;
    size_t answer_len;
    char *body;               /* req.body */
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
 * server did not know it (a refusal before the body was read), then
 * written (on the pump). */
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

/* Data of one event or answer: a message for the client, unless the
 * request was cancelled (its answer goes nowhere, as on a closed HTTP
 * connection). */
static int x_deliver_text(xch *x, const char *data, size_t len)
{
    pthread_mutex_lock(&x->b->mu);
    int cancelled = x->cancelled;
    pthread_mutex_unlock(&x->b->mu);
    if (cancelled)
        return 0;
    json_t *msg = json_loadb(data, len, JSON_ALLOW_NUL, NULL);
    if (!msg) {
        TM_WARN("stdio: a message of the server is not JSON");
        return 0;
    }
    int rc = x_deliver(x, msg);
    json_decref(msg);
    return rc == TIDEMARK_ECLOSED ? rc : 0;
}

static void x_free(xch *x)
{
    json_decref(x->id);
    free(x->answer);
    free(x->body);
    free(x);
}

/* An initialize ended: the session is made or not (the reader waits). */
static void x_init_done(xch *x)
{
    sb *b = x->b;
    json_t *resp = x->answer ? json_loadb(x->answer, x->answer_len, 0, NULL) : NULL;
    const char *pv = json_string_value(
        json_object_get(json_object_get(resp, "result"), "protocolVersion"));
    pthread_mutex_lock(&b->mu);
    int made = x->made_sid[0] && pv;
    if (made) {
        snprintf(b->sid, sizeof b->sid, "%s", x->made_sid);
        snprintf(b->pv, sizeof b->pv, "%s", pv);
    }
    b->init = made ? 2 : 0;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    json_decref(resp);
}

/* The request ended (answered, or its stream over): owed an answer it did
 * not get, the client is told; then it is let go. On the pump. */
static void x_end(xch *x)
{
    sb *b = x->b;
    if (x->is_init)
        x_init_done(x);
    pthread_mutex_lock(&b->mu);
    int cancelled = x->cancelled;
    if (x->registered && tm_map_get(b->live, x->idkey) == x)
        tm_map_del(b->live, x->idkey);
    pthread_mutex_unlock(&b->mu);
    if (x->id && !x->answered && !cancelled && !atomic_load(&b->quit)) {
        TM_WARN("stdio: a request ended without an answer (status %u)", x->status);
        sb_emit_error(b, x->id, TM_RPC_INTERNAL_ERROR, "The request ended without an answer",
                      "no_answer");
    }
    pthread_mutex_lock(&b->mu);
    b->inflight--;
    b->owed -= x->owed;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    x_free(x);
}

/* ---- the adapter's operations (request.h) ------------------------------------ */

static void op_add_header(tm_req *r, const char *name, const char *value)
{
    xch *x = (xch *)r;
    if (strcasecmp(name, "Mcp-Session-Id") == 0) /* initialize made the session */
        snprintf(x->made_sid, sizeof x->made_sid, "%s", value);
}

/* On the pump: the answer written, the request ended. */
static void x_replied(void *ud)
{
    xch *x = ud;
    if (x->answer_len)
        x_deliver_text(x, x->answer, x->answer_len);
    x_end(x);
}

static void op_reply(tm_req *r, unsigned status, const char *ctype, const char *body, size_t len)
{
    (void)ctype;
    xch *x = (xch *)r;
    x->status = status;
    if (len && (x->answer = malloc(len + 1)) != NULL) {
        memcpy(x->answer, body, len);
        x->answer[len] = '\0';
        x->answer_len = len;
    }
    tm_shub_defer(x->b->hub, x_replied, x); /* written in order, never on this thread */
}

static int x_on_message(void *ud, const char *data, size_t len)
{
    return x_deliver_text(ud, data, len);
}

static void x_on_end(void *ud)
{
    x_end(ud);
}

static int op_reply_stream(tm_req *r, const char *key, const tm_source *src)
{
    xch *x = (xch *)r;
    sb *b = x->b;
    pthread_mutex_lock(&b->mu);
    x->streaming = 1;
    snprintf(x->key, sizeof x->key, "%s", key);
    pthread_mutex_unlock(&b->mu);
    tm_shub_reader rd = {x_on_message, x_on_end, x};
    int rc = tm_shub_attach(b->hub, key, src, &rd);
    pthread_mutex_lock(&b->mu);
    int cancelled = rc == 0 && x->cancelled;
    if (rc)
        x->streaming = 0;
    pthread_mutex_unlock(&b->mu);
    if (cancelled) /* cancelled while it was being attached */
        tm_shub_end_key(b->hub, key);
    return rc;
}

static const tm_req_ops stdio_ops = {op_add_header, op_reply, op_reply_stream};

/* ---- requests --------------------------------------------------------------- */

/* The exchange's id is its own deep copy, not a reference into the read
 * message: other threads use and free it while the reader frees the
 * message. A value whose reference count two threads change is a data race
 * (jansson.h's json_incref/json_decref read the count with a plain load, and
 * the last decref of a child runs unseen inside libjansson). */
static xch *x_new(sb *b, const json_t *id, tm_req_method method)
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
    x->req = (tm_req){.ops = &stdio_ops, .method = method, .peer = NULL,
                      .content_type = "application/json",
                      .accept = method == TM_REQ_GET ? "text/event-stream"
                                                     : "application/json, text/event-stream"};
    return x;
}

/* The 2025 session's id and version on x, once there is one. */
static void x_session(sb *b, xch *x)
{
    pthread_mutex_lock(&b->mu);
    if (b->init == 2) {
        snprintf(x->sid, sizeof x->sid, "%s", b->sid);
        snprintf(x->pv, sizeof x->pv, "%s", b->pv);
        x->req.session_id = x->sid;
        x->req.protocol_version = x->pv;
    }
    pthread_mutex_unlock(&b->mu);
}

/* Hand x to the core (x is the core's until it is answered). */
static void sb_start(sb *b, xch *x)
{
    pthread_mutex_lock(&b->mu);
    b->inflight++;
    b->owed += x->owed;
    pthread_mutex_unlock(&b->mu);
    tm_handle_request(b->srv, &x->req);
}

/* The session's standalone stream: the server's requests and
 * notifications outside any call. */
static void sb_open_get(sb *b)
{
    xch *x = x_new(b, NULL, TM_REQ_GET);
    if (!x) {
        TM_WARN("stdio: the session's stream could not be opened");
        return;
    }
    x_session(b, x);
    sb_start(b, x);
}

/* A modern request is kept by id so notifications/cancelled can end it. */
static void x_register(sb *b, xch *x)
{
    if (tm_jsonrpc_id_key(x->id, x->idkey, sizeof x->idkey) != 0)
        return;
    pthread_mutex_lock(&b->mu);
    x->registered = !tm_map_get(b->live, x->idkey) && tm_map_put(b->live, x->idkey, x) == 0;
    pthread_mutex_unlock(&b->mu);
}

/* POST msg (borrowed): id is what an answer is owed to. */
static int sb_post(sb *b, const json_t *msg, const json_t *id, int modern, int is_init)
{
    xch *x = x_new(b, id, TM_REQ_POST);
    size_t len = 0;
    char *body = x ? tm_jsonrpc_dump(msg, &len) : NULL;
    if (!body) {
        if (x)
            x_free(x);
        return TIDEMARK_ENOMEM;
    }
    x->body = body;
    x->req.body = body;
    x->req.body_len = len;
    x->is_init = is_init;
    const char *method = json_string_value(json_object_get(msg, "method"));
    x->owed = id && method && strcmp(method, "subscriptions/listen") != 0;
    if (modern) {
        const char *pv = tm_era_body_version(msg);
        snprintf(x->pv, sizeof x->pv, "%s", pv ? pv : "");
        x->req.protocol_version = x->pv;
        x->req.flags = TM_REQ_BODY_ONLY;
        if (id)
            x_register(b, x);
    } else if (!is_init) {
        x_session(b, x);
    }
    sb_start(b, x);
    return 0;
}

/* notifications/cancelled of a modern request: its stream ends (as a
 * closed connection ends it on HTTP), or its answer is dropped. 1 when it
 * was one. */
static int sb_cancel_modern(sb *b, const json_t *params)
{
    char key[TM_ID_KEY_MAX], skey[TM_SRC_KEY_MAX] = "";
    const json_t *rid = json_object_get(params, "requestId");
    if (!rid || tm_jsonrpc_id_key(rid, key, sizeof key) != 0)
        return 0;
    pthread_mutex_lock(&b->mu);
    xch *x = tm_map_get(b->live, key);
    if (x) {
        x->cancelled = 1;
        if (x->streaming)
            snprintf(skey, sizeof skey, "%s", x->key);
    }
    pthread_mutex_unlock(&b->mu);
    if (skey[0])
        tm_shub_end_key(b->hub, skey);
    return x != NULL;
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

/* initialize: the process's one session. Later messages wait for it; once
 * made, its standalone stream is opened. */
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
    pthread_mutex_lock(&b->mu);
    int made = b->init == 2;
    pthread_mutex_unlock(&b->mu);
    if (made)
        sb_open_get(b);
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
        if (rc) /* out of memory */
            TM_WARN("stdio: a message could not be handed on: %s", tidemark_strerror(rc));
        if (rc && id && !json_is_null(id) && json_object_get(msg, "method"))
            sb_emit_error(b, (json_t *)id, TM_RPC_INTERNAL_ERROR, tidemark_strerror(rc),
                          "internal_error");
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
        rc = tm_shub_new(&b->hub);
    return rc;
}

/* After the server stopped: nothing of it calls back any more. */
static void sb_fini(sb *b)
{
    atomic_store(&b->quit, 1);
    tm_shub_free(b->hub); /* every stream ended, every answer ran */
    tm_stdio_writer_free(b->wr);
    tm_map_free(b->live);
    for (int i = 0; i < 2; i++)
        if (b->wake[i] >= 0)
            close(b->wake[i]);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

/* Serve with the server started: read until the end, then let go of the
 * streams (the server stops next). */
static int sb_serve(sb *b, int in_fd, const sigset_t *set)
{
    tm_stdio_reader *rd = NULL;
    int rc = tm_stdio_reader_new(in_fd, 0, b->wake[0], &rd);
    watch w = {.b = b, .set = *set};
    pthread_t wt;
    int wstarted = rc == 0 && pthread_create(&wt, NULL, watcher, &w) == 0;
    if (rc == 0 && !wstarted)
        rc = TIDEMARK_ENOMEM;
    if (rc == 0) {
        TM_INFO("serving one client on stdio");
        rc = sb_read_loop(b, rd);
        sb_drain(b, 10000);
    }
    atomic_store(&w.done, 1);
    sb_kick(b);
    if (wstarted)
        pthread_join(wt, NULL);
    tm_stdio_reader_free(rd);
    tm_shub_stop(b->hub); /* listeners and the session's stream end: their feeds read the store */
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
    sb b;
    int inited = rc == 0;
    if (inited)
        rc = sb_init(&b, srv, out_fd);
    if (rc == 0) { /* the store's commits wake this adapter's streams */
        srv->hub_store = (tm_hub){&tm_shub_ops, b.hub};
        atomic_store(&srv->hub, &srv->hub_store);
        rc = tm_server_start(srv, 0);
    }
    if (rc == 0)
        rc = sb_serve(&b, in_fd, &set);
    tidemark_server_stop(srv);
    atomic_store(&srv->hub, NULL);
    if (inited)
        sb_fini(&b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
