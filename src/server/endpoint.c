/*
 * endpoint.c - the MCP endpoint, whatever carries it (request.h): which
 * handler a parsed request goes to, the authorization gate (the token
 * checked on a worker, the principal handed on), the session a request
 * names, DELETE, and the typed error answers the handlers share. What only
 * HTTP has (framing, Host, Origin, health, metrics) is http.c's.
 */
#include "server_int.h"
#include "feed.h"
#include "era.h"
#include "../auth/auth.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- answers -------------------------------------------------------------- */

void tm_reply_json(tm_req *r, unsigned status, json_t *body /* stolen */)
{
    size_t len;
    char *txt = tm_jsonrpc_dump(body, &len);
    json_decref(body);
    tm_req_reply(r, status, "application/json", txt, txt ? len : 0);
    free(txt);
}

/* An HTTP-level error with a JSON-RPC error body carrying data.reason. */
void tm_reply_error(tm_req *r, unsigned status, int code, const char *reason,
                        const char *message, json_t *extra)
{
    tm_reply_json(r, status, tm_jsonrpc_error(NULL, code, message, reason, extra));
}

/* The store could not do what a request needs. Refusing writes (a full
 * disk, an I/O error) is temporary: 503 and a hint to retry. */
void tm_reply_store_error(tm_req *r, int rc)
{
    if (rc == TIDEMARK_EIO) {
        tm_req_add_header(r, "Retry-After", "1");
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_unavailable",
                    "Service Unavailable: the store does not take writes now", NULL);
    } else {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", tidemark_strerror(rc), NULL);
    }
}

/* An MCP-Protocol-Version header naming a version we do not speak: answer
 * 400 unsupported_protocol_version (with the versions we do) and return 1. */
int tm_refuse_version(tm_req *r)
{
    const char *pv = r->protocol_version;
    if (!pv || tm_protocol_version_supported(pv))
        return 0;
    /* Code -32600 as before 2026-07-28 (a request of that era gets -32022,
     * era.c); the data names every version served, 2026-07-28 included. */
    tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "unsupported_protocol_version",
                "Bad Request: unsupported MCP-Protocol-Version",
                json_pack("{s:s,s:s,s:o}", "received", pv, "requested", pv, "supported",
                          tm_era_served_json()));
    return 1;
}

/* ---- checks --------------------------------------------------------------- */

tm_sess *tm_require_session(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx)
{
    return tm_require_session_prefetch(srv, r, ctx, NULL, NULL);
}

tm_sess *tm_require_session_prefetch(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                                     const char *key, tm_req_prefetch *pf)
{
    const char *sid = ctx->sid;
    if (!sid) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "session_required",
                    "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    tm_sess *s = tm_sess_find_prefetch(srv, sid, key, pf);
    if (s && (strcmp(s->version, TIDEMARK_PROTOCOL_2026_07_28) == 0 ||
              strcmp(s->principal, ctx->principal) != 0)) {
        /* A 2026-07-28 call's or listener's store session is not a 2025
         * session; another principal's session is answered as one that
         * does not exist (no oracle), and is not touched. */
        tm_sess_unref(s);
        s = NULL;
    }
    if (!s || atomic_load(&s->closed)) {
        if (s)
            tm_sess_unref(s);
        tm_reply_error(r, 404, TM_RPC_SESSION_NOT_FOUND, "unknown_session", "Session not found", NULL);
        return NULL;
    }
    /* A supported MCP-Protocol-Version other than the negotiated one is
     * tolerated (the official conformance suite sends 2025-03-26 on a
     * 2025-11-25 session); behaviour follows the negotiated version.
     * Unsupported values were rejected before. */
    int trc = tm_store_session_touch(srv->store, s->id, tm_wall_ms());
    if (trc) /* last-seen only feeds idle expiry; the request goes on */
        TM_DEBUG("session %s: touch: %s", s->id, tidemark_strerror(trc));
    return s;
}

/* ---- authorization -------------------------------------------------------- */

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

static void delete_cont(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, void *ud)
{
    (void)ud;
    tm_sess *sess = tm_require_session(srv, r, ctx);
    if (!sess)
        return;
    tm_sess_close(sess);
    tm_sess_observe_end(srv, sess);
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, sess->id) == sess) {
        tm_map_del(srv->sessions, sess->id);
        tm_gauge_add(srv->m.sessions_open, -1);
        tm_sess_unref(sess);
    }
    pthread_mutex_unlock(&srv->mu);
    tm_feed_end_session(srv, sess->id);
    int rc = tm_store_session_delete(srv->store, sess->id);
    if (rc == 0 || rc == TIDEMARK_ENOTFOUND)
        tm_sess_bound_drop(srv, sess->id);
    tm_sess_unref(sess);
    if (rc && rc != TIDEMARK_ENOTFOUND) /* still stored: say so, a retry deletes it */
        return tm_reply_store_error(r, rc);
    TM_DEBUG("session deleted");
    tm_req_reply(r, 200, NULL, NULL, 0);
}

void tm_handle_delete(tidemark_server_t *srv, tm_req *r)
{
    tm_gate(srv, r, NULL, 0, delete_cont, NULL, NULL);
}

const char *tm_req_header(const tm_req *r, const char *name)
{
    if (strncasecmp(name, "Mcp-Param-", 10) == 0) {
        for (size_t i = 0; i < r->nparams; i++)
            if (strcasecmp(r->params[i].suffix, name + 10) == 0)
                return r->params[i].value;
        return NULL;
    }
    return strcasecmp(name, "MCP-Protocol-Version") == 0 ? r->protocol_version
           : strcasecmp(name, "Mcp-Method") == 0         ? r->mcp_method
           : strcasecmp(name, "Mcp-Name") == 0           ? r->mcp_name
                                                         : NULL;
}

void tm_handle_request(tidemark_server_t *srv, tm_req *r)
{
    if (r->method == TM_REQ_POST)
        return tm_handle_post(srv, r);
    if (tm_modern_refuse_method(r))
        return;
    if (r->method == TM_REQ_GET)
        return tm_handle_get(srv, r);
    tm_handle_delete(srv, r);
}
