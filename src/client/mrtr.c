/*
 * mrtr.c - what the modern era adds to a request once it is answered:
 * InputRequiredResult rounds (the server's questions answered with the
 * application's callbacks, the request sent again under a new id with
 * inputResponses and the opaque requestState, at most max_input_rounds
 * times), the in-memory cache of cacheable results (ttlMs), and the
 * subscriptions/listen stream.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDEM_KEY "dev.tidemark/idempotency-key"

/* ---- InputRequiredResult ----------------------------------------------------------------- */

static int input_required(json_t *result)
{
    const char *t = json_string_value(json_object_get(result, "resultType"));
    return t && !strcmp(t, "input_required");
}

static int fail(json_t **result, const char *reason, const char *msg, json_t *data)
{
    json_decref(*result);
    *result = NULL;
    tm_client_error(result, TM_RPC_INTERNAL_ERROR, reason, msg, data);
    return TIDEMARK_EPROTO;
}

/* The answers to a round's inputRequests. OUT responses. */
static int answer_round(tidemark_client_t *c, json_t *requests, json_t **responses,
                        json_t **result)
{
    *responses = json_object();
    const char *key;
    json_t *req;
    json_object_foreach(requests, key, req) {
        const char *method = json_string_value(json_object_get(req, "method"));
        json_t *params = json_object_get(req, "params");
        if (!method || (params && !json_is_object(params)))
            return fail(result, "malformed_input_required",
                        "an input request of the server is not a request",
                        json_pack("{s:s}", "key", key));
        json_t *answer = NULL;
        int rc = tm_answer_server_request(c, method, params, &answer);
        if (rc) {
            json_decref(answer);
            return fail(result, "input_request_unsupported",
                        "the client cannot answer an input request of the server",
                        json_pack("{s:s,s:s,s:s}", "key", key, "method", method, "error",
                                  tidemark_strerror(rc)));
        }
        if (!*responses || json_object_set_new(*responses, key, answer) != 0)
            return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* The params of the next round: the original ones, the answers, the state,
 * and (a keyed call) a key of its own: the round is another request. */
static json_t *next_params(json_t *params, json_t *responses, json_t *state, int round)
{
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (!p)
        return NULL;
    (void)json_object_del(p, "inputResponses"); /* -1 only when it was not there */
    (void)json_object_del(p, "requestState");
    int rc = responses ? json_object_set(p, "inputResponses", responses) : 0;
    if (!rc && state)
        rc = json_object_set(p, "requestState", state);
    json_t *meta = json_object_get(p, "_meta");
    const char *k = json_string_value(json_object_get(meta, IDEM_KEY));
    if (!rc && k) {
        char buf[600];
        snprintf(buf, sizeof buf, "%.512s#%d", k, round);
        rc = json_object_set_new(meta, IDEM_KEY, json_string(buf));
    }
    if (rc) {
        json_decref(p);
        return NULL;
    }
    return p;
}

int tm_mrtr_rounds(tidemark_client_t *c, const char *method, json_t *params, int rc,
                   tidemark_progress_fn progress, void *progress_ud, json_t **result)
{
    for (unsigned round = 1; rc == 0 && input_required(*result); round++) {
        if (round > c->cfg.max_input_rounds)
            return fail(result, "input_rounds_exceeded",
                        "the server asked for input more times than allowed",
                        json_pack("{s:i}", "max_input_rounds", (int)c->cfg.max_input_rounds));
        json_t *requests = json_object_get(*result, "inputRequests");
        json_t *state = json_object_get(*result, "requestState");
        if ((requests && !json_is_object(requests)) || (state && !json_is_string(state)) ||
            (!requests && !state))
            return fail(result, "malformed_input_required",
                        "the server's InputRequiredResult is malformed (inputRequests must be an "
                        "object, requestState a string, and one of them present)", NULL);
        json_t *responses = NULL;
        if (requests && (rc = answer_round(c, requests, &responses, result)) != 0) {
            json_decref(responses);
            return rc;
        }
        json_t *p = next_params(params, responses, state, (int)round + 1);
        json_decref(responses);
        if (!p)
            return fail(result, "out_of_memory", "cannot build the next round", NULL);
        json_decref(*result);
        rc = tm_request_once(c, method, p, progress, progress_ud, result);
        json_decref(p);
    }
    return rc;
}

/* ---- the cache ------------------------------------------------------------------------------ */

static int cacheable(const char *method)
{
    static const char *const m[] = {"server/discover", "tools/list", "prompts/list",
                                    "resources/list", "resources/templates/list",
                                    "resources/read", NULL};
    for (int i = 0; m[i]; i++)
        if (!strcmp(method, m[i]))
            return 1;
    return 0;
}

/* method and params without their _meta, as one string (malloc'd). */
static char *cache_key(const char *method, json_t *params)
{
    json_t *p = params ? json_deep_copy(params) : json_object();
    if (!p)
        return NULL;
    (void)json_object_del(p, "_meta"); /* -1 only when it was not there */
    char *t = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(p);
    size_t n = strlen(method) + (t ? strlen(t) : 0) + 2;
    char *k = t ? malloc(n) : NULL;
    if (k)
        snprintf(k, n, "%s %s", method, t);
    free(t);
    return k;
}

json_t *tm_cache_get(tidemark_client_t *c, const char *method, json_t *params)
{
    if (c->cfg.no_cache || !cacheable(method))
        return NULL;
    char *k = cache_key(method, params);
    if (!k)
        return NULL;
    json_t *hit = NULL;
    pthread_mutex_lock(&c->mu);
    json_t *e = json_object_get(c->cache, k);
    if (e && json_integer_value(json_object_get(e, "until")) > tm_now_ms())
        hit = json_deep_copy(json_object_get(e, "result"));
    else if (e)
        (void)json_object_del(c->cache, k); /* expired: it was there */
    pthread_mutex_unlock(&c->mu);
    free(k);
    return hit;
}

void tm_cache_put(tidemark_client_t *c, const char *method, json_t *params, json_t *result)
{
    json_t *ttl = json_object_get(result, "ttlMs");
    if (c->cfg.no_cache || !cacheable(method) || !json_is_integer(ttl) ||
        json_integer_value(ttl) <= 0)
        return;
    char *k = cache_key(method, params);
    json_t *e = json_pack("{s:I,s:O,s:O?}", "until",
                          (json_int_t)(tm_now_ms() + json_integer_value(ttl)), "result", result,
                          "scope", json_object_get(result, "cacheScope"));
    pthread_mutex_lock(&c->mu);
    if (!c->cache)
        c->cache = json_object();
    int rc = k && e && c->cache ? json_object_set(c->cache, k, e) : TIDEMARK_ENOMEM;
    pthread_mutex_unlock(&c->mu);
    if (rc)
        TM_DEBUG("client: a %s result could not be cached", method);
    json_decref(e);
    free(k);
}

void tm_cache_clear(tidemark_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->cache)
        (void)json_object_clear(c->cache); /* fails only for a non-object */
    pthread_mutex_unlock(&c->mu);
}

/* ---- subscriptions/listen ----------------------------------------------------------------- */

void tm_listen_acknowledged(rq *r, json_t *params)
{
    json_t *asked = json_object_get(json_object_get(r->msg, "params"), "notifications");
    json_t *got = json_object_get(params, "notifications");
    const char *k;
    json_t *v;
    json_object_foreach(asked, k, v) {
        json_t *g = json_object_get(got, k);
        int short_of = json_is_array(v) ? json_array_size(g) < json_array_size(v)
                                        : json_is_true(v) && !json_is_true(g);
        if (short_of)
            TM_WARN("client: the server did not agree to listen for %s", k);
    }
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
    rc = r->msg ? tm_pending_add(c, r) : TIDEMARK_ENOMEM;
    if (rc) {
        tm_rq_free(r);
        return rc;
    }
    if ((rc = tm_start_post(c, r)) != 0)
        tm_rq_fail(r, rc, "transport_error", "cannot start the HTTP exchange", NULL);
    rc = tm_drive(c, r, stop_after_ms > 0 ? tm_now_ms() + stop_after_ms : INT64_MAX / 2);
    tm_pending_del(c, r);
    tm_rq_free(r);
    return rc == TIDEMARK_ETIMEDOUT ? 0 : rc;
}
