/*
 * server.h - the MCP server of libtidemark (Streamable HTTP).
 *
 * Register tools, resources, prompts and completion, then start the server.
 * Handlers run on a worker pool and may block (sleep, wait for the client's
 * answer to a sampling request, ...) without stalling network I/O. Every
 * message a handler sends on a stream is appended to the event log first
 * and emitted only once durable (commit-then-emit).
 *
 * One endpoint serves both protocol eras, chosen per request: the 2025
 * versions (initialize, Mcp-Session-Id sessions) and 2026-07-28 (no session,
 * metadata in every request; docs/protocol.md "2026-07-28 (modern)"). The
 * same handlers serve both. In 2026-07-28 a handler that asks the client for
 * input (tidemark_call_input / tidemark_call_request) is run again from the
 * start once the input arrives, so it must make its effects on the atomic
 * path (tidemark_call_set_effect) or after its last input.
 *
 * JSON values are jansson's json_t. Who frees what follows tidemark.h's
 * rules ("Who frees what"): arguments passed to handlers are borrowed; a
 * handler's result is handed over (the library decrefs it); json_t
 * arguments of the functions below are borrowed, OUT json_t ** are new
 * references the caller decrefs; strings and structs passed in are copied
 * where kept.
 *
 * Return values: every function returning int returns 0 or a negative
 * TIDEMARK_E* code, except the two predicates that say so (1/0:
 * tidemark_call_cancelled, tidemark_call_client_has); accessors return
 * strings owned by the library, valid as their comment says; the result
 * helpers return a new reference, NULL only when out of memory.
 *
 * Threads: configure (add_tool, add_resource, ..., set_completion) before
 * tidemark_server_start or while it runs, from any one thread at a time;
 * add/remove while running is safe and sends list_changed.
 * tidemark_server_stop and tidemark_server_run are safe from any thread.
 * tidemark_server_resource_updated, tidemark_server_list_changed and
 * tidemark_server_rows are thread-safe. Handlers (tools, resources, prompts,
 * completion) run on the server's worker threads, never on an I/O thread,
 * and may block; several run at once (for one session at most
 * max_calls_per_session), so a handler's own data needs its own locking.
 * An effect function runs inside the store's commit (on its writer thread;
 * on the memory store, the thread appending the result, under the store's
 * lock): it must not block or call back into the server. The tidemark_call_*
 * functions are for the handler's own thread while it runs (cancelled:
 * from any thread).
 */
#ifndef TIDEMARK_SERVER_H
#define TIDEMARK_SERVER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "tidemark/tidemark.h"
#include "tidemark/txn.h" /* tidemark_txn_t, tidemark_txn_insert, tidemark_txn_exec */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tidemark_server tidemark_server_t;
typedef struct tidemark_call tidemark_call_t;

/* What a resume of a stale cursor yields (docs/protocol.md, "GET"). */
typedef enum tidemark_on_gap {
    TIDEMARK_ON_GAP_ERROR = 0, /* 400 resumption_gap */
    TIDEMARK_ON_GAP_EVENT = 1, /* "event: gap", then the retained events */
} tidemark_on_gap_t;

/* How durable an event must be before it is emitted (sqlite store). */
typedef enum tidemark_durability {
    TIDEMARK_DURABILITY_POWER = 0,   /* survives power loss: fsync every commit (default) */
    TIDEMARK_DURABILITY_PROCESS = 1, /* survives a killed process */
    TIDEMARK_DURABILITY_REPLICATED = 2, /* PostgreSQL: COMMIT returned on a primary that has a
                                           synchronous standby; writes are refused (503
                                           store_not_replicated) while it has none */
} tidemark_durability_t;

