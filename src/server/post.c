/*
 * post.c - POST: initialize, notifications and responses from the client,
 * retries of recorded calls, and new requests (a call's stream opened and
 * its record begun before anything runs).
 */
#include "server_int.h"
#include "feed.h"
#include "http_policy.h"
#include "era.h"
#include "record.h"
#include "../base/clock.h"
#include "../base/str.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct init_job {
    tidemark_server_t *srv;
    tm_req *req;
    json_t *root;
    tm_msg msg;
    char principal[TM_PRINCIPAL_MAX];
} init_job;

static void run_initialize(void *arg)
{
    init_job *ij = arg;
    tm_sess *sess = NULL;
    tm_msg_trace mt;
    tm_msg_trace_start(&mt, ij->srv, ij->req, &ij->msg);
    json_t *resp =
        tm_dispatch_initialize(ij->srv, &ij->msg, ij->principal, ij->req->peer, &sess);
    tm_msg_trace_end(&mt, resp, sess);
    if (sess) {
        tm_req_add_header(ij->req, "Mcp-Session-Id", sess->id);
        tm_sess_unref(sess);
        tm_reply_json(ij->req, 200, resp);
    } else {
        const char *why = json_string_value(
            json_object_get(json_object_get(json_object_get(resp, "error"), "data"), "reason"));
        int unavailable = why && (strcmp(why, "store_unavailable") == 0 ||
                                  strcmp(why, "store_not_replicated") == 0);
        int limited = tm_session_limit_status(resp); /* a DELETE or the TTL frees a place */
        if (unavailable || limited)
            tm_req_add_header(ij->req, "Retry-After", limited ? "60" : "1");
        tm_reply_json(ij->req, limited       ? limited
                               : unavailable ? 503
                               : json_object_get(resp, "error") ? 400 : 200, resp);
    }
    json_decref(ij->root);
    free(ij);
}

/* ---- POST ------------------------------------------------------------------ */

static void handle_notification(tidemark_server_t *srv, tm_req *r, tm_sess *sess, const tm_msg *m)
{
    tm_notification_trace(srv, r, m, sess->id, sess->version);
    if (strcmp(m->method, "notifications/cancelled") == 0) {
        tm_sess_cancel(sess, json_object_get(m->params, "requestId"));
    } else {
        TM_DEBUG("session %s: notification %s", sess->id, m->method);
    }
}

/* Mcp-Session-Id on pm's answer, once (a POST may be judged twice). */
static void sid_header(tm_req *r, tm_sess *sess, post_msgs *pm)
{
    if (!pm->sid_sent)
        tm_req_add_header(r, "Mcp-Session-Id", sess->id);
    pm->sid_sent = 1;
}

/* Attach this POST to an existing stream of the session, from its start.
 * busy: what to do when a live connection has it (its first request's
 * own, as when a copy of a request arrives with it): 0 answer 409, 1
 * return TIDEMARK_EBUSY unanswered. 0 when answered. */
static int attach_stream(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                         const char *stream, int busy)
{
    tm_feed_opts o = {.session = sess->id, .stream = stream, .after_seq = 0,
                             .retry_ms = srv->cfg.retry_ms, .announce_durable = srv->cfg.emit_early};
    sid_header(r, sess, pm);
    int rc = tm_feed_attach(srv, r, &o);
    if (rc == TIDEMARK_EBUSY && busy)
        return rc;
    if (rc == TIDEMARK_EBUSY) {
        json_t *x = json_pack("{s:s}", "stream", stream);
        tm_reply_error(r, 409, TM_RPC_INVALID_REQUEST, "stream_attached",
                    "Conflict: the request is running and its stream is attached to a live connection",
                    x);
    } else if (rc) {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc), NULL);
    }
    return 0;
}

/* Conflict: the call under this identity still runs, on a stream this
 * request cannot take (another request id carries it, or none is known). */
static void reply_in_flight(tm_req *r, const char *stream)
{
    tm_reply_error(r, 409, TM_RPC_INVALID_REQUEST, "request_in_flight",
                   "Conflict: a request under this id or idempotency key is still running",
                   stream[0] ? json_pack("{s:s}", "stream", stream) : NULL);
}

/* How long a request waits for another one under its identity to be
 * begun (record.h tm_record_claim) before it is told to retry. */
#define CLAIM_WAIT_MS 30000

/* A retry answered from its record (answer NULL: unreadable). */
static void reply_answered(tm_req *r, tm_sess *sess, post_msgs *pm, json_t *answer)
{
    sid_header(r, sess, pm);
    if (answer)
        tm_reply_json(r, 200, answer);
    else
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", "stored response unreadable",
                       NULL);
}

/* A copy of a running call whose stream its first request's connection
 * holds: answered from the record once the call's outcome is stored (on a
 * worker: 2 to be sent there first), else 409 stream_attached as before.
 * 0 when answered. */
