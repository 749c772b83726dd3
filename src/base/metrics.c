/* metrics.c - atomics behind a fixed catalogue; see metrics.h. */
#include "metrics.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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
    [TM_H_COMMIT_TO_EMIT_US] = {"tidemark_commit_to_emit_seconds",
                                "A live event's commit (the store's wake-up) to its SSE bytes framed.", 1e6,
                                {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
                                 250000, 500000, 1000000, 2500000, 5000000}},
    [TM_H_RESUME_REPLAYED] = {"tidemark_resume_replayed_events", "Events a resume had to replay.", 1,
                              {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536, 262144}},
};

/* The MCP semantic conventions' durations (seconds on output), buckets as
 * they advise, below them 1 and 5 ms for calls that never leave memory. */
#define OP_BOUNDS {1000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000, \
                   5000000, 10000000, 30000000, 60000000, 120000000, 300000000}
#define SESS_BOUNDS {100000, 1000000, 5000000, 10000000, 30000000, 60000000, 300000000, 600000000, \
                     1800000000, 3600000000, 7200000000, 14400000000, 28800000000, 43200000000,    \
                     86400000000, 172800000000}
static const hist_def lhists[TM_LH_COUNT] = {
    [TM_LH_SERVER_OPERATION] = {"mcp_server_operation_duration_seconds",
                                "MCP request duration as observed on the receiver (mcp.server.operation.duration).",
                                1e6, OP_BOUNDS},
    [TM_LH_SERVER_SESSION] = {"mcp_server_session_duration_seconds",
                              "MCP session duration as observed on the server (mcp.server.session.duration).",
                              1e6, SESS_BOUNDS},
    [TM_LH_CLIENT_OPERATION] = {"mcp_client_operation_duration_seconds",
                                "MCP request duration as observed on the sender (mcp.client.operation.duration).",
                                1e6, OP_BOUNDS},
    [TM_LH_CLIENT_SESSION] = {"mcp_client_session_duration_seconds",
                              "MCP session duration as observed on the client (mcp.client.session.duration).",
                              1e6, SESS_BOUNDS},
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


/* ---- labelled histograms ------------------------------------------------ */

/* A label set is found by the key of its values (each value, or \x1e
 * for none, ended by \x1f: no snprintf on the request path); its text,
 * escaped as the exposition format says, is made once, with the series. */
#define LTEXT_MAX (2 * TM_LABELS_MAX + 128)
typedef struct lseries {
    char key[TM_LABELS_MAX];  /* written once before published */
    size_t keylen;
    char labels[LTEXT_MAX];   /* k="v",...: written once before published */
    atomic_uint_fast64_t b[NBUCKETS + 1], sum, n;
} lseries;

/* [TM_LHIST_SERIES] is the overflow series. Series [0, lcount) are
 * published (release store of lcount after key and labels are written). */
static lseries lser[TM_LH_COUNT][TM_LHIST_SERIES + 1];
static atomic_int lcount[TM_LH_COUNT];
static pthread_mutex_t lmu = PTHREAD_MUTEX_INITIALIZER;

/* Append name="value" (escaped as the text format says) to out[*n..max). */
static int label(char *out, size_t *n, size_t max, const char *name, const char *v)
{
    if (!v)
        return 0;
    size_t need = strlen(name) + 4 + (*n ? 1 : 0);
    if (*n + need >= max)
        return -1;
    *n += (size_t)snprintf(out + *n, max - *n, "%s%s=\"", *n ? "," : "", name);
    for (; *v; v++) {
        int esc = *v == '\\' || *v == '"' || *v == '\n';
        if (*n + 3 >= max)
            return -1;
        if (esc)
            out[(*n)++] = '\\';
        out[(*n)++] = *v == '\n' ? 'n' : *v;
    }
    out[(*n)++] = '"';
    out[*n] = '\0';
    return 0;
}

static int render_labels(const tm_mcp_labels *l, char out[LTEXT_MAX])
{
    size_t n = 0;
    out[0] = '\0';
    return label(out, &n, LTEXT_MAX, "mcp_method_name", l->method) ||
           label(out, &n, LTEXT_MAX, "gen_ai_tool_name", l->tool) ||
           label(out, &n, LTEXT_MAX, "gen_ai_prompt_name", l->prompt) ||
           label(out, &n, LTEXT_MAX, "error_type", l->error) ||
           label(out, &n, LTEXT_MAX, "mcp_protocol_version", l->version) ||
           label(out, &n, LTEXT_MAX, "network_transport", l->transport);
}

/* The key of l's values; -1 when it does not fit or a value holds a
 * separator (such a set goes to the overflow series). */
static int values_key(const tm_mcp_labels *l, char out[TM_LABELS_MAX], size_t *len)
{
    const char *v[] = {l->method, l->tool, l->prompt, l->error, l->version, l->transport};
    size_t n = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        size_t k = v[i] ? strlen(v[i]) : 0;
        if (n + k + 2 >= TM_LABELS_MAX || (v[i] && (memchr(v[i], 0x1e, k) || memchr(v[i], 0x1f, k))))
            return -1;
        if (v[i])
            memcpy(out + n, v[i], k);
        else
            out[n++] = 0x1e;
        n += k;
        out[n++] = 0x1f;
    }
    *len = n;
    return 0;
}

