/*
 * era.c - which protocol era the server speaks. server/discover goes first
 * (modern _meta and headers); a -32022 names the versions the server
 * serves: one this client speaks in modern is tried again, legacy ones lead
 * to a legacy session. Any other answer without a modern error in its body
 * (a plain 4xx, an old server's error) means a legacy server. A forced
 * era (TIDEMARK_PROTOCOL_MODERN) never falls back.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdlib.h>
#include <string.h>

enum { ERA_MODERN = 0, ERA_LEGACY = 1, ERA_RETRY = 2, ERA_FAIL = 3 };

/* One server/discover; OUT status (HTTP), result (result or error). */
static int discover_once(tidemark_client_t *c, long *status, json_t **result)
{
    int64_t id;
    int rc = tm_next_id(c, &id, result);
    if (rc)
        return rc;
    rq *r = tm_rq_new(c, id);
    if (!r)
        return TIDEMARK_ENOMEM;
    r->modern = 1;
    r->probe = 1;
    r->msg = tm_jsonrpc_request(json_integer(id), "server/discover", json_object());
    /* A legacy server may hold the stream of a POST it does not understand. */
    rc = tm_rq_send(c, r, tm_now_ms() + (c->cfg.timeout_ms < 10000 ? c->cfg.timeout_ms : 10000));
    *status = r->status;
    *result = json_incref(r->result);
    tm_rq_free(r);
    return rc;
}

static int lists(json_t *versions, const char *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(versions, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), v))
        return 1;
    return 0;
}

static int lists_legacy(json_t *versions)
{
    size_t i;
    json_t *e;
    json_array_foreach(versions, i, e) if (tm_protocol_version_supported(json_string_value(e)))
        return 1;
    return 0;
}

/* Nothing in common: typed, with what the server serves. */
static int no_common(json_t *supported, json_t **err)
{
    tm_client_error(err, TM_RPC_UNSUPPORTED_VERSION, "no_common_version",
                    "the server serves no protocol version this client speaks",
                    json_pack("{s:O?,s:[s,s]}", "supported", supported, "client",
                              TIDEMARK_CLIENT_MODERN_VERSION, TIDEMARK_PROTOCOL_LATEST));
    return ERA_FAIL;
}

/* What a refusal of discover says about the era. */
static int judge_error(tidemark_client_t *c, long status, json_t *e, int last, json_t **err)
{
    json_int_t code = json_integer_value(json_object_get(e, "code"));
    json_t *supported = json_object_get(json_object_get(e, "data"), "supported");
    int legacy_ok = c->cfg.protocol != TIDEMARK_PROTOCOL_MODERN;
    if (code == TM_RPC_UNSUPPORTED_VERSION && json_is_array(supported)) {
        if (lists(supported, TIDEMARK_CLIENT_MODERN_VERSION))
            return last ? no_common(supported, err) : ERA_RETRY;
        return legacy_ok && lists_legacy(supported) ? ERA_LEGACY : no_common(supported, err);
    }
    if (code == TM_RPC_METHOD_NOT_FOUND && status == 404)
        return ERA_MODERN; /* a modern server without discover: modern all the same */
    if (code == TM_RPC_HEADER_MISMATCH || code == TM_RPC_MISSING_CLIENT_CAPABILITY) {
        *err = json_incref(e);
        return ERA_FAIL; /* modern, and it refused us: say so, never fall back */
    }
    if (legacy_ok)
        return ERA_LEGACY;
    tm_client_error(err, TM_RPC_INVALID_REQUEST, "modern_unsupported",
                    "the server does not speak the modern protocol (--protocol modern)",
                    json_pack("{s:i,s:O?}", "status", (int)status, "error", e));
    return ERA_FAIL;
}

