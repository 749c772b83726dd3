/*
 * rq.c - a request's record in memory (client_int.h, rq): made and freed,
 * its outcome set once (tm_rq_finish_locked wakes its driver), the client's
 * pending map and next request id, and the typed error of a request.
 * Below everything that drives, sends or reads a request.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../mcp/jsonrpc.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

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

void tm_held_clear(rq *r)
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
