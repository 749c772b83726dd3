/*
 * observe.c - what the client tells about itself: a CLIENT (or SERVER)
 * span of a request, and the mcp.client.* durations on the registry a
 * program handed it (client_metrics.h).
 */
#include "client_int.h"
#include "client_metrics.h"
#include "../base/clock.h"
#include "../base/metrics.h"
#include <string.h>

tm_span *tm_client_span(tidemark_client_t *c, tm_span_kind kind, const char *method,
                        const json_t *params, const json_t *id)
{
    if (!c->otel)
        return NULL;
    tm_trace_ctx parent;
    const char *ts = NULL;
    (void)tm_mcp_trace_from(params, NULL, &parent, &ts);
    tm_span *sp = tm_mcp_span_start(c->otel, kind, method, params, id, &parent, ts);
    pthread_mutex_lock(&c->mu);
    tm_span_set_str(sp, "mcp.session.id", c->session);
    tm_span_set_str(sp, "mcp.protocol.version", c->proto);
    pthread_mutex_unlock(&c->mu);
    tm_span_set_str(sp, "network.transport", "tcp");
    return sp;
}

void tm_client_count_on(tidemark_client_t *c, tm_metrics *m)
{
    if (!m)
        return;
    tm_mcp_durations d;
    tm_mcp_durations_client(m, &d);
    pthread_mutex_lock(&c->mu);
    c->m = d;
    pthread_mutex_unlock(&c->mu);
    tm_otel_count_on(c->otel, m);
}

void tm_client_session_ended_locked(tidemark_client_t *c)
{
    if (!c->session || !c->session_us)
        return;
    tm_mcp_labels l = {.version = c->proto, .transport = "tcp"};
    tm_mcp_observe(c->m.session, &l, (uint64_t)(tm_now_us() - c->session_us));
    c->session_us = 0;
}

/* mcp.client.operation.duration of a request ended with rc. */
void tm_client_observe_request(tidemark_client_t *c, const char *method, json_t *params, int rc,
                            const json_t *res, int64_t t0)
{
    char code[24];
    const char *err = NULL, *name = json_string_value(json_object_get(params, "name"));
    if (rc == TIDEMARK_EPEER)
        snprintf(code, sizeof code, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(res, "code")));
    if (rc)
        err = rc == TIDEMARK_EPEER ? code : tidemark_strerror(rc);
    else if (json_is_true(json_object_get(res, "isError")))
        err = "tool_error";
    pthread_mutex_lock(&c->mu);
    tm_mcp_labels l = {.method = method, .tool = strcmp(method, "tools/call") ? NULL : name,
                       .prompt = strcmp(method, "prompts/get") ? NULL : name, .error = err,
                       .version = c->proto, .transport = "tcp"};
    tm_mcp_observe(c->m.operation, &l, (uint64_t)(tm_now_us() - t0));
    pthread_mutex_unlock(&c->mu);
}
