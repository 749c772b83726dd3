/* call_trace.h - a call's trace for what runs above the server (the
 * gateway): the server's tracer and the call's SERVER span, NULL when
 * tracing is off. Both live as long as the call. */
#ifndef TM_CALL_TRACE_H
#define TM_CALL_TRACE_H
#include "tidemark/server.h"
#include "../otel/otel.h"

tm_otel *tm_server_otel(const tidemark_server_t *srv);
const tm_span *tm_call_span(const tidemark_call_t *c);

#endif
