/*
 * gate.c - the authorization gate every request passes before its handler:
 * the token checked for each operation the request holds (on a worker: a
 * check may wait for the issuer), the principal handed on to the handler's
 * continuation, or the typed 401/403/503 answer.
 */
#include "server_int.h"
#include "../auth/auth.h"
#include "../base/log.h"
#include "../base/pool.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scope="..." of a challenge we made (the scopes the request needs). */
static json_t *challenge_scope(const char *www)
{
    const char *p = strstr(www, "scope=\"");
    const char *q = p ? strchr(p + 7, '"') : NULL;
    return q ? json_stringn(p + 7, (size_t)(q - p - 7)) : NULL;
}

/* 401, 403 or 503 as src/auth decided; the body is typed like every other
 * refusal. Every invalid token gets the same answer (the reason is for
 * metrics and the debug log only). */
static void auth_refuse(tm_req *r, const tm_auth_result *a)
{
    TM_DEBUG("authorization: %u %s", a->status, tm_auth_reason_name(a->reason));
    if (a->www_authenticate[0])
        tm_req_add_header(r, "WWW-Authenticate", a->www_authenticate);
    if (a->status == 503) {
        tm_req_add_header(r, "Retry-After", "1");
        return tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "issuer_unavailable",
                              "Service Unavailable: the authorization server cannot be reached "
                              "to check the token", NULL);
    }
    if (a->status == 403) {
        json_t *sc = challenge_scope(a->www_authenticate);
        return tm_reply_error(r, 403, TM_RPC_INVALID_REQUEST, "insufficient_scope",
                              "Forbidden: the access token lacks a scope this request needs",
                              sc ? json_pack("{s:o}", "scope", sc) : NULL);
    }
    if (a->reason == TM_AUTH_MISSING)
        return tm_reply_error(r, 401, TM_RPC_INVALID_REQUEST, "unauthorized",
                              "Unauthorized: this server needs an access token (Authorization: "
                              "Bearer)", NULL);
    tm_reply_error(r, 401, TM_RPC_INVALID_REQUEST, "invalid_token",
                   "Unauthorized: the access token is not valid for this server", NULL);
}

typedef struct gate_op {
    char *method, *tool;
} gate_op;

typedef struct gate_job {
    tidemark_server_t *srv;
    tm_req *r;
    tm_reqctx ctx;
    gate_op *ops; /* the (method, tool) pairs to authorize, each once */
    size_t nops;
    tm_gate_fn cont;
    void *ud;
    void (*free_ud)(void *);
} gate_job;

static void gate_job_free(gate_job *g)
{
    for (size_t i = 0; i < g->nops; i++) {
        free(g->ops[i].method);
        free(g->ops[i].tool);
    }
    free(g->ops);
    free(g);
}

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The operations of the messages (a response or invalid message has no
 * method: it needs the base scopes); each distinct one once. */
static int gate_ops(gate_job *g, const tm_msg *msgs, size_t n)
{
    g->ops = calloc(n ? n : 1, sizeof *g->ops);
    if (!g->ops)
        return TIDEMARK_ENOMEM;
    for (size_t i = 0; i < (n ? n : 1); i++) {
        const tm_msg *m = n ? &msgs[i] : NULL;
        const char *method = m && (m->kind == TM_MSG_REQUEST || m->kind == TM_MSG_NOTIFICATION)
                                 ? m->method : NULL;
        const char *tool = method && strcmp(method, "tools/call") == 0
                               ? json_string_value(json_object_get(m->params, "name")) : NULL;
        size_t k = 0;
        while (k < g->nops && !(same_str(g->ops[k].method, method) && same_str(g->ops[k].tool, tool)))
            k++;
        if (k < g->nops)
            continue;
        gate_op *o = &g->ops[g->nops++];
        o->method = method ? strdup(method) : NULL;
        o->tool = tool ? strdup(tool) : NULL;
        if ((method && !o->method) || (tool && !o->tool))
            return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* On a worker: check every operation; the first refusal answers. */
static void run_gate(void *arg)
{
    gate_job *g = arg;
    tm_auth_result res = {.status = 200};
    snprintf(res.principal.id, sizeof res.principal.id, "%s", TM_PRINCIPAL_ANON);
    int rc = 0;
    for (size_t i = 0; g->srv->auth && rc == 0 && i < g->nops; i++) {
        rc = tm_auth_check(g->srv->auth, g->r->authorization, g->ops[i].method, g->ops[i].tool, &res);
        if (rc == 0 && res.status != 200)
            break;
    }
    if (rc) {
        tm_reply_error(g->r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc),
                       NULL);
    } else if (res.status != 200) {
        auth_refuse(g->r, &res);
    } else {
        snprintf(g->ctx.principal, sizeof g->ctx.principal, "%s", res.principal.id);
        g->cont(g->srv, g->r, &g->ctx, g->ud);
        g->free_ud = NULL; /* cont took it */
    }
    if (g->free_ud)
        g->free_ud(g->ud);
    gate_job_free(g);
}

void tm_gate(tidemark_server_t *srv, tm_req *r, const tm_msg *msgs, size_t n,
             tm_gate_fn cont, void *ud, void (*free_ud)(void *))
{
    /* Without authorization the request goes on here, on the I/O thread,
     * unless the store is shared: there looking up its session and records
     * are round trips to Redis, which would stall every connection of the
     * thread (2 I/O threads); a worker takes it, as with authorization. */
    if (!srv->auth && !tm_store_shared(srv->store)) {
        tm_reqctx ctx = {.principal = TM_PRINCIPAL_ANON, .sid = r->session_id,
                         .last_event_id = r->last_event_id};
        return cont(srv, r, &ctx, ud);
    }
    gate_job *g = calloc(1, sizeof *g);
    int oom = !g;
    if (g) {
        *g = (gate_job){.srv = srv, .r = r, .cont = cont, .ud = ud, .free_ud = free_ud};
        g->ctx = (tm_reqctx){.sid = r->session_id, .last_event_id = r->last_event_id,
                             .on_worker = 1};
        oom = oom || gate_ops(g, msgs, n) != 0;
    }
    /* A check may wait for the issuer (a key set fetch, an introspection),
     * a shared store for Redis: never on an I/O thread. */
    if (!oom && tm_pool_submit(srv->pool, run_gate, g) == 0)
        return;
    if (free_ud)
        free_ud(ud);
    if (g)
        gate_job_free(g);
    if (oom)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
}
