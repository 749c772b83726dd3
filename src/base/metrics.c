/* metrics.c - atomics behind a fixed catalogue; see metrics.h. */
#include "metrics.h"
#include <stdatomic.h>
#include <stddef.h>

typedef struct counter_def {
    const char *name, *labels, *help;
} counter_def;

/* Counters that share a name differ by label; HELP/TYPE print once. */
static const counter_def counters[TM_M_COUNTER_COUNT] = {
    [TM_M_EVENTS_APPENDED] = {"tidemark_events_appended_total", "", "Events appended to the log."},
    [TM_M_EVENTS_EMITTED] = {"tidemark_events_emitted_total", "", "Events written to SSE connections."},
    [TM_M_EVENTS_REPLAYED] = {"tidemark_events_replayed_total", "", "Events sent by resumes (at or below the head at resume time)."},
    [TM_M_RESUME_OK] = {"tidemark_resumes_total", "outcome=\"ok\"", "Resumes by outcome."},
    [TM_M_RESUME_GAP] = {"tidemark_resumes_total", "outcome=\"gap\"", NULL},
    [TM_M_RESUME_AHEAD] = {"tidemark_resumes_total", "outcome=\"ahead\"", NULL},
    [TM_M_RESUME_EPOCH] = {"tidemark_resumes_total", "outcome=\"epoch\"", NULL},
    [TM_M_RESUME_MALFORMED] = {"tidemark_resumes_total", "outcome=\"malformed\"", NULL},
    [TM_M_RESUME_UNKNOWN_STREAM] = {"tidemark_resumes_total", "outcome=\"unknown_stream\"", NULL},
    [TM_M_RESUME_CONFLICT] = {"tidemark_resumes_total", "outcome=\"conflict\"", NULL},
    [TM_M_REQUESTS_DEDUPLICATED] = {"tidemark_requests_deduplicated_total", "", "Repeated requests answered from their record."},
    [TM_M_REQUEST_LOOKUPS] = {"tidemark_request_lookups_total", "", "Store reads of a request record to tell a retry from a new request."},
    [TM_M_OUTCOME_UNKNOWN] = {"tidemark_outcome_unknown_total", "", "Requests ended with outcome_unknown after a crash."},
    [TM_M_REQUESTS_RECOVERED] = {"tidemark_requests_recovered_total", "", "Requests re-run after a crash (atomic or idempotent tools)."},
    [TM_M_COMMITS] = {"tidemark_commits_total", "", "Group commits."},
    [TM_M_COMMIT_FAILURES] = {"tidemark_commit_failures_total", "", "Group commits that failed."},
    [TM_M_HTTP_REQUESTS] = {"tidemark_http_requests_total", "", "HTTP requests handled."},
    [TM_M_CONN_REFUSED_TOTAL] = {"tidemark_connections_refused_total", "limit=\"total\"", "Connections answered 503 and closed at a limit."},
    [TM_M_CONN_REFUSED_ADDRESS] = {"tidemark_connections_refused_total", "limit=\"address\"", NULL},
    [TM_M_CONN_DEADLINE] = {"tidemark_connections_dropped_total", "reason=\"request_deadline\"", "Connections the server closed."},
    [TM_M_CONN_IDLE] = {"tidemark_connections_dropped_total", "reason=\"idle\"", NULL},
    [TM_M_HTTP_BAD_FRAMING] = {"tidemark_http_bad_framing_total", "", "Requests refused for ambiguous framing (a folded or malformed header field, a repeated Host, Content-Length or Transfer-Encoding, a Transfer-Encoding other than chunked, both)."},
    [TM_M_CALLS_REFUSED] = {"tidemark_calls_refused_total", "", "Calls refused with 429: the session's queue of waiting calls was full."},
    [TM_M_CHECKPOINT_STALLS] = {"tidemark_wal_checkpoint_stalls_total", "", "WAL checkpoints that could not complete for 5 s (counted every 10 s while it lasts)."},
    [TM_M_STORE_LOSS] = {"tidemark_store_loss_detected_total", "", "Store opens that found fewer commits than the head file recorded."},
    [TM_M_STORE_CORRUPT] = {"tidemark_store_corruption_total", "", "Damaged database files found, at open or at run time."},
    [TM_M_STORE_RECOVERIES] = {"tidemark_store_write_recoveries_total", "", "Times a store accepted writes again after a failed write."},
    [TM_M_OTEL_SPANS_EXPORTED] = {"tidemark_otel_spans_exported_total", "", "Trace spans the OTLP collector accepted."},
    [TM_M_OTEL_SPANS_DROPPED] = {"tidemark_otel_spans_dropped_total", "", "Trace spans dropped: the export queue was full or an export failed."},
};

