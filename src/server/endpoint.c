/*
 * endpoint.c - the HTTP endpoint: which handler a request goes to, the
 * checks every request passes first (framing, Host, Origin), the health and
 * metrics endpoints, DELETE, and the typed error answers the handlers share.
 */
#include "server_int.h"
#include "feed.h"
#include "http_policy.h"
#include "era.h"
#include "../base/buf.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

tm_sess *tm_require_session(tidemark_server_t *srv, tm_http_req *r)
{
    const char *sid = tm_http_req_header(r, "Mcp-Session-Id");
    if (!sid) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "session_required",
                    "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    tm_sess *s = tm_sess_find(srv, sid);
    if (s && strcmp(s->version, TIDEMARK_PROTOCOL_2026_07_28) == 0) {
        /* a 2026-07-28 call's or listener's store session is not a 2025 session */
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
    const char *why = rc == 0 ? NULL : rc == TIDEMARK_ECLOSED ? "shutting_down" : "store_unavailable";
    json_t *b = why ? json_pack("{s:s,s:s}", "status", "unavailable", "reason", why)
                    : json_pack("{s:s}", "status", ready ? "ready" : "ok");
    tm_reply_json(r, why ? 503 : 200, b);
}

static void metrics(tm_http_req *r)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    tm_metrics_render(&b);
    tm_http_reply(r, 200, "text/plain; version=0.0.4", b.data, b.len);
    tm_buf_free(&b);
}

void tm_handle_delete(tidemark_server_t *srv, tm_http_req *r)
{
    tm_sess *sess = tm_require_session(srv, r);
    if (!sess)
        return;
    tm_sess_close(sess);
    pthread_mutex_lock(&srv->mu);
    if (tm_map_get(srv->sessions, sess->id) == sess) {
        tm_map_del(srv->sessions, sess->id);
        tm_gauge_add(TM_G_SESSIONS_OPEN, -1);
        tm_sess_unref(sess);
    }
    pthread_mutex_unlock(&srv->mu);
    tm_feed_end_session(srv, sess->id);
    int rc = tm_store_session_delete(srv->store, sess->id);
    tm_sess_unref(sess);
    if (rc && rc != TIDEMARK_ENOTFOUND) /* still stored: say so, a retry deletes it */
        return tm_reply_store_error(r, rc);
    TM_DEBUG("session deleted");
    tm_http_reply(r, 200, NULL, NULL, 0);
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
                           "Bad Request: ambiguous message length (Content-Length / Transfer-Encoding)",
                           NULL);
    int mcp = strcmp(path, srv->path) == 0;
    if (!mcp && (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0)) {
        if (only_get(r, method))
            health(srv, r, path[1] == 'r');
        return;
    }
    if (!mcp && strcmp(path, "/metrics") == 0) {
        if ((listed(srv->metrics_addrs, tm_http_req_peer(r)) || host_and_origin_ok(srv, r)) &&
            only_get(r, method))
            metrics(r);
        return;
    }
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
