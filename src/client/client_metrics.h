/*
 * client_metrics.h - where a client counts. The client library serves no
 * /metrics of its own: a program that does (the gateway) hands its registry
 * to the clients it makes, and their mcp_client_* durations and span
 * counts appear there. A client given none counts nothing.
 */
#ifndef TM_CLIENT_METRICS_H
#define TM_CLIENT_METRICS_H
#include "../base/metrics.h"
#include "tidemark/client.h"

/* Count on m (it must outlive c) from now on; call before c's first
 * request. NULL: no change. */
void tm_client_count_on(tidemark_client_t *c, tm_metrics *m);

#endif
