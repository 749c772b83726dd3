/*
 * client.h - the MCP client of libtidemark (Streamable HTTP, libcurl).
 *
 * One client is one session with one server. Requests may be issued from
 * many threads at once; all HTTP runs on the client's own I/O thread (curl
 * multi). Every event that arrives on a stream goes through the resumption
 * validator and is dispatched to the application exactly once according to
 * the persistence mode, with the stream cursor saved in durable client state
 * (SQLite) so a killed client resumes where it was. A stream the validator
 * cannot prove continuous is refused with a typed reason (resumption_gap,
 * replay_not_monotonic, duplicate_effect, dispatch_log_inconsistent,
 * stream_mismatch, continuity_lost, malformed_event, malformed_event_id,
 * held_back_overflow, continuity_unprovable), never resumed silently.
 *
 * Return values: every function returns 0 or a negative TIDEMARK_E* code,
 * except tidemark_client_stop and tidemark_client_free, which cannot fail
 * (void). Typed errors come as JSON objects {code, message, data:{reason}}
 * through the function's OUT parameter where it has one.
 *
 * Threads:
 *  - tidemark_client_new and tidemark_client_connect come first, from one
 *    thread; tidemark_client_free comes last, once every other call has
 *    returned.
 *  - Everything in between is thread-safe and may be called from any
 *    number of threads at once: requests, call_tool, list, notify, resume,
 *    listen, wait_standalone, session, protocol_version, server_info,
 *    state, query, end_session, stop.
 *  - tidemark_client_stop may be called from any thread, but not from a
 *    signal handler (it takes a lock): have a thread sigwait() and call it.
 *  - No application callback ever runs on the client's I/O thread. Each
 *    stream is read by the thread that drives it, and that thread runs the
 *    callbacks of its events: the caller of tidemark_client_request,
 *    call_tool, list or resume (for the streams of its own requests), the
 *    caller of tidemark_client_listen, or, with open_standalone, the
 *    client's own listener thread (for the standalone stream). So the
 *    events of one stream reach on_event one at a time, in order, exactly
 *    once; events of different streams may reach it at the same time on
 *    different threads. on_request runs on one of the client's two worker
 *    threads. Which thread runs each callback is said at its type below.
 *
 * JSON values are jansson's json_t. Who frees what follows tidemark.h's
 * rules ("Who frees what"): results handed out (OUT json_t **) are new
 * references the caller decrefs, also on failure when one was set; json_t
 * arguments are borrowed; strings the library hands out are freed with
 * tidemark_free; the config's strings and JSON values are copied.
 */
#ifndef TIDEMARK_CLIENT_H
#define TIDEMARK_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "tidemark/tidemark.h"
#include "tidemark/txn.h" /* tidemark_txn_t, tidemark_txn_insert, tidemark_txn_exec */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tidemark_client tidemark_client_t;

/* How the cursor is saved relative to the application's effect. */
typedef enum tidemark_persist {
    TIDEMARK_PERSIST_ATOMIC = 0,            /* effect + dispatch row + cursor in one transaction */
    TIDEMARK_PERSIST_CURSOR_AFTER_DISPATCH, /* effect, then cursor: a crash between duplicates */
    TIDEMARK_PERSIST_CURSOR_BEFORE_DISPATCH /* cursor, then effect: a crash between skips */
} tidemark_persist_t;

/* An event of a stream, as dispatched (filled by the library, read by the
 * application). Only events with an id are dispatched (an id-less message
 * of a stream that never had ids is handled but cannot be logged); an event
 * whose data is not a JSON-RPC message is refused (malformed_event), never
 * logged as dispatched. */
typedef struct tidemark_event {
    const char *id;       /* the SSE id */
    const char *stream;   /* our stream name ("g", "r3") or "" for foreign ids */
    uint64_t seq;         /* 0 for foreign ids */
    json_t *message;      /* the JSON-RPC message (borrowed); NULL for an event with
                             empty data (a priming event): nothing to apply */
} tidemark_event_t;

/*
 * Called once per event, in order. In atomic mode txn is the client-state
 * transaction that also saves the dispatch row and the cursor: write the
 * effect with tidemark_txn_exec() or tidemark_txn_insert(). In the other
 * modes txn commits the effect and the dispatch row only. Return 0, or a
 * negative code to stop (the request fails with dispatch_failed and the
 * event is not logged).
 *
 * Thread: the one that drives the stream (see "Threads" above), never the
 * I/O thread. It runs inside the state's transaction, holding its lock: it
 * must not call the client (that would wait for the lock it holds).
 */
