/*
 * session.c - the session: initialize, reusing the one a state file holds,
 * a new one after the server lost it, notifications the client sends
 * (tidemark_client_notify), and the streams it listens on: the standalone
 * GET stream (tidemark_client_listen, and the listener thread of
 * open_standalone) or, in the 2026-07-28 era, subscriptions/listen
 * (tidemark_client_subscribe).
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdlib.h>
#include <string.h>

/* The capabilities offered: the configured ones, or those the callbacks imply. */
/* The initialize request of a new session, in the CLIENT span *sp (made
 * here; NULL when tracing is off), sent and driven. OUT r. */
static int initialize_request(tidemark_client_t *c, rq **out, tm_span **sp, json_t **err)
{
    int64_t id;
    int rc = tm_next_id(c, &id, err);
    if (rc)
        return rc;
    json_t *caps = tm_client_capabilities(c);
    rq *r = caps ? tm_rq_new(c, id) : NULL;
    if (!r) {
        json_decref(caps);
        return TIDEMARK_ENOMEM;
    }
    json_t *p = json_pack("{s:s,s:o,s:{s:s,s:s}}", "protocolVersion", c->offer, "capabilities", caps,
                          "clientInfo", "name", c->name, "version", c->version);
    json_t *jid = json_integer(id);
    *sp = p ? tm_client_span(c, TM_SPAN_CLIENT, "initialize", p, jid) : NULL;
    tm_span_set_str(*sp, "mcp.protocol.version", c->offer);
    if (p && tm_mcp_inject(*sp, p) != 0) {
        json_decref(p);
        p = NULL;
    }
    r->msg = p ? tm_jsonrpc_request(jid, "initialize", p) : NULL;
    if (!p)
        json_decref(jid);
    rc = tm_rq_send(c, r, tm_now_ms() + c->cfg.timeout_ms);
    if (rc) {
        if (err)
            *err = json_incref(r->result);
        tm_rq_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* The server's answer taken: version, info, and the state starts over
 * (old cursors and dispatch rows belong to the old session). */
static int adopt_session(tidemark_client_t *c, json_t *result, json_t **err)
{
    const char *v = json_string_value(json_object_get(result, "protocolVersion"));
    if (!tm_protocol_version_supported(v)) {
        tm_client_error(err, TM_RPC_INVALID_REQUEST, "unsupported_protocol_version",
                        "the server chose a protocol version this client does not speak",
                        json_pack("{s:s}", "protocolVersion", v ? v : ""));
        return TIDEMARK_ENOTSUP;
    }
    char *info = json_dumps(result, JSON_COMPACT);
    pthread_mutex_lock(&c->mu);
    free(c->proto);
    c->proto = strdup(v);
    json_decref(c->server_info);
    c->server_info = json_incref(result);
    char *sid = strdup(c->session ? c->session : "");
    int ok = info && sid && c->proto;
    pthread_mutex_unlock(&c->mu);
    int rc = ok ? tm_cstate_session_clear(c->st) : TIDEMARK_ENOMEM;
    if (!rc)
        rc = tm_cstate_session_set(c->st, c->url, sid, v, info);
    free(info);
    free(sid);
    if (rc)
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the new session cannot be saved in the client state", NULL);
    return rc;
}

int tm_initialize(tidemark_client_t *c, json_t **err)
{
    pthread_mutex_lock(&c->mu);
    free(c->session);
    c->session = NULL;
    free(c->proto);
    c->proto = NULL;
    c->session_lost = 0;
    pthread_mutex_unlock(&c->mu);
    rq *r = NULL;
    tm_span *sp = NULL;
    int rc = initialize_request(c, &r, &sp, err);
    if (rc) {
        tm_mcp_span_finish(sp, rc, err ? *err : NULL);
        return rc;
    }
    rc = adopt_session(c, r->result, err);
    pthread_mutex_lock(&c->mu);
    tm_span_set_str(sp, "mcp.session.id", c->session);
    tm_span_set_str(sp, "mcp.protocol.version", c->proto);
    pthread_mutex_unlock(&c->mu);
    tm_mcp_span_finish(sp, rc, rc ? (err ? *err : NULL) : r->result);
    tm_rq_free(r);
    if (rc)
        return rc;
    rc = tidemark_client_notify(c, "notifications/initialized", NULL);
    if (rc)
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "initialized_failed",
                        "the server did not accept notifications/initialized", NULL);
    return rc;
}

int tm_renew_session(tidemark_client_t *c, json_t **err)
{
    pthread_mutex_lock(&c->mu);
    int lost = c->session_lost;
    pthread_mutex_unlock(&c->mu);
    if (!lost)
        return 0;
    /* 404 earlier: the session is gone. Start a new one; requests that
     * were outstanding were already settled with session_lost. */
    pthread_mutex_lock(&c->init_mu);
    pthread_mutex_lock(&c->mu);
    lost = c->session_lost; /* another thread may have renewed it meanwhile */
    pthread_mutex_unlock(&c->mu);
    int rc = lost ? tm_initialize(c, err) : 0;
    pthread_mutex_unlock(&c->init_mu);
    return rc;
}

/* Whether a saved session of version may be taken under the configured era. */
static int era_allows(tidemark_client_t *c, const char *id, const char *version)
{
    int modern = !strcmp(version, TIDEMARK_CLIENT_MODERN_VERSION);
    if (modern)
        return c->cfg.protocol != TIDEMARK_PROTOCOL_LEGACY;
    return id[0] && c->cfg.protocol != TIDEMARK_PROTOCOL_MODERN;
}

/* The session a state file holds, when it is of this URL (a modern one:
 * the era, no session id). 1 when taken. */
static int reuse_saved(tidemark_client_t *c)
{
    char *url, *id, *version, *server;
    int taken = 0;
    if (tm_cstate_session_get(c->st, &url, &id, &version, &server) == 0 && url && id &&
        version && strcmp(url, c->url) == 0 && era_allows(c, id, version)) {
        int modern = !strcmp(version, TIDEMARK_CLIENT_MODERN_VERSION);
        if (modern) {
            free(id);
            id = NULL;
        }
        json_t *info = server ? json_loads(server, JSON_ALLOW_NUL, NULL) : NULL;
        pthread_mutex_lock(&c->mu);
        free(c->session);
        c->session = id;
        c->session_us = tm_now_us();
        free(c->proto);
        c->proto = version;
        json_decref(c->server_info);
        c->server_info = info;
        c->modern = modern;
        pthread_mutex_unlock(&c->mu);
        id = version = NULL;
        taken = 1;
    }
    free(url);
    free(id);
    free(version);
    free(server);
    return taken;
}

static void *listener_main(void *arg)
{
    tidemark_client_t *c = arg;
    int rc = tidemark_client_listen(c, 0);
    if (rc && rc != TIDEMARK_ECANCELED)
        TM_WARN("client: the standalone stream ended: %s", tidemark_strerror(rc));
    return NULL;
}

int tidemark_client_connect(tidemark_client_t *c, json_t **err)
{
    if (!c)
        return TIDEMARK_EINVAL;
    if (err)
        *err = NULL;
    int rc = 0;
    if (reuse_saved(c))
        rc = 0;
    else if (c->cfg.protocol == TIDEMARK_PROTOCOL_LEGACY || (rc = tm_modern_connect(c, err)) == 1)
        rc = tm_initialize(c, err);
    pthread_mutex_lock(&c->mu);
    int modern = c->modern;
    pthread_mutex_unlock(&c->mu);
    if (rc || !c->cfg.open_standalone || c->listening || modern)
        return rc; /* modern has no standalone stream: subscriptions/listen instead */
    /* open_standalone: keep the GET stream open on a thread of ours. */
    if (pthread_create(&c->listener, NULL, listener_main, c) != 0) {
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "thread_error",
                        "cannot start the thread of the standalone stream", NULL);
        return TIDEMARK_ENOMEM;
    }
    c->listening = 1;
    return 0;
}

