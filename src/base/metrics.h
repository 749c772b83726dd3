/*
 * metrics.h - process-wide counters, gauges and histograms, rendered in the
 * Prometheus text format. Lock-free (atomics); cheap enough for hot paths.
 */
#ifndef TM_METRICS_H
#define TM_METRICS_H
#include "buf.h"
#include <stdint.h>

typedef enum tm_counter {
    TM_M_EVENTS_APPENDED = 0,
    TM_M_EVENTS_EMITTED,
    TM_M_EVENTS_REPLAYED,
    TM_M_RESUME_OK,
    TM_M_RESUME_GAP,
    TM_M_RESUME_AHEAD,
    TM_M_RESUME_EPOCH,
    TM_M_RESUME_MALFORMED,
    TM_M_RESUME_UNKNOWN_STREAM,
    TM_M_RESUME_CONFLICT,
    TM_M_REQUESTS_DEDUPLICATED,
    TM_M_REQUEST_LOOKUPS,
    TM_M_OUTCOME_UNKNOWN,
    TM_M_REQUESTS_RECOVERED,
    TM_M_COMMITS,
    TM_M_COMMIT_FAILURES,
    TM_M_HTTP_REQUESTS,
    TM_M_CONN_REFUSED_TOTAL,    /* over max_connections: 503, closed */
    TM_M_CONN_REFUSED_ADDRESS,  /* over max_connections_per_address */
    TM_M_CONN_DEADLINE,         /* request not in within request_deadline_ms */
    TM_M_CONN_IDLE,             /* idle past idle_timeout_ms */
    TM_M_HTTP_BAD_FRAMING,      /* ambiguous framing (tm_http_framing_check) */
    TM_M_CALLS_REFUSED,         /* a session's call queue was full: 429 */
    TM_M_CHECKPOINT_STALLS,     /* SQLite WAL checkpoints unable to complete */
    TM_M_STORE_LOSS,            /* opens finding fewer commits than the head file recorded */
    TM_M_STORE_CORRUPT,         /* damaged database files found (open or run time) */
    TM_M_STORE_RECOVERIES,      /* writes accepted again after a failed write */
    TM_M_OTEL_SPANS_EXPORTED,   /* spans the collector took (src/otel/) */
    TM_M_OTEL_SPANS_DROPPED,    /* spans dropped: queue full, export failed */
    TM_M_COUNTER_COUNT
} tm_counter;

typedef enum tm_gauge {
    TM_G_SESSIONS_OPEN = 0,
    TM_G_STREAMS_OPEN,
    TM_G_CONNECTIONS_OPEN,
    TM_G_GAUGE_COUNT
} tm_gauge;

typedef enum tm_histogram {
    TM_H_COMMIT_BATCH = 0,     /* operations per group commit */
    TM_H_COMMIT_LATENCY_US,    /* queued -> durable, per append */
    TM_H_RESUME_LATENCY_US,    /* GET with Last-Event-ID -> replay sent */
    TM_H_COMMIT_TO_EMIT_US,    /* a live event's commit -> its SSE bytes framed */
    TM_H_RESUME_REPLAYED,      /* events a resume has to replay */
    TM_H_HISTOGRAM_COUNT
} tm_histogram;

/* Histograms with labels (the MCP semantic conventions' duration metrics):
 * a family holds at most TM_LHIST_SERIES label sets; later new ones are
 * counted in the family's overflow series (labels overflow="true"). */
typedef enum tm_lhist {
    TM_LH_SERVER_OPERATION = 0, /* mcp.server.operation.duration, us */
    TM_LH_SERVER_SESSION,       /* mcp.server.session.duration, us */
    TM_LH_CLIENT_OPERATION,     /* mcp.client.operation.duration, us */
    TM_LH_CLIENT_SESSION,       /* mcp.client.session.duration, us */
    TM_LH_COUNT
} tm_lhist;
#define TM_LHIST_SERIES 64
#define TM_LABELS_MAX 192

/* Label values of the MCP duration metrics; NULL ones are left out. */
typedef struct tm_mcp_labels {
    const char *method, *tool, *prompt, *error, *version, *transport;
} tm_mcp_labels;

void tm_metric_inc(tm_counter c);
void tm_metric_add(tm_counter c, uint64_t n);
uint64_t tm_metric_get(tm_counter c);
void tm_gauge_add(tm_gauge g, int64_t d);
void tm_histogram_observe(tm_histogram h, uint64_t v);
/* Observe v (us) in h under the label set l. Lock-free once the set is known. */
void tm_lhist_observe(tm_lhist h, const tm_mcp_labels *l, uint64_t v);
/* Append every metric in Prometheus text exposition format. */
int tm_metrics_render(tm_buf *out);

#endif
