/*
 * client_int.h - what the files of the client (src/client/) share; not
 * installed. The public API is include/tidemark/client.h.
 *
 *   client.c     the API's lifecycle: config, new, free, stop, state, end
 *   session.c    initialize, reuse of a saved session, notifications,
 *                listen and subscriptions/listen
 *   request.c    the request API: request, call_tool, list
 *   drive.c      a request from start to outcome: the drive loop
 *   rq.c         a request's record in memory, pending map, next id
 *   observe.c    the client's spans and durations
 *   exchange.c   HTTP exchanges: the I/O thread's callbacks (they only
 *                queue), and the driver's reading of what they queued
 *   reconnect.c  after a cut: budget, delay, resume or re-send or refuse
 *   events.c     SSE events: validator, hold-back, persistence modes
 *   messages.c   JSON-RPC messages that arrived: responses, progress,
 *                notifications, requests from the server (worker pool)
 *   resume.c     finishing what a killed client left outstanding
 *   cstate.c     the durable state (SQLite); validator.c the validator
 *   era.c        which era the server speaks (server/discover first)
 *   modern.c     the 2026-07-28 era: its _meta, headers, the -32022 retry
 *   mrtr.c       InputRequiredResult rounds answered by the application
 *   cache.c      the 2026-07-28 era's cached reads
 *   tasks.c      a call answered with a task: recorded, polled, applied once
 *   oauth.c      authorization: a 401 or insufficient_scope answered
 *   oauth_http.c the authorization flow's HTTP and text helpers
 *   oauth_loopback.c  the loopback redirect listener (RFC 8252)
 *
 * Threads. The I/O thread (transport/http_client) runs every HTTP exchange
 * and only records what arrives: headers, body bytes (into the request's
 * inbox, the transfer paused while the inbox is full), the end. Each
 * request is driven by one thread - the caller of tidemark_client_request
 * (and the other calls that send something), of tidemark_client_listen, or
 * the client's listener thread (open_standalone) - which waits on its
 * request's condition variable, takes what was queued and does everything
 * else: SSE parsing, the validator, the persistence modes, the
 * application's callbacks. So events of a stream are handled by one thread,
 * in order, and no application code ever runs on the I/O thread.
 *
 * Locks: c->mu guards the client's shared fields and, of every request, the
 * fields marked "c->mu" below; it is a leaf except that tm_hc_cancel /
 * tm_hc_unpause (the transport's own lock) may be called under it. The
 * state's lock (cstate) is taken only without c->mu held.
 */
#ifndef TM_CLIENT_INT_H
#define TM_CLIENT_INT_H
#include "tidemark/client.h"
#include "cstate.h"
#include "validator.h"
#include "../base/buf.h"
#include "../base/crash.h"
#include "../base/map.h"
#include "../base/pool.h"
#include "../common/event_id.h"
#include "../mcp/mcp_metrics.h"
#include "../otel/otel.h"
#include "../transport/http_client.h"
#include "../transport/sse_parser.h"
#include <pthread.h>
#include <stdint.h>

/* A JSON answer (or an error body) is read up to this many bytes. */
#define TM_CLIENT_MAX_BODY ((size_t)16 << 20)
/* Body bytes the I/O thread queues for a request's driver before it pauses
 * the transfer (the driver resumes it once it took them). */
#define TM_CLIENT_INBOX_MAX ((size_t)1 << 20)
/* What a held event counts against max_held_bytes beyond its data and id:
 * the parsed message and the list node. */
#define TM_CLIENT_HELD_OVERHEAD 512

#define TM_CLIENT_CRASH_POINT(name) TM_CRASH_POINT("TIDEMARK_CLIENT_CRASH", name)

/* Results that must not be dropped. */
#define TM_MUST_CHECK __attribute__((warn_unused_result))

enum rq_phase { RQ_RUNNING = 0, RQ_RECONNECT, RQ_DONE };

/* An event as it arrives, classified for the validator. */
typedef struct inev {
    const char *id;   /* the id as received; "" when none */
    tm_id_kind kind;
    tm_event_id eid;  /* kind == TM_ID_STRUCTURED */
    json_t *msg;      /* the message; NULL for empty data (a priming event) */
    int msg_ok;       /* data empty, or a valid JSON-RPC message (or batch) */
    const char *why;  /* kind == TM_ID_MALFORMED: "nul_byte", "too_long" */
} inev;

/* An event of an emit-early stream not yet announced durable. */
typedef struct held {
    char *id;
    json_t *msg;
    tm_event_id eid;
    size_t cost;
    struct held *next;
} held;

/* What the I/O thread left for a request's driver about the current
 * exchange (guarded by c->mu). */