/*
 * The server's settings. Start from tidemark_server_config_init(): it gives
 * every field the default its comment names, from the one table below
 * (TIDEMARK_SERVER_DEFAULTS); a zero a field's comment does not give a
 * meaning of its own also means that default. Durations are int64_t
 * milliseconds (except the *_seconds fields, kept until 1.0: docs/design.md
 * "The public API and ABI"); a negative one, or one above UINT32_MAX, is
 * refused with TIDEMARK_EINVAL. The port is an int in [0, 65535].
 *
 * Layout rule of this growable struct (tidemark.h, "Structs a caller
 * fills"): no hole and no tail padding, so every byte a caller passes
 * belongs to a named field that an initializer zeroes. 4-byte fields go in
 * pairs; a new field goes at the end, and a lone 4-byte one takes a
 * reserved partner. The build asserts the size (src/base/abi.c) and make
 * test runs pahole over the library (tests/abi). A field's default is
 * named in its own trailing comment ("default N"), as the table below
 * has it.
 */
typedef struct tidemark_server_config {
    /* Where it listens, and what it keeps. */
    const char *host;            /* bind address; default "127.0.0.1" */
    const char *path;            /* endpoint; default "/mcp" */
    const char *store;           /* store URI: "sqlite:PATH", "redis://HOST:PORT[/DB]",
                                    "postgresql://..." or "memory"; default "memory" */
    int port;                    /* 0 (default) picks a free port (tidemark_server_port) */
    tidemark_durability_t durability; /* default TIDEMARK_DURABILITY_POWER */
    uint64_t retain_events;      /* per-stream retention by count; 0 = keep all */
    uint64_t retain_seconds;     /* per-stream retention by age; 0 = keep all */
    uint64_t session_ttl_seconds; /* idle sessions expire after this; default 86400
                                    (24 h: clients that never DELETE theirs must not
                                    grow the store for ever); 0 = never */
    int emit_early;              /* emit before durable, announce the durable head
                                    (docs/design.md, "Emit-then-reconcile"); default 0 */
    int accept_loss;             /* SQLite: start even when the database holds fewer commits
                                    than its head file (PATH.head) recorded as durable (a
                                    damaged WAL, an older copy put back); default 0: refuse */
    tidemark_on_gap_t on_gap;    /* default TIDEMARK_ON_GAP_ERROR */
    unsigned workers;            /* handler threads, started as needed; default 64 */
    unsigned io_threads;         /* HTTP polling threads; default 2 */
    unsigned page_size;          /* list page size; default 100 */
    int64_t retry_ms;            /* SSE "retry:" advertised; default 1000; 0 = none */
    int64_t keepalive_ms;        /* SSE keep-alive comment interval; default 15000 */
    size_t max_body;             /* request body limit in bytes; default 4194304 (4 MiB) */
    const char *const *allowed_origins; /* NULL-terminated; NULL = loopback origins only */
    const char *const *allowed_hosts;   /* NULL-terminated; NULL = loopback hosts only */
    const char *const *metrics_addresses; /* NULL-terminated client addresses (e.g.
                                    "10.0.0.5") whose GET /metrics skips the Host
                                    check (a scrape host); NULL = none */
    const char *metrics_token;   /* GET /metrics needs "Authorization: Bearer <this>"
                                    (NULL: no token; the Host check as before) */
    const char *name;            /* serverInfo.name; default "tidemark" */
    const char *version;         /* serverInfo.version; default TIDEMARK_VERSION */
    const char *instructions;    /* optional initialize instructions */
    /* Limits and fairness. What happens at each is in the README's
     * "Guarantees". */
    unsigned max_connections;    /* open HTTP connections in all; default 16384 */
    unsigned max_connections_per_address; /* from one source address; default 4096 */
    int64_t request_deadline_ms; /* a request's header and body must arrive within
                                    this of its first byte, else the connection is
                                    dropped; default 30000 */
    int64_t idle_timeout_ms;     /* a connection with no request in progress and no
                                    stream is closed after this; default 120000 */
    unsigned max_calls_per_session; /* handlers running at once for one session
                                       (more wait their turn); default 8 */
    unsigned max_calls_per_address; /* ... for one source address; default 32 */
    unsigned max_queued_per_session; /* calls waiting beyond that; more are refused
                                        with 429 too_many_requests; default 256 */
    unsigned max_batch;          /* messages in one JSON-RPC batch; default 64 */
    unsigned max_subscriptions;  /* resources/subscribe per session; default 256 */
    unsigned max_uri_length;     /* longest resource uri subscribed to; default 2048
                                    (at most 8192) */
    size_t max_header_bytes;     /* the request line and header fields of one request;
                                    default 8192 (at most 65536); past it a typed 431.
                                    Each connection's buffer is this plus 2 KiB, so it
                                    bounds the memory of every open stream */
    /* 2026-07-28 (docs/protocol.md, "2026-07-28 (modern)"). */
    int64_t cache_ttl_ms;        /* ttlMs of cacheable results (lists, reads, discover);
                                    default 0: clients re-fetch */
    const char *cache_scope;     /* their cacheScope: "private" or "public"; default
                                    "private" */
    int64_t request_state_ttl_ms; /* a sealed requestState opens this long; default
                                     600000 (10 min) */
    /* Authorization (docs/protocol.md, "Authorization"): with auth_resource
     * set, the server is an OAuth 2.1 resource server and every MCP request
     * needs "Authorization: Bearer <access token>" issued by auth_issuer for
     * auth_resource; what a request creates (sessions, request records,
     * idempotency keys, listeners, sealed requestState) belongs to the
     * token's principal (iss, sub). NULL auth_resource: no authorization,
     * one anonymous principal (any other auth_* field set without it is a
     * bad configuration). tidemark_server_new refuses a bad configuration
     * with TIDEMARK_EINVAL (the log says which field) and copies every
     * string of it. */
    const char *auth_resource;   /* this server's resource identifier, exactly as the
                                    issuer puts it in aud ("https://mcp.example.com/mcp") */
    const char *auth_issuer;     /* the authorization server (exact iss) */
    const char *auth_jwks_uri;   /* JWT access tokens, checked against this key set, */
    const char *auth_introspection_uri; /* or opaque tokens by RFC 7662 introspection */
    const char *auth_client_id;  /* introspection: this server's client credentials */
    const char *auth_client_secret;
    const char *auth_ca_file;    /* PEM CAs for an https issuer (NULL: the system's) */
    const char *auth_scopes_supported; /* space-separated, in the metadata document */
    const char *auth_scope_base; /* needed by every request (space-separated) */
    /* NULL-terminated rules "tool:NAME=SCOPES", "tool:*=SCOPES" (other tools),
     * "method:NAME=SCOPES"; and "BROAD=NARROW ..." (BROAD implies each NARROW). */
    const char *const *auth_scope_rules;
    const char *const *auth_scope_implies;
    const char *auth_algorithms; /* accepted JWS algs (NULL: RS/PS/ES 256-512, EdDSA) */
    const char *auth_resource_name; /* optional, in the metadata document */
    uint64_t auth_leeway_s;      /* exp/nbf leeway in seconds; default 30; UINT32_MAX
                                    or more: none */
    int64_t auth_timeout_ms;     /* one JWKS fetch or introspection; default 3000 */
    int64_t auth_jwks_min_refresh_ms; /* between two key set fetches; default 10000 */
    /* HTTPS (PEM files, read at start): cert and key both or neither; with
     * tls_client_ca_file every connection must present a client certificate
     * that CA signed (others get 403). */
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_client_ca_file;
    int64_t store_timeout_ms;    /* PostgreSQL store: a commit waits this long for the
                                    primary (and its synchronous standby), then fails as
                                    not acknowledged: 503 store_unavailable, nothing
                                    emitted; default 5000 */
    /* Sessions (2025 initialize) in the store at once: from one client address
     * (past it 429 too_many_sessions, Retry-After) and in all (past it 503);
     * a DELETE or the TTL gives a place back. Idle ones are not kept in
     * memory: the store holds them (README, "Guarantees"). */
    unsigned max_sessions;       /* in all; default 200000; 0 = no limit */
    unsigned max_sessions_per_address; /* made from one source address; default 4096;
                                          0 = no limit */
} tidemark_server_config_t;

