/*
 * mcp.c - spans of MCP messages as the OpenTelemetry MCP semantic
 * conventions name them: "{mcp.method.name} {target}" (target: the tool's
 * or prompt's name; never a resource URI, which is unbounded), the
 * context carried in params._meta.traceparent / tracestate.
 */
#include "otel_int.h"
#include "tidemark/tidemark.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* W3C: tracestate is at most 512 characters; a longer one is not carried. */
#define TRACESTATE_MAX 512

int tm_mcp_trace_from(const json_t *params, const char *hdr, tm_trace_ctx *out,
                      const char **tracestate)
{
    json_t *meta = json_object_get(params, "_meta");
    json_t *tp = json_object_get(meta, "traceparent");
    *tracestate = NULL;
    if (json_is_string(tp) &&
        tm_traceparent_parse(json_string_value(tp), json_string_length(tp), out) == 0) {
        json_t *ts = json_object_get(meta, "tracestate");
        if (json_is_string(ts) && json_string_length(ts) <= TRACESTATE_MAX)
            *tracestate = json_string_value(ts);
        return 0;
    }
    return hdr ? tm_traceparent_parse(hdr, strlen(hdr), out) : tm_traceparent_parse(NULL, 0, out);
}

static const char *target_of(const char *method, const json_t *params)
{
    if (!strcmp(method, "tools/call") || !strcmp(method, "prompts/get"))
        return json_string_value(json_object_get(params, "name"));
    return NULL;
}

/* v in decimal, written backwards from end (24 bytes suffice); its start. */
static char *decimal(json_int_t v, char *end)
{
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN too */
    *--end = '\0';
    do
        *--end = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--end = '-';
    return end;
}

static void set_id(tm_span *s, const json_t *id)
{
    char buf[24];
    if (json_is_string(id))
        tm_span_set_str(s, "jsonrpc.request.id", json_string_value(id));
    else if (json_is_integer(id)) /* not snprintf: a fifth of a span's start */
        tm_span_set_str(s, "jsonrpc.request.id", decimal(json_integer_value(id), buf + sizeof buf));
}

tm_span *tm_mcp_span_start(tm_otel *o, tm_span_kind kind, const char *method,
                           const json_t *params, const json_t *id, const tm_trace_ctx *parent,
                           const char *tracestate)
{
    if (!o || !method)
        return NULL;
    const char *target = target_of(method, params);
    char name[256]; /* "{method} {target}", cut to fit (the span cuts it again) */
    size_t m = strnlen(method, 128), t = target ? strnlen(target, sizeof name - m - 2) : 0;
    while (m > 0 && ((unsigned char)method[m] & 0xc0) == 0x80) /* a cut: not inside a character */
        m--;
    while (t > 0 && ((unsigned char)target[t] & 0xc0) == 0x80)
        t--;
    memcpy(name, method, m);
    name[m] = ' ';
    memcpy(name + m + 1, target ? target : "", t);
    name[target ? m + 1 + t : m] = '\0';
    tm_span *s = tm_span_start(o, kind, name, parent, tracestate);
    if (!s)
        return NULL;
    tm_span_set_str(s, "mcp.method.name", method);
    set_id(s, id);
    if (!strcmp(method, "tools/call")) {
        tm_span_set_str(s, "gen_ai.tool.name", target);
        tm_span_set_str(s, "gen_ai.operation.name", "execute_tool");
    } else if (!strcmp(method, "prompts/get")) {
        tm_span_set_str(s, "gen_ai.prompt.name", target);
    } else if (!strncmp(method, "resources/", 10)) {
        tm_span_set_str(s, "mcp.resource.uri", json_string_value(json_object_get(params, "uri")));
    }
    return s;
}

int tm_mcp_inject(const tm_span *s, json_t *params)
{
    if (!s || !json_is_object(params))
        return 0;
    char tp[TM_TRACEPARENT_LEN + 1];
    tm_traceparent_format(&s->ctx, tp);
    json_t *meta = json_object_get(params, "_meta");
    if (!json_is_object(meta) && json_object_set_new(params, "_meta", meta = json_object()) != 0)
        return TIDEMARK_ENOMEM;
    if (json_object_set_new(meta, "traceparent", json_string(tp)) != 0)
        return TIDEMARK_ENOMEM;
    if (!s->tracestate) {
        (void)json_object_del(meta, "tracestate"); /* not another trace's */
        return 0;
    }
    return json_object_set_new(meta, "tracestate", json_string(s->tracestate)) ? TIDEMARK_ENOMEM : 0;
}

const char *tm_mcp_error_type(const json_t *response, char buf[24])
{
    json_t *err = json_object_get(response, "error");
    if (!response)
        return "no_answer";
    if (json_is_object(err)) {
        snprintf(buf, 24, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(err, "code")));
        return buf;
    }
    if (json_is_true(json_object_get(json_object_get(response, "result"), "isError")))
        return "tool_error";
    return NULL;
}

void tm_mcp_span_outcome(tm_span *s, const char *e, const char *buf)
{
    if (!s || !e)
        return;
    if (e == buf)
        tm_span_set_str(s, "rpc.response.status_code", e);
    tm_span_set_error(s, e);
}

void tm_mcp_span_finish(tm_span *s, int rc, const json_t *res)
{
    if (!s)
        return;
    char code[24];
    if (rc == TIDEMARK_EPEER) {
        snprintf(code, sizeof code, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(res, "code")));
        tm_span_set_str(s, "rpc.response.status_code", code);
        tm_span_set_error(s, code);
    } else if (rc) {
        const char *why = json_string_value(json_object_get(json_object_get(res, "data"), "reason"));
        tm_span_set_error(s, why ? why : tidemark_strerror(rc));
    } else if (json_is_true(json_object_get(res, "isError"))) {
        tm_span_set_error(s, "tool_error");
    }
    tm_span_end(s);
}