static int await_outcome(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                         int on_worker, const char *stream)
{
    if (!on_worker)
        return 2;
    json_t *answer = NULL;
    tm_rec_verdict v = tm_record_wait_outcome(srv, sess, &pm->m[0], CLAIM_WAIT_MS, &answer);
    if (v == TM_REC_ANSWERED)
        reply_answered(r, sess, pm, answer);
    else if (v == TM_REC_REUSED)
        tm_reply_json(r, 400, answer);
    else
        tm_reply_error(r, 409, TM_RPC_INVALID_REQUEST, "stream_attached",
                       "Conflict: the request is running and its stream is attached to a live "
                       "connection", json_pack("{s:s}", "stream", stream));
    return 0;
}

/* pm's message i holds the claim of its identity in sess (record.h): kept
 * until its call takes it over, else let go by post_msgs_free. */
static void keep_claim(post_msgs *pm, size_t i, tm_sess *sess)
{
    char key[TM_REQ_KEY_MAX], name[TM_SESSION_ID_LEN + 1 + TM_REQ_KEY_MAX];
    int ok = tm_request_key(&pm->m[i], key) == 0;
    if (ok)
        tm_strjoin(name, sizeof name, sess->id, "/", key, (const char *)NULL);
    if (ok && (pm->claimed || (pm->claimed = calloc(pm->n, sizeof *pm->claimed))))
        pm->claimed[i] = strdup(name);
    if (ok && (!pm->claimed || !pm->claimed[i])) /* out of memory: unclaimed, as before */
        tm_record_unclaim_name(pm->srv, name);
}

/* The verdict of the lone call m: its identity claimed by another request
 * of this process, waited for (on a worker: 2 to be sent there first) and
 * judged again. OUT look. 1 when the wait ended first (answered here). */
static int look_lone(tidemark_server_t *srv, tm_req *r, tm_sess *sess, const tm_msg *m,
                     tm_req_prefetch *pf, int on_worker, tm_rec_look *look)
{
    int64_t deadline = tm_now_ms() + CLAIM_WAIT_MS;
    for (;;) {
        tm_record_look(srv, sess, m, pf, look);
        if (look->verdict != TM_REC_CLAIMED)
            return 0;
        if (!on_worker)
            return 2;
        if (!tm_record_await_claim(srv, sess->id, m, deadline))
            break;
    }
    tm_req_add_header(r, "Retry-After", "1");
    reply_in_flight(r, "");
    return 1;
}

/* A lone tools/call of this session judged by its record (record.h): a
 * retry of a completed call gets the stored response and runs nothing; one
 * of a running call is attached to its stream; a request id or key that
 * names another request is refused typed; one that arrives while another
 * request under its identity is being begun here waits for that one and is
 * then judged as its retry. 1 when the POST was answered here, 0 when the
 * call is new (its claim kept in pm), 2 when it must wait on a worker. */
static int answer_repeat(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                         tm_req_prefetch *pf, int on_worker)
{
    const tm_msg *m = &pm->m[0];
    tm_rec_look look;
    int waited = look_lone(srv, r, sess, m, pf, on_worker, &look);
    if (waited)
        return waited;
    switch (look.verdict) {
    case TM_REC_NEW:
        if (look.claimed)
            keep_claim(pm, 0, sess);
        return 0;
    case TM_REC_CLAIMED: /* look_lone waited */
        break;
    case TM_REC_UNSETTLED: /* the same reason until the store recovers and it is settled */
        tm_req_add_header(r, "Retry-After", "1");
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_failed",
                       "The result of this request could not be made durable yet", NULL);
        break;
    case TM_REC_REUSED:
        tm_reply_json(r, 400, look.answer);
        look.answer = NULL;
        break;
    case TM_REC_ANSWERED:
        tm_record_trace(srv, r, m, "answered");
        reply_answered(r, sess, pm, look.answer);
        look.answer = NULL;
        break;
    case TM_REC_RUNNING:
        if (!look.same_id || !look.stream[0])
            reply_in_flight(r, look.stream);
        else if (attach_stream(srv, r, sess, pm, look.stream, 1) == TIDEMARK_EBUSY)
            waited = await_outcome(srv, r, sess, pm, on_worker, look.stream);
        break;
    }
    tm_rec_look_clear(&look);
    return waited ? waited : 1;
}

/* A batch's call judged by its record (record.h): its answer without
 * running it (new ref), or NULL when it is new. */
static json_t *batch_answer(const tm_msg *m, tm_rec_look *look)
{
    json_t *a = look->answer;
    look->answer = NULL;
    switch (look->verdict) {
    case TM_REC_NEW:
        return NULL;
    case TM_REC_CLAIMED: /* another request is beginning it: retry */
        break;
    case TM_REC_ANSWERED:
        return a ? a : tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "stored response unreadable",
                                        "store_error", NULL);
    case TM_REC_REUSED:
        return a;
    case TM_REC_UNSETTLED:
        return tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR,
                                "The result of this request could not be made durable yet",
                                "store_failed", NULL);
    case TM_REC_RUNNING:
        break;
    }
    return tm_jsonrpc_error(m->id, TM_RPC_INVALID_REQUEST,
                            "This request is still running: its stream carries its answer",
                            "request_in_flight",
                            look->stream[0] ? json_pack("{s:s}", "stream", look->stream) : NULL);
}