/*
 * The defaults of tidemark_server_config_t, one table: X(field, value) for
 * every field whose default is not zero or NULL. tidemark_server_config_init
 * is made from it, and so are the "(default ...)" of tidemark-server --help;
 * a test (tests/unit/test_api.c) checks that the comments above name the
 * same values.
 */
#define TIDEMARK_SERVER_DEFAULTS(X)                                                          \
    X(host, "127.0.0.1")                                                                     \
    X(path, "/mcp")                                                                          \
    X(store, "memory")                                                                       \
    X(session_ttl_seconds, 86400)                                                            \
    X(workers, 64)                                                                           \
    X(io_threads, 2)                                                                         \
    X(page_size, 100)                                                                        \
    X(retry_ms, 1000)                                                                        \
    X(keepalive_ms, 15000)                                                                   \
    X(max_body, 4194304)                                                                     \
    X(name, "tidemark")                                                                      \
    X(version, TIDEMARK_VERSION)                                                             \
    X(max_connections, 16384)                                                                \
    X(max_connections_per_address, 4096)                                                     \
    X(request_deadline_ms, 30000)                                                            \
    X(idle_timeout_ms, 120000)                                                               \
    X(max_calls_per_session, 8)                                                              \
    X(max_calls_per_address, 32)                                                             \
    X(max_queued_per_session, 256)                                                           \
    X(max_batch, 64)                                                                         \
    X(max_subscriptions, 256)                                                                \
    X(max_uri_length, 2048)                                                                  \
    X(max_header_bytes, 8192)                                                                \
    X(cache_scope, "private")                                                                \
    X(request_state_ttl_ms, 600000)                                                          \
    X(auth_leeway_s, 30)                                                                     \
    X(auth_timeout_ms, 3000)                                                                 \
    X(auth_jwks_min_refresh_ms, 10000)                                                       \
    X(store_timeout_ms, 5000)                                                                \
    X(max_sessions, 200000)                                                                  \
    X(max_sessions_per_address, 4096)

