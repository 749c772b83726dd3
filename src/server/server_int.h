/* server_int.h - private structures shared by the server modules. */
#ifndef TM_SERVER_INT_H
#define TM_SERVER_INT_H
#include "tidemark/server.h"
#include "../mcp/jsonrpc.h"
#include "registry.h"
#include "../base/map.h"
#include "../base/pool.h"
#include "sched.h"
#include "../log/store.h"
#include "../otel/otel.h"
#include "server_metrics.h"
#include "request.h"
#include <pthread.h>
#include <stdatomic.h>

#define TM_SESSION_ID_LEN 32 /* 128 bits as hex */
/* Who owns what a request creates: with authorization on, the token's
 * principal id (64 hex digits, src/auth/auth.h); without it, everyone is
 * TM_PRINCIPAL_ANON, which no authorized principal's id can be. */
#define TM_PRINCIPAL_MAX 65
#define TM_PRINCIPAL_ANON "anon"
/* The member of a session's stored client JSON that names its principal
 * (absent in sessions from before: TM_PRINCIPAL_ANON). */
#define TM_CLIENT_PRINCIPAL "principal"
#define TM_URI_MAX 8192      /* hard cap of max_uri_length (buffers are sized for it) */
/* A request record's key: an id key, or "k:" and the escaped idempotency
 * key; either fits (jsonrpc.h bounds both before anything runs). */
#define TM_REQ_KEY_MAX TM_ID_KEY_MAX
_Static_assert(2 + 3 * TM_IDEM_KEY_MAX_BYTES + 33 + 1 <= TM_REQ_KEY_MAX, "idempotency key room");

/* Runtime state of one session (its durable part lives in the store). */
typedef struct tm_sess {
    atomic_int refs;
    char id[TM_SESSION_ID_LEN + 1];
    char version[16];
    char principal[TM_PRINCIPAL_MAX]; /* its owner (from client's TM_CLIENT_PRINCIPAL) */
    json_t *client;          /* initialize params (and the principal) */
    pthread_mutex_t mu;      /* guards everything below */
    pthread_cond_t cv;       /* server->client answers, cancellation */
    int log_level;           /* index into tm_log_levels; lower = more verbose
                                (a copy of the store's attribute "log_level") */
    atomic_int closed;       /* deleted (read without mu: require_session, call.c) */
    json_t *subs;            /* uri -> true: the resources subscribed to (a copy of
                                the store's "sub:<uri>" attributes, for the limit) */
    tm_map *calls;           /* request id key -> tidemark_call_t (in flight) */
    unsigned calls_gone;     /* calls that have left calls (tm_sess_calls_del), or settled
                                outside it (tm_sess_call_settled) */
    tm_map *pending;         /* server request id key -> struct tm_waiter */
    int records_known;       /* every request record of this session is begun here:
                                made by initialize on a store of one node (this
                                process writes all its records); 0 for a session
                                read back from the store (ask the store) */
    tm_map *recorded;        /* records_known: every key it has a record under, until
                                past TM_SESS_RECORDED_MAX (then NULL) */
    int64_t max_int_key;     /* records_known: the highest integer request id with a
                                record ("i:N"; INT64_MIN before any); a client's ids
                                mostly rise, so a higher one is surely unrecorded */
    uint64_t next_req;
    _Atomic int64_t used_ms; /* last found (tm_sess_find): idle ones go first */
    int64_t born_us;         /* made or loaded by this process (monotonic): its duration */
} tm_sess;
#define TM_SESS_RECORDED_MAX 256

/* The messages of one POST. */
typedef struct post_msgs {
    json_t *root;  /* the parsed body; handed to the job that answers it */
    tm_msg *m;
    size_t n;
    int batch;
    size_t nreq, ninit, ninvalid, ncall, nhandler;
    json_t **answered;   /* a batch: per message, the answer its record gave (a
                            retry, a refusal: record.h), or NULL to run it */
    tidemark_server_t *srv;
    char **claimed;      /* per message, the identity it claimed (record.h
                            tm_record_claim, "session/key") until its call takes it */
    int sid_sent;        /* Mcp-Session-Id is on the answer already */
} post_msgs;