/* The verdict on one discover exchange. */
static int judge(tidemark_client_t *c, int rc, long status, json_t *res, int last, json_t **err)
{
    if (rc == 0) {
        json_t *sv = json_object_get(res, "supportedVersions");
        if (json_is_array(sv) && lists(sv, TIDEMARK_CLIENT_MODERN_VERSION))
            return ERA_MODERN;
        if (!json_is_array(sv) && c->cfg.protocol != TIDEMARK_PROTOCOL_MODERN)
            return ERA_LEGACY; /* not a DiscoverResult: an old server answered something */
        if (c->cfg.protocol != TIDEMARK_PROTOCOL_MODERN && lists_legacy(sv))
            return ERA_LEGACY;
        return no_common(sv, err);
    }
    if (rc == TIDEMARK_EPEER)
        return judge_error(c, status, res, last, err);
    const char *why = json_string_value(json_object_get(json_object_get(res, "data"), "reason"));
    /* A plain 404, or no answer at all (a stream ending without one, or none
     * within the probe's time): an old server, and initialize says what it
     * says. Nothing listening (cannot_connect) is no era at all. */
    if (why && (!strcmp(why, "no_endpoint") || !strcmp(why, "probe_unanswered") ||
                !strcmp(why, "timeout")) &&
        c->cfg.protocol != TIDEMARK_PROTOCOL_MODERN)
        return ERA_LEGACY;
    *err = json_incref(res);
    return ERA_FAIL;
}

/* Modern from now on: the discover result is the server's info, kept in
 * the state (a state of the same modern server keeps its outstanding
 * requests). */
static int adopt(tidemark_client_t *c, json_t *info, json_t **err)
{
    char *text = json_dumps(info ? info : json_object(), JSON_COMPACT);
    pthread_mutex_lock(&c->mu);
    json_decref(c->server_info);
    c->server_info = json_incref(info);
    pthread_mutex_unlock(&c->mu);
    char *url = NULL, *id = NULL, *version = NULL, *server = NULL;
    int same = tm_cstate_session_get(c->st, &url, &id, &version, &server) == 0 && url &&
               version && !strcmp(url, c->url) && !strcmp(version, TIDEMARK_CLIENT_MODERN_VERSION);
    free(url), free(id), free(version), free(server);
    int rc = !text ? TIDEMARK_ENOMEM : same ? 0 : tm_cstate_session_clear(c->st);
    if (!rc)
        rc = tm_cstate_session_set(c->st, c->url, "", TIDEMARK_CLIENT_MODERN_VERSION, text);
    free(text);
    if (rc)
        tm_client_error(err, TM_RPC_INTERNAL_ERROR, "state_error",
                        "the server's era cannot be saved in the client state", NULL);
    return rc;
}

static void set_era(tidemark_client_t *c, int modern)
{
    pthread_mutex_lock(&c->mu);
    c->modern = modern;
    free(c->proto);
    c->proto = modern ? strdup(TIDEMARK_CLIENT_MODERN_VERSION) : NULL;
    pthread_mutex_unlock(&c->mu);
}

int tm_modern_connect(tidemark_client_t *c, json_t **err)
{
    set_era(c, 1);
    for (int attempt = 0; attempt < 3; attempt++) {
        long status = 0;
        json_t *res = NULL, *e = NULL;
        int rc = discover_once(c, &status, &res);
        int v = judge(c, rc, status, res, attempt == 2, &e);
        if (v == ERA_MODERN) {
            rc = adopt(c, rc == 0 ? res : NULL, err);
            json_decref(res);
            return rc;
        }
        json_decref(res);
        if (v == ERA_RETRY)
            continue;
        set_era(c, 0);
        if (v == ERA_LEGACY) {
            json_decref(e);
            TM_DEBUG("client: %s speaks no modern protocol: a legacy session", c->url);
            return 1;
        }
        if (err)
            *err = e;
        else
            json_decref(e);
        return rc == 0 || rc == TIDEMARK_EPEER ? TIDEMARK_ENOTSUP : rc;
    }
    return TIDEMARK_ENOTSUP; /* not reached: the last attempt never retries */
}
