/*
 * drive.c - a request driven to its outcome on the calling thread: the
 * drive loop (wait for what the I/O thread queued, read it, reconnect after
 * a cut, answer an authorization challenge, settle at the deadline) and one
 * request sent and driven (tm_request_once: its record, span and duration).
 * The public request API above it is request.c's.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Wait until the I/O thread left something for r, r's outcome is known,
 * the client stops or the deadline passes. Holds c->mu. */
static void wait_work_locked(tidemark_client_t *c, rq *r, int64_t deadline)
{
    while (r->phase == RQ_RUNNING && !c->stopping && !tm_exchange_pending_locked(r)) {
        int64_t now = tm_now_ms();
        if (now >= deadline)
            return;
        struct timespec ts = tm_deadline_ms(deadline - now);
        int rc = pthread_cond_timedwait(&r->cv, &c->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT)
            TM_WARN("client: waiting for request %" PRId64 " failed (%d)", r->id, rc);
    }
}

/* The error of a request that ran out of time or was stopped: when its
 * last exchange never reached the server, say so. */
static json_t *deadline_error(tidemark_client_t *c, rq *r)
{
    json_t *e = NULL;
    if (c->stopping) {
        tm_client_error(&e, TM_RPC_INTERNAL_ERROR, "client_stopped", "the client is stopping", NULL);
    } else if (r->unreachable) {
        char msg[512];
        snprintf(msg, sizeof msg, "cannot connect to %s: %s", c->url, r->unreachable_why);
        tm_client_error(&e, TM_RPC_INTERNAL_ERROR, "cannot_connect", msg,
                        json_pack("{s:s,s:s}", "url", c->url, "error", r->unreachable_why));
    } else {
        tm_client_error(&e, TM_RPC_INTERNAL_ERROR, "timeout", "no response before the deadline",
                        NULL);
    }
    return e;
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
    /* Not final: the request stays outstanding, and resume() finishes it. */
    tm_rq_finish_locked(r, c->stopping ? TIDEMARK_ECANCELED : TIDEMARK_ETIMEDOUT,
                        deadline_error(c, r));
    return 1;
}

int tm_drive(tidemark_client_t *c, rq *r, int64_t deadline)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        wait_work_locked(c, r, deadline);
        pthread_mutex_unlock(&c->mu);
        tm_exchange_read(c, r); /* parsing, validator, dispatch: on this thread */
        pthread_mutex_lock(&c->mu);
        int done = settle_locked(c, r, deadline);
        int cut = r->phase == RQ_RECONNECT;
        pthread_mutex_unlock(&c->mu);
        if (done) {
            tm_end_exchange(c, r);
            if (!r->auth_status || tm_oauth_challenge(c, r) != 0)
                return r->rc;
            deadline = tm_now_ms() + c->cfg.timeout_ms; /* sent again with the new token */
            continue;
        }
        if (cut)
            tm_reconnect(c, r, deadline);
    }
}

/* params for the request: a copy, with progressToken = id when progress
 * is wanted, and the span's traceparent. NULL when memory is short. */
static json_t *request_params(json_t *params, int64_t id, int progress, const tm_span *sp)
{
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (p && tm_mcp_inject(sp, p) != 0) {
        json_decref(p);
        return NULL;
    }
    if (!p || !progress)
        return p;
    json_t *meta = json_object_get(p, "_meta");
    if (!json_is_object(meta)) {
        meta = json_object();
        if (json_object_set_new(p, "_meta", meta) != 0)
            meta = NULL;
    }
    if (!meta || json_object_set_new(meta, "progressToken", json_integer(id)) != 0) {
        json_decref(p);
        return NULL;
    }
    return p;
}

/* A tools/call is recorded outstanding before it is sent: a crash from
 * here on leaves it for resume(). */
static int record_call(tidemark_client_t *c, rq *r, json_t *p, json_t **err)
{
    char *ptxt = json_dumps(p, JSON_COMPACT);
    json_t *meta = json_object_get(p, "_meta");
    int rc = ptxt ? tm_cstate_outstanding_add(
                        c->st, r->id, "tools/call", ptxt,
                        json_string_value(json_object_get(meta, "dev.tidemark/idempotency-key")),
                        r->tasks)
                  : TIDEMARK_ENOMEM;
    free(ptxt);
    if (rc)
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the call cannot be recorded in the client state; it was not sent", NULL);
    r->recorded = rc == 0;
    return rc;
}

/* Build r for method and params; a call is recorded. */
static int request_prepare(tidemark_client_t *c, rq *r, const char *method, json_t *params,
                           const tm_span *sp, json_t **err)
{
    json_t *p = request_params(params, r->id, r->progress != NULL, sp);
    if (!p)
        return TIDEMARK_ENOMEM;
    int call = strcmp(method, "tools/call") == 0;
    r->tasks = call && r->modern && c->cfg.tasks;
    int rc = call ? record_call(c, r, p, err) : 0;
    if (rc) {
        json_decref(p);
        return rc;
    }
    r->msg = tm_jsonrpc_request(json_integer(r->id), method, p);
    return r->msg ? 0 : TIDEMARK_ENOMEM;
}

/* After the outcome: only a final one ends the outstanding row (after a
 * stop, a timeout or a refusal the call can still be resumed). */
static void request_settle(tidemark_client_t *c, rq *r)
{
    if (!r->recorded || !r->final)
        return;
    int rc = tm_cstate_outstanding_done(c->st, r->row_id);
    if (rc)
        TM_WARN("client: request %" PRId64 " has its outcome but stays listed outstanding (%s); "
                "a later resume asks for it again", r->row_id, tidemark_strerror(rc));
}

int tm_rq_send(tidemark_client_t *c, rq *r, int64_t deadline)
{
    int rc = r->msg ? tm_pending_add(c, r) : TIDEMARK_ENOMEM;
    if (rc) {
        tm_rq_fail(r, rc, "internal_error", "out of memory", NULL);
        return rc;
    }
    if ((rc = tm_start_post(c, r)) != 0)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    rc = tm_drive(c, r, deadline);
    tm_pending_del(c, r);
    return rc;
}

int tm_request_once(tidemark_client_t *c, const char *method, json_t *params,
                    tidemark_progress_fn progress, void *progress_ud, json_t **result)
{
    *result = NULL;
    int64_t id;
    int rc = tm_renew_session(c, result);
    if (!rc)
        rc = tm_next_id(c, &id, result);
    if (rc)
        return rc;
    rq *r = tm_rq_new(c, id);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->progress = progress;
    r->progress_ud = progress_ud;
    int64_t t0 = tm_now_us();
    json_t *jid = c->otel ? json_integer(id) : NULL;
    tm_span *sp = tm_client_span(c, TM_SPAN_CLIENT, method, params, jid);
    json_decref(jid);
    rc = request_prepare(c, r, method, params, sp, result);
    if (rc) {
        tm_mcp_span_finish(sp, rc, *result);
        tm_rq_free(r);
        return rc;
    }
    rc = tm_rq_send(c, r, tm_now_ms() + c->cfg.timeout_ms);
    if (rc == 0 && r->recorded)
        rc = tm_task_started(c, r);
    request_settle(c, r);
    *result = json_incref(r->result);
    tm_client_observe_request(c, method, params, rc, *result, t0);
    tm_mcp_span_finish(sp, rc, *result);
    tm_rq_free(r);
    return rc;
}