/* One POST's requests and how they are answered. */
typedef struct tm_job {
    tidemark_server_t *srv;
    tm_sess *sess;           /* NULL for initialize */
    tm_req *req;        /* JSON mode: answered when all calls end */
    int sse;                 /* answered as an SSE stream */
    int batch;
    char stream[TM_STREAM_MAX];
    pthread_mutex_t mu;
    int remaining;
    int held;                /* the submit hold is one of remaining (post.c); under mu */
    int ended;               /* a response ended the stream (TM_APPEND_FINAL); under mu */
    json_t *responses;       /* JSON mode: collected responses */
    json_t *root;            /* the parsed body, kept alive for the calls */
    unsigned flags;          /* TM_POST_MODERN, TM_POST_EPHEMERAL, TM_POST_POOLED */
    tm_req *lazy;       /* modern call: not answered yet (JSON at the end, or
                                the stream once the call sends a notification) */
    int inline_run;          /* its one call runs here, not on a worker (post.c) */
    int late;                /* ... before its record's begin is answered (post.c
                                late_begin): not joinable by a retry */
    char pkey[24];           /* ... and its call's record key there ("e:<n>") */
    struct post_msgs *deferred; /* a 2025 quiet call running inline: its stream and record
                                   are opened only if it turns out to need them, by: */
    int (*open_deferred)(struct tm_job *j, struct tidemark_call *c); /* set with deferred (post.c):
                               0, or TIDEMARK_EIO: the POST was answered with the store's
                               error and the call's output goes nowhere */
    json_t *final;           /* modern, lazy: the call's response */
    char *final_bytes;       /* ... as appended (the answer is these bytes), unless: */
    size_t final_len;
    int final_effect;        /* it rode with an effect: what was committed (the result, or
                                the fallback if the effect failed) is read back */
    char final_key[TM_REQ_KEY_MAX]; /* ... from this record (last: see tm_job_alloc) */
} tm_job;

struct tidemark_call {
    tidemark_server_t *srv;
    tm_sess *sess;
    tm_job *job;
    json_t *id;
    unsigned hints;           /* the tool's TIDEMARK_TOOL_* */
    int recorded;             /* a request record exists: completing it is due */
    int recovering;           /* re-run after a crash */
    int unrecorded;           /* its record was not confirmed and the tool did not run:
                                 its answer is not stored; recovery settles the record */
    double progress_floor;    /* progress at or below it is not sent again
                                 (-INFINITY: none sent before) */
    tidemark_effect_fn effect;
    void *effect_ud;
    void (*effect_free)(void *);
    const char *method;
    json_t *params;
    json_t *request;          /* a tools/call: its message (a reference; else NULL): a
                                 retry that finds it running is judged against it */
    json_t *progress_token;
    char *progress_text;      /* progress_token as JSON text (call.c's progress fast path) */
    char addr[64];            /* the client's address ("" for the server's own work) */
    char stream[TM_STREAM_MAX]; /* where its response went (set when appended) */
    int holds_sess;           /* owns a reference to sess (kept past its job) */
    uint64_t mark;            /* the store's queue position before its record was queued */
    atomic_int cancelled;
    int registered;           /* present in sess->calls */
    int claimed;              /* holds the claim of idem (record.h): let go when freed */
    /* 2026-07-28 (mrtr.c): the answers to input requests (earlier rounds from
     * the sealed state, this round's inputResponses), what the handler asked
     * that is not answered, how many it asked, a capability it needed that
     * the client did not declare. */
    int modern;
    int inline_run;           /* runs on the thread that read its POST (NONBLOCKING); its
                                 entry in sess->calls stays until its response settled,
                                 its job cleared (under sess->mu) once that is queued */
    int late;                 /* inline before its begin is answered (tm_job.late): in no
                                 sess->calls; its settling moves calls_gone instead */
    int punt;                 /* inline, its handler said TIDEMARK_EAGAIN: to a worker */
    struct tm_durable_answer *answer; /* modern: its POST, answered when the response settles */
    int effect_rc;            /* its effect's result, set inside the commit (job.c) */
    json_t *answers;
    json_t *asked;
    unsigned nasked;
    const char *missing_cap;
    tm_span *span;            /* its SERVER span (NULL: tracing off); ended with its response */
    tm_span *commit_span;     /* the commit of its recorded response (trace.c), or NULL */
    int64_t t0_us;            /* made (monotonic); 0 once its duration was observed */
    unsigned unsynced;        /* notifications since it last looked at the store's queue (call.c) */
    /* The keys last, each filled when the call is made: tm_call_alloc zeroes
     * only what comes before them (3 KB each, zeroed per call cost more
     * than the rest of its set-up). */
    char idkey[TM_ID_KEY_MAX];
    char reqkey[TM_REQ_KEY_MAX]; /* record key: idkey, or "k:" + idempotency key */
    char idem[TM_SESSION_ID_LEN + 1 + TM_REQ_KEY_MAX];
};