typedef int (*tidemark_event_fn)(tidemark_txn_t *txn, const tidemark_event_t *ev, void *ud);
/* Progress of a running request (progressToken = the request's id).
 * Thread: the caller of the request, inside tidemark_client_request (or
 * call_tool), after the event that carried it was applied. It may call
 * the client. total is -1 when the server sent none. */
typedef void (*tidemark_progress_fn)(double progress, double total, const char *message, void *ud);
/*
 * A request from the server (sampling/createMessage, elicitation/create,
 * roots/list, ping is answered internally). Store a result object in *result
 * and return 0, or return a negative code (answered as a JSON-RPC error).
 * Thread: one of the client's two worker threads; it may block (the
 * stream it came on goes on meanwhile) and may call the client.
 */
typedef int (*tidemark_server_request_fn)(const char *method, json_t *params, json_t **result,
                                          void *ud);
/* A notification (progress included), after its event was applied.
 * Thread: the one that drives the stream it came on, as for on_event, but
 * outside the state's transaction: it may call the client. message is
 * borrowed. */
typedef void (*tidemark_notification_fn)(json_t *message, void *ud);

/*
 * The person's part of the authorization code grant: show (or open)
 * authorization_url, and when the authorization server redirected to
 * redirect_uri, store that whole URL (with its query: code, state, iss)
 * into *callback_url, made with tidemark_strdup() (the library frees it;
 * a URL tidemark_loopback_wait handed out may be passed on as is), and
 * return 0; a negative code gives up. Thread: the one whose request met the 401 (never
 * the I/O thread). tidemark_authorize_follow is one for servers that
 * redirect at once (tests); tidemark_loopback_wait one for a browser.
 */
typedef int (*tidemark_authorize_fn)(const char *authorization_url, const char *redirect_uri,
                                     char **callback_url, void *ud);

/* What to do when a stream whose event ids are not Tidemark ids (a foreign
 * server: continuity cannot be proven) is cut in the middle of a request.
 * Either way a stream once proven by Tidemark ids is never continued by
 * opaque ids (continuity_lost), and a tools/call cut before any event is
 * re-sent only when that cannot repeat it: the server never received it, it
 * carries an idempotency key, the tool is annotated idempotent or read-only,
 * or the session's ids proved a Tidemark server (which keys its call
 * records by request id). Otherwise it fails with continuity_unprovable
 * before anything is re-sent. */
typedef enum tidemark_opaque_policy {
    TIDEMARK_OPAQUE_SAFE_ONLY = 0, /* resume only requests safe to see twice: not tools/call,
                                      or tools annotated idempotent/read-only; otherwise end
                                      the session with continuity_unprovable (default) */
    TIDEMARK_OPAQUE_RESUME = 1,    /* always resume with Last-Event-ID, deduplicating by event id */
} tidemark_opaque_policy_t;

/* Which protocol era the client speaks. Modern is 2026-07-28: no session,
 * every request carries its own _meta (protocol version, client info and
 * capabilities) and the standard headers; server requests come embedded in
 * InputRequiredResult (answered with on_request and the request re-sent);
 * change notifications come on a subscriptions/listen stream. Legacy is
 * 2025-11-25 and earlier: initialize, a session, the GET stream. */
typedef enum tidemark_protocol_mode {
    TIDEMARK_PROTOCOL_AUTO = 0,   /* server/discover first; legacy when the server's answer
                                     carries no modern error (default) */
    TIDEMARK_PROTOCOL_MODERN = 1, /* modern only: a legacy server is modern_unsupported */
    TIDEMARK_PROTOCOL_LEGACY = 2, /* initialize and a session, as before 2026-07-28 */
} tidemark_protocol_mode_t;

/* The modern protocol version this client speaks. */
#define TIDEMARK_CLIENT_MODERN_VERSION "2026-07-28"
/* Default bound of InputRequiredResult rounds per request. */
#define TIDEMARK_CLIENT_MAX_INPUT_ROUNDS 16

