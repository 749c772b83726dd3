/*
 * messages.c - JSON-RPC messages that arrived on a request's exchange, on
 * its driver: the response completes the request, progress goes to the
 * request's callback, notifications to on_notification, and requests from
 * the server (sampling, elicitation, roots, ping) to the client's worker
 * pool, where the application's on_request may block.
 */
#include "client_int.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <stdlib.h>
#include <string.h>

typedef struct srv_req {
    tidemark_client_t *c;
    json_t *msg;
} srv_req;

/* Fill in defaults of an elicitation schema the answer leaves out. */
static int apply_defaults(json_t *params, json_t *result)
{
    if (!json_is_object(result) ||
        !json_is_string(json_object_get(result, "action")) ||
        strcmp(json_string_value(json_object_get(result, "action")), "accept") != 0)
        return 0;
    json_t *props = json_object_get(json_object_get(params, "requestedSchema"), "properties");
    json_t *content = json_object_get(result, "content");
    if (!json_is_object(content)) {
        content = json_object();
        if (json_object_set_new(result, "content", content) != 0)
            return TIDEMARK_ENOMEM;
    }
    const char *k;
    json_t *p;
    json_object_foreach(props, k, p) {
        json_t *d = json_object_get(p, "default");
        if (d && !json_object_get(content, k) && json_object_set(content, k, d) != 0)
            return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* The answer to a server request: the application's, or ours. OUT result. */
static int answer_of(tidemark_client_t *c, const char *method, json_t *params, json_t **result)
{
    if (strcmp(method, "ping") == 0) {
        *result = json_object();
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    if (strcmp(method, "roots/list") == 0 && c->roots) {
        *result = json_pack("{s:O}", "roots", c->roots);
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    if (!c->cfg.on_request)
        return TIDEMARK_ENOTSUP;
    int rc = c->cfg.on_request(method, params, result, c->cfg.ud);
    if (rc == 0 && strcmp(method, "elicitation/create") == 0)
        rc = apply_defaults(params, *result);
    return rc;
}

/* answer_of inside a SERVER span under the request's own context. */
static int traced_answer(tidemark_client_t *c, const char *method, json_t *params,
                         const json_t *id, json_t **result)
{
    tm_span *sp = tm_client_span(c, TM_SPAN_SERVER, method, params, id);
    int rc = answer_of(c, method, params, result);
    tm_mcp_span_finish(sp, rc, rc ? NULL : *result);
    return rc;
}

int tm_answer_server_request(tidemark_client_t *c, const char *method, json_t *params,
                             json_t **result)
{
    *result = NULL;
    return traced_answer(c, method, params, NULL, result);
}

/* The reply to id: result, or the error rc stands for. */
static json_t *reply_of(json_t *id, int rc, json_t *result)
{
    if (rc == 0)
        return tm_jsonrpc_result(id, result ? result : json_object());
    json_decref(result);
    int unsupported = rc == TIDEMARK_ENOTSUP;
    return tm_jsonrpc_error(id, unsupported ? TM_RPC_METHOD_NOT_FOUND : TM_RPC_INTERNAL_ERROR,
                            unsupported ? "Method not supported by this client" : "Client handler failed",
                            unsupported ? "method_not_found" : "handler_failed", NULL);
}

/* Post reply; a reply that cannot go out leaves the server to time out. */
static void post_reply(tidemark_client_t *c, json_t *reply, const char *method)
{
    int rc = reply ? tm_post_message(c, reply) : TIDEMARK_ENOMEM;
    if (rc)
        TM_WARN("client: the answer to the server's %s could not be sent (%s)", method,
                tidemark_strerror(rc));
    json_decref(reply);
}

/* On a worker of the pool. */
static void answer_server_request(void *arg)
{
    srv_req *s = arg;
    tidemark_client_t *c = s->c;
    const char *method = json_string_value(json_object_get(s->msg, "method"));
    json_t *result = NULL;
    int rc = traced_answer(c, method, json_object_get(s->msg, "params"), json_object_get(s->msg, "id"),
                           &result);
    post_reply(c, reply_of(json_object_get(s->msg, "id"), rc, result), method);
    json_decref(s->msg);
    free(s);
}

/* A request from the server: answered on the pool (its handler may block);
 * when the pool takes no more, answered at once with an error. */
static void server_request(tidemark_client_t *c, json_t *msg, const char *method)
{
    srv_req *s = calloc(1, sizeof *s);
    if (s) {
        s->c = c;
        s->msg = json_incref(msg);
        if (tm_pool_submit(c->workers, answer_server_request, s) == 0)
            return;
        json_decref(s->msg);
        free(s);
    }
    TM_WARN("client: the server's %s cannot be handled now", method);
    post_reply(c, reply_of(json_object_get(msg, "id"), TIDEMARK_EBUSY, NULL), method);
}

/* A response: it completes only the request whose stream carried it. */
static void response(tidemark_client_t *c, rq *r, const tm_msg *m)
{
    /* Taken from another stream it would end that request while its own
     * stream (and the events still due on it) were never proven. */
    if (r->listen || !json_is_integer(m->id) || json_integer_value(m->id) != r->id) {
        TM_WARN("client: a response to request %" JSON_INTEGER_FORMAT
                " arrived on the stream of another; ignored",
                json_is_integer(m->id) ? json_integer_value(m->id) : (json_int_t)-1);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (tm_map_get(c->pending, r->key) == r) {
        r->got_response = 1;
        r->final = 1;
        tm_rq_finish_locked(r, m->kind == TM_MSG_RESULT ? 0 : TIDEMARK_EPEER,
                            json_incref(m->kind == TM_MSG_RESULT ? m->result : m->error));
    }
    pthread_mutex_unlock(&c->mu);
}

/* A subscriptions/listen acknowledged: what the server did not agree to
 * listen for is said (a warning), not fatal. */
static void listen_acknowledged(rq *r, json_t *params)
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

/* A notification: progress of r to its callback, every one to on_notification. */
static void notification(tidemark_client_t *c, rq *r, json_t *msg, const tm_msg *m)
{
    if (r->sub && strcmp(m->method, "notifications/subscriptions/acknowledged") == 0)
        listen_acknowledged(r, m->params); /* what it left out is said, not fatal */
    if (strstr(m->method, "list_changed") || strcmp(m->method, "notifications/resources/updated") == 0)
        tm_cache_clear(c); /* what was cached may no longer be so */
    if (strcmp(m->method, "notifications/progress") == 0 && r->progress) {
        json_t *p = m->params;
        json_t *tok = json_object_get(p, "progressToken");
        /* The token the request carries (a modern re-issue keeps it under a new id). */
        json_t *mine = json_object_get(
            json_object_get(json_object_get(r->msg, "params"), "_meta"), "progressToken");
        if (json_is_integer(tok) && json_is_integer(mine) &&
            json_integer_value(tok) == json_integer_value(mine)) {
            json_t *tot = json_object_get(p, "total");
            r->progress(json_number_value(json_object_get(p, "progress")),
                        tot ? json_number_value(tot) : -1,
                        json_string_value(json_object_get(p, "message")), r->progress_ud);
        }
    }
    if (c->cfg.on_notification)
        c->cfg.on_notification(msg, c->cfg.ud);
}

static void handle_message(tidemark_client_t *c, rq *r, json_t *msg)
{
    tm_msg m;
    tm_jsonrpc_classify(msg, &m);
    if (m.kind == TM_MSG_RESULT || m.kind == TM_MSG_ERROR)
        response(c, r, &m);
    else if (m.kind == TM_MSG_REQUEST)
        server_request(c, msg, m.method);
    else if (m.kind == TM_MSG_NOTIFICATION)
        notification(c, r, msg, &m);
}

void tm_deliver(tidemark_client_t *c, rq *r, json_t *msg)
{
    if (!json_is_array(msg)) {
        handle_message(c, r, msg);
        return;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msg, i, m) handle_message(c, r, m);
}

const char *tm_task_created(json_t *result)
{
    const char *t = json_string_value(json_object_get(result, "resultType"));
    if (!t || strcmp(t, "task") != 0)
        return NULL;
    const char *id = json_string_value(json_object_get(result, "taskId"));
    return id ? id : "";
}
