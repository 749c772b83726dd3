/* mcp_metrics.c - the MCP duration histograms; see mcp_metrics.h. */
#include "mcp_metrics.h"

/* Buckets as the conventions advise, below them 1 and 5 ms for calls that
 * never leave memory (microseconds). */
#define OP_BOUNDS {1000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000, \
                   5000000, 10000000, 30000000, 60000000, 120000000, 300000000}
#define SESS_BOUNDS {100000, 1000000, 5000000, 10000000, 30000000, 60000000, 300000000, 600000000, \
                     1800000000, 3600000000, 7200000000, 14400000000, 28800000000, 43200000000,    \
                     86400000000, 172800000000}

static const tm_hist_def defs[2][2] = {
    {{"mcp_server_operation_duration_seconds",
      "MCP request duration as observed on the receiver (mcp.server.operation.duration).", 1e6,
      OP_BOUNDS},
     {"mcp_server_session_duration_seconds",
      "MCP session duration as observed on the server (mcp.server.session.duration).", 1e6,
      SESS_BOUNDS}},
    {{"mcp_client_operation_duration_seconds",
      "MCP request duration as observed on the sender (mcp.client.operation.duration).", 1e6,
      OP_BOUNDS},
     {"mcp_client_session_duration_seconds",
      "MCP session duration as observed on the client (mcp.client.session.duration).", 1e6,
      SESS_BOUNDS}},
};

static const char *const names[] = {"mcp_method_name", "gen_ai_tool_name", "gen_ai_prompt_name",
                                    "error_type", "mcp_protocol_version", "network_transport"};
#define NNAMES (sizeof names / sizeof names[0])

static void durations(tm_metrics *m, int side, tm_mcp_durations *out)
{
    out->operation = tm_metrics_lhist(m, &defs[side][0], names, NNAMES);
    out->session = tm_metrics_lhist(m, &defs[side][1], names, NNAMES);
}

void tm_mcp_durations_server(tm_metrics *m, tm_mcp_durations *out) { durations(m, 0, out); }
void tm_mcp_durations_client(tm_metrics *m, tm_mcp_durations *out) { durations(m, 1, out); }

void tm_mcp_observe(tm_lhist *h, const tm_mcp_labels *l, uint64_t us)
{
    const char *v[NNAMES] = {l->method, l->tool, l->prompt, l->error, l->version, l->transport};
    tm_lhist_observe(h, v, us);
}