typedef struct xio {
    int is_get;       /* set by the driver before the exchange starts */
    int connected;    /* the request went out on a connection */
    int headers;      /* 1: response headers arrived, not yet taken */
    long status;
    int sse;          /* the answer is text/event-stream */
    tm_buf in;        /* body bytes not yet taken */
    int paused;       /* the transfer waits until the driver took in */
    int abandon;      /* the driver stopped reading: refuse more bytes */
    int done;         /* 1: the exchange ended, not yet taken; 2: taken */
    int rc;           /* ... its result and final status */
    long end_status;
    char error[160];  /* ... and what went wrong, for people */
    char *www_auth;   /* the answer's WWW-Authenticate (a 401 or 403) */
} xio;

typedef struct rq {
    struct tidemark_client *c;
    pthread_cond_t cv;          /* its driver waits here (with c->mu) */
    struct rq *live_prev, *live_next; /* c->live (c->mu) */
    int64_t id;                 /* the JSON-RPC id on the wire (a modern re-issue takes a new one) */
    int64_t row_id;             /* the outstanding row of the state (the first id) */
    int modern;                 /* sent in the modern era: _meta, headers, no session, no GET */
    char key[64];               /* pending map key */
    json_t *msg;                /* the request (NULL for the listen stream) */
    int listen;                 /* the standalone GET stream */
    int sub;                    /* a modern subscriptions/listen stream */
    int probe;                  /* server/discover finding the era out: never reconnected */
    int tasks;                  /* a modern tools/call declaring the tasks extension */
    int phase;                  /* c->mu */
    int rc;                     /* final status */
    json_t *result;             /* result, or error object */
    tidemark_progress_fn progress;
    void *progress_ud;
    /* The current exchange (0 = none, UINT64_MAX = starting), what its
     * I/O-thread callbacks left, and whether a POST of it ever reached a
     * connection (may have been received): c->mu. */
    uint64_t x;
    xio io;
    int sent;
    /* The driver's own, from here on. */
    long status;
    int sse;
    int is_get;                 /* the current exchange is a GET (resume or listen) */
    int had_session;            /* ... and carried Mcp-Session-Id */
    int abandoned;              /* ... is being cancelled: its bytes mean nothing */
    int unreachable;            /* the last exchange never reached a connection */
    char unreachable_why[160];  /* ... and why ("Connection refused") */
    tm_buf body;                /* a JSON answer or error body */
    tm_buf chunk;               /* bytes taken from io.in, being read */
    tm_sse_parser *parser;
    int got_response;           /* stop reading this exchange */
    /* the stream */
    char stream_key[80];
    char last_id[TM_CLIENT_ID_MAX + 1];
    int have_id;                /* an event with an id was accepted (or a cursor loaded) */
    int ours;                   /* ...with a Tidemark id: the stream is provable */
    unsigned long retry_ms;
    int retry_set;
    unsigned attempts;          /* reconnects in a row without progress */
    int progressed;             /* the current exchange moved the stream forward */
    int skip_nap;               /* decide and start the next exchange without waiting */
    int recorded;               /* outstanding row exists */
    int final;                  /* the outcome is known for good: the row may go */
    /* An emit-early server announces its durable head; events above it wait
     * here and are dispatched (and their cursor kept) only once announced
     * durable. Per exchange, bounded by cfg.max_held_bytes. */
    int early;
    uint64_t durable;
    held *held_head, *held_tail;
    size_t held_bytes;
    /* Authorization: the exchange was answered 401/403 (auth_status) with
     * this challenge; authorizations done for this request so far. */
    long auth_status;
    char *auth_challenge;
    unsigned auth_tries, auth_step_ups;
} rq;

struct tidemark_client {
    tidemark_client_config_t cfg;
    char *url, *state_path, *name, *version, *offer, *log_level;
    json_t *caps, *roots;
    tm_hc *hc;
    tm_cstate *st;
    tm_pool *workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* client-wide waits: stop, the standalone stream, DELETE */
    pthread_mutex_t init_mu; /* one new session at a time after a lost one */
    int locks;               /* mu, cv and init_mu are initialised */
    char *session;           /* c->mu (read and replaced by any thread) */
    char *proto;             /* c->mu */
    json_t *server_info;     /* c->mu */
    tm_map *pending;         /* id key -> rq (c->mu) */
    json_t *tool_safe;       /* tool name -> true when idempotent or read-only (c->mu) */
    rq *live;                /* every request being driven (c->mu): stop wakes each */
    pthread_t listener;      /* open_standalone */
    int listening;
    int standalone_open;     /* the GET stream was requested (c->mu) */
    int stopping;            /* c->mu */
    int session_lost;        /* c->mu */
    int modern;              /* the era is modern (c->mu) */
    json_t *tool_headers;    /* modern: tool name -> [[path..., header], ...], or false when
                                its x-mcp-header annotations are invalid (c->mu) */
    json_t *cache;           /* modern: cache key -> {until, result} (c->mu) */
    char *auth_token;        /* the bearer token sent (c->mu); never logged */
    struct tm_oauth *oauth;  /* authorization (oauth.c) */
    tm_otel *otel;           /* traces (NULL: off), from the environment at new */
    /* The request API's tidemark_client_list, set at new: reconnect.c asks
     * the tools' annotations through it from inside a request's drive loop
     * (a request within a request), without drive and reconnect depending
     * on the API above them. */
    int (*list)(tidemark_client_t *c, const char *method, const char *field, json_t **items);
    tm_mcp_durations m;      /* NULL handles unless tm_client_count_on gave a registry */
    int64_t session_us;      /* c->mu: when the session of c->session was made (monotonic) */
};