/* Fill a config with the defaults above. */
TIDEMARK_API void tidemark_server_config_init_sized(tidemark_server_config_t *cfg, size_t size);
#define tidemark_server_config_init(cfg) tidemark_server_config_init_sized((cfg), sizeof *(cfg))

/* Create a server (not yet listening). OUT srv: free with tidemark_server_free. */
TIDEMARK_API int tidemark_server_new_sized(const tidemark_server_config_t *cfg, size_t size,
                                           tidemark_server_t **srv);
#define tidemark_server_new(cfg, srv) tidemark_server_new_sized((cfg), sizeof *(cfg), (srv))
/* Open the store and start listening. Returns at once; the server runs on
 * its own threads until tidemark_server_stop. */
TIDEMARK_API int tidemark_server_start(tidemark_server_t *srv);
/* Start and serve until SIGINT or SIGTERM arrives, or another thread calls
 * tidemark_server_stop; then stop and return 0 (or start's error). It blocks
 * SIGINT and SIGTERM in the calling thread before the server's threads
 * start (they inherit the mask) and waits for them itself, so call it from
 * the main thread before creating threads of your own that do not block
 * them. */
TIDEMARK_API int tidemark_server_run(tidemark_server_t *srv);
/* Serve one client over stdio (the MCP stdio transport): newline-delimited
 * JSON-RPC read from in_fd, answers, notifications and the server's own
 * requests written to out_fd (nothing else is ever written there; logs go
 * to stderr). Both eras, the same handlers and store as over HTTP (the
 * first 2025 initialize makes the process's one session). Starts the
 * server (it must not be running; its HTTP address and path are replaced
 * by a private loopback endpoint the stdio side uses), serves until end of
 * input, SIGINT/SIGTERM or tidemark_server_stop, then stops it. Signals as
 * tidemark_server_run. Authorization (auth_*) and TLS are HTTP's and are
 * refused here. Returns 0, TIDEMARK_EINVAL (also: auth or TLS configured),
 * TIDEMARK_EBUSY (already running) or start's error. The fds are not
 * closed. */
