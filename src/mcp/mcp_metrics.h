/*
 * mcp_metrics.h - the MCP semantic conventions' duration histograms
 * (mcp.{server,client}.{operation,session}.duration), registered on a
 * metrics registry by the side that observes them.
 */
#ifndef TM_MCP_METRICS_H
#define TM_MCP_METRICS_H
#include "../base/metrics.h"

/* Label values; NULL ones are left out. */
typedef struct tm_mcp_labels {
    const char *method, *tool, *prompt, *error, *version, *transport;
} tm_mcp_labels;

typedef struct tm_mcp_durations {
    tm_lhist *operation, *session; /* microseconds, shown as seconds */
} tm_mcp_durations;

/* Register the server's pair (mcp_server_*) or the client's (mcp_client_*)
 * on m; NULL handles when m is NULL. */
void tm_mcp_durations_server(tm_metrics *m, tm_mcp_durations *out);
void tm_mcp_durations_client(tm_metrics *m, tm_mcp_durations *out);
void tm_mcp_observe(tm_lhist *h, const tm_mcp_labels *l, uint64_t us);

#endif
