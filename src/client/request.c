/*
 * request.c - a request from start to outcome: its record, the drive loop
 * that runs it on the calling thread, tidemark_client_request / call_tool /
 * list.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "client_metrics.h"
#include "../base/metrics.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tm_client_error(json_t **out, int code, const char *reason, const char *message,
                     json_t *data)
{
    if (!out) {
        json_decref(data);
        return;
    }
    json_t *d = json_is_object(data) ? data : json_object();
    if (d != data)
        json_decref(data);
    if (d && json_object_set_new(d, "reason", json_string(reason)) != 0) {
        json_decref(d);
        d = NULL;
    }
    /* Out of memory on the way: NULL, which callers report as the code alone. */
    *out = d ? json_pack("{s:i,s:s,s:o}", "code", code, "message", message, "data", d) : NULL;
}

rq *tm_rq_new(tidemark_client_t *c, int64_t id)
{
    rq *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if (tm_cond_init_monotonic(&r->cv) != 0) {
        free(r);
        return NULL;
    }
    r->c = c;
    r->id = id;
    r->row_id = id;
    snprintf(r->key, sizeof r->key, "%" PRId64, id);
    tm_buf_init(&r->body, TM_CLIENT_MAX_BODY);
    tm_buf_init(&r->chunk, TM_CLIENT_MAX_BODY);
    tm_buf_init(&r->io.in, TM_CLIENT_MAX_BODY);
    pthread_mutex_lock(&c->mu);
    r->modern = c->modern;
    r->live_next = c->live;
    if (c->live)
        c->live->live_prev = r;
    c->live = r;
    pthread_mutex_unlock(&c->mu);
    return r;
}

