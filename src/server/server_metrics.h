/*
 * server_metrics.h - the server's registry and the series the server layer
 * updates. Every layer below registers its own on the same registry (the
 * store at open, the HTTP transport at new, the tracer); /metrics renders
 * it. One registry per server: two servers in one process count apart.
 */
#ifndef TM_SERVER_METRICS_H
#define TM_SERVER_METRICS_H
#include "../base/metrics.h"
#include "../mcp/mcp_metrics.h"
#include "tidemark/server.h"

/* Resume outcomes, as tidemark_resumes_total{outcome} names them. */
enum {
    TM_RESUMED_OK = 0,
    TM_RESUMED_GAP,
    TM_RESUMED_AHEAD,
    TM_RESUMED_EPOCH,
    TM_RESUMED_MALFORMED,
    TM_RESUMED_UNKNOWN_STREAM,
    TM_RESUMED_CONFLICT,
    TM_RESUMED_COUNT
};

typedef struct tm_server_metrics {
    tm_counter *emitted, *replayed, *resumes[TM_RESUMED_COUNT], *deduplicated, *lookups,
        *outcome_unknown, *recovered, *http_requests, *calls_refused;
    tm_gauge *sessions_open;
    tm_hist *resume_latency_us, *commit_to_emit_us, *resume_replayed;
    tm_mcp_durations mcp;
} tm_server_metrics;

/* Register the server layer's series on r (and the MCP client pair, so a
 * dashboard finds every family on any server; clients count on it only
 * when handed it, as the gateway's are). */
void tm_server_metrics_register(tm_server_metrics *m, tm_metrics *r);
/* The server's registry (lives until tidemark_server_free). */
tm_metrics *tm_server_registry(tidemark_server_t *srv);

#endif
