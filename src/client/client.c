/*
 * client.c - the MCP client: session lifecycle, requests over POST (JSON or
 * SSE answers), resumption with Last-Event-ID, the validator and the three
 * persistence modes, server->client requests.
 *
 * Threads: the caller of a request drives it (start, wait, reconnect after
 * the delay); the HTTP I/O thread parses and dispatches events; a small
 * worker pool answers server->client requests (application callbacks may
 * block).
 */
#include "tidemark/client.h"
#include "../mcp/jsonrpc.h"
#include "validator.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/map.h"
#include "../base/pool.h"
#include "../base/str.h"
#include "../base/random.h"
#include "cstate.h"
#include "../log/event_id.h"
#include "../log/sqlite_util.h"
#include "../transport/http_client.h"
#include "../transport/sse_parser.h"
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_JSON_BODY (16u << 20)

#define CRASH_POINT(name) TM_CRASH_POINT("TIDEMARK_CLIENT_CRASH", name)

/* ---- structures -------------------------------------------------------------- */

enum rq_phase { RQ_RUNNING = 0, RQ_RECONNECT, RQ_DONE };

/* An event as it arrives, classified for the validator. */
typedef struct inev {
    const char *id;   /* the id as received; "" when none */
    tm_id_kind kind;
    tm_event_id eid;  /* kind == TM_ID_STRUCTURED */
    json_t *msg;      /* the message; NULL for empty data (a priming event) */
    int msg_ok;       /* data empty, or a valid JSON-RPC message (or batch) */
    const char *why;  /* kind == TM_ID_MALFORMED: "nul_byte", "too_long" */
} inev;

/* An event of an emit-early stream not yet announced durable. */
typedef struct held {
    char *id;
    json_t *msg;
    tm_event_id eid;
    size_t cost;
    struct held *next;
} held;

/* What a held event counts against max_held_bytes beyond its data and id:
 * the parsed message and the list node. */
#define HELD_OVERHEAD 512

typedef struct rq {
    struct tidemark_client *c;
    int64_t id;
    char key[64];               /* pending map key */
    json_t *msg;                /* the request (NULL for the listen stream) */
    int listen;                 /* the standalone GET stream */
    int phase;
    int rc;                     /* final status */
    json_t *result;             /* result, or error object */
    tidemark_progress_fn progress;
    void *progress_ud;
    /* the current exchange (0 = none); guarded by c->mu */
    uint64_t x;
    long status;
    int sse;
    int got_response;           /* stop reading this exchange */
    int is_get;                 /* the current exchange is a GET (resume or listen) */
    tm_buf body;
    tm_sse_parser *parser;
    /* the stream */
    char stream_key[80];
    char last_id[TM_CLIENT_ID_MAX + 1];
    int have_id;                /* an event with an id was accepted (or a cursor loaded) */
    int ours;                   /* ...with a Tidemark id: the stream is provable */
    unsigned long retry_ms;
    int retry_set;
    unsigned attempts;          /* reconnects in a row without progress */
    int progressed;             /* the current exchange moved the stream forward */
    int sent;                   /* a POST of it reached a connection (may have been received) */
    int skip_nap;               /* decide and start the next exchange without waiting */
    int recorded;               /* outstanding row exists */
    int final;                  /* the outcome is known for good: the row may go */
    /* An emit-early server announces its durable head; events above it wait
     * here and are dispatched (and their cursor kept) only once announced
     * durable. Per exchange, bounded by cfg.max_held_bytes. */
    int early;
    uint64_t durable;
    held *held_head, *held_tail;
    size_t held_bytes;
} rq;

struct tidemark_client {
    tidemark_client_config_t cfg;
    char *url, *state_path, *name, *version, *offer;
    json_t *caps, *roots;
    tm_hc *hc;
    tm_cstate *st;
    tm_pool *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *session;
    char *proto;
    json_t *server_info;
    tm_map *pending; /* id key -> rq */
    json_t *tool_safe; /* tool name -> true when annotated idempotent or read-only */
    pthread_t listener;  /* open_standalone */
    int listening;
    int standalone_open; /* the GET stream got its 200 */
    int stopping;
    int session_lost;
};

static void set_error(json_t **out, int code, const char *reason, const char *message, json_t *data)
{
    if (!out) {
        json_decref(data);
        return;
    }
    json_t *d = json_is_object(data) ? data : json_object();
    json_object_set_new(d, "reason", json_string(reason));
    *out = json_pack("{s:i,s:s,s:o}", "code", code, "message", message, "data", d);
}

/* ---- state and requests ------------------------------------------------------- */

void tidemark_client_config_init(tidemark_client_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->name = "tidemark-client";
    c->version = TIDEMARK_VERSION;
    c->protocol_version = TIDEMARK_PROTOCOL_LATEST;
    c->max_attempts = 8;
    c->backoff_ms = 250;
    c->backoff_max_ms = 5000;
    c->retry_min_ms = TIDEMARK_CLIENT_RETRY_MIN_MS;
    c->retry_max_ms = TIDEMARK_CLIENT_RETRY_MAX_MS;
    c->max_held_bytes = TIDEMARK_CLIENT_MAX_HELD_BYTES;
    c->timeout_ms = 60000;
}

/* Zeros mean "the default"; a range given upside down is put right. */
static void config_defaults(tidemark_client_config_t *c)
{
    if (!c->max_attempts)
        c->max_attempts = 8;
    if (!c->backoff_ms)
        c->backoff_ms = 250;
    if (!c->backoff_max_ms)
        c->backoff_max_ms = 5000;
    if (!c->retry_min_ms)
        c->retry_min_ms = TIDEMARK_CLIENT_RETRY_MIN_MS;
    if (!c->retry_max_ms)
        c->retry_max_ms = TIDEMARK_CLIENT_RETRY_MAX_MS;
    if (c->retry_max_ms < c->retry_min_ms)
        c->retry_max_ms = c->retry_min_ms;
    if (!c->max_held_bytes)
        c->max_held_bytes = TIDEMARK_CLIENT_MAX_HELD_BYTES;
    if (c->timeout_ms <= 0)
        c->timeout_ms = 60000;
}