/* Defaults of the reconnection and hold-back bounds (the table below). */
#define TIDEMARK_CLIENT_RETRY_MIN_MS 50
#define TIDEMARK_CLIENT_RETRY_MAX_MS 30000
#define TIDEMARK_CLIENT_MAX_HELD_BYTES 8388608 /* 8 MiB */

/* Filled by the caller: start from tidemark_client_config_init(), which
 * gives every field the default its comment names, from the one table
 * below (TIDEMARK_CLIENT_DEFAULTS); a zero a field's comment does not give
 * a meaning of its own also means that default. Durations are int64_t
 * milliseconds; a negative one (but timeout_ms's) or one above UINT32_MAX
 * is refused with TIDEMARK_EINVAL. The client keeps copies of the strings
 * and JSON values it points to; schema is used once, by
 * tidemark_client_new.
 *
 * Layout rule of this growable struct (tidemark.h, "Structs a caller
 * fills"): no hole and no tail padding. 4-byte fields go in pairs; a new
 * field goes at the end, and a lone 4-byte one takes the place of
 * reserved0 or a reserved partner. A field's default is named in its own
 * trailing comment ("default N"), as the table below has it. */
typedef struct tidemark_client_config {
    const char *url;               /* the server endpoint, e.g. http://127.0.0.1:8080/mcp */
    const char *state_path;        /* SQLite file for durable state; NULL = in memory only */
    tidemark_persist_t persist;    /* default TIDEMARK_PERSIST_ATOMIC */
    tidemark_opaque_policy_t opaque_policy; /* default TIDEMARK_OPAQUE_SAFE_ONLY */
    int idempotent_handlers;       /* a replayed, already-dispatched event is suppressed
                                      instead of failing closed (duplicate_effect) */
    int open_standalone;           /* after connect, keep the standalone GET stream open on a
                                      thread of the client (server requests and notifications
                                      that belong to no request arrive there); legacy era only:
                                      modern has tidemark_client_subscribe */
    const char *name;              /* clientInfo.name; default "tidemark-client" */
    const char *version;           /* clientInfo.version; default TIDEMARK_VERSION */
    const char *protocol_version;  /* offered; default TIDEMARK_PROTOCOL_LATEST */
    unsigned max_attempts;         /* reconnect attempts in a row without progress (a new
                                      event accepted; pings and comments are not); default 8 */
    unsigned max_input_rounds;     /* modern: InputRequiredResult rounds answered per request
                                      before input_rounds_exceeded; default
                                      TIDEMARK_CLIENT_MAX_INPUT_ROUNDS */
    int64_t backoff_ms;            /* first backoff when the server sent no retry; default 250 */
    int64_t backoff_max_ms;        /* cap of the exponential backoff (full jitter); default 5000 */
    int64_t retry_min_ms;          /* a server's retry: is clamped to [retry_min_ms,
                                      retry_max_ms]; default TIDEMARK_CLIENT_RETRY_MIN_MS */
    int64_t retry_max_ms;          /* default TIDEMARK_CLIENT_RETRY_MAX_MS */
    size_t max_held_bytes;         /* events of an emit-early server held back until announced
                                      durable, at most this many bytes (event data plus a
                                      fixed per-event overhead); past it the stream is refused
                                      (held_back_overflow); default TIDEMARK_CLIENT_MAX_HELD_BYTES */
    int64_t timeout_ms;            /* per request, reconnect waits included; default 60000
                                      (0 or less: the default) */
    json_t *capabilities;          /* client capabilities (copied); default from callbacks */
    json_t *roots;                 /* array of {uri, name} answered to roots/list (copied) */
    const char *schema;            /* application DDL run in the state file at open (effect tables) */
    tidemark_event_fn on_event;    /* every stream event, exactly once; may be NULL */
    tidemark_server_request_fn on_request; /* sampling / elicitation; NULL = not supported */
    tidemark_notification_fn on_notification; /* notifications, after dispatch; may be NULL */
    void *ud;                      /* passed to on_event, on_request, on_notification */
    /* The 2026-07-28 protocol. */
    tidemark_protocol_mode_t protocol; /* which era to speak; default TIDEMARK_PROTOCOL_AUTO */
    int no_cache;                  /* modern: do not keep cacheable results (ttlMs) in memory */
    const char *log_level;         /* modern: _meta logLevel on every request (the server then
                                      sends notifications/message at that level); NULL = none */
    int tasks;                     /* modern: declare the extension on tools/call. A call
                                      the server answers with a task (CreateTaskResult) has
                                      the task id committed to the state first, then polls
                                      tasks/get at the task's pollIntervalMs (through cuts
                                      and server restarts, within timeout_ms), answers an
                                      input_required task's inputRequests (on_request, each
                                      key once, tasks/update) and returns the task's outcome
                                      as the call's. That outcome is dispatched once to
                                      on_event, as the event "task:<taskId>" (stream "",
                                      seq 0, message the call's JSON-RPC response), in one
                                      transaction with the end of the outstanding call,
                                      whatever the persistence mode. A killed client's
                                      tidemark_client_resume polls the same task. */
    int reserved0;                 /* must be 0 (a later 4-byte field takes its place) */
    /* Authorization (OAuth 2.1). A server that answers 401 (or 403
     * insufficient_scope) is authorized against: its Protected Resource
     * Metadata, its authorization server's metadata (the issuer checked), a
     * client registration (pre-registered, a Client ID Metadata Document,
     * or dynamic registration), then a token by the client credentials
     * grant or the authorization code grant with PKCE, and the request is
     * sent again with the token. Tokens and registrations are kept in the
     * state file by issuer. */
    const char *access_token;      /* a bearer token to send from the start (never logged) */
    const char *client_id;         /* a pre-registered client; NULL = register */
    const char *client_secret;     /* ... its secret (NULL: a public client) */
    const char *client_issuer;     /* the issuer the pre-registered client belongs to (NULL:
                                      whichever the server names) */
    const char *client_metadata_url; /* the https URL of this client's metadata document,
                                      used as client_id where the server supports it */
    const char *redirect_uri;      /* the authorization code grant's redirect URI (e.g. that
                                      of tidemark_loopback_open); NULL = no such grant */
    int client_credentials;        /* get tokens by the client credentials grant (needs
                                      client_id and client_secret) */
    unsigned max_step_up;          /* re-authorizations for more scope per request (403
                                      insufficient_scope); default 2; 0 = none */
    tidemark_authorize_fn on_authorize; /* show the authorization URL, OUT the redirect */
    void *authorize_ud;            /* passed to on_authorize */
    const char *ca_file;           /* PEM file of the CAs https servers (the MCP server and
                                      authorization servers) are verified against; NULL:
                                      the system's. Verification is always on. */
} tidemark_client_config_t;