TIDEMARK_API int tidemark_server_run_stdio(tidemark_server_t *srv, int in_fd, int out_fd);
/* The port actually bound (after start; 0 before). */
TIDEMARK_API int tidemark_server_port(const tidemark_server_t *srv);
/* Stop listening, cancel running calls, wait for handlers, close the store. */
TIDEMARK_API void tidemark_server_stop(tidemark_server_t *srv);
/* Stop if running, then free everything. */
TIDEMARK_API void tidemark_server_free(tidemark_server_t *srv);

/* ---- tools ------------------------------------------------------------- */

/* Tool annotation hints (MCP ToolAnnotations). */
#define TIDEMARK_TOOL_READ_ONLY    0x01u
#define TIDEMARK_TOOL_DESTRUCTIVE  0x02u
#define TIDEMARK_TOOL_IDEMPOTENT   0x04u
#define TIDEMARK_TOOL_OPEN_WORLD   0x08u
/* Tidemark: the tool's effects go through the atomic path
 * (tidemark_call_set_effect), so re-running it after a crash is safe. */
#define TIDEMARK_TOOL_ATOMIC       0x100u
/* Tidemark: the handler never blocks (no sleep, no file or network I/O,
 * no lock held long, no tidemark_call_request / _input in a 2025 session:
 * those fail with TIDEMARK_ENOTSUP there) and returns within microseconds.
 * Together with TIDEMARK_TOOL_IDEMPOTENT, or with TIDEMARK_TOOL_ATOMIC on a
 * store of one node (memory, SQLite) or, for a 2025-11-25 call, on
 * PostgreSQL, a call of the tool runs on the thread that read its POST,
 * with no hand-off to a worker and back, and everything the call writes
 * (its stream, record, events, result and effect) commits in one
 * transaction. An atomic tool needs no durable record before it runs
 * there: its effect commits with its result, so a crash before that commit
 * leaves neither, and no event of the call was sent (on PostgreSQL that
 * transaction also checks that no other node began the request first;
 * if one did, the effect and result are not written). Otherwise the
 * hint is not used. A handler that finds, before doing anything, that this
 * call would block (tidemark_call_is_inline says where it runs) returns
 * TIDEMARK_EAGAIN: the call then runs again from the start on a worker, as
 * calls of other tools do. With TIDEMARK_TOOL_READ_ONLY and
 * TIDEMARK_TOOL_IDEMPOTENT too, a call is quiet: a 2025 one opens its
 * stream only when it first sends something (a notification, an effect, a
 * stream close) or goes to a worker, and one that does none of these is
 * answered as JSON with nothing written; a key-less 2026-07-28 one asking
 * no progress and no log level writes nothing either. */
#define TIDEMARK_TOOL_NONBLOCKING  0x200u

/*
 * A tool handler. args: the call's arguments object (borrowed, never NULL).
 * On success store a CallToolResult object in *result (owned by the library)
 * and return 0. A tool-level failure is a result with "isError": true
 * (tidemark_result_error). Returning a negative code makes a JSON-RPC error;
 * TIDEMARK_EPEER with a JSON-RPC error object {code, message[, data]} in
 * *result answers with that error (a gateway passing its upstream's on).
 * The same holds for resource, prompt and completion handlers.
 */
typedef int (*tidemark_tool_fn)(tidemark_call_t *call, json_t *args, json_t **result, void *ud);

/* A tool (a growable struct: tidemark.h, "Structs a caller fills"; no hole,
 * no tail padding). */
typedef struct tidemark_tool {
    const char *name;
    const char *title;          /* optional */
    const char *description;    /* optional */
    const char *input_schema;   /* JSON text; NULL = {"type":"object"} */
    const char *output_schema;  /* JSON text or NULL */
    unsigned hints;             /* TIDEMARK_TOOL_* */
    /* io.modelcontextprotocol/tasks (2026-07-28; docs/protocol.md "Tasks"):
     * whether a call runs as a task, decided by the server per tool. With
     * TIDEMARK_TASK_OPTIONAL a client that declared the extension gets a
     * task, any other a plain result; with TIDEMARK_TASK_REQUIRED any other
     * gets -32021. TIDEMARK_TASK_INPUTS_FIRST (or-ed in): the inputs the
     * handler asks for before its first effect are gathered by multi
     * round-trip on the tools/call itself, and the task is created on the
     * round that brings answers (the handler then runs again, in the task,
     * with them). Inputs asked inside a task are answered with tasks/update. */
    unsigned task;
    tidemark_tool_fn fn;
    void *ud;
    /* How long a finished task stays readable, from its creation, in ms
     * (0: one hour; capped by the session TTL). */
    int64_t task_ttl_ms;
} tidemark_tool_t;