void tm_rq_free(rq *r)
{
    if (!r)
        return;
    tidemark_client_t *c = r->c;
    pthread_mutex_lock(&c->mu);
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        c->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    pthread_mutex_unlock(&c->mu);
    tm_held_clear(r);
    json_decref(r->msg);
    json_decref(r->result);
    tm_buf_free(&r->body);
    tm_buf_free(&r->chunk);
    tm_buf_free(&r->io.in);
    tm_sse_parser_free(r->parser);
    free(r->io.www_auth);
    free(r->auth_challenge);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void tm_rq_finish_locked(rq *r, int rc, json_t *result)
{
    if (r->phase == RQ_DONE) {
        json_decref(result);
        return;
    }
    r->phase = RQ_DONE;
    r->rc = rc;
    json_decref(r->result);
    r->result = result;
    pthread_cond_broadcast(&r->cv);
}

void tm_rq_fail(rq *r, int rc, const char *reason, const char *message, json_t *data)
{
    json_t *e = NULL;
    tm_client_error(&e, TM_RPC_INTERNAL_ERROR, reason, message, data);
    pthread_mutex_lock(&r->c->mu);
    tm_rq_finish_locked(r, rc, e);
    pthread_mutex_unlock(&r->c->mu);
}

void tm_rq_fail_final(rq *r, int rc, const char *reason, const char *message, json_t *data)
{
    tm_rq_fail(r, rc, reason, message, data);
    r->final = 1;
}

int tm_pending_add(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    int rc = tm_map_put(c->pending, r->key, r);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void tm_pending_del(tidemark_client_t *c, rq *r)
{
    pthread_mutex_lock(&c->mu);
    if (tm_map_get(c->pending, r->key) == r)
        tm_map_del(c->pending, r->key);
    pthread_mutex_unlock(&c->mu);
}

int tm_next_id(tidemark_client_t *c, int64_t *id, json_t **err)
{
    int rc = tm_cstate_next_request_id(c->st, id);
    if (rc)
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the client state cannot give out a request id", NULL);
    return rc;
}

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

tm_span *tm_client_span(tidemark_client_t *c, tm_span_kind kind, const char *method,
                        const json_t *params, const json_t *id)
{
    if (!c->otel)
        return NULL;
    tm_trace_ctx parent;
    const char *ts = NULL;
    (void)tm_mcp_trace_from(params, NULL, &parent, &ts);
    tm_span *sp = tm_mcp_span_start(c->otel, kind, method, params, id, &parent, ts);
    pthread_mutex_lock(&c->mu);
    tm_span_set_str(sp, "mcp.session.id", c->session);
    tm_span_set_str(sp, "mcp.protocol.version", c->proto);
    pthread_mutex_unlock(&c->mu);
    tm_span_set_str(sp, "network.transport", "tcp");
    return sp;
}

void tm_client_count_on(tidemark_client_t *c, tm_metrics *m)
{
    if (!m)
        return;
    tm_mcp_durations d;
    tm_mcp_durations_client(m, &d);
    pthread_mutex_lock(&c->mu);
    c->m = d;
    pthread_mutex_unlock(&c->mu);
    tm_otel_count_on(c->otel, m);
}

void tm_client_session_ended_locked(tidemark_client_t *c)
{
    if (!c->session || !c->session_us)
        return;
    tm_mcp_labels l = {.version = c->proto, .transport = "tcp"};
    tm_mcp_observe(c->m.session, &l, (uint64_t)(tm_now_us() - c->session_us));
    c->session_us = 0;
}

/* mcp.client.operation.duration of a request ended with rc. */
static void observe_request(tidemark_client_t *c, const char *method, json_t *params, int rc,
                            const json_t *res, int64_t t0)
{
    char code[24];
    const char *err = NULL, *name = json_string_value(json_object_get(params, "name"));
    if (rc == TIDEMARK_EPEER)
        snprintf(code, sizeof code, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(res, "code")));
    if (rc)
        err = rc == TIDEMARK_EPEER ? code : tidemark_strerror(rc);
    else if (json_is_true(json_object_get(res, "isError")))
        err = "tool_error";
    pthread_mutex_lock(&c->mu);
    tm_mcp_labels l = {.method = method, .tool = strcmp(method, "tools/call") ? NULL : name,
                       .prompt = strcmp(method, "prompts/get") ? NULL : name, .error = err,
                       .version = c->proto, .transport = "tcp"};
    tm_mcp_observe(c->m.operation, &l, (uint64_t)(tm_now_us() - t0));
    pthread_mutex_unlock(&c->mu);
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
    if (!rc)
        rc = tm_pending_add(c, r);
    if (rc) {
        tm_mcp_span_finish(sp, rc, *result);
        tm_rq_free(r);
        return rc;
    }
    rc = tm_start_post(c, r);
    if (rc)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    rc = tm_drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    tm_pending_del(c, r);
    if (rc == 0 && r->recorded)
        rc = tm_task_started(c, r);
    request_settle(c, r);
    *result = json_incref(r->result);
    observe_request(c, method, params, rc, *result, t0);
    tm_mcp_span_finish(sp, rc, *result);
    tm_rq_free(r);
    return rc;
}

/* Modern, a tools/call: its tool's x-mcp-header annotations are needed
 * for the headers (tools/list once), and a tool whose annotations are
 * invalid is never called. */
static int modern_call_check(tidemark_client_t *c, json_t *params, json_t **result)
{
    const char *tool = json_string_value(json_object_get(params, "name"));
    if (!tm_modern_tool_known(c, tool)) {
        json_t *tools = NULL;
        int rc = tidemark_client_list(c, "tools/list", "tools", &tools);
        json_decref(tools);
        if (rc)
            TM_DEBUG("client: tools/list before a call failed (%s)", tidemark_strerror(rc));
    }
    if (!tm_modern_tool_refused(c, tool))
        return 0;
    tm_client_error(result, TM_RPC_INVALID_PARAMS, "invalid_tool_definition",
                    "the tool's x-mcp-header annotations are invalid: it is not called",
                    json_pack("{s:s}", "tool", tool));
    return TIDEMARK_EPROTO;
}

/* A tools/call the server refused for its Mcp-Param-* headers (-32020). */
static int header_mismatch(const char *method, int rc, json_t *err)
{
    return rc == TIDEMARK_EPEER && strcmp(method, "tools/call") == 0 &&
           json_integer_value(json_object_get(err, "code")) == TM_RPC_HEADER_MISMATCH;
}

int tidemark_client_request(tidemark_client_t *c, const char *method, json_t *params,
                            tidemark_progress_fn progress, void *progress_ud, json_t **result)
{
    if (!c || !method || !result)
        return TIDEMARK_EINVAL;
    *result = NULL;
    pthread_mutex_lock(&c->mu);
    int modern = c->modern;
    pthread_mutex_unlock(&c->mu);
    if (!modern)
        return tm_request_once(c, method, params, progress, progress_ud, result);
    if ((*result = tm_cache_get(c, method, params)) != NULL)
        return 0;
    int rc = strcmp(method, "tools/call") == 0 ? modern_call_check(c, params, result) : 0;
    if (rc)
        return rc;
    rc = tm_request_once(c, method, params, progress, progress_ud, result);
    if (header_mismatch(method, rc, *result)) {
        /* The tool's schema may have changed: its headers learned again,
         * then once more (a request refused at its headers never ran). */
        tm_modern_tools_forget(c);
        json_decref(*result);
        *result = NULL;
        if ((rc = modern_call_check(c, params, result)) != 0)
            return rc;
        rc = tm_request_once(c, method, params, progress, progress_ud, result);
    }
    rc = tm_mrtr_rounds(c, method, params, rc, progress, progress_ud, result);
    if (rc == 0 && strcmp(method, "tools/list") == 0)
        tm_modern_tools_seen(c, json_object_get(*result, "tools"));
    if (rc == 0)
        tm_cache_put(c, method, params, *result);
    return rc;
}

int tidemark_client_call_tool(tidemark_client_t *c, const char *name, json_t *args,
                              tidemark_progress_fn progress, void *ud, json_t **result)
{
    if (!c || !name || !result)
        return TIDEMARK_EINVAL;
    *result = NULL;
    json_t *params = json_pack("{s:s,s:o}", "name", name, "arguments",
                               args ? json_incref(args) : json_object());
    if (!params)
        return TIDEMARK_ENOMEM;
    int rc = tidemark_client_request(c, "tools/call", params, progress, ud, result);
    json_decref(params);
    return rc;
}

/* One page of a list: its items appended to items; OUT next (NULL at the end). */
static int list_page(tidemark_client_t *c, const char *method, const char *field, json_t *cursor,
                     json_t *items, json_t **next, json_t **err)
{
    json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
    if (cursor && !params)
        return TIDEMARK_ENOMEM;
    json_t *res = NULL;
    int rc = tidemark_client_request(c, method, params, NULL, NULL, &res);
    json_decref(params);
    if (rc) {
        *err = res;
        return rc;
    }
    json_t *page = json_object_get(res, field);
    if (page && json_array_extend(items, page) != 0)
        rc = TIDEMARK_ENOMEM;
    json_t *nc = json_object_get(res, "nextCursor");
    *next = json_is_string(nc) ? json_incref(nc) : NULL;
    json_decref(res);
    return rc;
}

int tidemark_client_list(tidemark_client_t *c, const char *method, const char *field, json_t **items)
{
    if (!c || !method || !field || !items)
        return TIDEMARK_EINVAL;
    json_t *all = json_array(), *cursor = NULL, *err = NULL;
    if (!all)
        return TIDEMARK_ENOMEM;
    int rc = 0;
    for (int page = 0; page < 10000; page++) {
        json_t *next = NULL;
        rc = list_page(c, method, field, cursor, all, &next, &err);
        json_decref(cursor);
        cursor = next;
        if (rc || !cursor)
            break;
    }
    json_decref(cursor);
    if (rc) {
        json_decref(all);
        *items = err;
        return rc;
    }
    *items = all;
    return 0;
}
