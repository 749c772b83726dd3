/*
 * http.c - the HTTP adapter of the request path (request.h): what only
 * HTTP has - the transport's lifecycle, the checks every request passes
 * first (framing, Host, Origin), the health, metrics and Protected Resource
 * Metadata endpoints - and, for the MCP endpoint, the request parsed once
 * into a tm_req (the header fields read in one pass and copied with it)
 * that the core answers through libmicrohttpd.
 */
#include "server_int.h"
#include "http_policy.h"
#include "../auth/auth.h"
#include "../base/buf.h"
#include "../base/metrics.h"
#include "../transport/http_server.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the transport's own answers ------------------------------------------ */

static void http_json(tm_http_req *r, unsigned status, json_t *body /* stolen */)
{
    size_t len;
    char *txt = tm_jsonrpc_dump(body, &len);
    json_decref(body);
    tm_http_reply(r, status, "application/json", txt, txt ? len : 0);
    free(txt);
}

static void http_error(tm_http_req *r, unsigned status, int code, const char *reason,
                       const char *message, json_t *extra)
{
    http_json(r, status, tm_jsonrpc_error(NULL, code, message, reason, extra));
}

/* ---- checks --------------------------------------------------------------- */

static int host_allowed(tidemark_server_t *s, const char *host)
{
    return tm_policy_host_allowed((const char *const *)s->hosts, host);
}

/* Host and Origin (DNS rebinding), else 403. */
static int host_and_origin_ok(tidemark_server_t *srv, tm_http_req *r, const char *host,
                              const char *origin)
{
    if (!host_allowed(srv, host)) {
        json_t *x = host ? json_pack("{s:s}", "host", host) : NULL;
        http_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_host",
                   "Forbidden: Host header not allowed", x);
        return 0;
    }
    if (origin && !tm_policy_origin_allowed((const char *const *)srv->origins, origin)) {
        json_t *x = json_pack("{s:s}", "origin", origin);
        http_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_origin",
                   "Forbidden: Origin not allowed", x);
        return 0;
    }
    return 1;
}

/* ---- routes other than the MCP endpoint ------------------------------------ */

static int listed(char **l, const char *v)
{
    for (size_t i = 0; l && v && l[i]; i++)
        if (strcmp(l[i], v) == 0)
            return 1;
    return 0;
}

/* GET only, or 405. */
static int only_get(tm_http_req *r, const char *method)
{
    if (strcmp(method, "GET") == 0)
        return 1;
    tm_http_req_add_header(r, "Allow", "GET");
    http_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed", "Method Not Allowed", NULL);
    return 0;
}

/* /healthz: the process answers. /readyz: and its store takes writes. No
 * Host check (probes come from outside: load balancers, kubelets). */
static void health(tidemark_server_t *srv, tm_http_req *r, int ready)
{
    int rc = ready && !atomic_load(&srv->stopping) ? tm_store_writable(srv->store) : 0;
    if (ready && atomic_load(&srv->stopping))
        rc = TIDEMARK_ECLOSED;
    const char *why = rc == 0                  ? NULL
                      : rc == TIDEMARK_ECLOSED ? "shutting_down"
                                               : tm_store_unavailable_reason(srv->store);
    json_t *b = why ? json_pack("{s:s,s:s}", "status", "unavailable", "reason", why)
                    : json_pack("{s:s}", "status", ready ? "ready" : "ok");
    http_json(r, why ? 503 : 200, b);
}

/* Requests refused by authorization, by reason (src/auth counts them). */
static void auth_metrics(tidemark_server_t *srv, tm_buf *b)
{
    if (!srv->auth)
        return;
    tm_buf_adds(b, "# HELP tidemark_auth_refused_total MCP requests refused by authorization, "
                   "by reason\n# TYPE tidemark_auth_refused_total counter\n");
    for (int i = TM_AUTH_OK + 1; i < TM_AUTH_REASON_COUNT; i++)
        tm_buf_printf(b, "tidemark_auth_refused_total{reason=\"%s\"} %llu\n",
                      tm_auth_reason_name((tm_auth_reason)i),
                      (unsigned long long)tm_auth_count(srv->auth, (tm_auth_reason)i));
    tm_buf_printf(b, "# HELP tidemark_auth_accepted_total MCP requests whose access token was "
                     "accepted\n# TYPE tidemark_auth_accepted_total counter\n"
                     "tidemark_auth_accepted_total %llu\n",
                  (unsigned long long)tm_auth_count(srv->auth, TM_AUTH_OK));
}

/* Whether the store takes writes now, and why not (durability replicated
 * on a primary without a synchronous standby). */