/*
 * The defaults of tidemark_client_config_t, one table: X(field, value) for
 * every field whose default is not zero or NULL. tidemark_client_config_init
 * is made from it, and so are the "(default ...)" of tidemark-client --help;
 * a test (tests/unit/test_api.c) checks that the comments above name the
 * same values.
 */
#define TIDEMARK_CLIENT_DEFAULTS(X)                                                          \
    X(name, "tidemark-client")                                                               \
    X(version, TIDEMARK_VERSION)                                                             \
    X(protocol_version, TIDEMARK_PROTOCOL_LATEST)                                            \
    X(max_attempts, 8)                                                                       \
    X(max_input_rounds, TIDEMARK_CLIENT_MAX_INPUT_ROUNDS)                                    \
    X(backoff_ms, 250)                                                                       \
    X(backoff_max_ms, 5000)                                                                  \
    X(retry_min_ms, TIDEMARK_CLIENT_RETRY_MIN_MS)                                            \
    X(retry_max_ms, TIDEMARK_CLIENT_RETRY_MAX_MS)                                            \
    X(max_held_bytes, TIDEMARK_CLIENT_MAX_HELD_BYTES)                                        \
    X(timeout_ms, 60000)                                                                     \
    X(max_step_up, 2)

/* Fill a config with the defaults. Returns 0, or TIDEMARK_EINVAL for a
 * NULL cfg. */
TIDEMARK_API int tidemark_client_config_init_sized(tidemark_client_config_t *cfg, size_t size);
#define tidemark_client_config_init(cfg) tidemark_client_config_init_sized((cfg), sizeof *(cfg))
/* Create a client; opens its state and starts its I/O thread. OUT client
 * (tidemark_client_free). TIDEMARK_EINVAL without a url; TIDEMARK_ENOTSUP
 * for a config with a setting this library does not know; TIDEMARK_EIO
 * when the state file cannot be opened. */