/* Every call of a batch judged by its record: what a record answers runs
 * nothing and is answered from pm->answered. 0, or TIDEMARK_ENOMEM. */
static int batch_records(tidemark_server_t *srv, tm_sess *sess, post_msgs *pm)
{
    for (size_t i = 0; i < pm->n; i++) {
        const tm_msg *m = &pm->m[i];
        if (!tm_is_call(m))
            continue;
        tm_rec_look look;
        tm_record_look(srv, sess, m, NULL, &look);
        if (look.claimed)
            keep_claim(pm, i, sess);
        json_t *a = batch_answer(m, &look);
        tm_rec_look_clear(&look);
        if (!a)
            continue;
        if (!pm->answered && !(pm->answered = calloc(pm->n, sizeof *pm->answered))) {
            json_decref(a);
            return TIDEMARK_ENOMEM;
        }
        pm->answered[i] = a;
        pm->ncall--;
        pm->nhandler -= tm_runs_handler(m->method) != 0;
    }
    return 0;
}

/* Content-Type and Accept (a body over the limit never gets here: the
 * transport answers it 413). 0, or 1 when answered. */
static int post_headers_refused(tm_req *r)
{
    const char *ctype = r->content_type;
    const char *accept = r->accept;
    if (!tm_policy_media_type_is(ctype, "application/json")) {
        tm_reply_error(r, 415, TM_RPC_INVALID_REQUEST, "unsupported_media_type",
                       "Unsupported Media Type: Content-Type must be application/json", NULL);
    } else if (!tm_policy_accepts(accept, "application/json") ||
               !tm_policy_accepts(accept, "text/event-stream")) {
        tm_reply_error(r, 406, TM_RPC_INVALID_REQUEST, "not_acceptable",
                       "Not Acceptable: Accept must list application/json and text/event-stream",
                       NULL);
    } else {
        return 0;
    }
    return 1;
}

/* Classify every message and count what the POST holds. */
static int post_classify(post_msgs *pm)
{
    pm->m = calloc(pm->n, sizeof *pm->m);
    if (!pm->m)
        return TIDEMARK_ENOMEM;
    for (size_t i = 0; i < pm->n; i++) {
        tm_msg *m = &pm->m[i];
        tm_jsonrpc_classify(pm->batch ? json_array_get(pm->root, i) : pm->root, m);
        if (tm_is_call(m))
            tm_call_meta_check(m);
        if (m->kind == TM_MSG_INVALID)
            pm->ninvalid++;
        if (m->kind != TM_MSG_REQUEST)
            continue;
        pm->nreq++;
        pm->ninit += strcmp(m->method, "initialize") == 0;
        pm->ncall += tm_is_call(m);
        pm->nhandler += tm_runs_handler(m->method) != 0;
    }
    return 0;
}

/* Parse the body into pm. 0, or 1 when answered (a parse or batch error).
 * A batch over max_batch is not classified (pm->m stays NULL): it is
 * refused once the session's version is known, batch_not_supported on a
 * version without batches, else batch_too_large. */
static int post_parse(tidemark_server_t *srv, tm_req *r, post_msgs *pm)
{
    size_t len = r->body_len;
    const char *body = r->body ? r->body : "";
    char perr[200];
    if (tm_jsonrpc_parse(body, len, &pm->root, perr, sizeof perr) != 0) {
        tm_reply_error(r, 400, TM_RPC_PARSE_ERROR, "parse_error", "Parse error",
                       json_pack("{s:s}", "detail", perr));
        return 1;
    }
    pm->batch = json_is_array(pm->root);
    pm->n = pm->batch ? json_array_size(pm->root) : 1;
    if (pm->batch && pm->n == 0) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "invalid_request",
                       "Invalid Request: empty batch", NULL);
        return 1;
    }
    if (pm->n > srv->cfg.max_batch)
        return 0;
    if (post_classify(pm) != 0) {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
        return 1;
    }
    return 0;
}

/* initialize: alone in its POST, run on a worker (it writes durably). */
static void post_initialize(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                            post_msgs *pm)
{
    if (pm->batch)
        return tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "invalid_request",
                              "Invalid Request: initialize must not be part of a batch", NULL);
    init_job *ij = calloc(1, sizeof *ij);
    if (!ij)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    ij->srv = srv;
    ij->req = r;
    ij->root = pm->root;
    ij->msg = pm->m[0];
    snprintf(ij->principal, sizeof ij->principal, "%s", ctx->principal);
    pm->root = NULL;
    if (ctx->on_worker)
        return run_initialize(ij);
    if (tm_pool_submit(srv->pool, run_initialize, ij) != 0) {
        json_decref(ij->root);
        free(ij);
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    }
}

/* Everything that is answered before a job exists: a batch on a version
 * without batches, notifications and responses (202), a retry of a
 * recorded call, a session over its queue (429). 1 when answered. */