struct tidemark_server {
    tidemark_server_config_t cfg;
    char **origins, **hosts;  /* owned copies, NULL-terminated */
    char **metrics_addrs;     /* owned copy of cfg.metrics_addresses */
    char *host, *path, *store_uri, *name, *version, *instructions;
    tm_store *store;
    struct tm_http *http;     /* the HTTP transport (http.c); NULL on stdio */
    tm_hub hub_store;         /* where hub points, once set */
    tm_hub *_Atomic hub;      /* the adapter's streams (request.h): read by store threads
                                 (commit wake-ups) as it is set */
    tm_pool *pool;
    tm_sched *sched;          /* admits handler calls to the pool fairly */
    tm_registry *reg;
    pthread_mutex_t mu;       /* guards sessions */
    tm_map *sessions;         /* id -> tm_sess */
    atomic_int running;
    atomic_int stopping;
    tidemark_complete_fn complete_fn;
    void *complete_ud;
    char **schemas;           /* application DDL run at start */
    size_t nschemas;
    pthread_t janitor;        /* session expiry */
    pthread_mutex_t jan_mu;
    pthread_cond_t jan_cv;
    int jan_running;
    pthread_t recoverer;      /* finishes dead nodes' requests (shared stores) and calls
                                 whose response could not be written */
    int rec_running;          /* (under jan_mu, woken by jan_cv) */
    pthread_mutex_t life_mu;  /* serialises stop (from run and from other threads) */
    pthread_mutex_t fail_mu;  /* guards failed */
    tm_map *failed;           /* calls whose response write failed (recovery.c) */
    struct tm_sealer *sealer; /* request state and derived ids (2026-07-28) */
    struct tm_doomed *doomed; /* modern store sessions to delete soon (under fail_mu) */
    struct tm_pooled *pooled; /* store sessions key-less modern calls share (modern_answer.c),
                                 under pool_mu */
    pthread_mutex_t pool_mu;
    pthread_mutex_t keyed_mu; /* a keyed modern call's replay check and record start,
                                 as one on this node (modern.c) */
    struct tm_auth *auth;     /* authorization (NULL: off; every principal anonymous) */
    struct tm_rec_waits *rec_waits; /* retries waiting for a record's commit (record.c) */
    char *metrics_token;      /* cfg.metrics_token, owned */
    char *tls_cert, *tls_key, *tls_client_ca; /* owned copies of the TLS files' paths */
    struct tm_sess_bound *bound; /* sessions counted per address and in all (session.c) */
    tm_otel *otel;            /* traces (NULL: off), from the environment at new */
    tm_metrics *metrics;      /* every layer's series; freed last */
    tm_server_metrics m;      /* the server layer's handles on it */
    pthread_mutex_t task_mu;  /* guards task_policies and task_runs (task_run.c) */
    struct tm_task_policy *task_policies; /* tools' task policies */
    struct tm_task_run *task_runs;        /* tasks running in this server */
    pthread_mutex_t live_mu;  /* guards live_feeds (feed.c) */
    tm_map *live_feeds;       /* session -> connections holding one of its streams */
    atomic_ullong pooled_calls; /* calls made on pooled sessions: their record keys */
};

