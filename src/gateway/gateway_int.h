/*
 * gateway_int.h - what the gateway's files share (not installed):
 * gateway.c (children of stdio, the handlers, the catalog, the janitor) and
 * remote.c (an HTTP MCP server upstream, through the Tidemark client).
 */
#ifndef TM_GATEWAY_INT_H
#define TM_GATEWAY_INT_H
#include "gateway/gateway.h"
#include "gateway/upstream.h"
#include "tidemark/client.h"
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

/* A request of an HTTP upstream to the client (sampling, elicitation,
 * roots), waiting on the pending call it came with for the answer. */
typedef struct box {
    const char *method;
    json_t *params;   /* borrowed from the client library's callback */
    json_t *result;   /* the answer (result, or error object when rc is TIDEMARK_EPEER) */
    int rc;
    int taken;        /* a handler is answering it: its waiter waits to the end */
    int done;
    struct box *next;
} box;

/* One request in flight at a child, waited for by one handler. */
typedef struct pending {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *response; /* on_response */
    int lost;         /* on_lost: its error */
    json_t *notes;    /* notifications for it, in order */
    json_t *asks;     /* the child's requests while it runs: [generation, msg] */
    box *boxes;       /* an HTTP upstream's requests waiting for answers */
    int waiters;      /* threads waiting on a box of it */
    struct pending *next;
} pending;

typedef struct child {
    struct tm_gateway *g;
    tm_upstream *u;    /* a stdio child, or */
    tidemark_client_t *hc; /* an HTTP upstream (remote.c) */
    char *key;
    int busy;          /* handlers using it (g->mu) */
    int64_t last_used; /* g->mu */
    pthread_mutex_t mu;
    pending *flight;   /* ch->mu: newest first */
    int modern;        /* it answers 2026-07-28 requests too: calls go to it in that era */
    struct child *next;
} child;

/* The ud of a registered tool or prompt. */
typedef struct entry {
    struct tm_gateway *g;
    char *name;
    int safe;
    struct entry *next;
} entry;

struct tm_gateway {
    tidemark_server_t *srv;
    tm_gateway_config cfg;
    pthread_mutex_t start_mu, mu;
    pthread_cond_t cv;      /* the janitor's sleep */
    child *children;        /* g->mu */
    unsigned n;             /* g->mu */
    child *catalog;
    entry *entries;         /* g->mu: kept until free (a removed tool's call may run) */
    json_t *tools;          /* name -> the tool as listed (janitor and new only) */
    int relist, stopping;   /* g->mu */
    int users;              /* g->mu: children's threads calling the server now */
    pthread_t janitor;
    int janitor_on;
};


/* gateway.c */
int tm_gw_pending_init(pending *p);
void tm_gw_pending_destroy(pending *p);
void tm_gw_track(child *ch, pending *p);
void tm_gw_untrack(child *ch, pending *p);
/* What changed upstream (a list, a resource): to every session. */
void tm_gw_changed(tm_gateway *g, json_t *msg);
/* Take what arrived for p (OUT notes, asks) until something did or until;
 * 1 when p is over (answered or lost). */
int tm_gw_take(pending *p, int64_t until, json_t **notes, json_t **asks);
/* Relay notes (and a stdio child's asks) to call (NULL: the asks are
 * refused, the notes dropped); takes both. flags: the request's
 * (TM_UPSTREAM_RESEND: it may run twice). */
int tm_gw_relay(child *ch, tidemark_call_t *call, json_t *notes, json_t *asks, unsigned flags);
json_t *tm_gw_error(const char *reason, const char *message);

/* remote.c: the upstream is an HTTP MCP server (cfg.url) */
/* Connect ch->hc with params (initialize params: name, capabilities). */
int tm_gw_remote_start(child *ch, const char *url, json_t *params, int timeout_ms);
void tm_gw_remote_stop(child *ch);
/* method(params) at the upstream for call, relayed as a stdio child's is.
 * OUT out: result (0) or error object (TIDEMARK_EPEER). */
int tm_gw_remote_ask(child *ch, tidemark_call_t *call, const char *method, json_t *params,
                     json_t **out);
/* Every page of a list at the upstream. OUT items. */
int tm_gw_remote_list(child *ch, const char *method, const char *field, json_t **items);
/* OUT caps: the upstream's server capabilities (a new reference). */
int tm_gw_remote_caps(child *ch, json_t **caps);

#endif