#define TIDEMARK_TASK_NEVER       0u
#define TIDEMARK_TASK_OPTIONAL    1u
#define TIDEMARK_TASK_REQUIRED    2u
#define TIDEMARK_TASK_INPUTS_FIRST 0x10u

/* Register a tool (copied). Sends tools/list_changed when the server runs. */
TIDEMARK_API int tidemark_server_add_tool_sized(tidemark_server_t *srv, const tidemark_tool_t *tool,
                                                size_t size);
#define tidemark_server_add_tool(srv, tool) tidemark_server_add_tool_sized((srv), (tool), sizeof *(tool))
/* Remove a tool by name. */
TIDEMARK_API int tidemark_server_remove_tool(tidemark_server_t *srv, const char *name);

/* ---- resources --------------------------------------------------------- */

/*
 * Read a resource: store a contents array (of {uri, mimeType, text|blob}) in
 * *contents. Return TIDEMARK_ENOTFOUND for an unknown URI.
 */
typedef int (*tidemark_resource_fn)(tidemark_call_t *call, const char *uri, json_t **contents,
                                    void *ud);

typedef struct tidemark_resource {
    const char *uri;            /* for templates: the RFC 6570 uriTemplate */
    const char *name;
    const char *title;          /* optional */
    const char *description;    /* optional */
    const char *mime_type;      /* optional */
    tidemark_resource_fn fn;
    void *ud;
} tidemark_resource_t;

/* Register a resource (copied). */
TIDEMARK_API int tidemark_server_add_resource_sized(tidemark_server_t *srv,
                                                    const tidemark_resource_t *res, size_t size);
#define tidemark_server_add_resource(srv, res) \
    tidemark_server_add_resource_sized((srv), (res), sizeof *(res))
/* A template matches URIs of the form of its uriTemplate ({var} segments). */
TIDEMARK_API int tidemark_server_add_resource_template_sized(tidemark_server_t *srv,
                                                             const tidemark_resource_t *tpl,
                                                             size_t size);
#define tidemark_server_add_resource_template(srv, tpl) \
    tidemark_server_add_resource_template_sized((srv), (tpl), sizeof *(tpl))
/* Tell every session subscribed to uri that it changed. TIDEMARK_EIO when
 * it could not be recorded for some session (logged; the others got it). */
TIDEMARK_API int tidemark_server_resource_updated(tidemark_server_t *srv, const char *uri);

/* ---- prompts ----------------------------------------------------------- */

/* Produce a GetPromptResult ({description?, messages}) in *result. */
typedef int (*tidemark_prompt_fn)(tidemark_call_t *call, json_t *args, json_t **result, void *ud);

typedef struct tidemark_prompt {
    const char *name;
    const char *title;          /* optional */
    const char *description;    /* optional */
    const char *arguments;      /* JSON text: array of {name, description?, required?}, or NULL */
    tidemark_prompt_fn fn;
    void *ud;
} tidemark_prompt_t;

/* Register a prompt (copied). */
TIDEMARK_API int tidemark_server_add_prompt_sized(tidemark_server_t *srv,
                                                  const tidemark_prompt_t *prompt, size_t size);
#define tidemark_server_add_prompt(srv, prompt) \
    tidemark_server_add_prompt_sized((srv), (prompt), sizeof *(prompt))

/* ---- completion -------------------------------------------------------- */

/*
 * Complete an argument. ref: {"type":"ref/prompt","name":..} or
 * {"type":"ref/resource","uri":..}; argument: {name, value}; context: the
 * request's context object or NULL. Store a string array in *values.
 */