int tidemark_client_listen(tidemark_client_t *c, int stop_after_ms)
{
    if (!c)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    int modern = c->modern;
    pthread_mutex_unlock(&c->mu);
    if (modern)
        return tidemark_client_subscribe(c, NULL, stop_after_ms);
    rq *r = tm_rq_new(c, -1);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->listen = 1;
    snprintf(r->key, sizeof r->key, "listen");
    int rc = tm_start_get(c, r);
    if (rc)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    rc = tm_drive(c, r, stop_after_ms > 0 ? tm_now_ms() + stop_after_ms : INT64_MAX / 2);
    tm_rq_free(r);
    return rc == TIDEMARK_ETIMEDOUT ? 0 : rc;
}

static json_t *listen_params(json_t *filter)
{
    if (filter)
        return json_pack("{s:O}", "notifications", filter);
    return json_pack("{s:{s:b,s:b,s:b}}", "notifications", "toolsListChanged", 1,
                     "promptsListChanged", 1, "resourcesListChanged", 1);
}

int tidemark_client_subscribe(tidemark_client_t *c, json_t *filter, int stop_after_ms)
{
    if (!c)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->mu);
    int modern = c->modern;
    pthread_mutex_unlock(&c->mu);
    if (!modern)
        return tidemark_client_listen(c, stop_after_ms);
    int64_t id;
    int rc = tm_next_id(c, &id, NULL);
    rq *r = rc ? NULL : tm_rq_new(c, id);
    if (!r)
        return rc ? rc : TIDEMARK_ENOMEM;
    r->sub = 1;
    r->msg = tm_jsonrpc_request(json_integer(id), "subscriptions/listen", listen_params(filter));
    rc = tm_rq_send(c, r, stop_after_ms > 0 ? tm_now_ms() + stop_after_ms : INT64_MAX / 2);
    tm_rq_free(r);
    return rc == TIDEMARK_ETIMEDOUT ? 0 : rc;
}

/* A notification's params: params itself (a new reference), or, when it
 * is traced, a copy carrying the span's traceparent (the caller's stay
 * untouched). *ok is 0 when memory is short. */
static json_t *notify_params(const tm_span *sp, json_t *params, int *ok)
{
    *ok = 1;
    if (!sp)
        return json_incref(params);
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (!p || tm_mcp_inject(sp, p) != 0) {
        json_decref(p);
        *ok = 0;
        return NULL;
    }
    return p;
}

int tidemark_client_notify(tidemark_client_t *c, const char *method, json_t *params)
{
    if (!c || !method)
        return TIDEMARK_EINVAL;
    rq *r = tm_rq_new(c, 0);
    if (!r)
        return TIDEMARK_ENOMEM;
    tm_span *sp = tm_client_span(c, TM_SPAN_CLIENT, method, params, NULL);
    int ok;
    json_t *p = notify_params(sp, params, &ok);
    r->msg = ok ? tm_jsonrpc_notification(method, p) : NULL;
    int rc = r->msg ? tm_start_post(c, r) : TIDEMARK_ENOMEM;
    if (rc)
        tm_rq_fail(r, rc, "transport_error", "cannot send the notification", NULL);
    rc = tm_drive(c, r, tm_now_ms() + c->cfg.timeout_ms);
    tm_mcp_span_finish(sp, rc, r->result);
    tm_rq_free(r);
    return rc;
}