/* The span of a call's request (server side); NULL when tracing is off. */
void tm_call_trace_start(tidemark_call_t *c, tm_req *r);
void tm_call_trace_end(tidemark_call_t *c, const json_t *response);
/* Its recorded response is durable (status 0) or not: the commit's span ends. */
void tm_call_commit_end(tidemark_call_t *c, int status, uint64_t seq);
/* Spans of a resume, a refused resume, a request answered from its record. */
struct tm_resume_decision;
void tm_resume_trace(tidemark_server_t *srv, tm_req *r, const char *session,
                     const struct tm_resume_decision *d, int64_t t0_us);
void tm_resume_refused_trace(tidemark_server_t *srv, tm_req *r, const char *reason);
void tm_record_trace(tidemark_server_t *srv, tm_req *r, const tm_msg *m, const char *verdict);
void tm_notification_trace(tidemark_server_t *srv, tm_req *r, const tm_msg *m, const char *session,
                           const char *version);
/* A request that is no call (initialize): its SERVER span and duration. */
typedef struct tm_msg_trace {
    tidemark_server_t *srv;
    const tm_msg *m;
    tm_span *span;
    int64_t t0_us;
} tm_msg_trace;
void tm_msg_trace_start(tm_msg_trace *t, tidemark_server_t *srv, tm_req *r, const tm_msg *m);
void tm_msg_trace_end(tm_msg_trace *t, const json_t *response, const tm_sess *sess);
/* A session's end (DELETE, expiry): mcp.server.session.duration. */
void tm_sess_observe_end(tidemark_server_t *srv, const tm_sess *s);

/* What the request path learned about one MCP request before it went on:
 * its principal, and the request's session and cursor (the tm_req's own
 * strings, valid until it is answered). */
typedef struct tm_reqctx {
    char principal[TM_PRINCIPAL_MAX];
    const char *sid;       /* Mcp-Session-Id, or NULL */
    const char *last_event_id; /* Last-Event-ID (GET), or NULL */
    int on_worker;         /* the request goes on on a worker thread */
} tm_reqctx;

extern const char *const tm_log_levels[8];
int tm_log_level_index(const char *name);

/* session.c */
/* The member of a session's stored client JSON that names the address it
 * was made from: a session initialize made over HTTP (the ones counted
 * against the session limits; absent in sessions made before them). */
#define TM_CLIENT_ADDRESS "address"
/* Idle sessions kept loaded; past it the janitor lets the least recently
 * used go (they are read back from the store when a request names them). */
#define TM_SESS_CACHE_MAX 1024
/* The session counts (srv->bound): made at tidemark_server_new, filled
 * from the store at start (tm_sess_bound_load), freed with the server. */
int tm_sess_bound_new(tidemark_server_t *srv);
int tm_sess_bound_load(tidemark_server_t *srv);
void tm_sess_bound_free(tidemark_server_t *srv);
/* Take a place for session id made from addr (NULL: not over HTTP, counted
 * in all only): 0, or 429 (the address is at --max-sessions-per-address)
 * or 503 (at --max-sessions) with nothing taken. */
int tm_sess_bound_admit(tidemark_server_t *srv, const char *addr, const char *id);
/* Give session id's place back (deleted, expired, not created); a no-op
 * for an id not counted. */