static const counter_def gauges[TM_G_GAUGE_COUNT] = {
    [TM_G_SESSIONS_OPEN] = {"tidemark_sessions_open", "", "Sessions held in memory."},
    [TM_G_STREAMS_OPEN] = {"tidemark_streams_open", "", "SSE connections attached to streams."},
    [TM_G_CONNECTIONS_OPEN] = {"tidemark_connections_open", "", "Open HTTP connections."},
};

#define NBUCKETS 16
typedef struct hist_def {
    const char *name, *help;
    double scale; /* divide raw values (and bounds) by this on output */
    uint64_t bounds[NBUCKETS];
} hist_def;

static const hist_def hists[TM_H_HISTOGRAM_COUNT] = {
    [TM_H_COMMIT_BATCH] = {"tidemark_commit_batch_size", "Operations per group commit.", 1,
                           {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}},
    [TM_H_COMMIT_LATENCY_US] = {"tidemark_commit_latency_seconds", "Append queued to durable.", 1e6,
                                {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
                                 250000, 500000, 1000000, 2500000, 5000000}},
    [TM_H_RESUME_LATENCY_US] = {"tidemark_resume_latency_seconds", "Resume request to replay queued.", 1e6,
                                {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
                                 250000, 500000, 1000000, 2500000, 5000000}},
};

static atomic_uint_fast64_t counter_v[TM_M_COUNTER_COUNT];
static atomic_int_fast64_t gauge_v[TM_G_GAUGE_COUNT];
static atomic_uint_fast64_t hist_b[TM_H_HISTOGRAM_COUNT][NBUCKETS + 1];
static atomic_uint_fast64_t hist_sum[TM_H_HISTOGRAM_COUNT];
static atomic_uint_fast64_t hist_n[TM_H_HISTOGRAM_COUNT];

void tm_metric_inc(tm_counter c) { atomic_fetch_add(&counter_v[c], 1); }
void tm_metric_add(tm_counter c, uint64_t n) { atomic_fetch_add(&counter_v[c], n); }
uint64_t tm_metric_get(tm_counter c) { return atomic_load(&counter_v[c]); }
void tm_gauge_add(tm_gauge g, int64_t d) { atomic_fetch_add(&gauge_v[g], d); }

void tm_histogram_observe(tm_histogram h, uint64_t v)
{
    size_t i = 0;
    while (i < NBUCKETS && v > hists[h].bounds[i])
        i++;
    atomic_fetch_add(&hist_b[h][i], 1);
    atomic_fetch_add(&hist_sum[h], v);
    atomic_fetch_add(&hist_n[h], 1);
}

int tm_metrics_render(tm_buf *out)
{
    int rc = 0;
    for (int i = 0; i < TM_M_COUNTER_COUNT && !rc; i++) {
        const counter_def *d = &counters[i];
        if (d->help && (rc = tm_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", d->name,
                                           d->help, d->name)))
            break;
        rc = d->labels[0]
                 ? tm_buf_printf(out, "%s{%s} %llu\n", d->name, d->labels,
                                 (unsigned long long)atomic_load(&counter_v[i]))
                 : tm_buf_printf(out, "%s %llu\n", d->name, (unsigned long long)atomic_load(&counter_v[i]));
    }
    for (int i = 0; i < TM_G_GAUGE_COUNT && !rc; i++)
        rc = tm_buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", gauges[i].name,
                           gauges[i].help, gauges[i].name, gauges[i].name,
                           (long long)atomic_load(&gauge_v[i]));
    for (int h = 0; h < TM_H_HISTOGRAM_COUNT && !rc; h++) {
        const hist_def *d = &hists[h];
        rc = tm_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", d->name, d->help, d->name);
        uint64_t cum = 0;
        for (int b = 0; b < NBUCKETS && !rc; b++) {
            cum += atomic_load(&hist_b[h][b]);
            rc = tm_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", d->name, (double)d->bounds[b] / d->scale,
                               (unsigned long long)cum);
        }
        cum += atomic_load(&hist_b[h][NBUCKETS]);
        if (!rc)
            rc = tm_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %g\n%s_count %llu\n", d->name,
                               (unsigned long long)cum, d->name,
                               (double)atomic_load(&hist_sum[h]) / d->scale, d->name,
                               (unsigned long long)atomic_load(&hist_n[h]));
    }
    return rc;
}
