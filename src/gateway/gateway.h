/*
 * gateway.h - a stdio MCP server behind a Tidemark server: what the child
 * offers (tools, resources, resource templates, prompts, completion) is
 * registered in the Tidemark server, and every call of it is forwarded to
 * a child, so the child's answers, progress and log messages travel
 * through Tidemark's store (committed before they are emitted; resumable
 * with Last-Event-ID, in both protocol eras).
 *
 * Children (upstream.h underneath):
 *  - the catalog child, started first with the gateway's own initialize
 *    params: it is listed at start and again when it says a list changed;
 *  - one child per 2025 session, initialized with that session's recorded
 *    initialize params (tidemark_call_client_params), so sampling,
 *    elicitation and roots are the session's, and a session survives the
 *    gateway's restart (a new child gets the same params);
 *  - for 2026-07-28 requests (no session), a pool: one child per set of
 *    client capabilities, initialized by the first request with them.
 *  At most max_children at once: an idle one (LRU) makes room, and one
 *  idle longer than idle_ms is stopped; when all are busy a call is
 *  refused (-32603 gateway_busy).
 *
 * A call whose child dies: a tool named safe (or, with trust_annotations,
 * annotated idempotent or read-only by the child) is sent again to the
 * restarted child (and re-run by Tidemark's recovery after the gateway's
 * own crash); any other ends -32010 outcome_unknown. A child's
 * server->client request (sampling, elicitation, roots) goes to the client
 * on the stream of the call in flight on that child (the latest one), and
 * the answer back to the child.
 */
#ifndef TM_GATEWAY_GATEWAY_H
#define TM_GATEWAY_GATEWAY_H
#include "tidemark/server.h"

typedef struct tm_gateway tm_gateway;

typedef struct tm_gateway_config {
    const char *const *argv;       /* the stdio server's command, NULL-ended; or */
    const char *url;               /* a Streamable HTTP MCP server's endpoint (remote.c) */
    const char *const *safe_tools; /* NULL-ended tool names safe to send twice; may be NULL */
    int trust_annotations;         /* the child's readOnlyHint / idempotentHint count as safe */
    unsigned max_children;         /* 0: 64 */
    int idle_ms;                   /* 0: 300000 */
    int call_timeout_ms;           /* a call's whole life at the child; 0: 600000 */
} tm_gateway_config;

/* Start the catalog child, list what it offers and register it in srv
 * (before tidemark_server_start). OUT gw. 0, or the child's start error
 * (upstream.h), TIDEMARK_EPEER when it refused a list, TIDEMARK_ENOMEM. */
int tm_gateway_new(tidemark_server_t *srv, const tm_gateway_config *cfg, tm_gateway **gw);
/* Stop the gateway's own thread (the janitor: idle children, relists),
 * before tidemark_server_stop: it registers into the server. Idempotent. */
void tm_gateway_quiesce(tm_gateway *gw);
/* Stop every child (after tidemark_server_stop: no call runs any more). */
void tm_gateway_free(tm_gateway *gw);

#endif