void tm_sess_bound_drop(tidemark_server_t *srv, const char *id);
/* Let idle loaded sessions go down to TM_SESS_CACHE_MAX (the janitor). */
void tm_sess_evict_idle(tidemark_server_t *srv);
tm_sess *tm_sess_new(const char *id, const char *version, json_t *client);
tm_sess *tm_sess_ref(tm_sess *s);
void tm_sess_unref(tm_sess *s);
/* Find a live session, loading it from the store after a restart. New ref. */
tm_sess *tm_sess_find(tidemark_server_t *srv, const char *id);
/* A lone call's request record, read with its session where nodes share
 * the store (one round trip; answer_repeat reads it instead of asking the
 * store again). rc: 1 not read; else what tm_store_request_get returned
 * (0: rec filled). gone: the session's calls_gone before the read; once it
 * has moved, a call of the session may have settled since, and the record
 * read may be stale. */
typedef struct tm_req_prefetch {
    int rc;
    unsigned gone;
    tm_request_rec rec;
} tm_req_prefetch;
#define TM_REQ_PREFETCH_INIT {.rc = 1}
void tm_req_prefetch_clear(tm_req_prefetch *pf);
/* tm_sess_find, reading key's request record into pf (key, pf may be NULL). */
tm_sess *tm_sess_find_prefetch(tidemark_server_t *srv, const char *id, const char *key,
                               tm_req_prefetch *pf);
/* Out of the session's calls (s->mu held). */
void tm_sess_calls_del(tm_sess *s, const char *key);
/* A call of s settled that was in no calls map (a late begin's): records
 * read before now may be stale (tm_req_prefetch.gone). */
void tm_sess_call_settled(tm_sess *s);
/* The session's record keys, kept from now on (a new session, one node). */
void tm_sess_know_records(tm_sess *s);
/* key gets a request record (called before it is begun). */
void tm_sess_note_record(tm_sess *s, const char *key);
/* 1 when key surely has no request record (no store lookup needed). */
int tm_sess_surely_unrecorded(tm_sess *s, const char *key);
int tm_sess_client_has(const tm_sess *s, const char *capability);
/* Append a message to a stream of the session. msg is borrowed. */
int tm_sess_append(tidemark_server_t *srv, tm_sess *s, const char *stream, json_t *msg,
                   unsigned flags);
/* Append a message to a stream of the session with that id. msg is borrowed. */
int tm_session_append(tidemark_server_t *srv, const char *id, const char *stream, json_t *msg,
                      unsigned flags);
/* The same with the message already written out as JSON text. */
int tm_session_append_bytes(tidemark_server_t *srv, const char *id, const char *stream,
                            const char *bytes, size_t len, unsigned flags);
/* Session attributes kept in the store, so every node (and a restarted
 * server) sees them: "log_level" ("info"...), "get" (true once the standalone
 * stream was opened), "sub:<uri>" (true while subscribed). Sets one, value
 * JSON text or NULL to remove; returns once durable. */
int tm_sess_set_attr(tidemark_server_t *srv, tm_sess *s, const char *name, const char *value);
/* Take the stored attributes (JSON object text, or NULL) into s. */
void tm_sess_apply_attrs(tm_sess *s, const char *attrs);
/* Mark deleted, cancel calls, wake waiters. */
void tm_sess_close(tm_sess *s);
/* Route a client's response to a waiting server->client request: here, or
 * over the store's bus to the node where it waits. */
void tm_sess_deliver_response(tidemark_server_t *srv, tm_sess *s, const tm_msg *m);
/* The store's bus listener (tm_store_options.bus): responses forwarded
 * by other nodes. ud: the server. */
void tm_sess_on_bus(void *ud, const char *channel, const void *data, size_t len);
/* Cancel an in-flight call by its request id. */
void tm_sess_cancel(tm_sess *s, json_t *request_id);

/* endpoint.c: a request an adapter parsed (http.c, stdio.c) goes to its
 * method's handler; the typed answers the handlers share (body stolen;
 * extra stolen, merged into data). */
void tm_handle_request(tidemark_server_t *srv, tm_req *r);
void tm_reply_json(tm_req *r, unsigned status, json_t *body);
void tm_reply_error(tm_req *r, unsigned status, int code, const char *reason,
                    const char *message, json_t *extra);