/* observe.c: mcp.client.session.duration of the session ending now (c->mu held). */
void tm_client_session_ended_locked(tidemark_client_t *c);
/* observe.c: mcp.client.operation.duration of a request ended with rc. */
void tm_client_observe_request(tidemark_client_t *c, const char *method, json_t *params, int rc,
                               const json_t *res, int64_t t0);
/* A span of this client's tracer for method (NULL when tracing is off):
 * kind CLIENT for what it sends, SERVER for a server's request it answers;
 * the child of params._meta.traceparent when there is one (a gateway's
 * span passed on, the server's span of the call that asks); id may be NULL
 * (a notification). The session and the protocol version as they are now. */
tm_span *tm_client_span(tidemark_client_t *c, tm_span_kind kind, const char *method,
                        const json_t *params, const json_t *id);

/* rq.c */
/* A typed error object {code, message, data:{reason, ...}} into *out (data
 * is taken; out may be NULL). */
void tm_client_error(json_t **out, int code, const char *reason, const char *message,
                     json_t *data);
rq *tm_rq_new(tidemark_client_t *c, int64_t id);
void tm_rq_free(rq *r);
/* Settle r: its outcome, its driver woken. Holds c->mu. */
void tm_rq_finish_locked(rq *r, int rc, json_t *result);
/* Settle r with a typed error (internal error code). */
void tm_rq_fail(rq *r, int rc, const char *reason, const char *message, json_t *data);
/* ... and mark the outcome final (the outstanding row may go). */
void tm_rq_fail_final(rq *r, int rc, const char *reason, const char *message, json_t *data);
TM_MUST_CHECK int tm_pending_add(tidemark_client_t *c, rq *r);
void tm_pending_del(tidemark_client_t *c, rq *r);
/* The next request id of the state (survives restarts). */
TM_MUST_CHECK int tm_next_id(tidemark_client_t *c, int64_t *id, json_t **err);
/* A new response on r's exchange: a new connection says again what is durable. */
void tm_held_clear(rq *r);

/* drive.c */
/* Drive r (started, or waiting to reconnect) to its outcome, on the
 * calling thread: read what its exchanges bring, reconnect after cuts,
 * all within the deadline. Returns r->rc. */
int tm_drive(tidemark_client_t *c, rq *r, int64_t deadline);
/* r's message (r->msg; NULL when memory was short) POSTed while r is
 * pending, and driven to its outcome within the deadline; r is no longer
 * pending after. Returns r->rc (r->result says why when it is not 0); the
 * caller still frees r. */
int tm_rq_send(tidemark_client_t *c, rq *r, int64_t deadline);
/* One request round: sent, driven, settled. */
int tm_request_once(tidemark_client_t *c, const char *method, json_t *params,
                    tidemark_progress_fn progress, void *progress_ud, json_t **result);

/* exchange.c */
TM_MUST_CHECK int tm_start_post(tidemark_client_t *c, rq *r);
TM_MUST_CHECK int tm_start_get(tidemark_client_t *c, rq *r);
/* Fire-and-forget POST of a message (answers to server requests). */
TM_MUST_CHECK int tm_post_message(tidemark_client_t *c, json_t *msg);
/* Cancel r's exchange, if any, and wait until its callbacks are over. */
void tm_end_exchange(tidemark_client_t *c, rq *r);
/* Read what the I/O thread queued for r's exchange, on r's driver. */
void tm_exchange_read(tidemark_client_t *c, rq *r);
/* Whether the I/O thread left anything for r's driver. Holds c->mu. */
int tm_exchange_pending_locked(const rq *r);
int tm_is_tools_call(json_t *msg);

/* reconnect.c */
/* One reconnection of r after a cut: budget, decision, delay, exchange. */
void tm_reconnect(tidemark_client_t *c, rq *r, int64_t deadline);

/* events.c */
extern const tm_sse_callbacks tm_client_sse_callbacks;

/* messages.c */
/* A message or a batch of them arrived on r's exchange (r's driver). */
void tm_deliver(tidemark_client_t *c, rq *r, json_t *msg);
/* The task id of a CreateTaskResult ("" when it has none), else NULL. */
const char *tm_task_created(json_t *result);

