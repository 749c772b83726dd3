/*
 * events.c - SSE events of a request's stream, on its driver: classified
 * on arrival, held back while an emit-early server has not announced them
 * durable, run through the validator against the saved cursor and the
 * dispatch log, then applied under the persistence mode (the application's
 * on_event, its dispatch row and the cursor), then delivered as messages.
 */
#include "client_int.h"
#include "../base/log.h"
#include "../common/txn.h"
#include "../mcp/jsonrpc.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the persistence modes ---------------------------------------------------------- */

static int app_dispatch(tidemark_client_t *c, const tidemark_event_t *ev)
{
    if (!c->cfg.on_event || !ev->message)
        return 0;
    struct tidemark_txn txn;
    tm_txn_sqlite_init(&txn, tm_cstate_db(c->st)); /* the state's open transaction */
    return c->cfg.on_event(&txn, ev, c->cfg.ud);
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
    TM_CLIENT_CRASH_POINT("atomic_before_commit");
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
    TM_CLIENT_CRASH_POINT("after_dispatch_before_cursor");
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
    TM_CLIENT_CRASH_POINT("after_cursor_before_dispatch");
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

/* In the first transaction of r's first accepted event: the outstanding
 * request learns its stream (a crash cannot leave the cursor without it),
 * and a structured id proves the session's server a Tidemark server. */
static int note_first_event(tidemark_client_t *c, rq *r, const inev *e, const char *key)
{
    int rc = 0;
    if (r->recorded && !r->have_id)
        rc = tm_cstate_outstanding_stream_txn(c->st, r->row_id, key);
    if (rc == 0 && e->kind == TM_ID_STRUCTURED && !r->ours)
        rc = tm_cstate_session_prove(c->st);
    return rc;
}

/* Apply an accepted event (verdict v) under the persistence mode. The
 * transaction is open on entry and settled on return. */
static int persist(tidemark_client_t *c, rq *r, const inev *e, const char *key, tm_verdict v)
{
    uint64_t seq = e->kind == TM_ID_STRUCTURED ? e->eid.seq : 0;
    tidemark_event_t ev = {.id = e->id, .stream = seq ? e->eid.stream : "", .seq = seq,
                           .message = e->msg};
    int64_t done_id = r->recorded && !r->listen && e->msg && answers(e->msg, r->id) ? r->row_id : 0;
    int rc = note_first_event(c, r, e, key);
    const char *task = done_id && r->tasks
                           ? tm_task_created(json_object_get(e->msg, "result")) : NULL;
    if (rc == 0 && task && *task) {
        /* A CreateTaskResult: the call goes on as the task, recorded with
         * the event that named it. */
        rc = tm_cstate_outstanding_task_txn(c->st, r->row_id, task);
        done_id = 0;
    }
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

/* ---- the validator ------------------------------------------------------------------ */

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
    if (d && v == TM_V_BAD_ID &&
        json_object_set_new(d, "detail", json_string(e->why ? e->why : "malformed")) != 0)
        TM_WARN("client: out of memory describing a refusal");
    if (d && v == TM_V_STREAM_MISMATCH && e->kind == TM_ID_STRUCTURED &&
        json_object_set_new(d, "event_stream", json_string(e->eid.stream)) != 0)
        TM_WARN("client: out of memory describing a refusal");
    TM_WARN("stream %s: %s at event %s (cursor %s)", r->stream_key[0] ? r->stream_key : "-",
            tm_verdict_reason(v), shown[0] ? shown : "(no id)", at[0] ? at : "-");
    tm_rq_fail(r, TIDEMARK_EPROTO, tm_verdict_reason(v), "resumption validator refused the stream", d);
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

/* The validator's input from the saved state, in the open transaction.
 * OUT cur: the saved cursor. */
static int saved_input(tidemark_client_t *c, const inev *e, const char *key, tm_validate_in *in,
                       tm_cursor *cur)
{
    int rc = tm_cstate_cursor_get(c->st, key, cur);
    int state = TM_DISPATCH_NONE;
    if (rc == 0 && e->id[0])
        rc = tm_cstate_dispatch_state(c->st, e->id, &state);
    if (rc == 0)
        rc = tm_cstate_last_dispatched(c->st, key, &in->last_dispatched);
    in->cursor = cur->seq;
    in->dispatched = state != TM_DISPATCH_NONE;
    return rc;
}

/* The verdict on e, with the transaction left open for DISPATCH and
 * SUPPRESS (and rolled back otherwise). Fails r on a state error. */
static int judge(tidemark_client_t *c, rq *r, const inev *e, const char *key, tm_verdict *v,
                 tm_cursor *cur)
{
    tm_validate_in in = {.id_kind = e->kind, .message_ok = e->msg_ok, .stream = stream_kind(r),
                         .idempotent = c->cfg.idempotent_handlers};
    if (e->kind == TM_ID_STRUCTURED) {
        in.head = e->eid.seq;
        in.same_stream = !r->ours || strcmp(r->stream_key, e->eid.stream) == 0;
    }
    if (tm_cstate_begin(c->st) != 0) {
        tm_rq_fail(r, TIDEMARK_EIO, "state_error", "client state unavailable", NULL);
        return TIDEMARK_EIO;
    }
    if (saved_input(c, e, key, &in, cur) != 0) {
        tm_cstate_rollback(c->st);
        tm_rq_fail(r, TIDEMARK_EIO, "state_error", "the saved cursor or dispatch log cannot be read",
                   NULL);
        return TIDEMARK_EIO;
    }
    *v = tm_validate(&in);
    if (*v != TM_V_DISPATCH && *v != TM_V_SUPPRESS)
        tm_cstate_rollback(c->st);
    return 0;
}

/* Run one arriving event through the validator and the persistence mode.
 * Returns 0 to go on (the event was applied, or is a plain id-less message
 * to handle without logging), or a negative code after failing r. */
static int accept_event(tidemark_client_t *c, rq *r, const inev *e)
{
    char key[80];
    stream_key_for(r, e, key, sizeof key);
    tm_verdict v;
    tm_cursor cur;
    int rc = judge(c, r, e, key, &v, &cur);
    if (rc)
        return rc;
    if (v == TM_V_PLAIN) {
        r->progressed |= e->msg != NULL;
        return 0;
    }
    if (v != TM_V_DISPATCH && v != TM_V_SUPPRESS) {
        refuse(r, v, e, &cur);
        return TIDEMARK_EPROTO;
    }
    rc = persist(c, r, e, key, v);
    if (rc) {
        tm_rq_fail(r, rc, "dispatch_failed", "the event could not be dispatched and saved", NULL);
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
        tm_deliver(c, r, e->msg);
    pthread_mutex_lock(&c->mu);
    int stop = r->phase == RQ_DONE;
    pthread_mutex_unlock(&c->mu);
    /* A foreign server may keep a resumed stream open after the response:
     * stop reading once we have it. */
    return stop ? 1 : 0;
}

/* ---- emit-early: holding back what is not durable yet ---------------------------------- */

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
    size_t cost = data_len + strlen(e->id) + TM_CLIENT_HELD_OVERHEAD;
    if (r->held_bytes + cost > c->cfg.max_held_bytes) {
        TM_WARN("client: an emit-early server sent over %zu bytes not yet durable", r->held_bytes);
        tm_rq_fail(r, TIDEMARK_EPROTO, "held_back_overflow",
                   "the server sent more events than may be held back before it announced any durable",
                   json_pack("{s:I,s:I,s:I}", "limit", (json_int_t)c->cfg.max_held_bytes,
                             "held_bytes", (json_int_t)r->held_bytes, "durable_head",
                             (json_int_t)r->durable));
        return 1;
    }
    held *h = calloc(1, sizeof *h);
    if (!h || !(h->id = strdup(e->id))) {
        free(h);
        tm_rq_fail(r, TIDEMARK_ENOMEM, "out_of_memory", "cannot hold an event back", NULL);
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

/* ---- events as they arrive -------------------------------------------------------------- */

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

/* event: tidemark-durable - what the emit-early server made durable. */
static int on_durable(rq *r, const tm_sse_event *ev)
{
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

static int on_sse_event(void *ud, const tm_sse_event *ev)
{
    rq *r = ud;
    if (strcmp(ev->type, "gap") == 0) {
        /* The server trimmed events we had not received: typed, never silent. */
        json_t *d = json_loadb(ev->data, ev->data_len, 0, NULL);
        tm_rq_fail(r, TIDEMARK_EPROTO, "resumption_gap", "events of the stream were trimmed", d);
        return 1;
    }
    if (strcmp(ev->type, "tidemark-durable") == 0)
        return on_durable(r, ev);
    if (strcmp(ev->type, "message") != 0)
        return 0; /* pings and other types: nothing to apply, and no progress */
    inev e;
    intake(ev, &e);
    if (r->modern) {
        /* Modern streams are never resumed: their ids mean nothing to us,
         * and the events are handled as the plain messages they are. */
        e.kind = TM_ID_NONE;
        e.id = "";
    }
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

const tm_sse_callbacks tm_client_sse_callbacks = {.on_event = on_sse_event,
                                                  .on_retry = on_sse_retry};
