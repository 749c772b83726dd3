/*
 * mrtr.c - what the modern era adds to a request once it is answered:
 * InputRequiredResult rounds (the server's questions answered with the
 * application's callbacks, the request sent again under a new id with
 * inputResponses and the opaque requestState, at most max_input_rounds
 * times). The cache of cacheable results is cache.c's, the
 * subscriptions/listen stream session.c's.
 */
#include "client_int.h"
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