typedef int (*tidemark_complete_fn)(tidemark_call_t *call, json_t *ref, json_t *argument,
                                    json_t *context, json_t **values, void *ud);
TIDEMARK_API int tidemark_server_set_completion(tidemark_server_t *srv, tidemark_complete_fn fn, void *ud);

/* ---- notifications to every session ------------------------------------ */

/* Send notifications/{tools,resources,prompts}/list_changed to every session. */
TIDEMARK_API int tidemark_server_list_changed(tidemark_server_t *srv, const char *kind);

/* ---- inside a running handler ------------------------------------------ */

/* The session id of the call (valid while the call runs). A 2026-07-28
 * request has no session: its call's id is that of the store session it
 * runs in (one per call, or per idempotency key). */
TIDEMARK_API const char *tidemark_call_session(const tidemark_call_t *call);
/* The negotiated protocol version of the call's session (same lifetime). */
TIDEMARK_API const char *tidemark_call_protocol_version(const tidemark_call_t *call);
/* "<session>/<request key>": hand this to outside systems to dedup effects
 * (same lifetime; copy it to keep it). In a 2026-07-28 request it is derived
 * from (principal, the client's _meta["dev.tidemark/idempotency-key"]) when
 * it sent one (the same on every node and every re-issue), else unique to
 * the call. */
TIDEMARK_API const char *tidemark_call_idempotency_key(const tidemark_call_t *call);
/* 1 when the call runs on the thread that read its POST (a tool declared
 * TIDEMARK_TOOL_NONBLOCKING): a handler that would block returns
 * TIDEMARK_EAGAIN first thing, and is run again on a worker. */
TIDEMARK_API int tidemark_call_is_inline(const tidemark_call_t *call);
/* 1 once the client cancelled the request (or the server is stopping). */
TIDEMARK_API int tidemark_call_cancelled(const tidemark_call_t *call);
/* Send notifications/progress for the request's progress token (no-op when
 * the client gave none). total < 0 and message NULL are omitted. */
TIDEMARK_API int tidemark_call_progress(tidemark_call_t *call, double progress, double total,
                           const char *message);
/* Send notifications/message at level (debug..emergency) if the session's
 * logging level lets it through. data is borrowed. */
TIDEMARK_API int tidemark_call_log(tidemark_call_t *call, const char *level, const char *logger, json_t *data);
/* Send any notification on the request's stream. params is borrowed. */
TIDEMARK_API int tidemark_call_notify(tidemark_call_t *call, const char *method, json_t *params);
/*
 * Send a request to the client on the call's stream (sampling/createMessage,
 * elicitation/create, roots/list) and wait up to timeout_ms for its answer.
 * OUT result: the client's result (caller decrefs). TIDEMARK_EPEER when the
 * client answered with an error (then *result holds the error object).
 * In a 2026-07-28 request it does not block: see tidemark_call_input (the
 * n-th request of a call is the input "input_<n>"; the handler re-runs from
 * the start once the client answered, so its effects go on the atomic path
 * or after its last input).
 */
TIDEMARK_API int tidemark_call_request(tidemark_call_t *call, const char *method, json_t *params,
                          int timeout_ms, json_t **result);
/*
 * tidemark_call_request with a name for the input (NULL: "input_<n>", n
 * counting the call's requests from 1).
 *
 * 2025 sessions: as tidemark_call_request (the key is not used).
 *
 * 2026-07-28 requests (multi round-trip): nothing is sent and nothing
 * blocks. When the client's answer for key is at hand (this request's
 * inputResponses, or an earlier round's, carried in the sealed
 * requestState), it is returned at once. Otherwise the request is noted
 * and TIDEMARK_EINPUT returned: the handler should return (it may first ask
 * for more inputs, which then go out together); whatever it returns, the
 * call ends with an InputRequiredResult listing what it asked, and the
 * client's retry RUNS THE HANDLER AGAIN FROM THE START with the answers
 * available. So a handler must make its effects on the atomic path
 * (tidemark_call_set_effect) or after its last input, never before an
 * input it may not have yet. A method whose client capability (sampling,
 * elicitation, roots) the request did not declare is TIDEMARK_ENOTSUP; a
 * handler that then fails ends with MissingRequiredClientCapabilityError.
 * timeout_ms is not used in that era.
 */