static int post_answered_early(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                               tm_req_prefetch *pf, int on_worker)
{
    if (pm->batch && strcmp(sess->version, TIDEMARK_PROTOCOL_2025_03_26) != 0) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "batch_not_supported",
                       "Invalid Request: JSON-RPC batches are not allowed in this protocol version",
                       json_pack("{s:s}", "protocolVersion", sess->version));
        return 1;
    }
    if (!pm->m) { /* a batch over max_batch (post_parse) */
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "batch_too_large",
                       "Invalid Request: too many messages in one batch",
                       json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_batch));
        return 1;
    }
    for (size_t i = 0; i < pm->n; i++) { /* notifications and responses take effect now */
        if (pm->m[i].kind == TM_MSG_NOTIFICATION)
            handle_notification(srv, r, sess, &pm->m[i]);
        else if (pm->m[i].kind == TM_MSG_RESULT || pm->m[i].kind == TM_MSG_ERROR)
            tm_sess_deliver_response(srv, sess, &pm->m[i]);
    }
    if (pm->nreq == 0 && pm->ninvalid == 0) {
        tm_req_reply(r, 202, NULL, NULL, 0);
        return 1;
    }
    int repeat = !pm->batch && tm_is_call(&pm->m[0]) ? answer_repeat(srv, r, sess, pm, pf, on_worker)
                                                     : 0;
    if (repeat)
        return repeat;
    if (pm->batch && batch_records(srv, sess, pm) != 0) {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
        return 1;
    }
    /* Admission before anything is recorded: a refused call never ran,
     * so the client may send it again under the same id. */
    if (pm->nhandler && tm_sched_would_refuse(srv->sched, sess->id, (unsigned)pm->nhandler)) {
        tm_counter_inc(srv->m.calls_refused);
        tm_req_add_header(r, "Retry-After", "1");
        tm_reply_error(r, 429, TM_RPC_SERVER_ERROR, "too_many_requests",
                       "Too Many Requests: this session has too many calls waiting",
                       json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_queued_per_session));
        return 1;
    }
    return 0;
}

static tm_job *job_new(tidemark_server_t *srv, tm_sess *sess, tm_req *r, post_msgs *pm)
{
    tm_job *j = tm_job_alloc();
    if (!j)
        return NULL;
    j->srv = srv;
    j->sess = sess;
    j->req = r;
    j->batch = pm->batch;
    j->sse = pm->ncall > 0;
    j->root = pm->root;
    pm->root = NULL;
    j->responses = json_array();
    pthread_mutex_init(&j->mu, NULL);
    j->remaining = (int)(pm->nreq + pm->ninvalid) + 1; /* +1 held while submitting */
    j->held = 1;
    return j;
}

/* Record every call as started before the stream's first event, so no
 * emitted stream is ever left without an owner after a crash. */
/* The text a call's record keeps: the POST's body itself when it is that
 * one message (it parsed, so it holds no raw NUL), else the message
 * serialized again (a batch). Saves a serialization per call. */
static char *record_text(tm_req *r, const post_msgs *pm, size_t i)
{
    size_t len = pm->batch ? 0 : r->body_len;
    const char *body = pm->batch ? NULL : r->body;
    if (body && len && memchr(body, '\0', len) == NULL)
        return strndup(body, len);
    return tm_jsonrpc_dump(pm->m[i].raw, NULL);
}

/* The record key of a job's call m: its own in a pooled store session
 * (request ids repeat there), else the request's (tm_request_key). */
static int job_request_key(const tm_job *j, const tm_msg *m, char key[TM_REQ_KEY_MAX])
{
    if (!tm_job_is(j, TM_POST_POOLED))
        return tm_request_key(m, key);
    tm_strjoin(key, TM_REQ_KEY_MAX, j->pkey, (const char *)NULL);
    return 0;
}

/* Whether a 2025 call's record begin is waited for (begin_records): on a
 * store shared by nodes, always. Another node may have read the record as
 * absent at the same moment and begun it too; only the store's answer to
 * the begin says which run is the request's. An idempotent tool is no
 * exception: the run that lost would write events to a stream no record
 * names, and a client that took them would resume it forever. */
static int begin_waits(tidemark_server_t *srv)
{
    return tm_store_shared(srv->store);
}

/* A POST whose one call runs here although the store is shared by nodes
 * (runs_inline: an atomic 2025 call): its record's begin is queued, not
 * waited for, and the call runs at once, so the begin, the call's effect
 * and its response commit in one transaction, in which the store checks
 * that the record is this node's before it writes the effect or the
 * response. The POST is answered once the begin's answer is known
 * (late_begin_end): with the stream, or, when another node began the
 * request first, as begun_elsewhere. */
typedef struct late_begin {
    void *ticket;   /* tm_store_request_begin_later's */
    tm_sess *sess;  /* a reference */
    json_t *root;   /* a reference: the POST's messages point into it */
    char stream[TM_STREAM_MAX];
} late_begin;