static int series_find(tm_lhist h, const char *key, size_t len, int from, int to)
{
    for (int i = from; i < to; i++)
        if (lser[h][i].keylen == len && memcmp(lser[h][i].key, key, len) == 0)
            return i;
    return -1;
}

/* The series of a key: found without a lock, else made under lmu. */
static lseries *series_of(tm_lhist h, const tm_mcp_labels *l, const char *key, size_t len)
{
    int n = atomic_load_explicit(&lcount[h], memory_order_acquire);
    int i = series_find(h, key, len, 0, n);
    if (i >= 0)
        return &lser[h][i];
    pthread_mutex_lock(&lmu);
    int m = atomic_load_explicit(&lcount[h], memory_order_relaxed);
    i = series_find(h, key, len, n, m);
    if (i < 0 && m < TM_LHIST_SERIES && render_labels(l, lser[h][m].labels) == 0) {
        i = m;
        memcpy(lser[h][i].key, key, len);
        lser[h][i].keylen = len;
        atomic_store_explicit(&lcount[h], m + 1, memory_order_release);
    }
    pthread_mutex_unlock(&lmu);
    return &lser[h][i < 0 ? TM_LHIST_SERIES : i];
}

static void observe_into(const hist_def *d, atomic_uint_fast64_t *b, atomic_uint_fast64_t *sum,
                         atomic_uint_fast64_t *n, uint64_t v)
{
    size_t i = 0;
    while (i < NBUCKETS && v > d->bounds[i])
        i++;
    atomic_fetch_add(&b[i], 1);
    atomic_fetch_add(sum, v);
    atomic_fetch_add(n, 1);
}

void tm_lhist_observe(tm_lhist h, const tm_mcp_labels *l, uint64_t v)
{
    char key[TM_LABELS_MAX];
    size_t len;
    lseries *s = values_key(l, key, &len) ? &lser[h][TM_LHIST_SERIES] : series_of(h, l, key, len);
    observe_into(&lhists[h], s->b, &s->sum, &s->n, v);
}

/* One series: name_bucket{labels,le=...}, _sum, _count. */
static int render_series(tm_buf *out, const hist_def *d, const char *labels,
                         atomic_uint_fast64_t *b, atomic_uint_fast64_t *sum, atomic_uint_fast64_t *n)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    int rc = 0;
    for (int i = 0; i < NBUCKETS && !rc; i++) {
        cum += atomic_load(&b[i]);
        rc = tm_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", d->name, labels, sep,
                           (double)d->bounds[i] / d->scale, (unsigned long long)cum);
    }
    cum += atomic_load(&b[NBUCKETS]);
    if (!rc)
        rc = tm_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n%s_sum{%s} %g\n%s_count{%s} %llu\n",
                           d->name, labels, sep, (unsigned long long)cum, d->name, labels,
                           (double)atomic_load(sum) / d->scale, d->name, labels,
                           (unsigned long long)atomic_load(n));
    return rc;
}

static int render_lhists(tm_buf *out)
{
    int rc = 0;
    for (int h = 0; h < TM_LH_COUNT && !rc; h++) {
        const hist_def *d = &lhists[h];
        rc = tm_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", d->name, d->help, d->name);
        int n = atomic_load_explicit(&lcount[h], memory_order_acquire);
        for (int i = 0; i < n && !rc; i++)
            rc = render_series(out, d, lser[h][i].labels, lser[h][i].b, &lser[h][i].sum, &lser[h][i].n);
        lseries *o = &lser[h][TM_LHIST_SERIES];
        if (!rc && atomic_load(&o->n))
            rc = render_series(out, d, "overflow=\"true\"", o->b, &o->sum, &o->n);
    }
    return rc;
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
    return rc ? rc : render_lhists(out);
}
