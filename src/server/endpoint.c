/*
 * endpoint.c - the HTTP endpoint: which handler a request goes to, the
 * checks every request passes first (framing, Host, Origin), the
 * authorization gate (the token checked on a worker, the principal handed
 * on), the health, metrics and Protected Resource Metadata endpoints,
 * DELETE, and the typed error answers the handlers share.
 */
#include "server_int.h"
#include "feed.h"
#include "http_policy.h"
#include "era.h"
#include "../auth/auth.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- answers -------------------------------------------------------------- */

void tm_reply_json(tm_http_req *r, unsigned status, json_t *body /* stolen */)
{
    size_t len;
    char *txt = tm_jsonrpc_dump(body, &len);
    json_decref(body);
    tm_http_reply(r, status, "application/json", txt, txt ? len : 0);
    free(txt);
}

/* An HTTP-level error with a JSON-RPC error body carrying data.reason. */
void tm_reply_error(tm_http_req *r, unsigned status, int code, const char *reason,
                        const char *message, json_t *extra)
{
    tm_reply_json(r, status, tm_jsonrpc_error(NULL, code, message, reason, extra));
}

/* The store could not do what a request needs. Refusing writes (a full
 * disk, an I/O error) is temporary: 503 and a hint to retry. */
void tm_reply_store_error(tm_http_req *r, int rc)
{
    if (rc == TIDEMARK_EIO) {
        tm_http_req_add_header(r, "Retry-After", "1");
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "store_unavailable",
                    "Service Unavailable: the store does not take writes now", NULL);
    } else {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error", tidemark_strerror(rc), NULL);
    }
}

/* An MCP-Protocol-Version header naming a version we do not speak: answer
 * 400 unsupported_protocol_version (with the versions we do) and return 1. */