/* 503 store_unavailable (writes refused, temporary) or 500 store_error. */
void tm_reply_store_error(tm_req *r, int rc);
/* An unsupported MCP-Protocol-Version header: answered 400, returns 1. */
int tm_refuse_version(tm_req *r);
/* The request's session (new ref), or NULL after answering 400/404: a
 * session of another principal is answered 404 as one that does not exist. */
tm_sess *tm_require_session(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx);
/* The same, reading key's request record with it (tm_sess_find_prefetch). */
tm_sess *tm_require_session_prefetch(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                                     const char *key, tm_req_prefetch *pf);
/* endpoint.c: the authorization gate. Called on the I/O thread once the
 * request's JSON-RPC messages are known (msgs NULL, n 0: GET, DELETE): the
 * headers cont needs are copied into a tm_reqctx, then, with authorization
 * on, the token is checked on a worker (a check may wait for the issuer)
 * and cont(srv, r, ctx, ud) runs there with the principal, or the request
 * is answered 401 / 403 / 503; without it, cont runs at once as "anon". ud
 * is handed over: free_ud(ud) runs when cont does not. */
typedef void (*tm_gate_fn)(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx,
                           void *ud);
void tm_gate(tidemark_server_t *srv, tm_req *r, const tm_msg *msgs, size_t n,
             tm_gate_fn cont, void *ud, void (*free_ud)(void *));
/* A short tag for a session id in logs (the id itself is never logged at
 * info level or above: it names the session to whoever reads it). */
const char *tm_sid_tag(const char *sid, char out[16]);
#define TM_SID(sid) tm_sid_tag((sid), (char[16]){0})
/* http.c: the HTTP adapter. start: the transport opened, listening, its
 * streams the server's hub; free: after the store closed. */
int tm_http_adapter_start(tidemark_server_t *srv);
unsigned tm_http_adapter_port(const tidemark_server_t *srv);
void tm_http_adapter_free(tidemark_server_t *srv);
/* server.c: tidemark_server_start, with the HTTP adapter or without it
 * (stdio: the caller set srv->hub to its own first). */
int tm_server_start(tidemark_server_t *srv, int with_http);
/* post.c, get.c, endpoint.c: the three methods of the MCP endpoint. */
void tm_handle_post(tidemark_server_t *srv, tm_req *r);
void tm_handle_get(tidemark_server_t *srv, tm_req *r);
void tm_handle_delete(tidemark_server_t *srv, tm_req *r);
/* post.c: m is a tools/call request. */
int tm_is_call(const tm_msg *m);
/* post.c: the JSON-RPC code of an invalid message's error. */
int tm_invalid_code(const tm_msg *m);

/* job.c: a call of job ended with response (stolen, may be NULL);
 * call (may be NULL) contributes its request record and effect. */
void tm_job_complete(tm_job *j, json_t *response, tidemark_call_t *call);
/* The TIDEMARK_TOOL_* hints of the tool a tools/call names (0: none such). */
unsigned tm_call_tool_hints(tidemark_server_t *srv, const tm_msg *m);
/* A tool whose calls have nothing to make durable unless they send
 * something: non-blocking, read-only, idempotent (2025 quiet calls, post.c;
 * 2026-07-28 light calls, modern.c). */
static inline int tm_tool_quiet(unsigned hints)
{
    const unsigned need =
        TIDEMARK_TOOL_NONBLOCKING | TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT;
    return (hints & need) == need;
}
/* A zeroed job / call, but for their key buffers, which are left empty
 * strings (a calloc zeroed ~12 KB per call). NULL when out of memory. */
tm_job *tm_job_alloc(void);
tidemark_call_t *tm_call_alloc(void);
/* job.c: free a job whose calls all completed (tm_job_complete does). */
void tm_job_free(tm_job *j);
/* job.c: method runs an application handler (may block: scheduled fairly). */
int tm_runs_handler(const char *method);
/* janitor.c: the background threads (recoverer always, janitor with a
 * session TTL); stop joins them. */