int tidemark_client_new(const tidemark_client_config_t *cfg, tidemark_client_t **out)
{
    if (!cfg || !cfg->url)
        return TIDEMARK_EINVAL;
    tidemark_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return TIDEMARK_ENOMEM;
    c->cfg = *cfg;
    c->url = tm_strdup(cfg->url);
    c->state_path = tm_strdup(cfg->state_path);
    c->name = tm_strdup(cfg->name ? cfg->name : "tidemark-client");
    c->version = tm_strdup(cfg->version ? cfg->version : TIDEMARK_VERSION);
    c->offer = tm_strdup(cfg->protocol_version ? cfg->protocol_version : TIDEMARK_PROTOCOL_LATEST);
    c->caps = cfg->capabilities ? json_deep_copy(cfg->capabilities) : NULL;
    c->roots = cfg->roots ? json_deep_copy(cfg->roots) : NULL;
    config_defaults(&c->cfg);
    pthread_mutex_init(&c->mu, NULL);
    tm_cond_init_monotonic(&c->cv);
    c->pending = tm_map_new();
    int rc = (!c->url || !c->name || !c->version || !c->offer || !c->pending) ? TIDEMARK_ENOMEM : 0;
    if (!rc)
        rc = tm_cstate_open(c->state_path, cfg->schema, &c->st);
    if (!rc)
        rc = tm_pool_new(2, &c->workers);
    if (!rc)
        rc = tm_hc_new(&c->hc);
    if (rc) {
        tidemark_client_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

const char *tidemark_client_session(const tidemark_client_t *c) { return c->session; }
const char *tidemark_client_protocol_version(const tidemark_client_t *c) { return c->proto; }
json_t *tidemark_client_server_info(const tidemark_client_t *c) { return c->server_info; }

static void held_clear(rq *r)
{
    for (held *h = r->held_head, *n; h; h = n) {
        n = h->next;
        free(h->id);
        json_decref(h->msg);
        free(h);
    }
    r->held_head = r->held_tail = NULL;
    r->held_bytes = 0;
}

static void rq_free(rq *r)
{
    if (!r)
        return;
    held_clear(r);
    json_decref(r->msg);
    json_decref(r->result);
    tm_buf_free(&r->body);
    tm_sse_parser_free(r->parser);
    free(r);
}

/* Settle a request: wake its caller. Holds c->mu. */
static void rq_finish_locked(rq *r, int rc, json_t *result)
{
    if (r->phase == RQ_DONE) {
        json_decref(result);
        return;
    }
    r->phase = RQ_DONE;
    r->rc = rc;
    json_decref(r->result);
    r->result = result;
    pthread_cond_broadcast(&r->c->cv);
}

static void rq_fail(rq *r, int rc, const char *reason, const char *message, json_t *data)
{
    json_t *e = NULL;
    set_error(&e, TM_RPC_INTERNAL_ERROR, reason, message, data);
    pthread_mutex_lock(&r->c->mu);
    rq_finish_locked(r, rc, e);
    pthread_mutex_unlock(&r->c->mu);
}

/* ---- messages arriving ------------------------------------------------------ */

typedef struct srv_req {
    tidemark_client_t *c;
    json_t *msg;
} srv_req;

/* Fill in defaults of an elicitation schema the answer leaves out. */
static void apply_defaults(json_t *params, json_t *result)
{
    if (!json_is_object(result) ||
        !json_is_string(json_object_get(result, "action")) ||
        strcmp(json_string_value(json_object_get(result, "action")), "accept") != 0)
        return;
    json_t *props = json_object_get(json_object_get(params, "requestedSchema"), "properties");
    json_t *content = json_object_get(result, "content");
    if (!json_is_object(content)) {
        content = json_object();
        json_object_set_new(result, "content", content);
    }
    const char *k;
    json_t *p;
    json_object_foreach(props, k, p) {
        json_t *d = json_object_get(p, "default");
        if (d && !json_object_get(content, k))
            json_object_set(content, k, d);
    }
}

static int post_message(tidemark_client_t *c, json_t *msg);

static void answer_server_request(void *arg)
{
    srv_req *s = arg;
    tidemark_client_t *c = s->c;
    json_t *id = json_object_get(s->msg, "id");
    const char *method = json_string_value(json_object_get(s->msg, "method"));
    json_t *params = json_object_get(s->msg, "params");
    json_t *result = NULL, *reply;
    int rc = TIDEMARK_ENOTSUP;
    if (strcmp(method, "ping") == 0) {
        result = json_object();
        rc = 0;
    } else if (strcmp(method, "roots/list") == 0 && c->roots) {
        result = json_pack("{s:O}", "roots", c->roots);
        rc = 0;
    } else if (c->cfg.on_request) {
        rc = c->cfg.on_request(method, params, &result, c->cfg.ud);
        if (rc == 0 && strcmp(method, "elicitation/create") == 0)
            apply_defaults(params, result);
    }
    if (rc == 0) {
        reply = tm_jsonrpc_result(id, result ? result : json_object());
    } else {
        json_decref(result);
        reply = tm_jsonrpc_error(id, rc == TIDEMARK_ENOTSUP ? TM_RPC_METHOD_NOT_FOUND : TM_RPC_INTERNAL_ERROR,
                                 rc == TIDEMARK_ENOTSUP ? "Method not supported by this client"
                                                        : "Client handler failed",
                                 rc == TIDEMARK_ENOTSUP ? "method_not_found" : "handler_failed", NULL);
    }
    post_message(c, reply);
    json_decref(reply);
    json_decref(s->msg);
    free(s);
}

/* A JSON-RPC message arrived on r's exchange: complete r, report
 * progress, answer server requests. */
static void handle_message(tidemark_client_t *c, rq *r, json_t *msg)
{
    tm_msg m;
    tm_jsonrpc_classify(msg, &m);
    if (m.kind == TM_MSG_RESULT || m.kind == TM_MSG_ERROR) {
        /* A response completes only the request whose stream carried it:
         * taken from another stream it would end that request while its own
         * stream (and the events still due on it) were never proven. */
        if (r->listen || !json_is_integer(m.id) || json_integer_value(m.id) != r->id) {
            TM_WARN("client: a response to request %" JSON_INTEGER_FORMAT
                    " arrived on the stream of another; ignored",
                    json_is_integer(m.id) ? json_integer_value(m.id) : (json_int_t)-1);
            return;
        }
        pthread_mutex_lock(&c->mu);
        if (tm_map_get(c->pending, r->key) == r) {
            r->got_response = 1;
            r->final = 1;
            rq_finish_locked(r, m.kind == TM_MSG_RESULT ? 0 : TIDEMARK_EPEER,
                             json_incref(m.kind == TM_MSG_RESULT ? m.result : m.error));
        }
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (m.kind == TM_MSG_REQUEST) {
        srv_req *s = calloc(1, sizeof *s);
        if (s) {
            s->c = c;
            s->msg = json_incref(msg);
            if (tm_pool_submit(c->workers, answer_server_request, s) != 0) {
                json_decref(s->msg);
                free(s);
            }
        }
        return;
    }
    if (m.kind == TM_MSG_NOTIFICATION) {
        if (strcmp(m.method, "notifications/progress") == 0 && r && r->progress) {
            json_t *p = m.params;
            json_t *tok = json_object_get(p, "progressToken");
            if (json_is_integer(tok) && json_integer_value(tok) == r->id) {
                json_t *tot = json_object_get(p, "total");
                r->progress(json_number_value(json_object_get(p, "progress")),
                            tot ? json_number_value(tot) : -1,
                            json_string_value(json_object_get(p, "message")), r->progress_ud);
            }
        }
        if (c->cfg.on_notification)
            c->cfg.on_notification(msg, c->cfg.ud);
    }
}

/* A message or a batch of them. */
static void deliver(tidemark_client_t *c, rq *r, json_t *msg)
{
    if (!json_is_array(msg)) {
        handle_message(c, r, msg);
        return;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msg, i, m) handle_message(c, r, m);
}

/* ---- events: validator, persistence modes, dispatch ----------------------------- */

static int app_dispatch(tidemark_client_t *c, const tidemark_event_t *ev)
{
    if (!c->cfg.on_event || !ev->message)
        return 0;
    struct tidemark_txn txn = {.db = tm_cstate_db(c->st)};
    return c->cfg.on_event(&txn, ev, c->cfg.ud);
}

/* An id as it may appear in a report or a log line: at most 64 bytes of
 * printable ASCII (a hostile id may be 100 KB of anything). */
static void id_for_report(const char *id, char out[72])
{
    size_t n = 0;
    for (; id && id[n] && n < 64; n++)
        out[n] = (unsigned char)id[n] >= 0x20 && (unsigned char)id[n] < 0x7f ? id[n] : '?';
    if (id && id[n]) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* Fail r with the validator's typed reason; cur may be NULL. */
static void refuse(rq *r, tm_verdict v, const inev *e, const tm_cursor *cur)
{
    char shown[72];
    id_for_report(e->id, shown);
    const char *at = cur && cur->known ? cur->event_id : r->have_id ? r->last_id : "";
    json_t *d = json_pack("{s:s,s:s,s:I,s:s}", "event_id", shown, "cursor", at, "head",
                          (json_int_t)(e->kind == TM_ID_STRUCTURED ? e->eid.seq : 0), "stream",
                          r->stream_key);
    if (d && v == TM_V_BAD_ID)
        json_object_set_new(d, "detail", json_string(e->why ? e->why : "malformed"));
    if (d && v == TM_V_STREAM_MISMATCH && e->kind == TM_ID_STRUCTURED)
        json_object_set_new(d, "event_stream", json_string(e->eid.stream));
    TM_WARN("stream %s: %s at event %s (cursor %s)", r->stream_key[0] ? r->stream_key : "-",
            tm_verdict_reason(v), shown[0] ? shown : "(no id)", at[0] ? at : "-");
    rq_fail(r, TIDEMARK_EPROTO, tm_verdict_reason(v), "resumption validator refused the stream", d);
}

/* What the stream r reads has been so far, for the validator. */
static tm_stream_kind stream_kind(const rq *r)
{
    return r->ours ? TM_STREAM_PROVABLE : r->have_id ? TM_STREAM_OPAQUE : TM_STREAM_NEW;
}

/* The state key of the stream e is taken on: the stream being read once it
 * is provable (a structured id naming another is refused), else the one the
 * event names; opaque streams are keyed by their request. */
static void stream_key_for(const rq *r, const inev *e, char *key, size_t n)
{
    if (e->kind == TM_ID_STRUCTURED)
        snprintf(key, n, "%s", r->ours ? r->stream_key : e->eid.stream);
    else if (r->stream_key[0])
        snprintf(key, n, "%s", r->stream_key);
    else if (r->listen)
        snprintf(key, n, "g");
    else
        snprintf(key, n, "req:%" PRId64, r->id);
}

/* In the first transaction of r's first accepted event: the outstanding
 * request learns its stream (a crash cannot leave the cursor without it),
 * and a structured id proves the session's server a Tidemark server. */
static int note_first_event(tidemark_client_t *c, rq *r, const inev *e, const char *key)
{
    int rc = 0;
    if (r->recorded && !r->have_id)
        rc = tm_cstate_outstanding_stream_txn(c->st, r->id, key);
    if (rc == 0 && e->kind == TM_ID_STRUCTURED && !r->ours)
        rc = tm_cstate_session_prove(c->st);
    return rc;
}

/* Commit the open transaction unless rc failed; then it is rolled back. */
static int settle_txn(tidemark_client_t *c, int rc)
{
    if (rc) {
        tm_cstate_rollback(c->st);
        return rc;
    }
    return tm_cstate_commit(c->st);
}

/* The dispatch row of ev; with it, when ev carries the response of
 * request done_id (> 0), the end of that outstanding request. */
static int log_dispatch(tidemark_client_t *c, const tidemark_event_t *ev, const char *key, int state,
                        int64_t done_id)
{
    int rc = tm_cstate_dispatch_set(c->st, ev->id, key, ev->seq, state);
    if (rc == 0 && done_id > 0)
        rc = tm_cstate_outstanding_done_txn(c->st, done_id);
    return rc;
}

/* atomic: effect + dispatch row + cursor in one transaction. */
static int persist_atomic(tidemark_client_t *c, const tidemark_event_t *ev, const char *key,
                          int64_t done_id)
{
    int rc = app_dispatch(c, ev);
    if (rc == 0)
        rc = log_dispatch(c, ev, key, TM_DISPATCH_COMMITTED, done_id);
    if (rc == 0)
        rc = tm_cstate_cursor_set(c->st, key, ev->id, ev->seq);
    CRASH_POINT("atomic_before_commit");
    return settle_txn(c, rc);
}

/* cursor_after_dispatch: effect + row (processed), commit, then the cursor. */
static int persist_after(tidemark_client_t *c, const tidemark_event_t *ev, const char *key,
                         int64_t done_id)
{
    int rc = app_dispatch(c, ev);
    if (rc == 0)
        rc = log_dispatch(c, ev, key, TM_DISPATCH_PROCESSED, done_id);
    if ((rc = settle_txn(c, rc)) != 0)
        return rc;
    CRASH_POINT("after_dispatch_before_cursor");
    if ((rc = tm_cstate_begin(c->st)) != 0)
        return rc;
    rc = tm_cstate_cursor_set(c->st, key, ev->id, ev->seq);
    if (rc == 0)
        rc = tm_cstate_dispatch_set(c->st, ev->id, key, ev->seq, TM_DISPATCH_COMMITTED);
    return settle_txn(c, rc);
}

/* cursor_before_dispatch: the cursor, commit, then effect + row. */
static int persist_before(tidemark_client_t *c, const tidemark_event_t *ev, const char *key,
                          int64_t done_id)
{
    int rc = settle_txn(c, tm_cstate_cursor_set(c->st, key, ev->id, ev->seq));
    if (rc)
        return rc;
    CRASH_POINT("after_cursor_before_dispatch");
    if ((rc = tm_cstate_begin(c->st)) != 0)
        return rc;
    rc = app_dispatch(c, ev);
    if (rc == 0)
        rc = log_dispatch(c, ev, key, TM_DISPATCH_COMMITTED, done_id);
    return settle_txn(c, rc);
}

/* Whether msg (or a message of its batch) is the response to request id. */
static int answers(json_t *msg, int64_t id)
{
    if (json_is_array(msg)) {
        size_t i;
        json_t *m;
        json_array_foreach(msg, i, m) if (answers(m, id)) return 1;
        return 0;
    }
    tm_msg m;
    tm_jsonrpc_classify(msg, &m);
    return (m.kind == TM_MSG_RESULT || m.kind == TM_MSG_ERROR) && json_is_integer(m.id) &&
           json_integer_value(m.id) == id;
}

/* Apply an accepted event (verdict v) under the persistence mode. The
 * transaction is open on entry and settled on return. */
static int persist(tidemark_client_t *c, rq *r, const inev *e, const char *key, tm_verdict v)
{
    uint64_t seq = e->kind == TM_ID_STRUCTURED ? e->eid.seq : 0;
    tidemark_event_t ev = {.id = e->id, .stream = seq ? e->eid.stream : "", .seq = seq,
                           .message = e->msg};
    int64_t done_id = r->recorded && !r->listen && e->msg && answers(e->msg, r->id) ? r->id : 0;
    int rc = note_first_event(c, r, e, key);
    if (rc)
        return settle_txn(c, rc);
    if (v == TM_V_SUPPRESS) {
        /* Already applied before a crash; handlers are idempotent: skip the
         * effect, make the cursor catch up. */
        rc = tm_cstate_cursor_set(c->st, key, e->id, seq);
        if (rc == 0)
            rc = log_dispatch(c, &ev, key, TM_DISPATCH_COMMITTED, done_id);
        return settle_txn(c, rc);
    }
    switch (c->cfg.persist) {
    case TIDEMARK_PERSIST_CURSOR_AFTER_DISPATCH: return persist_after(c, &ev, key, done_id);
    case TIDEMARK_PERSIST_CURSOR_BEFORE_DISPATCH: return persist_before(c, &ev, key, done_id);
    case TIDEMARK_PERSIST_ATOMIC:
    default: return persist_atomic(c, &ev, key, done_id);
    }
}

/* Run one arriving event through the validator and the persistence mode.
 * Returns 0 to go on (the event was applied, or is a plain id-less message
 * to handle without logging), or a negative code after failing r. */
static int accept_event(tidemark_client_t *c, rq *r, const inev *e)
{
    tm_validate_in in = {.id_kind = e->kind, .message_ok = e->msg_ok, .stream = stream_kind(r),
                         .idempotent = c->cfg.idempotent_handlers};
    if (e->kind == TM_ID_STRUCTURED) {
        in.head = e->eid.seq;
        in.same_stream = !r->ours || strcmp(r->stream_key, e->eid.stream) == 0;
    }
    char key[80];
    stream_key_for(r, e, key, sizeof key);
    if (tm_cstate_begin(c->st) != 0) {
        rq_fail(r, TIDEMARK_EIO, "state_error", "client state unavailable", NULL);
        return TIDEMARK_EIO;
    }
    tm_cursor cur;
    if (tm_cstate_cursor_get(c->st, key, &cur) != 0) {
        tm_cstate_rollback(c->st);
        rq_fail(r, TIDEMARK_EIO, "state_error", "the saved cursor cannot be read", NULL);
        return TIDEMARK_EIO;
    }
    in.cursor = cur.seq;
    in.dispatched = e->id[0] && tm_cstate_dispatch_state(c->st, e->id) != TM_DISPATCH_NONE;
    in.last_dispatched = tm_cstate_last_dispatched(c->st, key);
    tm_verdict v = tm_validate(&in);
    if (v == TM_V_PLAIN) {
        tm_cstate_rollback(c->st);
        r->progressed |= e->msg != NULL;
        return 0;
    }
    if (v != TM_V_DISPATCH && v != TM_V_SUPPRESS) {
        tm_cstate_rollback(c->st);
        refuse(r, v, e, &cur);
        return TIDEMARK_EPROTO;
    }
    int rc = persist(c, r, e, key, v);
    if (rc) {
        rq_fail(r, rc, "dispatch_failed", "the event could not be dispatched and saved", NULL);
        return rc;
    }
    snprintf(r->stream_key, sizeof r->stream_key, "%s", key);
    snprintf(r->last_id, sizeof r->last_id, "%s", e->id);
    r->ours |= e->kind == TM_ID_STRUCTURED;
    r->have_id = 1;
    r->progressed = 1;
    return 0;
}

/* Validate, apply and deliver one event. Returns 1 to stop reading. */
static int process_event(rq *r, const inev *e)
{
    tidemark_client_t *c = r->c;
    if (accept_event(c, r, e) != 0)
        return 1;
    if (e->msg)
        deliver(c, r, e->msg);
    pthread_mutex_lock(&c->mu);
    int stop = r->phase == RQ_DONE;
    pthread_mutex_unlock(&c->mu);
    /* A foreign server may keep a resumed stream open after the response:
     * stop reading once we have it. */
    return stop ? 1 : 0;
}

/* Dispatch the held events the durable head now covers, in order. */
static int release_held(rq *r)
{
    while (r->held_head && r->held_head->eid.seq <= r->durable) {
        held *h = r->held_head;
        r->held_head = h->next;
        if (!r->held_head)
            r->held_tail = NULL;
        r->held_bytes -= h->cost;
        inev e = {.id = h->id, .kind = TM_ID_STRUCTURED, .eid = h->eid, .msg = h->msg, .msg_ok = 1};
        int stop = process_event(r, &e);
        free(h->id);
        json_decref(h->msg);
        free(h);
        if (stop)
            return 1;
    }
    return 0;
}

/* Keep e (taking its message) until the server announces it durable, within
 * max_held_bytes: past that the stream is refused, never dropped and
 * re-fetched (that re-sent calls and let memory follow the server). */
static int hold(rq *r, inev *e, size_t data_len)
{
    tidemark_client_t *c = r->c;
    size_t cost = data_len + strlen(e->id) + HELD_OVERHEAD;
    if (r->held_bytes + cost > c->cfg.max_held_bytes) {
        TM_WARN("client: an emit-early server sent over %zu bytes not yet durable", r->held_bytes);
        rq_fail(r, TIDEMARK_EPROTO, "held_back_overflow",
                "the server sent more events than may be held back before it announced any durable",
                json_pack("{s:I,s:I,s:I}", "limit", (json_int_t)c->cfg.max_held_bytes, "held_bytes",
                          (json_int_t)r->held_bytes, "durable_head", (json_int_t)r->durable));
        return 1;
    }
    held *h = calloc(1, sizeof *h);
    if (!h || !(h->id = strdup(e->id))) {
        free(h);
        rq_fail(r, TIDEMARK_ENOMEM, "out_of_memory", "cannot hold an event back", NULL);
        return 1;
    }
    h->msg = e->msg;
    e->msg = NULL;
    h->eid = e->eid;
    h->cost = cost;
    if (r->held_tail)
        r->held_tail->next = h;
    else
        r->held_head = h;
    r->held_tail = h;
    r->held_bytes += cost;
    return 0;
}

static int one_message_valid(json_t *m)
{
    tm_msg x;
    tm_jsonrpc_classify(m, &x);
    return x.kind != TM_MSG_INVALID;
}

/* One JSON-RPC message, or a non-empty batch of them. */
static int message_valid(json_t *msg)
{
    if (!json_is_array(msg))
        return one_message_valid(msg);
    size_t i;
    json_t *m;
    json_array_foreach(msg, i, m) if (!one_message_valid(m)) return 0;
    return json_array_size(msg) > 0;
}

/* Classify an arriving event: its own id (an inherited one is no id) and its
 * data. e->msg is a new reference or NULL. */
static void intake(const tm_sse_event *ev, inev *e)
{
    memset(e, 0, sizeof *e);
    e->id = ev->own_id && ev->id ? ev->id : "";
    if (ev->bad_id) {
        e->kind = TM_ID_MALFORMED;
        e->why = "nul_byte";
        e->id = "";
    } else if (!ev->own_id || !ev->id) {
        e->kind = TM_ID_NONE;
    } else if (!ev->id[0]) {
        e->kind = TM_ID_EMPTY;
    } else if (strlen(ev->id) > TM_CLIENT_ID_MAX) {
        e->kind = TM_ID_MALFORMED; /* kept whole or not at all: a truncated cursor lies */
        e->why = "too_long";
    } else {
        e->kind = tm_event_id_parse(ev->id, &e->eid) == 0 ? TM_ID_STRUCTURED : TM_ID_OPAQUE;
    }
    if (ev->data_len == 0) {
        e->msg_ok = 1; /* no message: a priming event */
        return;
    }
    e->msg = json_loadb(ev->data, ev->data_len, 0, NULL);
    e->msg_ok = e->msg && message_valid(e->msg);
}

static int on_sse_event(void *ud, const tm_sse_event *ev)
{
    rq *r = ud;
    if (strcmp(ev->type, "gap") == 0) {
        /* The server trimmed events we had not received: typed, never silent. */
        json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
        rq_fail(r, TIDEMARK_EPROTO, "resumption_gap", "events of the stream were trimmed", d);
        return 1;
    }
    if (strcmp(ev->type, "tidemark-durable") == 0) {
        json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
        json_t *head = json_object_get(d, "durable_head");
        if (json_is_integer(head) && json_integer_value(head) >= 0) {
            r->early = 1;
            if ((uint64_t)json_integer_value(head) > r->durable)
                r->durable = (uint64_t)json_integer_value(head);
        }
        json_decref(d);
        return release_held(r);
    }
    if (strcmp(ev->type, "message") != 0)
        return 0; /* pings and other types: nothing to apply, and no progress */
    inev e;
    intake(ev, &e);
    tm_verdict v = tm_validate_intake(e.kind, e.msg_ok);
    int stop;
    if (v != TM_V_DISPATCH) {
        refuse(r, v, &e, NULL);
        stop = 1;
    } else if (r->early && e.kind == TM_ID_STRUCTURED && e.eid.seq > r->durable) {
        stop = hold(r, &e, ev->data_len); /* not durable yet: a server crash could lose it */
    } else {
        stop = process_event(r, &e);
    }
    json_decref(e.msg);
    return stop;
}

static void on_sse_retry(void *ud, unsigned long ms)
{
    rq *r = ud;
    r->retry_ms = ms;
    r->retry_set = 1;
}

/* ---- exchanges ----------------------------------------------------------------- */

static void x_headers(void *ud, long status, const char *ctype, const char *sid)
{
    rq *r = ud;
    tidemark_client_t *c = r->c;
    r->status = status;
    r->sse = ctype && strncasecmp(ctype, "text/event-stream", 17) == 0;
    if (r->listen && !(status == 200 && r->sse)) {
        pthread_mutex_lock(&c->mu);
        c->standalone_open = 0;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    if (sid) { /* c->session is read and freed by other threads: only under c->mu */
        pthread_mutex_lock(&c->mu);
        if (!c->session)
            c->session = strdup(sid);
        pthread_mutex_unlock(&c->mu);
    }
    if (r->sse) {
        if (!r->parser) {
            tm_sse_callbacks cb = {.on_event = on_sse_event, .on_retry = on_sse_retry};
            tm_sse_parser_new(0, 0, &cb, r, &r->parser);
        } else {
            tm_sse_parser_reset(r->parser);
        }
        held_clear(r); /* a new connection says again what is durable */
        r->early = 0;
        r->durable = 0;
    }
}

static int x_data(void *ud, const char *buf, size_t len)
{
    rq *r = ud;
    if (r->sse && r->status == 200)
        return r->parser && tm_sse_parser_feed(r->parser, buf, len) != 0 ? 1 : 0;
    return tm_buf_add(&r->body, buf, len) == 0 ? 0 : 1;
}

static void x_end(rq *r)
{
    pthread_mutex_lock(&r->c->mu);
    r->x = 0;
    pthread_cond_broadcast(&r->c->cv);
    pthread_mutex_unlock(&r->c->mu);
}

static void x_done_inner(rq *r, int rc, long status);

static void x_done(void *ud, int rc, long status)
{
    rq *r = ud;
    if (r->listen) {
        pthread_mutex_lock(&r->c->mu);
        r->c->standalone_open = 0;
        pthread_mutex_unlock(&r->c->mu);
    }
    x_done_inner(r, rc, status);
    x_end(r); /* last: the caller may free r once x is 0 */
}

static void x_session_lost(rq *r)
{
    tidemark_client_t *c = r->c;
    json_t *e = NULL;
    set_error(&e, TM_RPC_SESSION_NOT_FOUND, "session_lost", "the server no longer knows the session",
              NULL);
    pthread_mutex_lock(&c->mu);
    c->session_lost = 1;
    r->final = 1; /* nothing of the session can be resumed */
    rq_finish_locked(r, TIDEMARK_ENOTFOUND, e);
    pthread_mutex_unlock(&c->mu);
}

/* A JSON answer to r's POST: its response, or an error without one. */
static void x_json_answer(rq *r)
{
    tidemark_client_t *c = r->c;
    json_t *v = json_loadb(r->body.data, r->body.len, 0, NULL);
    tm_buf_reset(&r->body);
    if (v)
        deliver(c, r, v);
    json_decref(v);
    pthread_mutex_lock(&c->mu);
    if (r->phase != RQ_DONE)
        rq_finish_locked(r, TIDEMARK_EPROTO, NULL);
    pthread_mutex_unlock(&c->mu);
}

static void x_http_error(rq *r, long status)
{
    tidemark_client_t *c = r->c;
    json_t *v = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, NULL);
    tm_buf_reset(&r->body);
    json_t *err = json_incref(json_object_get(v, "error"));
    json_decref(v);
    if (!err)
        set_error(&err, TM_RPC_INTERNAL_ERROR, "http_error", "the server answered with an error",
                  json_pack("{s:i}", "status", (int)status));
    pthread_mutex_lock(&c->mu);
    r->final = !r->is_get; /* the request itself was refused; a refused resume may be retried */
    rq_finish_locked(r, TIDEMARK_EPEER, err);
    pthread_mutex_unlock(&c->mu);
}

/* A resume answered with a body that is not an event stream: whatever it
 * says carries no id, so nothing proves it continues the stream. */
static void x_not_a_stream(rq *r, long status)
{
    TM_WARN("stream %s: continuity_lost: the resume from %s was answered %ld without an event "
            "stream", r->stream_key, r->last_id, status);
    tm_buf_reset(&r->body);
    rq_fail(r, TIDEMARK_EPROTO, "continuity_lost", "the resume was answered without an event stream",
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

static void x_done_inner(rq *r, int rc, long status)
{
    tidemark_client_t *c = r->c;
    pthread_mutex_lock(&c->mu);
    int done = r->phase == RQ_DONE;
    pthread_mutex_unlock(&c->mu);
    if (done)
        return;
    if (status == 404 && !r->sse) {
        x_session_lost(r);
        return;
    }
    int ok2xx = !r->sse && rc == 0 && status >= 200 && status < 300;
    int expects_answer = r->msg && json_object_get(r->msg, "id") && json_object_get(r->msg, "method");
    if (ok2xx && !expects_answer && !r->is_get) {
        /* A POST carrying a notification or a response is accepted by any
         * 2xx; a body, if any, means nothing. */
        pthread_mutex_lock(&c->mu);
        rq_finish_locked(r, 0, json_object());
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* An answer has a body. A 202 or an empty 2xx is none: libcurl reports
     * a response cut inside its headers as a complete 200 with no body
     * (measured, 7.88), so it is taken as the cut it may be. */
    if (ok2xx && status != 202 && r->body.len > 0) {
        if (r->is_get && r->have_id) {
            x_not_a_stream(r, status);
        } else if (!r->is_get) {
            x_json_answer(r);
        } else {
            pthread_mutex_lock(&c->mu); /* a listen answered without a stream: it ends */
            rq_finish_locked(r, 0, json_object());
            pthread_mutex_unlock(&c->mu);
        }
        return;
    }
    if (!r->sse && status >= 400 && !still_attached(r, status)) {
        x_http_error(r, status);
        return;
    }
    /* The stream ended (or was cut, or is still held elsewhere) before the
     * response: reconnect, within the attempt budget. */
    tm_buf_reset(&r->body);
    if (r->parser)
        tm_sse_parser_finish(r->parser);
    pthread_mutex_lock(&c->mu);
    r->phase = RQ_RECONNECT;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void x_sent(void *ud)
{
    rq *r = ud;
    pthread_mutex_lock(&r->c->mu);
    if (!r->is_get)
        r->sent = 1; /* from now on the server may have received it */
    if (r->listen) {
        r->c->standalone_open = 1; /* requested: servers may hold the headers back */
        pthread_cond_broadcast(&r->c->cv);
    }
    pthread_mutex_unlock(&r->c->mu);
}

static const tm_hx_cb rq_callbacks = {x_sent, x_headers, x_data, x_done};

/* Build headers for an exchange. out holds up to 8 lines, buf the text. */
static void make_headers(tidemark_client_t *c, const char *accept, const char *last_id,
                         const char **out, char buf[4][512])
{
    int n = 0;
    out[n++] = accept;
    if (strcmp(accept, "Accept: text/event-stream") != 0)
        out[n++] = "Content-Type: application/json";
    pthread_mutex_lock(&c->mu);
    if (c->session) {
        snprintf(buf[0], 512, "Mcp-Session-Id: %s", c->session);
        out[n++] = buf[0];
    }
    if (c->proto) {
        snprintf(buf[1], 512, "MCP-Protocol-Version: %s", c->proto);
        out[n++] = buf[1];
    }
    pthread_mutex_unlock(&c->mu);
    if (last_id) {
        snprintf(buf[2], 512, "Last-Event-ID: %s", last_id);
        out[n++] = buf[2];
    }
    out[n] = NULL;
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

/* Cancel r's exchange, if any, and wait until its callbacks are over. */
static void end_exchange(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    if (r->x && r->x != UINT64_MAX)
        tm_hc_cancel(c->hc, r->x);
    while (r->x) {
        struct timespec ts = tm_deadline_ms(100);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
}

static int is_tools_call(json_t *msg)
{
    const char *method = json_string_value(json_object_get(msg, "method"));
    return method && strcmp(method, "tools/call") == 0;
}

/* Fresh state for r's next exchange. */
static void exchange_reset(rq *r, int is_get)
{
    r->status = 0;
    r->sse = 0;
    r->is_get = is_get;
    r->progressed = 0;
    tm_buf_reset(&r->body);
}

static int start_post(tidemark_client_t *c, rq *r)
{
    size_t len;
    char *body = tm_jsonrpc_dump(r->msg, &len);
    if (!body)
        return TIDEMARK_ENOMEM;
    const char *h[8];
    char buf[4][512];
    make_headers(c, "Accept: application/json, text/event-stream", NULL, h, buf);
    /* A call goes out once per decision of ours: never on a reused
     * connection, where libcurl would re-send it by itself after a cut. */
    tm_hx_req req = {.method = "POST", .url = c->url, .headers = h, .body = body, .body_len = len,
                     .fresh_connection = is_tools_call(r->msg)};
    exchange_reset(r, 0);
    int rc = start_exchange(c, r, &req);
    free(body);
    return rc;
}

static int start_get(tidemark_client_t *c, rq *r)
{
    const char *h[8];
    char buf[4][512];
    make_headers(c, "Accept: text/event-stream", r->have_id ? r->last_id : NULL, h, buf);
    tm_hx_req req = {.method = "GET", .url = c->url, .headers = h};
    exchange_reset(r, 1);
    return start_exchange(c, r, &req);
}

/* Fire-and-forget POST of a message (responses to server requests): only
 * its outcome is logged. */
static void f_done(void *ud, int rc, long status)
{
    (void)ud;
    if (rc || status >= 300)
        TM_WARN("posting a response to the server failed (status %ld)", status);
}

static int post_message(tidemark_client_t *c, json_t *msg)
{
    size_t len;
    char *body = tm_jsonrpc_dump(msg, &len);
    if (!body)
        return TIDEMARK_ENOMEM;
    const char *h[8];
    char buf[4][512];
    make_headers(c, "Accept: application/json, text/event-stream", NULL, h, buf);
    tm_hx_req req = {.method = "POST", .url = c->url, .headers = h, .body = body, .body_len = len,
                     .timeout_ms = c->cfg.timeout_ms};
    static const tm_hx_cb cb = {.on_done = f_done};
    int rc = tm_hc_start(c->hc, &req, &cb, NULL, NULL);
    free(body);
    return rc;
}

/* Wait until r leaves RQ_RUNNING or the deadline passes. Holds c->mu. */
static int wait_phase(tidemark_client_t *c, rq *r, int64_t deadline)
{
    while (r->phase == RQ_RUNNING && !c->stopping) {
        struct timespec ts = tm_deadline_ms(deadline - tm_now_ms());
        if (tm_now_ms() >= deadline ||
            pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0) {
            if (r->phase == RQ_RUNNING && tm_now_ms() >= deadline)
                return TIDEMARK_ETIMEDOUT;
        }
    }
    return 0;
}

/* Settle r when the client stops or its deadline has passed, whatever it
 * was doing (running, or waiting to reconnect). Returns 1 once r is done.
 * Holds c->mu. */
static int settle_locked(tidemark_client_t *c, rq *r, int64_t deadline)
{
    if (r->phase == RQ_DONE)
        return 1;
    if (!c->stopping && tm_now_ms() < deadline)
        return 0;
    json_t *e = NULL;
    set_error(&e, TM_RPC_INTERNAL_ERROR, c->stopping ? "client_stopped" : "timeout",
              c->stopping ? "the client is stopping" : "no response before the deadline", NULL);
    /* Not final: the request stays outstanding, and resume() finishes it. */
    rq_finish_locked(r, c->stopping ? TIDEMARK_ECANCELED : TIDEMARK_ETIMEDOUT, e);
    return 1;
}

/* Sleep ms, but never past the deadline, and not at all once the client
 * stops. Returns 0 when the whole delay passed, 1 when cut short. */
static int nap(tidemark_client_t *c, long ms, int64_t deadline)
{
    pthread_mutex_lock(&c->mu);
    int64_t end = tm_now_ms() + ms;
    int cut = end >= deadline;
    if (cut)
        end = deadline;
    while (!c->stopping && tm_now_ms() < end) {
        struct timespec ts = tm_deadline_ms(end - tm_now_ms());
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    cut |= c->stopping;
    pthread_mutex_unlock(&c->mu);
    return cut;
}

/* The delay before reconnect attempt n (n = attempts since the last
 * progress). The first is the server's retry exactly, clamped to
 * [retry_min_ms, retry_max_ms], else backoff_ms with jitter; each later one
 * doubles, with full jitter, up to max(backoff_max_ms, the retry). */
static long reconnect_delay(tidemark_client_t *c, rq *r)
{
    unsigned long base = c->cfg.backoff_ms;
    if (r->retry_set) {
        base = r->retry_ms;
        if (base < c->cfg.retry_min_ms)
            base = c->cfg.retry_min_ms;
        if (base > c->cfg.retry_max_ms)
            base = c->cfg.retry_max_ms;
        if (r->attempts <= 1)
            return (long)base;
    }
    unsigned long cap = c->cfg.backoff_max_ms > base ? c->cfg.backoff_max_ms : base;
    unsigned long d = base;
    for (unsigned i = 1; i < r->attempts && d < cap; i++)
        d *= 2;
    if (d > cap)
        d = cap;
    uint32_t rnd = 0;
    tm_random_bytes(&rnd, sizeof rnd);
    return (long)(d / 2 + rnd % (d / 2 + 1));
}

/* Whether the tool is annotated idempotent or read-only: 1 yes, 0 no (or
 * not listed), -1 unknown for now (tools/list did not get through). */
static int tool_safe(tidemark_client_t *c, const char *tool)
{
    pthread_mutex_lock(&c->mu);
    int known = c->tool_safe != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!known) {
        json_t *tools = NULL;
        int rc = tidemark_client_list(c, "tools/list", "tools", &tools);
        if (rc) {
            json_decref(tools);
            return rc == TIDEMARK_EPEER ? 0 : -1;
        }
        json_t *safe = json_object();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *a = json_object_get(t, "annotations");
            int ok = json_is_true(json_object_get(a, "idempotentHint")) ||
                     json_is_true(json_object_get(a, "readOnlyHint"));
            const char *name = json_string_value(json_object_get(t, "name"));
            if (name)
                json_object_set_new(safe, name, json_boolean(ok));
        }
        json_decref(tools);
        pthread_mutex_lock(&c->mu);
        json_decref(c->tool_safe);
        c->tool_safe = safe;
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->mu);
    int ok = tool && json_is_true(json_object_get(c->tool_safe, tool));
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static const char *tool_of(json_t *msg)
{
    return json_string_value(json_object_get(json_object_get(msg, "params"), "name"));
}

/*
 * With ids we cannot interpret (a foreign server), continuity across a
 * reconnect cannot be proven; only the dispatch log deduplicates. Resuming
 * is then allowed for requests that are safe to see twice: anything but
 * tools/call, and tools annotated idempotent or read-only. 1 / 0 / -1 unknown.
 */
static int opaque_resume_allowed(tidemark_client_t *c, rq *r)
{
    if (!r->msg || r->listen || c->cfg.opaque_policy == TIDEMARK_OPAQUE_RESUME ||
        !is_tools_call(r->msg))
        return 1;
    return tool_safe(c, tool_of(r->msg));
}

/*
 * A request with no event through may be POSTed again only when that cannot
 * repeat it: it is not a call (the other requests are reads), no POST of it
 * ever reached a connection, it carries an idempotency key, the session's
 * server proved itself a Tidemark server (its call records are keyed by
 * request id, so the same id is answered from the record), or the tool is
 * annotated idempotent or read-only. 1 / 0 / -1 unknown.
 */
static int resend_allowed(tidemark_client_t *c, rq *r)
{
    if (!is_tools_call(r->msg))
        return 1;
    pthread_mutex_lock(&c->mu);
    int sent = r->sent;
    pthread_mutex_unlock(&c->mu);
    if (!sent)
        return 1;
    json_t *meta = json_object_get(json_object_get(r->msg, "params"), "_meta");
    if (json_is_string(json_object_get(meta, "dev.tidemark/idempotency-key")))
        return 1;
    if (tm_cstate_session_proven(c->st))
        return 1;
    return tool_safe(c, tool_of(r->msg));
}

enum { X_NONE = 0, X_GET, X_POST, X_WAIT };

/* What r's next exchange is after a cut; X_NONE after failing r. */
static int next_exchange(tidemark_client_t *c, rq *r)
{
    if (r->listen)
        return X_GET;
    if (r->have_id) {
        int ok = r->ours ? 1 : opaque_resume_allowed(c, r);
        if (ok)
            return ok > 0 ? X_GET : X_WAIT;
        rq_fail(r, TIDEMARK_EPROTO, "continuity_unprovable",
                "a non-idempotent request was cut mid-stream on a server whose event ids "
                "cannot prove continuity; the session is not resumed",
                json_pack("{s:s}", "last_event_id", r->last_id));
        pthread_mutex_lock(&c->mu);
        c->session_lost = 1; /* session-terminating, reported as such */
        r->final = 1;
        pthread_mutex_unlock(&c->mu);
        return X_NONE;
    }
    int ok = resend_allowed(c, r);
    if (ok)
        return ok > 0 ? X_POST : X_WAIT;
    rq_fail(r, TIDEMARK_EPROTO, "continuity_unprovable",
            "the call was cut before any event and may have reached the server; nothing "
            "proves that re-sending it would not repeat it, so it was not re-sent", NULL);
    pthread_mutex_lock(&c->mu);
    r->final = 1; /* its outcome can never be learned */
    pthread_mutex_unlock(&c->mu);
    return X_NONE;
}

/* One reconnection of r after a cut: budget, decision, delay, exchange. */
static void reconnect(tidemark_client_t *c, rq *r, int64_t deadline)
{
    if (r->progressed)
        r->attempts = 0; /* the stream moved forward: a fresh budget */
    r->progressed = 0;
    if (++r->attempts > c->cfg.max_attempts) {
        rq_fail(r, TIDEMARK_EIO, "reconnect_exhausted", "the stream could not be resumed",
                json_pack("{s:i}", "attempts", (int)c->cfg.max_attempts));
        return;
    }
    end_exchange(c, r);
    int how = next_exchange(c, r);
    if (how == X_NONE)
        return;
    long delay = r->skip_nap ? 0 : reconnect_delay(c, r);
    r->skip_nap = 0;
    if (nap(c, delay, deadline) || how == X_WAIT)
        return; /* stopped or out of time (settled next), or decide again */
    pthread_mutex_lock(&c->mu);
    r->phase = RQ_RUNNING;
    pthread_mutex_unlock(&c->mu);
    int rc = how == X_POST ? start_post(c, r) : start_get(c, r);
    if (rc)
        rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
}

/* Drive r (already started, or waiting to reconnect) to its end: wait,
 * reconnect with Last-Event-ID after cuts, bounded attempts, all within the
 * deadline. Returns r->rc. */
static int drive(tidemark_client_t *c, rq *r, int64_t deadline)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        wait_phase(c, r, deadline);
        int done = settle_locked(c, r, deadline);
        pthread_mutex_unlock(&c->mu);
        if (done) {
            end_exchange(c, r);
            return r->rc;
        }
        reconnect(c, r, deadline); /* RQ_RECONNECT */
    }
}

static rq *rq_new(tidemark_client_t *c, int64_t id)
{
    rq *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->c = c;
    r->id = id;
    snprintf(r->key, sizeof r->key, "%" PRId64, id);
    tm_buf_init(&r->body, MAX_JSON_BODY);
    return r;
}

static void pending_add(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    tm_map_put(c->pending, r->key, r);
    pthread_mutex_unlock(&c->mu);
}

static void pending_del(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    if (tm_map_get(c->pending, r->key) == r)
        tm_map_del(c->pending, r->key);
    pthread_mutex_unlock(&c->mu);
}

/* ---- public API ------------------------------------------------------------------ */

static int do_initialize(tidemark_client_t *c, json_t **err)
{
    pthread_mutex_lock(&c->mu);
    free(c->session);
    c->session = NULL;
    free(c->proto);
    c->proto = NULL;
    c->session_lost = 0;
    pthread_mutex_unlock(&c->mu);
    json_t *caps = c->caps ? json_incref(c->caps) : json_object();
    if (!c->caps) {
        if (c->cfg.on_request) {
            json_object_set_new(caps, "sampling", json_object());
            json_object_set_new(caps, "elicitation", json_pack("{s:{}}", "form"));
        }
        if (c->roots)
            json_object_set_new(caps, "roots", json_pack("{s:b}", "listChanged", 0));
    }
    int64_t id = tm_cstate_next_request_id(c->st);
    rq *r = rq_new(c, id);
    if (!r) {
        json_decref(caps);
        return TIDEMARK_ENOMEM;
    }
    r->msg = tm_jsonrpc_request(json_integer(id), "initialize",
                                json_pack("{s:s,s:o,s:{s:s,s:s}}", "protocolVersion", c->offer,
                                          "capabilities", caps, "clientInfo", "name", c->name,
                                          "version", c->version));
    pending_add(c, r);
    int rc = start_post(c, r);
    if (!rc)
        rc = drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    pending_del(c, r);
    if (rc) {
        if (err)
            *err = json_incref(r->result);
        rq_free(r);
        return rc;
    }
    const char *v = json_string_value(json_object_get(r->result, "protocolVersion"));
    if (!tm_protocol_version_supported(v)) {
        set_error(err, TM_RPC_INVALID_REQUEST, "unsupported_protocol_version",
                  "the server chose a protocol version this client does not speak",
                  json_pack("{s:s}", "protocolVersion", v ? v : ""));
        rq_free(r);
        return TIDEMARK_ENOTSUP;
    }
    pthread_mutex_lock(&c->mu);
    c->proto = strdup(v);
    json_decref(c->server_info);
    c->server_info = json_incref(r->result);
    pthread_mutex_unlock(&c->mu);
    rq_free(r);
    /* The session starts over: old cursors and dispatch rows belong to the old one. */
    tm_cstate_session_clear(c->st);
    char *info = json_dumps(c->server_info, JSON_COMPACT);
    tm_cstate_session_set(c->st, c->url, c->session ? c->session : "", c->proto, info);
    free(info);
    int nrc = tidemark_client_notify(c, "notifications/initialized", NULL);
    if (nrc)
        set_error(err, TM_RPC_INTERNAL_ERROR, "initialized_failed",
                  "the server did not accept notifications/initialized", NULL);
    return nrc;
}

static void *listener_main(void *arg)
{
    tidemark_client_listen(arg, 0);
    return NULL;
}

/* open_standalone: keep the GET stream open in the background. */
static int start_listener(tidemark_client_t *c, int rc)
{
    if (rc || !c->cfg.open_standalone || c->listening)
        return rc;
    if (pthread_create(&c->listener, NULL, listener_main, c) == 0)
        c->listening = 1;
    return 0;
}

static int connect_inner(tidemark_client_t *c, json_t **err);

int tidemark_client_connect(tidemark_client_t *c, json_t **err)
{
    return start_listener(c, connect_inner(c, err));
}

static int connect_inner(tidemark_client_t *c, json_t **err)
{
    if (err)
        *err = NULL;
    char *url, *id, *version, *server;
    if (tm_cstate_session_get(c->st, &url, &id, &version, &server) == 0 && url && id && id[0] &&
        version && strcmp(url, c->url) == 0) {
        pthread_mutex_lock(&c->mu);
        c->session = id;
        c->proto = version;
        c->server_info = server ? json_loads(server, JSON_ALLOW_NUL, NULL) : NULL;
        pthread_mutex_unlock(&c->mu);
        free(url);
        free(server);
        return 0;
    }
    free(url);
    free(id);
    free(version);
    free(server);
    return do_initialize(c, err);
}

int tidemark_client_notify(tidemark_client_t *c, const char *method, json_t *params)
{
    rq *r = rq_new(c, 0);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->msg = tm_jsonrpc_notification(method, params ? json_incref(params) : NULL);
    int rc = start_post(c, r);
    if (!rc)
        rc = drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    rq_free(r);
    return rc;
}

int tidemark_client_request(tidemark_client_t *c, const char *method, json_t *params,
                            tidemark_progress_fn progress, void *progress_ud, json_t **result)
{
    *result = NULL;
    pthread_mutex_lock(&c->mu);
    int lost = c->session_lost;
    pthread_mutex_unlock(&c->mu);
    if (lost) {
        /* 404 earlier: the session is gone. Start a new one; requests that
         * were outstanding were already settled with session_lost. */
        json_t *err = NULL;
        int rc = do_initialize(c, &err);
        if (rc) {
            *result = err;
            return rc;
        }
    }
    int64_t id = tm_cstate_next_request_id(c->st);
    rq *r = rq_new(c, id);
    if (!r)
        return TIDEMARK_ENOMEM;
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (progress) {
        json_t *meta = json_object_get(p, "_meta");
        if (!json_is_object(meta)) {
            meta = json_object();
            json_object_set_new(p, "_meta", meta);
        }
        json_object_set_new(meta, "progressToken", json_integer(id));
    }
    r->msg = tm_jsonrpc_request(json_integer(id), method, p);
    r->progress = progress;
    r->progress_ud = progress_ud;
    if (strcmp(method, "tools/call") == 0) {
        char *ptxt = json_dumps(p, JSON_COMPACT);
        json_t *meta = json_object_get(p, "_meta");
        r->recorded = tm_cstate_outstanding_add(c->st, id, method, ptxt,
                                                json_string_value(json_object_get(meta, "dev.tidemark/idempotency-key"))) == 0;
        free(ptxt);
    }
    pending_add(c, r);
    int rc = start_post(c, r);
    if (!rc)
        rc = drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    pending_del(c, r);
    /* Only a final outcome ends the outstanding row: after a stop, a
     * timeout or a refusal the call can still be resumed. */
    if (r->recorded && r->final)
        tm_cstate_outstanding_done(c->st, id);
    *result = json_incref(r->result);
    rc = r->rc;
    rq_free(r);
    return rc;
}

int tidemark_client_call_tool(tidemark_client_t *c, const char *name, json_t *args,
                              tidemark_progress_fn progress, void *ud, json_t **result)
{
    json_t *params = json_pack("{s:s,s:o}", "name", name, "arguments",
                               args ? json_incref(args) : json_object());
    int rc = tidemark_client_request(c, "tools/call", params, progress, ud, result);
    json_decref(params);
    return rc;
}

int tidemark_client_list(tidemark_client_t *c, const char *method, const char *field, json_t **items)
{
    *items = json_array();
    json_t *cursor = NULL;
    for (int page = 0; page < 10000; page++) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_t *res = NULL;
        int rc = tidemark_client_request(c, method, params, NULL, NULL, &res);
        json_decref(params);
        json_decref(cursor);
        cursor = NULL;
        if (rc) {
            json_decref(*items);
            *items = res;
            return rc;
        }
        json_array_extend(*items, json_object_get(res, field));
        cursor = json_incref(json_object_get(res, "nextCursor"));
        json_decref(res);
        if (!json_is_string(cursor))
            break;
    }
    json_decref(cursor);
    return 0;
}

/* Load r's saved cursor for stream. Returns 0, or a verdict other than
 * TM_V_DISPATCH when the saved state itself proves a skipped event. */
static tm_verdict load_cursor(tidemark_client_t *c, rq *r, const char *stream, json_t **why)
{
    snprintf(r->stream_key, sizeof r->stream_key, "%s", stream);
    tm_cursor cur;
    uint64_t last = 0;
    if (tm_cstate_begin(c->st) != 0)
        return TM_V_DISPATCH; /* no cursor known: decided like a request cut before any event */
    int rc = tm_cstate_cursor_get(c->st, stream, &cur);
    if (rc == 0 && cur.known)
        last = tm_cstate_last_dispatched(c->st, stream);
    tm_cstate_rollback(c->st);
    if (rc) { /* unreadable: never resume from a cursor we cannot prove */
        *why = json_pack("{s:s,s:s}", "stream", stream, "detail", "saved cursor unreadable");
        return TM_V_BAD_ID;
    }
    if (!cur.known)
        return TM_V_DISPATCH;
    snprintf(r->last_id, sizeof r->last_id, "%s", cur.event_id);
    r->have_id = 1;
    r->ours = cur.seq > 0;
    tm_verdict v = tm_validate_saved(cur.seq, last);
    if (v != TM_V_DISPATCH)
        *why = json_pack("{s:s,s:s,s:I,s:I}", "stream", stream, "cursor", cur.event_id, "head",
                         (json_int_t)cur.seq, "last_dispatched", (json_int_t)last);
    return v;
}

/* Resume one outstanding request (a row of the state); its entry goes to results. */
static void resume_one(tidemark_client_t *c, json_t *row, json_t *results)
{
    int64_t id = json_integer_value(json_object_get(row, "request_id"));
    const char *stream = json_string_value(json_object_get(row, "stream"));
    const char *params = json_string_value(json_object_get(row, "params"));
    rq *r = rq_new(c, id);
    if (!r)
        return;
    r->recorded = 1;
    r->msg = tm_jsonrpc_request(json_integer(id), json_string_value(json_object_get(row, "method")),
                                json_loads(params ? params : "{}", JSON_ALLOW_NUL, NULL));
    json_t *why = NULL;
    tm_verdict v = stream ? load_cursor(c, r, stream, &why) : TM_V_DISPATCH;
    pending_add(c, r);
    int rc = 0;
    if (v != TM_V_DISPATCH) {
        /* Typed before any byte is sent: nothing the server sends can undo it. */
        rq_fail(r, TIDEMARK_EPROTO, tm_verdict_reason(v),
                "the saved cursor is ahead of the dispatch log: an event was skipped", why);
    } else if (r->have_id) {
        /* With a cursor: resume the stream. */
        if ((rc = start_get(c, r)) != 0)
            rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    } else {
        /* Without: no event of it got through; it is re-sent only where that
         * cannot repeat it (drive decides, as after a cut: the killed process
         * may have sent it). */
        r->sent = 1;
        r->skip_nap = 1;
        r->phase = RQ_RECONNECT;
    }
    rc = drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    pending_del(c, r);
    json_array_append_new(results, json_pack("{s:I,s:O?}", "id", (json_int_t)id,
                                             rc == 0 ? "result" : "error", r->result));
    if (r->final)
        tm_cstate_outstanding_done(c->st, id);
    rq_free(r);
}

int tidemark_client_resume(tidemark_client_t *c, json_t **results)
{
    *results = json_array();
    json_t *rows = NULL;
    int rc = tm_cstate_outstanding_list(c->st, &rows);
    if (rc)
        return rc;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) resume_one(c, row, *results);
    json_decref(rows);
    return 0;
}

int tidemark_client_listen(tidemark_client_t *c, int stop_after_ms)
{
    rq *r = rq_new(c, -1);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->listen = 1;
    snprintf(r->key, sizeof r->key, "listen");
    int rc = start_get(c, r);
    if (!rc)
        rc = drive(c, r, stop_after_ms > 0 ? tm_now_ms() + stop_after_ms : INT64_MAX / 2);
    rq_free(r);
    return rc == TIDEMARK_ETIMEDOUT ? 0 : rc;
}

int tidemark_client_state(tidemark_client_t *c, json_t **state)
{
    return tm_cstate_dump(c->st, state);
}

int tidemark_client_query(tidemark_client_t *c, const char *sql, const char *const *args,
                          size_t nargs, json_t **rows)
{
    return tm_cstate_query(c->st, sql, args, nargs, rows);
}

int tidemark_client_wait_standalone(tidemark_client_t *c, int timeout_ms)
{
    int64_t end = tm_now_ms() + timeout_ms;
    pthread_mutex_lock(&c->mu);
    while (!c->standalone_open && !c->stopping && tm_now_ms() < end) {
        struct timespec ts = tm_deadline_ms(end - tm_now_ms());
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    int ok = c->standalone_open;
    pthread_mutex_unlock(&c->mu);
    return ok ? 0 : TIDEMARK_ETIMEDOUT;
}

void tidemark_client_stop(tidemark_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

typedef struct del_ctx {
    long status;
    int done;
    tidemark_client_t *c;
} del_ctx;
static void d_done(void *ud, int rc, long status)
{
    (void)rc;
    del_ctx *d = ud;
    pthread_mutex_lock(&d->c->mu);
    d->status = status;
    d->done = 1;
    pthread_cond_broadcast(&d->c->cv);
    pthread_mutex_unlock(&d->c->mu);
}

int tidemark_client_end_session(tidemark_client_t *c)
{
    if (!c->session)
        return TIDEMARK_ENOTFOUND;
    const char *h[8];
    char buf[4][512];
    make_headers(c, "Accept: application/json, text/event-stream", NULL, h, buf);
    tm_hx_req req = {.method = "DELETE", .url = c->url, .headers = h, .timeout_ms = c->cfg.timeout_ms};
    del_ctx d = {0, 0, c};
    static const tm_hx_cb cb = {.on_done = d_done};
    int rc = tm_hc_start(c->hc, &req, &cb, &d, NULL);
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    while (!d.done)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    tm_cstate_session_clear(c->st);
    return d.status >= 200 && d.status < 300 ? 0 : TIDEMARK_EPEER;
}

void tidemark_client_free(tidemark_client_t *c)
{
    if (!c)
        return;
    tidemark_client_stop(c);
    if (c->listening)
        pthread_join(c->listener, NULL);
    tm_pool_free(c->workers);
    tm_hc_free(c->hc);
    tm_cstate_close(c->st);
    tm_map_free(c->pending);
    json_decref(c->caps);
    json_decref(c->roots);
    json_decref(c->server_info);
    json_decref(c->tool_safe);
    free(c->url);
    free(c->state_path);
    free(c->name);
    free(c->version);
    free(c->offer);
    free(c->session);
    free(c->proto);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}