int tm_refuse_version(tm_http_req *r)
{
    const char *pv = tm_http_req_header(r, "MCP-Protocol-Version");
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

static int host_allowed(tidemark_server_t *s, const char *host)
{
    return tm_policy_host_allowed((const char *const *)s->hosts, host);
}

static int origin_allowed(tidemark_server_t *s, const char *origin)
{
    return tm_policy_origin_allowed((const char *const *)s->origins, origin);
}

tm_sess *tm_require_session(tidemark_server_t *srv, tm_http_req *r, const tm_reqctx *ctx)
{
    return tm_require_session_prefetch(srv, r, ctx, NULL, NULL);
}

tm_sess *tm_require_session_prefetch(tidemark_server_t *srv, tm_http_req *r, const tm_reqctx *ctx,
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
static void auth_refuse(tm_http_req *r, const tm_auth_result *a)
{
    TM_DEBUG("authorization: %u %s", a->status, tm_auth_reason_name(a->reason));
    if (a->www_authenticate[0])
        tm_http_req_add_header(r, "WWW-Authenticate", a->www_authenticate);
    if (a->status == 503) {
        tm_http_req_add_header(r, "Retry-After", "1");
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
    tm_http_req *r;
    tm_reqctx ctx;
    char *authorization, *sid, *last_event_id;
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
    free(g->authorization);
    free(g->sid);
    free(g->last_event_id);
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
        rc = tm_auth_check(g->srv->auth, g->authorization, g->ops[i].method, g->ops[i].tool, &res);
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

static char *dup_header(tm_http_req *r, const char *name, int *oom)
{
    const char *v = tm_http_req_header(r, name);
    char *d = v ? strdup(v) : NULL;
    if (v && !d)
        *oom = 1;
    return d;
}

void tm_gate(tidemark_server_t *srv, tm_http_req *r, const tm_msg *msgs, size_t n,
             tm_gate_fn cont, void *ud, void (*free_ud)(void *))
{
    /* Without authorization the request goes on here, on the I/O thread,
     * unless the store is shared: there looking up its session and records
     * are round trips to Redis, which would stall every connection of the
     * thread (2 I/O threads); a worker takes it, as with authorization. */
    if (!srv->auth && !tm_store_shared(srv->store)) {
        tm_reqctx ctx = {.principal = TM_PRINCIPAL_ANON,
                         .sid = tm_http_req_header(r, "Mcp-Session-Id"),
                         .last_event_id = tm_http_req_header(r, "Last-Event-ID")};
        return cont(srv, r, &ctx, ud);
    }
    gate_job *g = calloc(1, sizeof *g);
    int oom = !g;
    if (g) {
        *g = (gate_job){.srv = srv, .r = r, .cont = cont, .ud = ud, .free_ud = free_ud};
        g->authorization = dup_header(r, "Authorization", &oom);
        g->sid = dup_header(r, "Mcp-Session-Id", &oom);
        g->last_event_id = dup_header(r, "Last-Event-ID", &oom);
        g->ctx = (tm_reqctx){.sid = g->sid, .last_event_id = g->last_event_id, .on_worker = 1};
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

/* Host and Origin (DNS rebinding), else 403. */
static int host_and_origin_ok(tidemark_server_t *srv, tm_http_req *r)
{
    const char *host = tm_http_req_header(r, "Host");
    if (!host_allowed(srv, host)) {
        json_t *x = host ? json_pack("{s:s}", "host", host) : NULL;
        tm_reply_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_host",
                    "Forbidden: Host header not allowed", x);
        return 0;
    }
    const char *origin = tm_http_req_header(r, "Origin");
    if (origin && !origin_allowed(srv, origin)) {
        json_t *x = json_pack("{s:s}", "origin", origin);
        tm_reply_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_origin",
                    "Forbidden: Origin not allowed", x);
        return 0;
    }
    return 1;
}

/* ---- routes --------------------------------------------------------------- */

static int listed(char **l, const char *v)
{
    for (size_t i = 0; l && v && l[i]; i++)
        if (strcmp(l[i], v) == 0)
            return 1;
    return 0;
}

/* GET only, or 405. */
static int only_get(tm_http_req *r, const char *method)
{
    if (strcmp(method, "GET") == 0)
        return 1;
    tm_http_req_add_header(r, "Allow", "GET");
    tm_reply_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed", "Method Not Allowed", NULL);
    return 0;
}

/* /healthz: the process answers. /readyz: and its store takes writes. No
 * Host check (probes come from outside: load balancers, kubelets). */
static void health(tidemark_server_t *srv, tm_http_req *r, int ready)
{
    int rc = ready && !atomic_load(&srv->stopping) ? tm_store_writable(srv->store) : 0;
    if (ready && atomic_load(&srv->stopping))
        rc = TIDEMARK_ECLOSED;
    const char *why = rc == 0                  ? NULL
                      : rc == TIDEMARK_ECLOSED ? "shutting_down"
                                               : tm_store_unavailable_reason(srv->store);
    json_t *b = why ? json_pack("{s:s,s:s}", "status", "unavailable", "reason", why)
                    : json_pack("{s:s}", "status", ready ? "ready" : "ok");
    tm_reply_json(r, why ? 503 : 200, b);
}

/* Requests refused by authorization, by reason (src/auth counts them). */
static void auth_metrics(tidemark_server_t *srv, tm_buf *b)
{
    if (!srv->auth)
        return;
    tm_buf_adds(b, "# HELP tidemark_auth_refused_total MCP requests refused by authorization, "
                   "by reason\n# TYPE tidemark_auth_refused_total counter\n");
    for (int i = TM_AUTH_OK + 1; i < TM_AUTH_REASON_COUNT; i++)
        tm_buf_printf(b, "tidemark_auth_refused_total{reason=\"%s\"} %llu\n",
                      tm_auth_reason_name((tm_auth_reason)i),
                      (unsigned long long)tm_auth_count(srv->auth, (tm_auth_reason)i));
    tm_buf_printf(b, "# HELP tidemark_auth_accepted_total MCP requests whose access token was "
                     "accepted\n# TYPE tidemark_auth_accepted_total counter\n"
                     "tidemark_auth_accepted_total %llu\n",
                  (unsigned long long)tm_auth_count(srv->auth, TM_AUTH_OK));
}

/* Whether the store takes writes now, and why not (durability replicated
 * on a primary without a synchronous standby). */
static void store_metrics(tidemark_server_t *srv, tm_buf *b)
{
    tm_buf_printf(b, "# HELP tidemark_store_writable 1 while the store takes writes\n"
                     "# TYPE tidemark_store_writable gauge\ntidemark_store_writable %d\n"
                     "# HELP tidemark_store_not_replicated 1 while writes are refused because "
                     "the PostgreSQL primary has no synchronous standby (--durability replicated)\n"
                     "# TYPE tidemark_store_not_replicated gauge\ntidemark_store_not_replicated %d\n",
                  tm_store_writable(srv->store) == 0, tm_store_pg_not_replicated(srv->store));
}

static void metrics(tidemark_server_t *srv, tm_http_req *r)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    tm_metrics_render(&b);
    auth_metrics(srv, &b);
    store_metrics(srv, &b);
    tm_http_reply(r, 200, "text/plain; version=0.0.4", b.data, b.len);
    tm_buf_free(&b);
}

/* --metrics-token: "Bearer <token>", compared in constant time. */
static int metrics_token_ok(const tidemark_server_t *srv, tm_http_req *r)
{
    const char *h = tm_http_req_header(r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t a = strlen(h), b = strlen(srv->metrics_token);
    unsigned char d = a != b;
    for (size_t i = 0; i < b; i++)
        d |= (unsigned char)(srv->metrics_token[i] ^ (i < a ? h[i] : 0));
    return d == 0;
}

/* /metrics: its own setting, never an MCP access token. */
static void metrics_route(tidemark_server_t *srv, tm_http_req *r, const char *method)
{
    if (listed(srv->metrics_addrs, tm_http_req_peer(r))) {
        if (only_get(r, method))
            metrics(srv, r);
        return;
    }
    if (srv->metrics_token) {
        if (!metrics_token_ok(srv, r)) {
            tm_http_req_add_header(r, "WWW-Authenticate", "Bearer realm=\"metrics\"");
            return tm_reply_error(r, 401, TM_RPC_INVALID_REQUEST, "unauthorized",
                                  "Unauthorized: /metrics needs its scrape token", NULL);
        }
    } else if (!host_and_origin_ok(srv, r)) {
        return;
    }
    if (only_get(r, method))
        metrics(srv, r);
}

static void delete_cont(tidemark_server_t *srv, tm_http_req *r, const tm_reqctx *ctx, void *ud)
{
    (void)ud;
    tm_sess *sess = tm_require_session(srv, r, ctx);
    if (!sess)
        return;
    tm_sess_close(sess);
    tm_sess_observe_end(sess);
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, sess->id) == sess) {
        tm_map_del(srv->sessions, sess->id);
        tm_gauge_add(TM_G_SESSIONS_OPEN, -1);
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
    tm_http_reply(r, 200, NULL, NULL, 0);
}

void tm_handle_delete(tidemark_server_t *srv, tm_http_req *r)
{
    tm_gate(srv, r, NULL, 0, delete_cont, NULL, NULL);
}

/* The Protected Resource Metadata (RFC 9728) at its two URLs: public, after
 * the Host check. 1 when path is one of them (answered). */
static int metadata_route(tidemark_server_t *srv, tm_http_req *r, const char *method,
                          const char *path)
{
    const char *doc = NULL;
    if (!srv->auth || tm_auth_metadata(srv->auth, path, &doc) != 0)
        return 0;
    if (!host_allowed(srv, tm_http_req_header(r, "Host"))) {
        const char *host = tm_http_req_header(r, "Host");
        tm_reply_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_host",
                       "Forbidden: Host header not allowed",
                       host ? json_pack("{s:s}", "host", host) : NULL);
    } else if (only_get(r, method)) {
        tm_http_reply(r, 200, "application/json", doc, strlen(doc));
    }
    return 1;
}

void tm_on_http(void *ud, tm_http_req *r)
{
    tidemark_server_t *srv = ud;
    const char *method = tm_http_req_method(r);
    const char *path = tm_http_req_path(r);
    tm_metric_inc(TM_M_HTTP_REQUESTS);
    const char *framing = tm_http_req_framing_error(r);
    if (framing)
        return tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, framing,
                              "Bad Request: the header fields frame the message ambiguously "
                              "(request smuggling)",
                              NULL);
    int mcp = strcmp(path, srv->path) == 0;
    if (!mcp && (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0)) {
        if (only_get(r, method))
            health(srv, r, path[1] == 'r');
        return;
    }
    if (!mcp && strcmp(path, "/metrics") == 0)
        return metrics_route(srv, r, method);
    if (!mcp && metadata_route(srv, r, method, path))
        return;
    if (!mcp)
        return tm_reply_error(r, 404, TM_RPC_INVALID_REQUEST, "not_found", "Not Found", NULL);
    if (!host_and_origin_ok(srv, r))
        return;
    if (atomic_load(&srv->stopping))
        return tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    if (strcmp(method, "POST") == 0)
        return tm_handle_post(srv, r);
    if ((strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0) && tm_modern_refuse_method(r))
        return;
    if (strcmp(method, "GET") == 0)
        return tm_handle_get(srv, r);
    if (strcmp(method, "DELETE") == 0)
        return tm_handle_delete(srv, r);
    tm_http_req_add_header(r, "Allow", "GET, POST, DELETE");
    tm_reply_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed", "Method Not Allowed", NULL);
}
