/* metrics.c - the server layer's series; see server_metrics.h. */
#include "server_int.h"
#include "server_metrics.h"

#define US_BOUNDS {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, \
                   500000, 1000000, 2500000, 5000000}

static const tm_hist_def resume_latency = {"tidemark_resume_latency_seconds",
                                           "Resume request to replay queued.", 1e6, US_BOUNDS};
static const tm_hist_def commit_to_emit = {
    "tidemark_commit_to_emit_seconds",
    "A live event's commit (the store's wake-up) to its SSE bytes framed.", 1e6, US_BOUNDS};
static const tm_hist_def resume_replayed = {
    "tidemark_resume_replayed_events", "Events a resume had to replay.", 1,
    {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536, 262144}};

static const char *const outcomes[TM_RESUMED_COUNT] = {
    [TM_RESUMED_OK] = "outcome=\"ok\"",
    [TM_RESUMED_GAP] = "outcome=\"gap\"",
    [TM_RESUMED_AHEAD] = "outcome=\"ahead\"",
    [TM_RESUMED_EPOCH] = "outcome=\"epoch\"",
    [TM_RESUMED_MALFORMED] = "outcome=\"malformed\"",
    [TM_RESUMED_UNKNOWN_STREAM] = "outcome=\"unknown_stream\"",
    [TM_RESUMED_CONFLICT] = "outcome=\"conflict\"",
};

void tm_server_metrics_register(tm_server_metrics *m, tm_metrics *r)
{
    m->emitted = tm_metrics_counter(r, "tidemark_events_emitted_total", "",
                                    "Events written to SSE connections.");
    m->replayed = tm_metrics_counter(r, "tidemark_events_replayed_total", "",
                                     "Events sent by resumes (at or below the head at resume time).");
    for (int i = 0; i < TM_RESUMED_COUNT; i++)
        m->resumes[i] = tm_metrics_counter(r, "tidemark_resumes_total", outcomes[i],
                                           "Resumes by outcome.");
    m->deduplicated = tm_metrics_counter(r, "tidemark_requests_deduplicated_total", "",
                                         "Repeated requests answered from their record.");
    m->lookups = tm_metrics_counter(
        r, "tidemark_request_lookups_total", "",
        "Store reads of a request record to tell a retry from a new request.");
    m->outcome_unknown = tm_metrics_counter(r, "tidemark_outcome_unknown_total", "",
                                            "Requests ended with outcome_unknown after a crash.");
    m->recovered = tm_metrics_counter(r, "tidemark_requests_recovered_total", "",
                                      "Requests re-run after a crash (atomic or idempotent tools).");
    m->http_requests = tm_metrics_counter(r, "tidemark_http_requests_total", "", "HTTP requests handled.");
    m->calls_refused = tm_metrics_counter(
        r, "tidemark_calls_refused_total", "",
        "Calls refused with 429: the session's queue of waiting calls was full.");
    m->sessions_open = tm_metrics_gauge(r, "tidemark_sessions_open", "Sessions held in memory.");
    m->resume_latency_us = tm_metrics_hist(r, &resume_latency);
    m->commit_to_emit_us = tm_metrics_hist(r, &commit_to_emit);
    m->resume_replayed = tm_metrics_hist(r, &resume_replayed);
    tm_mcp_durations_server(r, &m->mcp);
    tm_mcp_durations unused;
    tm_mcp_durations_client(r, &unused);
}

tm_metrics *tm_server_registry(tidemark_server_t *srv) { return srv->metrics; }