void tm_background_start(tidemark_server_t *srv);
void tm_background_stop(tidemark_server_t *srv);
/* recovery.c: finish the requests a dead process left started. */
int tm_recover(tidemark_server_t *srv);
/* recovery.c: the response of call c could not be made durable (status):
 * its record stays "started"; the client's stream gets a typed store_failed
 * error without an id, and tm_recover_failed finishes the record later. */
void tm_call_write_failed(tidemark_call_t *c, int status);
/* recovery.c: the record of a call of session sid (request key key) was
 * not confirmed (its commit failed, or its outcome is unknown) and the call
 * will not run: the record may still exist "started", with nothing running
 * it. Noted like a failed write: its retries are answered store_failed, and
 * tm_recover_failed finishes it if it exists. */
void tm_call_begin_failed(tidemark_server_t *srv, const char *sid, const char *key);
/* 1 while such a call of session sid with request key key is unfinished. */
int tm_call_write_pending(tidemark_server_t *srv, const char *sid, const char *key);
/* Once the store takes writes again, finish those calls as after a crash
 * (re-run atomic and idempotent tools, else outcome_unknown). */
void tm_recover_failed(tidemark_server_t *srv);
/* Free a call (after its job completion). */
void tm_call_free(tidemark_call_t *c);
/* An inline call's handler said TIDEMARK_EAGAIN before doing anything:
 * forget what the run left (effect, input rounds) and mark it for a
 * worker (dispatch.c; run_call re-submits it). */
void tm_call_unrun(tidemark_call_t *c);
/* Queue a call on the worker pool. */
int tm_call_submit(tidemark_server_t *srv, tidemark_call_t *c);

/* post.c: run the requests of pm for sess (reference handed over); modern:
 * one 2026-07-28 request. */
void post_msgs_free(post_msgs *pm);
#define TM_POST_MODERN 1u    /* a 2026-07-28 request */
#define TM_POST_EPHEMERAL 2u /* its store session goes once it is answered */
#define TM_POST_LIGHT 4u     /* a call with nothing to make durable: JSON, no stream or record */
#define TM_POST_POOLED 8u    /* its store session is shared (modern.c): a record key of its own */
#define TM_POST_QUIET 16u    /* 2025: JSON unless the call's one tool needs its stream (post.c) */
/* Whether job j has the TM_POST_* flag f. */
static inline int tm_job_is(const tm_job *j, unsigned f) { return (j->flags & f) != 0; }
void tm_post_submit(tidemark_server_t *srv, tm_req *r, tm_sess *sess, post_msgs *pm,
                    unsigned flags);
/* modern.c: the checks of a POST of the 2026-07-28 era that look nothing
 * up (pm parsed and classified; on the I/O thread, headers read): 1 when
 * answered, else 0 (then tm_modern_route, past the authorization gate). */
int tm_modern_post(tidemark_server_t *srv, tm_req *r, post_msgs *pm);
/* modern.c: its checks done and its principal known (ctx), the request
 * goes on (pm's messages taken). */
void tm_modern_route(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, post_msgs *pm);
/* modern.c: GET or DELETE carrying the 2026-07-28 header: answered 405, 1. */
int tm_modern_refuse_method(tm_req *r);
/* modern_answer.c: complete a modern result: resultType, serverInfo in _meta, the
 * caching hints of cacheable methods. resp is a response (in place). */
void tm_modern_decorate(tidemark_server_t *srv, const char *method, json_t *resp);
/* modern_answer.c: the HTTP status of a modern response. */
unsigned tm_modern_status(const json_t *resp);
/* modern_answer.c: a modern call's first notification: attach its POST to the stream. */
void tm_modern_attach(tm_job *j);
/* modern_answer.c: a modern call's job ended before it was attached: answer the
 * POST with resp (borrowed) once durable, delete an ephemeral session. */
void tm_modern_answer(tm_job *j, const json_t *resp);
/* A job in a pooled store session ended (tm_job_free). */
void tm_modern_pool_done(tidemark_server_t *srv, const char *id);
/* The janitor: touch the pooled store sessions with calls in them. */
void tm_modern_pool_touch(tidemark_server_t *srv, int64_t now_ms);
/* A 2026-07-28 call's POST r answered once its response committed (status
 * 0: with body, else the store's error), from the append's callback; then
 * its ephemeral session doomed and the session let go (as tm_modern_answer). */