/* modern.c: the 2026-07-28 era */
/* Recognised modern JSON-RPC error codes (a server that sends one speaks modern). */
#define TM_RPC_HEADER_MISMATCH -32020
#define TM_RPC_MISSING_CLIENT_CAPABILITY -32021
#define TM_RPC_UNSUPPORTED_VERSION -32022
/* Discover the server's era (auto/modern) and settle on one: 0 with
 * c->modern set, 1 when the caller should initialize a legacy session,
 * else a negative code with *err. */
TM_MUST_CHECK int tm_modern_connect(tidemark_client_t *c, json_t **err);
/* The capabilities offered (config, or implied by the callbacks). */
json_t *tm_client_capabilities(tidemark_client_t *c);
/* Put the modern _meta keys into r->msg's params. */
TM_MUST_CHECK int tm_modern_meta(tidemark_client_t *c, rq *r);
/* The modern headers of r's POST (Mcp-Method, Mcp-Name, Mcp-Param-*) into
 * out[*n...] (at most max), their text owned by own (tm_modern_headers_free). */
typedef struct tm_hdrs {
    const char *v[48];
    char *own[48];
    int n;
} tm_hdrs;
TM_MUST_CHECK int tm_modern_headers(tidemark_client_t *c, rq *r, tm_hdrs *h);
void tm_hdrs_free(tm_hdrs *h);
/* A copy of line into h; TIDEMARK_ENOMEM when it does not fit. */
TM_MUST_CHECK int tm_hdrs_add(tm_hdrs *h, const char *line);
/* Learn the x-mcp-header annotations of a tools/list page; invalid tools
 * are removed from tools (and logged). */
void tm_modern_tools_seen(tidemark_client_t *c, json_t *tools);
/* Forget what was learned of the tools (and the cached lists). */
void tm_modern_tools_forget(tidemark_client_t *c);
/* Whether tool's definition was refused (invalid x-mcp-header): 1 yes. */
int tm_modern_tool_refused(tidemark_client_t *c, const char *tool);
/* Whether tool's headers are known (tools/list seen it, or said it is unknown). */
int tm_modern_tool_known(tidemark_client_t *c, const char *tool);
/* A new JSON-RPC id for r (a modern re-issue: same key, new id). */
TM_MUST_CHECK int tm_modern_new_id(tidemark_client_t *c, rq *r);

/* mrtr.c: InputRequiredResult rounds */
/* After a request's result: while it is an InputRequiredResult, answer
 * its input requests and send the request again (new id). *result is
 * replaced by the final one (or a typed error). Returns the final rc. */
int tm_mrtr_rounds(tidemark_client_t *c, const char *method, json_t *params, int rc,
                   tidemark_progress_fn progress, void *progress_ud, json_t **result);
/* cache.c: a fresh cached result for method+params (new reference) or NULL. */
json_t *tm_cache_get(tidemark_client_t *c, const char *method, json_t *params);
void tm_cache_put(tidemark_client_t *c, const char *method, json_t *params, json_t *result);
/* Something changed on the server (a list_changed or updated notification). */
void tm_cache_clear(tidemark_client_t *c);

/* tasks.c: a call answered with a task (io.modelcontextprotocol/tasks) */
/* After r's drive: when r's result is a CreateTaskResult, record the task
 * on r's outstanding row, poll it to its end and apply its outcome once
 * (r->result and the return value become the call's). Else r->rc. */
int tm_task_started(tidemark_client_t *c, rq *r);
/* Follow the task id of outstanding row row_id (the first poll after
 * wait_ms) to its outcome, applied once. *result is replaced by the call's
 * result or error. Non-final failures leave the row for a resume. */
int tm_task_follow(tidemark_client_t *c, int64_t row_id, const char *id, long wait_ms,
                   json_t **result);

/* messages.c */
/* The answer to a server request (ping, roots/list, on_request). OUT result. */
int tm_answer_server_request(tidemark_client_t *c, const char *method, json_t *params,
                             json_t **result);

/* oauth.c: authorization */
TM_MUST_CHECK int tm_oauth_new(tidemark_client_t *c);
void tm_oauth_free(tidemark_client_t *c);
/* r was answered 401/403: authorize (on r's driver). 0 when r should be
 * sent again with the new token; otherwise r keeps its refusal (its
 * result replaced by a typed error saying why authorization failed). */
int tm_oauth_challenge(tidemark_client_t *c, rq *r);

/* session.c */
/* Initialize a new session (forgetting the old one's state). */
TM_MUST_CHECK int tm_initialize(tidemark_client_t *c, json_t **err);
/* After a lost session: a new one, once, whichever thread gets here first. */
TM_MUST_CHECK int tm_renew_session(tidemark_client_t *c, json_t **err);

#endif