TIDEMARK_API int tidemark_client_new_sized(const tidemark_client_config_t *cfg, size_t size,
                                           tidemark_client_t **client);
#define tidemark_client_new(cfg, client) \
    tidemark_client_new_sized((cfg), sizeof *(cfg), (client))
/*
 * Start: reuse what the state file holds for this URL (a legacy session, or
 * the modern era; its outstanding requests are then for
 * tidemark_client_resume), or find the era out (cfg.protocol AUTO:
 * server/discover first, initialize when the server speaks no 2026-07-28)
 * and start it. OUT err (optional): a typed error object on failure.
 * Reasons include cannot_connect (nothing answers at the URL: data.error
 * says why, e.g. "Connection refused"), no_endpoint (the URL answers 404 to
 * initialize), timeout, unsupported_protocol_version, no_common_version (the
 * server serves no version this client speaks: data.supported),
 * modern_unsupported (protocol MODERN, legacy server), state_error.
 */
TIDEMARK_API int tidemark_client_connect(tidemark_client_t *c, json_t **err);
/* The session id, copied into buf (size bytes, NUL included).
 * TIDEMARK_ENOTFOUND when there is none (before connect, after
 * end_session), TIDEMARK_ERANGE when it does not fit (buf holds ""). */
TIDEMARK_API int tidemark_client_session(tidemark_client_t *c, char *buf, size_t size);
/* The negotiated protocol version, copied like the session id. */
TIDEMARK_API int tidemark_client_protocol_version(tidemark_client_t *c, char *buf, size_t size);
/* OUT info: a copy of the server's initialize result (caller decrefs).
 * TIDEMARK_ENOTFOUND before connect. */
TIDEMARK_API int tidemark_client_server_info(tidemark_client_t *c, json_t **info);

/*
 * Send a request (params borrowed, may be NULL) and wait for its response,
 * on the calling thread (which runs the callbacks of the request's stream). OUT result: the result
 * object, or on TIDEMARK_EPEER the JSON-RPC error object; on other
 * failures a typed error {code, message, data:{reason}} when one is known
 * (cannot_connect, no_endpoint, session_lost, timeout, client_stopped,
 * reconnect_exhausted, state_error, or a refusal of the validator).
 * Modern era: an InputRequiredResult is answered (on_request, roots, on
 * this thread) and the request sent again under a new id until it
 * completes: malformed_input_required, input_request_unsupported,
 * input_rounds_exceeded (TIDEMARK_EPROTO) when that cannot go on; a tool
 * whose x-mcp-header annotations are invalid is invalid_tool_definition,
 * never sent; a cacheable result may come from the cache (its ttlMs).
 */
TIDEMARK_API int tidemark_client_request(tidemark_client_t *c, const char *method, json_t *params,
                                         tidemark_progress_fn progress, void *progress_ud,
                                         json_t **result);
/* tools/call with arguments (borrowed, may be NULL). */
TIDEMARK_API int tidemark_client_call_tool(tidemark_client_t *c, const char *name, json_t *args,
                                           tidemark_progress_fn progress, void *ud,
                                           json_t **result);
/* Collect every page of a list method ("tools/list", ...): OUT items
 * array, or on failure the error as for tidemark_client_request. */
TIDEMARK_API int tidemark_client_list(tidemark_client_t *c, const char *method, const char *field,
                                      json_t **items);
/*
 * After a crash (or a stop, a timeout, a refusal): resume every request the
 * state file says is outstanding, each from its stream's cursor (or re-sent,
 * under the re-send rules above, when no event of it was ever received),
 * until each has its answer. A request leaves the state only with a final
 * outcome: its response, a lost session, or continuity_unprovable. OUT
 * results: array of {id, result} / {id, error}. The return value is 0 when
 * every request was tried (their own outcomes are in results).
 */
TIDEMARK_API int tidemark_client_resume(tidemark_client_t *c, json_t **results);
/* Ask the server to cancel task task_id (tasks/cancel; cancellation is
 * cooperative: the task may still end otherwise, and a call following it
 * returns whatever it ends with, task_cancelled when cancelled). OUT err
 * (optional): the server's error. TIDEMARK_EINVAL for an unusable id. */
TIDEMARK_API int tidemark_client_cancel_task(tidemark_client_t *c, const char *task_id,
                                             json_t **err);