static int begin_records(tidemark_server_t *srv, tm_job *j, tm_req *r, post_msgs *pm,
                         late_begin *late)
{
    for (size_t i = 0; i < pm->n; i++) {
        if (!tm_is_call(&pm->m[i]) || (pm->answered && pm->answered[i]))
            continue;
        char key[TM_REQ_KEY_MAX];
        int rc = job_request_key(j, &pm->m[i], key);
        if (rc)
            return rc;
        if (!tm_job_is(j, TM_POST_MODERN)) /* noted first: a retry that races it asks the store */
            tm_sess_note_record(j->sess, key);
        char *message = record_text(r, pm, i);
        const char *tool = json_string_value(json_object_get(pm->m[i].params, "name"));
        tm_request_rec rec = {.session = j->sess->id, .key = key,
                              .tool = (char *)(tool ? tool : ""), .stream = j->stream,
                              .message = message};
        /* A keyed modern call, and a 2025 call on a store shared by nodes,
         * waits for its record: only then does the store say whether the
         * identity's first request began elsewhere (EEXIST), before
         * anything runs. (Within this process the identity's claim,
         * record.h, keeps a copy out.) */
        int wait = tm_job_is(j, TM_POST_MODERN) ? !tm_job_is(j, TM_POST_EPHEMERAL) : begin_waits(srv);
        if (late) /* its answer is awaited after the call ran (nothing queued on failure) */
            wait = 0;
        rc = !message ? TIDEMARK_ENOMEM
             : late   ? tm_store_request_begin_later(srv->store, &rec, &late->ticket)
                      : tm_store_request_begin(srv->store, &rec, wait);
        free(message);
        /* EEXIST: a modern keyed call's first run on another node, which
         * its caller waits for instead; a 2025 call's, answered as its
         * retry (begun_elsewhere); unwaited (a store no other node writes),
         * nothing else can have begun it. */
        if (rc && wait && rc != TIDEMARK_EEXIST)
            tm_call_begin_failed(srv, j->sess->id, key);
        if (rc && (rc != TIDEMARK_EEXIST || wait))
            return rc;
    }
    return 0;
}

/* Answer r with a POST's call stream of session sid, from its start, each
 * event as it commits. */
static int attach_call_stream(tidemark_server_t *srv, tm_req *r, const char *sid,
                              const char *stream)
{
    tm_feed_opts o = {.session = sid, .stream = stream, .after_seq = 0,
                      .retry_ms = srv->cfg.retry_ms, .announce_durable = srv->cfg.emit_early,
                      .defer = 1};
    tm_req_add_header(r, "Mcp-Session-Id", sid);
    return tm_feed_attach(srv, r, &o);
}

/* A POST with calls is answered with the stream they write to: opened,
 * its records begun and its priming event queued, then attached. On failure
 * nothing runs: a 2025 POST is answered here with the error (but for
 * TIDEMARK_EEXIST: begun on another node), a modern one by the caller. */
static int open_call_stream(tidemark_server_t *srv, tm_job *j, tm_req *r, post_msgs *pm,
                            late_begin *late)
{
    tm_sess *sess = j->sess;
    int rc = tm_store_stream_open(srv->store, sess->id, NULL, j->stream);
    int priming = strcmp(sess->version, TIDEMARK_PROTOCOL_2025_11_25) == 0;
    /* The priming event goes after the records, so it never commits before
     * them; but where each begin is waited for (begin_waits, not late) it
     * goes first, to commit with the first record rather than in a commit
     * of its own: the stream is attached, and anything of it sent, only
     * once every record is durable. A POST whose begin fails leaves that
     * stream unattached (nobody is told its ids). After a late begin it
     * sits next to the call's response: both go in one statement. */
    int first = priming && begin_waits(srv) && !late;
    if (rc == 0 && first)
        rc = tm_store_append(srv->store, sess->id, j->stream, "", 0, 0, NULL, NULL);
    if (rc == 0)
        rc = begin_records(srv, j, r, pm, late);
    if (rc == 0 && priming && !first)
        rc = tm_store_append(srv->store, sess->id, j->stream, "", 0, 0, NULL, NULL);
    if (tm_job_is(j, TM_POST_MODERN)) {
        if (rc == 0)
            j->lazy = r; /* answered as JSON, or attached by the call's first notification */
        return rc;
    }
    if (rc == TIDEMARK_EEXIST) /* begun on another node: the caller answers */
        return rc;
    if (rc == 0 && late) /* attached once its begin's answer is known (late_begin_end) */
        return 0;
    if (rc == 0)
        rc = attach_call_stream(srv, r, sess->id, j->stream);
    if (rc) { /* answered here; nothing runs unrecorded */
        tm_reply_store_error(r, rc);
        j->sse = 0;
        j->req = NULL;
    }
    return rc;
}