void tm_modern_answer_durable(tidemark_server_t *srv, tm_sess *sess, tm_req *r,
                              int ephemeral, int status, unsigned http_status, const char *body,
                              size_t len);
/* modern.c: a modern call's stream or record could not be begun (rc):
 * TIDEMARK_EEXIST (its key's first request began on another node) waits
 * for that one's result, else the store error; nothing runs. */
void tm_modern_setup_failed(tidemark_server_t *srv, tm_req *r, tm_sess *sess,
                            const tm_msg *m, int ephemeral, int rc);
/* modern_answer.c: delete the store session id a little later (its last commit's
 * bookkeeping done first); tm_modern_reap deletes those due (all: every
 * one, at stop), from the recoverer thread. */
void tm_modern_doom(tidemark_server_t *srv, const char *id);
void tm_modern_reap(tidemark_server_t *srv, int all);
/* modern_answer.c: a new store session id (0, or TIDEMARK_EIO); a store
 * session made for a call or listener (marked modern: a 2025 request naming
 * it gets 404), queued or waited for; the principal's pooled session for a
 * key-less call (OUT sid; 0, or the store's error). */
int tm_modern_sid_new(char id[TM_SESSION_ID_LEN + 1]);
int tm_modern_session_store(tidemark_server_t *srv, const char *id, const json_t *client,
                            int queued);
int tm_modern_pool_take(tidemark_server_t *srv, const char *principal, const json_t *client,
                        char sid[TM_SESSION_ID_LEN + 1]);
/* modern_answer.c: a call's or listener's session kept in srv->sessions
 * while it runs (the janitor never expires it under it), let go at its end;
 * its stream attached to r (the session released and, for a listener or an
 * answered ephemeral call, doomed when the connection ends). */
void tm_modern_hold(tidemark_server_t *srv, tm_sess *s);
void tm_modern_release(tidemark_server_t *srv, tm_sess *s);
int tm_modern_attach_stream(tidemark_server_t *srv, tm_req *r, tm_sess *sess, const char *stream,
                            int ephemeral, int listener);
/* modern_answer.c: a list_changed / resource update for a listener session
 * (attrs parsed): 1 and *msg (new) when it listens to it. */
int tm_modern_listener_msg(const json_t *attrs, const char *method, const json_t *params,
                           json_t **msg);
/* mrtr.c: before a modern tools/call, prompts/get or resources/read runs:
 * open params.requestState and gather the answers. NULL, or the error. */
json_t *tm_mrtr_begin(tidemark_call_t *c);
/* mrtr.c: after its handler returned: the InputRequiredResult response when
 * it asked for input that is not answered (new), else NULL. */
json_t *tm_mrtr_end(tidemark_call_t *c);
/* mrtr.c: a handler failed after needing a capability the client did not
 * declare: the -32021 error (new), else NULL. */
json_t *tm_mrtr_missing_capability(tidemark_call_t *c);
/* mrtr.c: tidemark_call_input in a modern call. */
int tm_mrtr_input(tidemark_call_t *c, const char *key, const char *method, json_t *params,
                  json_t **result);

/* dispatch.c: run one request; returns the response (new ref) or NULL when
 * no response must be sent (cancelled). */
json_t *tm_dispatch(tidemark_call_t *call);
/* initialize: creates the session, owned by principal, made from addr
 * (the client's address; NULL: not over HTTP). OUT sess on success. */
json_t *tm_dispatch_initialize(tidemark_server_t *srv, const tm_msg *m, const char *principal,
                               const char *addr, tm_sess **sess);
/* The HTTP status of initialize's answer resp when it refused a session
 * over a limit (429 per address, 503 in all), else 0. */
int tm_session_limit_status(const json_t *resp);

#endif