/* Send a notification (params borrowed, may be NULL). */
TIDEMARK_API int tidemark_client_notify(tidemark_client_t *c, const char *method, json_t *params);
/*
 * Open the standalone GET stream and deliver its events, on the calling
 * thread, until stop_after_ms passes (0 = until tidemark_client_stop) or
 * the stream ends for good. 0 when the time ran out.
 */
TIDEMARK_API int tidemark_client_listen(tidemark_client_t *c, int stop_after_ms);
/*
 * Modern: open a subscriptions/listen stream with filter (borrowed; NULL =
 * every list change: {toolsListChanged, promptsListChanged,
 * resourcesListChanged}; resourceSubscriptions: [URI...] for updates) and
 * deliver its notifications - the acknowledgement first - to
 * on_notification, on the calling thread, until stop_after_ms passes (0 =
 * until tidemark_client_stop) or the server ends it (its response). A cut
 * stream is opened again (a new request id) within the reconnect budget.
 * Legacy: the GET stream, as tidemark_client_listen (the filter is not
 * sent). 0 when the time ran out or the server ended it.
 */
TIDEMARK_API int tidemark_client_subscribe(tidemark_client_t *c, json_t *filter,
                                           int stop_after_ms);
/* Wait until the standalone GET stream has been requested on a connection
 * (servers may hold its headers until they have something to send), at
 * most timeout_ms. TIDEMARK_ETIMEDOUT otherwise. */
TIDEMARK_API int tidemark_client_wait_standalone(tidemark_client_t *c, int timeout_ms);
/* Make listen() and pending waits return, and every later wait at once
 * (requests then fail with client_stopped and stay resumable). Any thread;
 * not async-signal-safe. Cannot fail: void. */
TIDEMARK_API void tidemark_client_stop(tidemark_client_t *c);
/* End the session on the server (DELETE) and forget it, in the client and
 * in the state: the next request starts a new one.
 * TIDEMARK_ENOTFOUND without a session; TIDEMARK_EPEER when the server
 * refused the DELETE (the state forgets the session anyway). */
TIDEMARK_API int tidemark_client_end_session(tidemark_client_t *c);
/* Stop the I/O thread and free; NULL is fine. The session stays resumable
 * from the state. Cannot fail: void. */
TIDEMARK_API void tidemark_client_free(tidemark_client_t *c);

/* The durable state as JSON: OUT {session, proven, cursors, dispatch,
 * outstanding} (caller decrefs). For operators and tests. */
TIDEMARK_API int tidemark_client_state(tidemark_client_t *c, json_t **state);

/* Read the application's tables in the state file: OUT rows, an array of
 * objects (caller decrefs). */
TIDEMARK_API int tidemark_client_query(tidemark_client_t *c, const char *sql,
                                       const char *const *args, size_t nargs, json_t **rows);

/*
 * Authorization helpers.
 *
 * tidemark_authorize_follow: a tidemark_authorize_fn that requests the
 * authorization URL itself and takes the redirect it answers (Location):
 * for authorization servers that approve without a person. ud unused.
 *
 * A loopback redirect (RFC 8252): tidemark_loopback_open listens on
 * 127.0.0.1:port (0 = a free port) and writes its redirect URI
 * (http://127.0.0.1:PORT/callback) into uri; tidemark_loopback_wait waits
 * at most timeout_ms for the browser's request of it, answers it, and
 * OUT callback_url: the URL requested (free it with tidemark_free, or hand
 * it to the library as on_authorize's answer). TIDEMARK_ETIMEDOUT.
 * tidemark_authorize_follow's OUT callback_url is the same kind of string.
 * tidemark_loopback_close frees lb (NULL is fine).
 */
TIDEMARK_API int tidemark_authorize_follow(const char *authorization_url, const char *redirect_uri,
                                           char **callback_url, void *ud);
typedef struct tidemark_loopback tidemark_loopback_t;
TIDEMARK_API int tidemark_loopback_open(int port, tidemark_loopback_t **lb, char *uri,
                                        size_t size);
TIDEMARK_API int tidemark_loopback_wait(tidemark_loopback_t *lb, int timeout_ms,
                                        char **callback_url);
TIDEMARK_API void tidemark_loopback_close(tidemark_loopback_t *lb);

#ifdef __cplusplus
}
#endif
#endif
