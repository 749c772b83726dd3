/*
 * otel.h - OpenTelemetry traces: a tracer per server or client object,
 * configured once from the standard OTEL_* environment variables, spans
 * exported as OTLP/HTTP (protobuf or JSON) by one exporter thread (docs/design.md,
 * "Tracing").
 *
 * Invariants:
 * - Off is NULL. tm_otel_from_env returns NULL unless an OTLP endpoint is
 *   set and OTEL_SDK_DISABLED is not true; every function here takes a
 *   NULL tracer or span and then does nothing, so the request path of an
 *   unconfigured object does no work beyond a NULL test.
 * - The request path never waits on the exporter: tm_span_end only links
 *   the span into a bounded queue under a mutex held for a few pointer
 *   writes; a full queue drops the span and counts it
 *   (tidemark_otel_spans_dropped_total). Only the exporter thread talks to
 *   the collector.
 * - A span that is not sampled is still started (it is the context that
 *   is propagated, flags 00) and never queued.
 */
#ifndef TM_OTEL_H
#define TM_OTEL_H
#include "../base/metrics.h"
#include "trace.h"
#include <jansson.h>
#include <stdint.h>

typedef struct tm_otel tm_otel;
typedef struct tm_span tm_span;

typedef enum tm_span_kind {
    TM_SPAN_INTERNAL = 1, /* OTLP SpanKind values */
    TM_SPAN_SERVER = 2,
    TM_SPAN_CLIENT = 3,
} tm_span_kind;

/* A tracer from the environment, or NULL (off). service is the
 * service.name used when neither OTEL_SERVICE_NAME nor
 * OTEL_RESOURCE_ATTRIBUTES names one. Spans exported and dropped are
 * counted on metrics (NULL: not counted; it must outlive the tracer),
 * where the two counters are registered even when tracing is off.
 * Starts the exporter thread. */
tm_otel *tm_otel_from_env(const char *service, tm_metrics *metrics);
/* Count spans exported and dropped on m from now on (a registry that
 * outlives o; NULL: no change). */
void tm_otel_count_on(tm_otel *o, tm_metrics *m);
/* Export what is queued (bounded by the export timeout), stop the thread. */
void tm_otel_free(tm_otel *o);
/* Spans dropped at a full queue or a failed export. */
uint64_t tm_otel_dropped(const tm_otel *o);

/* A span named name, child of parent (NULL or invalid: a new trace);
 * tracestate (may be NULL) is carried on. NULL when o is NULL or memory
 * is short. The sampler decides here. */
tm_span *tm_span_start(tm_otel *o, tm_span_kind kind, const char *name,
                       const tm_trace_ctx *parent, const char *tracestate);
const tm_trace_ctx *tm_span_ctx(const tm_span *s);
const char *tm_span_tracestate(const tm_span *s);
/* key is a string literal (kept by pointer, and known again by pointer:
 * set a key twice through the same literal, or the span has it twice); v is
 * copied into the span's text (a value that does not fit is left out). At
 * most TM_SPAN_MAX_ATTRS attributes; more are ignored. */
#define TM_SPAN_MAX_ATTRS 16
void tm_span_set_str(tm_span *s, const char *key, const char *v);
void tm_span_set_int(tm_span *s, const char *key, int64_t v);
/* Status ERROR and error.type = type. */
void tm_span_set_error(tm_span *s, const char *type);
/* End now: queued for export when sampled, else freed. */
void tm_span_end(tm_span *s);

/* ---- MCP (otel/mcp.c): the MCP semantic conventions ---------------------- */

/* The context of params._meta.traceparent (and tracestate), else of the
 * header value hdr (may be NULL). 0, or TIDEMARK_EINVAL when neither holds
 * a valid traceparent. */
int tm_mcp_trace_from(const json_t *params, const char *hdr, tm_trace_ctx *out,
                      const char **tracestate);
/* A span "{method} {target}" with the attributes of the request: method,
 * jsonrpc.request.id, gen_ai.tool.name / gen_ai.prompt.name /
 * mcp.resource.uri. NULL when o is NULL. */
tm_span *tm_mcp_span_start(tm_otel *o, tm_span_kind kind, const char *method,
                           const json_t *params, const json_t *id, const tm_trace_ctx *parent,
                           const char *tracestate);
/* Put s's traceparent (and tracestate) into params._meta (created when
 * missing). 0, or TIDEMARK_ENOMEM. Nothing when s is NULL. */
int tm_mcp_inject(const tm_span *s, json_t *params);
/* error.type of a response: NULL (a success), its error code written into
 * buf, "tool_error" (isError), or "no_answer" (response NULL). */
const char *tm_mcp_error_type(const json_t *response, char buf[24]);
/* The outcome of a response on s: e and buf as tm_mcp_error_type returned
 * and filled them (one reading of the response serves the metric and the
 * span); e == buf, an error code, is also rpc.response.status_code. */
void tm_mcp_span_outcome(tm_span *s, const char *e, const char *buf);
/* End s after a library call's rc and its result (rc 0) or error object
 * (TIDEMARK_EPEER: error.type is its code; else its data.reason). */
void tm_mcp_span_finish(tm_span *s, int rc, const json_t *res);

#endif