static tidemark_call_t *call_new(tm_job *j, tm_req *r, const tm_msg *m, uint64_t mark)
{
    tidemark_call_t *c = tm_call_alloc();
    if (!c)
        return NULL;
    c->srv = j->srv;
    c->sess = j->sess;
    c->job = j;
    c->id = json_incref(m->id);
    c->method = m->method;
    c->params = m->params;
    c->request = tm_is_call(m) ? json_incref(m->raw) : NULL; /* outlives the job's root */
    tm_strjoin(c->addr, sizeof c->addr, r->peer, (const char *)NULL);
    c->progress_token = json_object_get(json_object_get(c->params, "_meta"), "progressToken");
    /* Both fit: classify and tm_call_meta_check bounded id and key. */
    tm_jsonrpc_id_key(c->id, c->idkey, sizeof c->idkey);
    job_request_key(j, m, c->reqkey);
    tm_strjoin(c->idem, sizeof c->idem, j->sess->id, "/", c->reqkey, (const char *)NULL);
    c->recorded = tm_is_call(m) && j->sse; /* its record was begun */
    c->mark = mark;
    c->modern = tm_job_is(j, TM_POST_MODERN);
    c->inline_run = j->inline_run;
    c->late = j->late;
    c->t0_us = tm_now_us();
    tm_call_trace_start(c, r);
    return c;
}

/* Register c with its session (a retry finds it) and start it. */
static void call_start(tm_job *j, tidemark_call_t *c)
{
    tm_sess *sess = j->sess;
    pthread_mutex_lock(&sess->mu);
    /* A late-begin call is not found by a retry here: its stream may be
     * one no record will name (its begin lost to another node's). A retry
     * meanwhile finds its claim held (record.h) and waits for it; the
     * claim is let go once the call's response settled. */
    if (!j->late && !tm_map_get(sess->calls, c->reqkey) &&
        tm_map_put(sess->calls, c->reqkey, c) == 0)
        c->registered = 1;
    pthread_mutex_unlock(&sess->mu);
    if (tm_call_submit(j->srv, c) == 0)
        return;
    if (c->registered) {
        pthread_mutex_lock(&sess->mu);
        tm_sess_calls_del(sess, c->reqkey);
        pthread_mutex_unlock(&sess->mu);
    }
    json_t *e = tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR, "Server is stopping",
                                 "shutting_down", NULL);
    tm_call_free(c);
    tm_job_complete(j, e, NULL);
}

static void submit_requests(tm_job *j, tm_req *r, post_msgs *pm, uint64_t mark)
{
    for (size_t i = 0; i < pm->n; i++) {
        const tm_msg *m = &pm->m[i];
        if (pm->answered && pm->answered[i]) { /* its record answered it (batch_records) */
            tm_job_complete(j, pm->answered[i], NULL);
            pm->answered[i] = NULL;
            continue;
        }
        if (m->kind == TM_MSG_INVALID) {
            tm_job_complete(j, tm_jsonrpc_error(m->id, tm_invalid_code(m), m->detail, m->why, NULL),
                            NULL);
            continue;
        }
        if (m->kind != TM_MSG_REQUEST)
            continue;
        tidemark_call_t *c = call_new(j, r, m, mark);
        if (c && pm->claimed && pm->claimed[i]) { /* the call holds its claim now */
            c->claimed = 1;
            free(pm->claimed[i]);
            pm->claimed[i] = NULL;
        }
        if (c)
            call_start(j, c);
        else
            tm_job_complete(j, tm_jsonrpc_error(m->id, TM_RPC_INTERNAL_ERROR, "out of memory",
                                                "internal_error", NULL), NULL);
    }
    if (j->deferred) /* its call ran here without needing its stream */
        j->deferred = NULL;
    pthread_mutex_lock(&j->mu);
    j->held = 0;
    pthread_mutex_unlock(&j->mu);
    tm_job_complete(j, NULL, NULL); /* release the submit hold */
}

/* The hints of a POST's one tools/call (0 for anything else). */
static unsigned lone_call_hints(tidemark_server_t *srv, const post_msgs *pm)
{
    if (pm->batch || pm->n != 1 || !tm_is_call(&pm->m[0]))
        return 0;
    return tm_call_tool_hints(srv, &pm->m[0]);
}

/* A lone tools/call of a tool declared non-blocking and idempotent runs on
 * this thread (server.h, TIDEMARK_TOOL_NONBLOCKING). */
/* Whether a lone call of a tool with these hints, on a store shared by
 * nodes, runs before its record's begin is answered (late_begin): an
 * atomic 2025 call that is not idempotent (an idempotent one waits for its
 * begin, begin_waits), where the store checks in the transaction of the
 * call's effect that the record begun there is this node's. */
static int late_begins(tidemark_server_t *srv, unsigned hints, unsigned flags)
{
    return tm_store_shared(srv->store) && tm_store_begins_later(srv->store) &&
           !(flags & TM_POST_MODERN) && (hints & TIDEMARK_TOOL_ATOMIC) &&
           !(hints & TIDEMARK_TOOL_IDEMPOTENT);
}

static int runs_inline(tidemark_server_t *srv, unsigned hints, unsigned flags)
{
    if (!(hints & TIDEMARK_TOOL_NONBLOCKING))
        return 0;
    /* Atomic, not idempotent: where no other node could take a retry
     * before this call's record is stored (server.h), or late_begins. */
    return (hints & TIDEMARK_TOOL_IDEMPOTENT) ||
           ((hints & TIDEMARK_TOOL_ATOMIC) &&
            (!tm_store_shared(srv->store) || late_begins(srv, hints, flags)));
}

/* A 2025 POST whose call's record another node began first (EEXIST of its
 * waited begin, begin_records): a lone call is answered as that request's
 * retry from its record, a batch told to retry (then each of its calls is
 * judged by its record). Nothing of it runs. */