TIDEMARK_API int tidemark_call_input(tidemark_call_t *call, const char *key, const char *method,
                                     json_t *params, int timeout_ms, json_t **result);
/* OUT params: what the client said of itself, as initialize params
 * {protocolVersion, capabilities, clientInfo} (a 2025 session's initialize;
 * a 2026-07-28 request's _meta), a copy the caller decrefs. A gateway
 * initializes its upstream with them. */
TIDEMARK_API int tidemark_call_client_params(const tidemark_call_t *call, json_t **params);
/* Who made the call: the principal its token named ("iss sub"-like, as the
 * authorization rules see it), "" without authorization. Same lifetime as
 * the call. A gateway keeps one principal's upstream apart from another's. */
TIDEMARK_API const char *tidemark_call_principal(const tidemark_call_t *call);
/* 1 if the client declared the capability ("sampling", "elicitation", "roots"). */
TIDEMARK_API int tidemark_call_client_has(const tidemark_call_t *call, const char *capability);
/* End the call's SSE connection now (SEP-1699 polling): the client
 * reconnects with GET + Last-Event-ID and the call's events continue there. */
TIDEMARK_API int tidemark_call_close_stream(tidemark_call_t *call);

/* ---- exactly-once effects ------------------------------------------------ */

/* An effect: runs inside the store transaction that commits the tool's
 * result (tidemark_txn_t, txn.h), writing with tidemark_txn_insert (rows,
 * every store; on Redis the one way to an atomic effect) or tidemark_txn_exec
 * (SQL: SQLite, PostgreSQL and memory stores); return 0, or a negative code
 * to discard the effect (the call then ends with an effect_failed error).
 * A store may call it again for the same commit after rolling a try back
 * (PostgreSQL: a deadlock, or another call's effect in the batch refused):
 * only what it writes through txn is kept, once, so it must do nothing
 * else that lasts. */
typedef int (*tidemark_effect_fn)(tidemark_txn_t *txn, void *ud);

/* From a tool handler: commit fn's rows in the same transaction as the
 * tool's result, so a crash leaves both or neither. free_ud (may be NULL)
 * releases ud after the commit. One effect per call. */
TIDEMARK_API int tidemark_call_set_effect(tidemark_call_t *call, tidemark_effect_fn fn, void *ud,
                             void (*free_ud)(void *));
/* Rows of an application table (tidemark_txn_insert) in commit order, each
 * {"id": n, <fields>}, keeping those whose fields equal every field of match
 * (NULL: all; borrowed). OUT rows (caller decrefs). */
TIDEMARK_API int tidemark_server_rows(tidemark_server_t *srv, const char *table, json_t *match, json_t **rows);
/* Application DDL (CREATE TABLE IF NOT EXISTS ...) run in the store at start.
 * Call before tidemark_server_start. The text is copied. SQL stores only:
 * on Redis the server does not start (TIDEMARK_ENOTSUP). */
TIDEMARK_API int tidemark_server_add_schema(tidemark_server_t *srv, const char *sql);
/* Read application tables: OUT rows, an array of objects (caller decrefs). */
TIDEMARK_API int tidemark_server_query(tidemark_server_t *srv, const char *sql, const char *const *args,
                          size_t nargs, json_t **rows);

/* ---- result helpers (return new references) ---------------------------- */

/* {"content":[{"type":"text","text":text}]} */
TIDEMARK_API json_t *tidemark_result_text(const char *text);
/* {"content":[{"type":"text","text":text}],"isError":true} */
TIDEMARK_API json_t *tidemark_result_error(const char *text);
/* {"type":"text","text":text} */
TIDEMARK_API json_t *tidemark_content_text(const char *text);

#ifdef __cplusplus
}
#endif
#endif
