/*
 * mrtr.c - multi round-trip requests of the 2026-07-28 era. A handler's
 * tidemark_call_input never blocks there: an answer at hand is returned, a
 * missing one is noted, and the call ends with an InputRequiredResult
 * {inputRequests, requestState}. requestState is sealed (seal.h) for the
 * principal and the method, with an expiry; it carries the answers of the
 * earlier rounds and the name of what runs, so a retry landing on any node
 * re-runs the handler from the start with every answer so far. A state that
 * does not open is refused before the handler runs.
 */
#include "server_int.h"
#include "era.h"
#include "seal.h"
#include "../base/clock.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the sealed state is bound to besides the principal: the method. The
 * payload also names the tool / prompt / resource, checked on open. */
static const char *target_of(const tidemark_call_t *c)
{
    const char *k = strcmp(c->method, "resources/read") == 0 ? "uri" : "name";
    const char *v = json_string_value(json_object_get(c->params, k));
    return v ? v : "";
}

static json_t *state_error(tidemark_call_t *c, const char *reason)
{
    int expired = reason && strcmp(reason, "request_state_expired") == 0;
    return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS,
                            expired ? "requestState has expired: start the request again"
                                    : "requestState is not valid for this request",
                            expired ? "request_state_expired" : "request_state_invalid", NULL);
}

/* Open params.requestState into c->answers. NULL, or the error. */
static json_t *open_state(tidemark_call_t *c, const char *token)
{
    void *payload = NULL;
    size_t len = 0;
    const char *reason = NULL;
    int rc = tm_unseal(c->srv->sealer, c->sess->principal, c->method, tm_wall_ms(), token, &payload, &len,
                       &reason);
    if (rc)
        return state_error(c, reason ? reason : "request_state_invalid");
    json_t *st = json_loadb(payload, len, 0, NULL);
    free(payload);
    const char *t = json_string_value(json_object_get(st, "t"));
    json_t *a = json_object_get(st, "a");
    if (!t || strcmp(t, target_of(c)) != 0 || !json_is_object(a)) {
        json_decref(st);
        return state_error(c, "request_state_invalid");
    }
    json_object_update(c->answers, a);
    json_decref(st);
    return NULL;
}

json_t *tm_mrtr_begin(tidemark_call_t *c)
{
    c->answers = json_object();
    c->asked = json_object();
    if (!c->answers || !c->asked)
        return tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR, "out of memory", "internal_error",
                                NULL);
    json_t *token = json_object_get(c->params, "requestState");
    json_t *responses = json_object_get(c->params, "inputResponses");
    if (token && !json_is_string(token))
        return state_error(c, "request_state_invalid");
    if (responses && !json_is_object(responses))
        return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS, "inputResponses must be an object",
                                "invalid_params", NULL);
    json_t *e = token ? open_state(c, json_string_value(token)) : NULL;
    if (e)
        return e;
    if (responses) /* this round's answers; unknown keys are never asked for */
        json_object_update(c->answers, responses);
    return NULL;
}

/* The capability a server->client method needs, or NULL. */
static const char *capability_of(const char *method)
{
    if (strcmp(method, "sampling/createMessage") == 0)
        return "sampling";
    if (strcmp(method, "elicitation/create") == 0)
        return "elicitation";
    if (strcmp(method, "roots/list") == 0)
        return "roots";
    return NULL;
}

int tm_mrtr_input(tidemark_call_t *c, const char *key, const char *method, json_t *params,
                  json_t **result)
{
    char auto_key[32];
    c->nasked++;
    if (!key) {
        snprintf(auto_key, sizeof auto_key, "input_%u", c->nasked);
        key = auto_key;
    }
    const char *cap = capability_of(method);
    if (!cap)
        return TIDEMARK_EINVAL;
    if (!tm_sess_client_has(c->sess, cap)) {
        c->missing_cap = cap;
        return TIDEMARK_ENOTSUP;
    }
    json_t *answer = json_object_get(c->answers, key);
    if (answer) {
        *result = json_deep_copy(answer);
        if (json_is_object(answer) && json_object_get(answer, "code") &&
            json_object_get(answer, "message") && !json_object_get(answer, "action"))
            return TIDEMARK_EPEER; /* the client answered with an error object */
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    json_t *req = params ? json_pack("{s:s,s:O}", "method", method, "params", params)
                         : json_pack("{s:s,s:{}}", "method", method, "params");
    if (!req || json_object_set_new(c->asked, key, req) != 0)
        return TIDEMARK_ENOMEM;
    return TIDEMARK_EINPUT;
}

json_t *tm_mrtr_end(tidemark_call_t *c)
{
    if (!c->modern || json_object_size(c->asked) == 0)
        return NULL;
    /* The state carries every answer so far (they are the client's own
     * data; the seal only proves this server issued them for this call). */
    json_t *st = json_pack("{s:s,s:O}", "t", target_of(c), "a", c->answers);
    char *payload = st ? json_dumps(st, JSON_COMPACT) : NULL;
    json_decref(st);
    char *token = NULL;
    int64_t exp = tm_wall_ms() + (int64_t)c->srv->cfg.request_state_ttl_ms;
    if (payload && strlen(payload) > TM_SEAL_MAX_PAYLOAD) {
        free(payload);
        return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS,
                                "The answers so far do not fit in a request state",
                                "request_state_too_large",
                                json_pack("{s:I}", "limit", (json_int_t)TM_SEAL_MAX_PAYLOAD));
    }
    int rc = payload ? tm_seal(c->srv->sealer, c->sess->principal, c->method, exp, payload,
                               strlen(payload), &token)
                     : TIDEMARK_ENOMEM;
    free(payload);
    if (rc)
        return tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR, "Could not seal the request state",
                                "internal_error", json_pack("{s:s}", "error", tidemark_strerror(rc)));
    json_t *res = json_pack("{s:s,s:O,s:s}", "resultType", "input_required", "inputRequests",
                            c->asked, "requestState", token);
    free(token);
    return tm_jsonrpc_result(c->id, res);
}

json_t *tm_mrtr_missing_capability(tidemark_call_t *c)
{
    if (!c->modern || !c->missing_cap)
        return NULL;
    json_t *x = json_pack("{s:{s:{}}}", "requiredCapabilities", c->missing_cap);
    return tm_jsonrpc_error(c->id, TM_RPC_MISSING_CAPABILITY,
                            "The request needs a client capability it did not declare",
                            "missing_client_capability", x);
}