static void begun_elsewhere(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm)
{
    char key[TM_REQ_KEY_MAX];
    tm_rec_look look = {.verdict = TM_REC_CLAIMED};
    if (!pm->batch && tm_request_key(&pm->m[0], key) == 0)
        tm_record_look_store(srv, sess->id, key, &pm->m[0], &look);
    if (look.verdict == TM_REC_ANSWERED) {
        reply_answered(r, sess, pm, look.answer);
        look.answer = NULL;
    } else if (look.verdict == TM_REC_REUSED) {
        tm_reply_json(r, 400, look.answer);
        look.answer = NULL;
    } else if (look.verdict == TM_REC_RUNNING && look.same_id && look.stream[0]) {
        if (attach_stream(srv, r, sess, pm, look.stream, 1) == TIDEMARK_EBUSY)
            await_outcome(srv, r, sess, pm, 1, look.stream);
    } else {
        tm_req_add_header(r, "Retry-After", "1");
        reply_in_flight(r, look.stream);
    }
    tm_rec_look_clear(&look);
}

/* A quiet call that needs its stream after all (call.c: it notifies, takes
 * an effect, closes its stream; job.c: it goes to a worker). Its stream,
 * record and priming event are queued now, still under the POST's hold and
 * before anything of the call: the POST is answered with that stream. On a
 * store failure the POST was answered with it and the call's output goes
 * nowhere. */
static int open_deferred(tm_job *j, tidemark_call_t *c)
{
    post_msgs *pm = j->deferred;
    j->deferred = NULL;
    j->sse = 1;
    int rc = open_call_stream(j->srv, j, j->req, pm, NULL);
    if (rc == TIDEMARK_EEXIST) { /* begun on another node first: its run is the request's */
        begun_elsewhere(j->srv, j->req, j->sess, pm);
        j->sse = 0;
        j->req = NULL;
    }
    if (!j->sse)
        return TIDEMARK_EIO;
    c->recorded = 1;
    return 0;
}

static late_begin *post_submit_held(tidemark_server_t *srv, tm_req *r, tm_sess *sess,
                                    post_msgs *pm, unsigned flags)
{
    tm_job *j = job_new(srv, sess, r, pm);
    if (!j) {
        tm_sess_unref(sess);
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
        return NULL;
    }
    j->flags = flags & (TM_POST_MODERN | TM_POST_EPHEMERAL);
    if (flags & TM_POST_POOLED) { /* request ids repeat across the pool's calls */
        char n[21];
        tm_u64_dec(n, atomic_fetch_add(&srv->pooled_calls, 1) + 1);
        j->flags |= TM_POST_POOLED;
        tm_strjoin(j->pkey, sizeof j->pkey, "e:", n, (const char *)NULL);
    }
    if (flags & TM_POST_LIGHT)
        j->sse = 0; /* answered as JSON; nothing recorded */
    unsigned hints = lone_call_hints(srv, pm);
    j->inline_run = runs_inline(srv, hints, flags);
    /* A 2025 quiet call: run inline, its stream and record not opened; one
     * that ends without a notification, an effect or a hand-off to a
     * worker had nothing to make durable: JSON (docs/design.md). */
    if ((flags & TM_POST_QUIET) && j->inline_run && tm_tool_quiet(hints)) {
        j->sse = 0;
        j->deferred = pm; /* read only while its call runs here */
        j->open_deferred = open_deferred;
    }
    late_begin *late = NULL;
    if (j->sse && j->inline_run && late_begins(srv, hints, flags) &&
        !(late = calloc(1, sizeof *late)))
        j->inline_run = 0; /* on a worker, its begin waited for */
    j->late = late != NULL;
    uint64_t mark = tm_store_mark(srv->store);
    int rc = j->sse ? open_call_stream(srv, j, r, pm, late) : 0;
    if (rc == TIDEMARK_EEXIST && !tm_job_is(j, TM_POST_MODERN)) /* its identity began on another node */
        begun_elsewhere(srv, r, j->sess, pm);
    else if (rc && tm_job_is(j, TM_POST_MODERN)) /* nothing runs unrecorded (2025: answered already) */
        tm_modern_setup_failed(srv, r, j->sess, &pm->m[0], tm_job_is(j, TM_POST_EPHEMERAL), rc);
    if (rc) { /* nothing of a late begin was queued */
        free(late);
        tm_job_free(j);
        return NULL;
    }
    if (late) {
        late->sess = tm_sess_ref(j->sess);
        late->root = json_incref(j->root);
        tm_strjoin(late->stream, sizeof late->stream, j->stream, (const char *)NULL);
    }
    submit_requests(j, r, pm, mark); /* the job owns the session reference now */
    return late;
}

/* After the hold: the late begin's answer decides how the POST is answered
 * (its call ran and its writes are settled, committed or not, with it). */