static void store_metrics(tidemark_server_t *srv, tm_buf *b)
{
    tm_buf_printf(b, "# HELP tidemark_store_writable 1 while the store takes writes\n"
                     "# TYPE tidemark_store_writable gauge\ntidemark_store_writable %d\n"
                     "# HELP tidemark_store_not_replicated 1 while writes are refused because "
                     "the PostgreSQL primary has no synchronous standby (--durability replicated)\n"
                     "# TYPE tidemark_store_not_replicated gauge\ntidemark_store_not_replicated %d\n",
                  tm_store_writable(srv->store) == 0, tm_store_pg_not_replicated(srv->store));
}

static void metrics(tidemark_server_t *srv, tm_http_req *r)
{
    tm_buf b;
    tm_buf_init(&b, 1u << 20);
    tm_metrics_render(srv->metrics, &b);
    auth_metrics(srv, &b);
    store_metrics(srv, &b);
    tm_http_reply(r, 200, "text/plain; version=0.0.4", b.data, b.len);
    tm_buf_free(&b);
}

/* --metrics-token: "Bearer <token>", compared in constant time. */
static int metrics_token_ok(const tidemark_server_t *srv, tm_http_req *r)
{
    const char *h = tm_http_req_header(r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t a = strlen(h), b = strlen(srv->metrics_token);
    unsigned char d = a != b;
    for (size_t i = 0; i < b; i++)
        d |= (unsigned char)(srv->metrics_token[i] ^ (i < a ? h[i] : 0));
    return d == 0;
}

/* /metrics: its own setting, never an MCP access token. */
static void metrics_route(tidemark_server_t *srv, tm_http_req *r, const char *method)
{
    if (listed(srv->metrics_addrs, tm_http_req_peer(r))) {
        if (only_get(r, method))
            metrics(srv, r);
        return;
    }
    if (srv->metrics_token) {
        if (!metrics_token_ok(srv, r)) {
            tm_http_req_add_header(r, "WWW-Authenticate", "Bearer realm=\"metrics\"");
            return http_error(r, 401, TM_RPC_INVALID_REQUEST, "unauthorized",
                              "Unauthorized: /metrics needs its scrape token", NULL);
        }
    } else if (!host_and_origin_ok(srv, r, tm_http_req_header(r, "Host"),
                                   tm_http_req_header(r, "Origin"))) {
        return;
    }
    if (only_get(r, method))
        metrics(srv, r);
}

/* The Protected Resource Metadata (RFC 9728) at its two URLs: public, after
 * the Host check. 1 when path is one of them (answered). */
static int metadata_route(tidemark_server_t *srv, tm_http_req *r, const char *method,
                          const char *path)
{
    const char *doc = NULL;
    if (!srv->auth || tm_auth_metadata(srv->auth, path, &doc) != 0)
        return 0;
    const char *host = tm_http_req_header(r, "Host");
    if (!host_allowed(srv, host)) {
        http_error(r, 403, TM_RPC_INVALID_REQUEST, "forbidden_host",
                   "Forbidden: Host header not allowed",
                   host ? json_pack("{s:s}", "host", host) : NULL);
    } else if (only_get(r, method)) {
        tm_http_reply(r, 200, "application/json", doc, strlen(doc));
    }
    return 1;
}

/* ---- the MCP endpoint's requests as tm_req --------------------------------- */

typedef struct http_req {
    tm_req base;
    tm_http_req *h;
    char strs[]; /* the header values base points at */
} http_req;

static void op_add_header(tm_req *r, const char *name, const char *value)
{
    tm_http_req_add_header(((http_req *)r)->h, name, value);
}

static void op_reply(tm_req *r, unsigned status, const char *ctype, const char *body, size_t len)
{
    tm_http_reply(((http_req *)r)->h, status, ctype, body, len);
}

static int op_reply_stream(tm_req *r, const char *key, const tm_source *src)
{
    return tm_http_reply_source(((http_req *)r)->h, key, src);
}

static const tm_req_ops http_ops = {op_add_header, op_reply, op_reply_stream};

/* The header fields one pass finds (the first of each name, as a lookup
 * by name gives), before they are copied into the request. */
enum { F_SID, F_PV, F_LEID, F_AUTH, F_CTYPE, F_ACCEPT, F_MMETHOD, F_MNAME, F_TRACE, F_HOST,
       F_ORIGIN, F_COUNT };
#define FIELD(name) {name, sizeof name - 1}
static const struct {
    const char *name;
    size_t len; /* so most fields are told apart without a compare */
} fields[F_COUNT] = {FIELD("Mcp-Session-Id"), FIELD("MCP-Protocol-Version"),
                     FIELD("Last-Event-ID"), FIELD("Authorization"), FIELD("Content-Type"),
                     FIELD("Accept"), FIELD("Mcp-Method"), FIELD("Mcp-Name"),
                     FIELD("traceparent"), FIELD("Host"), FIELD("Origin")};

typedef struct scan {
    const char *v[F_COUNT];
    tm_req_param p[TM_REQ_PARAMS_MAX];
    size_t np;
} scan;

static void scan_param(scan *s, const char *suffix, const char *value)
{
    for (size_t i = 0; i < s->np; i++)
        if (strcasecmp(s->p[i].suffix, suffix) == 0)
            return;
    if (s->np < TM_REQ_PARAMS_MAX)
        s->p[s->np++] = (tm_req_param){suffix, value};
}

static void scan_field(void *ud, const char *name, const char *value)
{
    scan *s = ud;
    size_t n = strlen(name);
    if (n > 10 && strncasecmp(name, "Mcp-Param-", 10) == 0)
        return scan_param(s, name + 10, value);
    for (int i = 0; i < F_COUNT; i++)
        if (fields[i].len == n && !s->v[i] && strcasecmp(name, fields[i].name) == 0) {
            s->v[i] = value;
            return;
        }
}

/* dst <- a copy of src in the request's string room at *at. */
static const char *keep_str(char *room, size_t *at, const char *src)
{
    if (!src)
        return NULL;
    size_t n = strlen(src) + 1;
    char *d = memcpy(room + *at, src, n);
    *at += n;
    return d;
}

static size_t scan_bytes(const scan *s)
{
    size_t n = 0;
    for (int i = 0; i < F_COUNT; i++)
        n += s->v[i] ? strlen(s->v[i]) + 1 : 0;
    for (size_t i = 0; i < s->np; i++)
        n += strlen(s->p[i].suffix) + strlen(s->p[i].value) + 2;
    return n;
}

/* The request as the core sees it, kept with h until h is gone. NULL:
 * out of memory. */
static tm_req *parse(tm_http_req *h, tm_req_method method, const scan *s)
{
    http_req *q = malloc(sizeof *q + scan_bytes(s));
    if (!q)
        return NULL;
    size_t at = 0;
    char *room = q->strs;
    q->h = h;
    tm_req *r = &q->base;
    *r = (tm_req){.ops = &http_ops, .method = method, .peer = tm_http_req_peer(h)};
    r->session_id = keep_str(room, &at, s->v[F_SID]);
    r->protocol_version = keep_str(room, &at, s->v[F_PV]);
    r->last_event_id = keep_str(room, &at, s->v[F_LEID]);
    r->authorization = keep_str(room, &at, s->v[F_AUTH]);
    r->content_type = keep_str(room, &at, s->v[F_CTYPE]);
    r->accept = keep_str(room, &at, s->v[F_ACCEPT]);
    r->mcp_method = keep_str(room, &at, s->v[F_MMETHOD]);
    r->mcp_name = keep_str(room, &at, s->v[F_MNAME]);
    r->traceparent = keep_str(room, &at, s->v[F_TRACE]);
    for (size_t i = 0; i < s->np; i++) {
        r->params[i].suffix = keep_str(room, &at, s->p[i].suffix);
        r->params[i].value = keep_str(room, &at, s->p[i].value);
    }
    r->nparams = s->np;
    r->body = tm_http_req_body(h, &r->body_len);
    tm_http_req_keep(h, q, free);
    return r;
}

/* The MCP endpoint: Host and Origin checked, the request parsed, the core's. */
static void mcp_route(tidemark_server_t *srv, tm_http_req *h, const char *method)
{
    scan s = {0};
    tm_http_req_each_header(h, scan_field, &s);
    if (!host_and_origin_ok(srv, h, s.v[F_HOST], s.v[F_ORIGIN]))
        return;
    if (atomic_load(&srv->stopping))
        return http_error(h, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping",
                          NULL);
    tm_req_method m = strcmp(method, "POST") == 0  ? TM_REQ_POST
                      : strcmp(method, "GET") == 0 ? TM_REQ_GET
                                                   : TM_REQ_DELETE;
    if (m == TM_REQ_DELETE && strcmp(method, "DELETE") != 0) {
        tm_http_req_add_header(h, "Allow", "GET, POST, DELETE");
        return http_error(h, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed",
                          "Method Not Allowed", NULL);
    }
    tm_req *r = parse(h, m, &s);
    if (!r)
        return http_error(h, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
    tm_handle_request(srv, r);
}

static void on_http(void *ud, tm_http_req *r)
{
    tidemark_server_t *srv = ud;
    const char *method = tm_http_req_method(r);
    const char *path = tm_http_req_path(r);
    tm_counter_inc(srv->m.http_requests);
    const char *framing = tm_http_req_framing_error(r);
    if (framing)
        return http_error(r, 400, TM_RPC_INVALID_REQUEST, framing,
                          "Bad Request: the header fields frame the message ambiguously "
                          "(request smuggling)",
                          NULL);
    if (strcmp(path, srv->path) == 0)
        return mcp_route(srv, r, method);
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0) {
        if (only_get(r, method))
            health(srv, r, path[1] == 'r');
        return;
    }
    if (strcmp(path, "/metrics") == 0)
        return metrics_route(srv, r, method);
    if (metadata_route(srv, r, method, path))
        return;
    http_error(r, 404, TM_RPC_INVALID_REQUEST, "not_found", "Not Found", NULL);
}

/* ---- the transport's streams as the server's hub ----------------------------- */

static void hub_wake(void *impl, const char *key)
{
    tm_http_wake(impl, key);
}

static int hub_signal(void *impl, const char *key, int (*fn)(void *, void *), void *arg)
{
    return tm_http_signal(impl, key, fn, arg);
}

static void hub_end(void *impl, const char *prefix)
{
    tm_http_end(impl, prefix);
}

static void hub_stop(void *impl)
{
    tm_http_stop(impl);
}

static const tm_hub_ops http_hub = {hub_wake, hub_signal, hub_end, hub_stop};

/* ---- lifecycle ----------------------------------------------------------------- */

/* A JSON-RPC error (id null) the transport sends by itself; extra stolen. */
static char *error_body(int code, const char *message, const char *reason, json_t *extra)
{
    json_t *e = tm_jsonrpc_error(NULL, code, message, reason, extra);
    char *body = e ? tm_jsonrpc_dump(e, NULL) : NULL;
    json_decref(e);
    return body;
}

/* The HTTP transport with the server's limits and the typed bodies it
 * answers on its own (a connection over a limit, headers or a body too
 * large). OUT *h. */
static int http_open(tidemark_server_t *srv, tm_http **h)
{
    char *busy_body = error_body(TM_RPC_SERVER_ERROR, "Service Unavailable: too many connections",
                                 "too_many_connections", NULL);
    char *headers_body =
        error_body(TM_RPC_INVALID_REQUEST,
                   "Request Header Fields Too Large: the request line and headers are over the limit",
                   "headers_too_large", json_pack("{s:I}", "limit",
                                                  (json_int_t)srv->cfg.max_header_bytes));
    char *too_large_body = error_body(TM_RPC_INVALID_REQUEST, "Payload Too Large", "body_too_large",
                                      json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_body));
    char *bad_chunk_body =
        error_body(TM_RPC_INVALID_REQUEST,
                   "Bad Request: a chunk size no body can have (request smuggling)",
                   "invalid_chunk_size", NULL);
    tm_http_config hc = {.metrics = srv->metrics, .host = srv->host, .port = srv->cfg.port,
                         .max_body = srv->cfg.max_body,
                         .io_threads = srv->cfg.io_threads, .keepalive_ms = srv->cfg.keepalive_ms,
                         .max_connections = srv->cfg.max_connections,
                         .max_per_address = srv->cfg.max_connections_per_address,
                         .request_deadline_ms = srv->cfg.request_deadline_ms,
                         .idle_timeout_ms = srv->cfg.idle_timeout_ms, .busy_body = busy_body,
                         .max_header_bytes = srv->cfg.max_header_bytes, .headers_body = headers_body,
                         .too_large_body = too_large_body, .bad_chunk_body = bad_chunk_body,
                         .tls_cert_file = srv->tls_cert, .tls_key_file = srv->tls_key,
                         .tls_client_ca_file = srv->tls_client_ca};
    int rc = busy_body && headers_body && too_large_body && bad_chunk_body
                 ? tm_http_new(&hc, on_http, srv, h)
                 : TIDEMARK_ENOMEM;
    free(busy_body);
    free(headers_body);
    free(too_large_body);
    free(bad_chunk_body);
    return rc;
}

int tm_http_adapter_start(tidemark_server_t *srv)
{
    tm_http *h = NULL;
    int rc = http_open(srv, &h);
    if (rc)
        return rc;
    srv->http = h;
    srv->hub_store = (tm_hub){&http_hub, h};
    atomic_store(&srv->hub, &srv->hub_store); /* before any thread of it can call back */
    return tm_http_listen(h);
}

unsigned tm_http_adapter_port(const tidemark_server_t *srv)
{
    return srv->http ? tm_http_port(srv->http) : 0;
}

void tm_http_adapter_free(tidemark_server_t *srv)
{
    tm_http_free(srv->http);
    srv->http = NULL;
}