static void late_begin_end(tidemark_server_t *srv, tm_req *r, post_msgs *pm, late_begin *lb)
{
    int rc = tm_store_request_begin_await(srv->store, lb->ticket);
    char key[TM_REQ_KEY_MAX];
    if (tm_request_key(&pm->m[0], key) != 0)
        key[0] = '\0';
    /* the begin committed, the response not (a batch of its own that
     * failed): its feed would wait for words already said */
    if (rc == 0 && tm_call_write_pending(srv, lb->sess->id, key))
        rc = TIDEMARK_EIO;
    if (rc == 0) {
        rc = attach_call_stream(srv, r, lb->sess->id, lb->stream);
        if (rc) /* committed: a retry is answered from its record */
            tm_reply_store_error(r, rc);
    } else if (rc == TIDEMARK_EEXIST) { /* neither its effect nor its response was written */
        begun_elsewhere(srv, r, lb->sess, pm);
    } else {
        if (key[0])
            tm_call_begin_failed(srv, lb->sess->id, key);
        tm_reply_store_error(r, rc);
    }
    tm_sess_unref(lb->sess);
    json_decref(lb->root);
    free(lb);
}

/* The POST's writes (stream, records, priming event; an inline call's
 * events and response too) are queued under one hold of the store's
 * writer: one transaction, one fsync. */
void tm_post_submit(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                    unsigned flags)
{
    tm_store_hold(srv->store);
    late_begin *late = post_submit_held(srv, r, sess, pm, flags);
    tm_store_release(srv->store);
    if (late)
        late_begin_end(srv, r, pm, late);
}

static void post_legacy(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud);

/* A POST that waits for another request under its call's identity (record.h
 * tm_record_claim), sent from an I/O thread to a worker. */
typedef struct legacy_wait {
    tidemark_server_t *srv;
    tm_req *r;
    tm_reqctx ctx;
    post_msgs *pm;
} legacy_wait;

static void legacy_wait_run(void *arg)
{
    legacy_wait *lw = arg;
    post_legacy(lw->srv, lw->r, &lw->ctx, lw->pm);
    free(lw);
}

/* pm's POST goes on on a worker (its session is looked up again there). */
static void legacy_to_worker(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                             post_msgs *pm)
{
    legacy_wait *lw = malloc(sizeof *lw);
    if (lw) {
        *lw = (legacy_wait){.srv = srv, .r = r, .ctx = *ctx, .pm = pm};
        lw->ctx.on_worker = 1;
        if (tm_pool_submit(srv->pool, legacy_wait_run, lw) == 0)
            return;
        free(lw);
    }
    tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    post_msgs_free(pm);
    free(pm);
}

/* Its principal known (ctx): the 2025 path. */
static void post_legacy(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud)
{
    post_msgs *pm = ud;
    pm->srv = srv;
    if (pm->ninit) {
        post_initialize(srv, r, ctx, pm);
    } else if (!pm->batch && pm->m[0].kind == TM_MSG_INVALID) {
        tm_reply_json(r, 400, tm_jsonrpc_error(pm->m[0].id, tm_invalid_code(&pm->m[0]),
                                               pm->m[0].detail, pm->m[0].why, NULL));
    } else {
        /* A lone call's record is read with its session (a retry?). */
        char key[TM_REQ_KEY_MAX];
        int lone = !pm->batch && tm_is_call(&pm->m[0]) && tm_request_key(&pm->m[0], key) == 0;
        tm_req_prefetch pf = TM_REQ_PREFETCH_INIT;
        tm_sess *sess = tm_require_session_prefetch(srv, r, ctx, lone ? key : NULL, &pf);
        int early = sess ? post_answered_early(srv, r, sess, pm, &pf, ctx->on_worker) : 0;
        if (early)
            tm_sess_unref(sess);
        else if (sess) /* the store mark is taken before the records: a tool that
                          is not idempotent waits for them by it */
            tm_post_submit(srv, r, sess, pm, TM_POST_QUIET);
        tm_req_prefetch_clear(&pf);
        if (early == 2)
            return legacy_to_worker(srv, r, ctx, pm);
    }
    post_msgs_free(pm);
    free(pm);
}

static void post_modern(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud)
{
    post_msgs *pm = ud;
    tm_modern_route(srv, r, ctx, pm);
    post_msgs_free(pm);
    free(pm);
}

static void post_msgs_drop(void *ud)
{
    post_msgs_free(ud);
    free(ud);
}

void tm_handle_post(tidemark_server_t *srv, tm_req *r)
{
    post_msgs pm = {0};
    if (post_headers_refused(r) || post_parse(srv, r, &pm))
        return post_msgs_free(&pm);
    /* Header checks that look nothing up come first; then the gate (the
     * token, on a worker), before any session is looked up or created. */
    int modern = tm_era_modern(r->protocol_version, pm.root);
    if (modern ? tm_modern_post(srv, r, &pm) != 0 : tm_refuse_version(r))
        return post_msgs_free(&pm);
    post_msgs *held = malloc(sizeof *held);
    if (!held) {
        post_msgs_free(&pm);
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    }
    *held = pm;
    tm_gate(srv, r, held->m, held->m ? held->n : 0, modern ? post_modern : post_legacy, held,
            post_msgs_drop);
}
