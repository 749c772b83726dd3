/* test_auth_http.c ISSUER JWKS_URI - src/auth/ wired into the HTTP transport
 * the way the server's request path is meant to wire it (docs/design.md,
 * "Authorization", "Wiring"), on a minimal stateless MCP endpoint, for
 * tests/integration/auth_http.mjs to drive with a real OAuth client:
 *
 *   GET  /.well-known/oauth-protected-resource[/mcp]  the metadata (public)
 *   POST /mcp   JSON-RPC parsed first (method, params.name), then
 *               tm_auth_check: 401/403 with WWW-Authenticate, 503 with
 *               Retry-After, or the call: initialize, notifications,
 *               tools/list (echo, admin_reset), tools/call answering with the
 *               principal ("id=<id> sub=<sub> scope=<scope>")
 *
 * Prints "URL http://127.0.0.1:<port>/mcp" once listening; runs until stdin
 * closes. Scopes: tools/call needs mcp:tools, its admin_reset mcp:admin
 * (which implies mcp:tools). */
#include "auth/auth.h"
#include "tidemark/tidemark.h"
#include "transport/http_server.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tm_auth *g_auth;

static void reply_json(tm_http_req *req, unsigned status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    tm_http_reply(req, status, "application/json", s ? s : "{}", s ? strlen(s) : 2);
    free(s);
}

static json_t *rpc_error(json_t *id, int code, const char *msg)
{
    return json_pack("{ss,sO,s{si,ss}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
                     "code", code, "message", msg);
}

static json_t *tools(void)
{
    return json_pack("{s[{ss,ss,s{ss}},{ss,ss,s{ss}}]}", "tools", "name", "echo", "description",
                     "who am I", "inputSchema", "type", "object", "name", "admin_reset",
                     "description", "needs mcp:admin", "inputSchema", "type", "object");
}

static json_t *result_of(const char *method, const tm_auth_result *r)
{
    if (strcmp(method, "initialize") == 0)
        return json_pack("{ss,s{},s{ss,ss}}", "protocolVersion", "2025-11-25", "capabilities",
                         "serverInfo", "name", "auth-http-test", "version", "0");
    if (strcmp(method, "tools/list") == 0)
        return tools();
    if (strcmp(method, "tools/call") == 0) {
        char text[2048];
        snprintf(text, sizeof text, "id=%s sub=%s scope=%s", r->principal.id, r->principal.sub,
                 r->principal.scope);
        return json_pack("{s[{ss,ss}]}", "content", "type", "text", "text", text);
    }
    if (strcmp(method, "ping") == 0)
        return json_object();
    return NULL;
}

/* The request path: transport checks (done by the transport here), the
 * body parsed, then the check, then the call. */
static void on_post(tm_http_req *req)
{
    size_t len = 0;
    const char *body = tm_http_req_body(req, &len);
    json_t *msg = body ? json_loadb(body, len, 0, NULL) : NULL;
    const char *method = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id");
    if (!method) {
        reply_json(req, 400, rpc_error(NULL, -32600, "not a JSON-RPC request"));
        json_decref(msg);
        return;
    }
    const char *tool = strcmp(method, "tools/call") == 0
                           ? json_string_value(json_object_get(json_object_get(msg, "params"), "name"))
                           : NULL;
    tm_auth_result r;
    if (tm_auth_check(g_auth, tm_http_req_header(req, "Authorization"), method, tool, &r) != 0) {
        reply_json(req, 500, rpc_error(id, -32603, "internal error"));
    } else if (r.status != 200) {
        if (r.www_authenticate[0])
            tm_http_req_add_header(req, "WWW-Authenticate", r.www_authenticate);
        if (r.status == 503)
            tm_http_req_add_header(req, "Retry-After", "1");
        reply_json(req, r.status, rpc_error(id, -32001, r.status == 503 ? "authorization unavailable"
                                                                        : "unauthorized"));
    } else if (!id) {
        tm_http_reply(req, 202, NULL, "", 0); /* a notification */
    } else {
        json_t *res = result_of(method, &r);
        reply_json(req, 200, res ? json_pack("{ss,sO,so}", "jsonrpc", "2.0", "id", id, "result", res)
                                 : rpc_error(id, -32601, "method not found"));
    }
    json_decref(msg);
}

static void handler(void *ud, tm_http_req *req)
{
    (void)ud;
    const char *m = tm_http_req_method(req), *doc = NULL;
    if (strcmp(m, "GET") == 0 && tm_auth_metadata(g_auth, tm_http_req_path(req), &doc) == 0)
        tm_http_reply(req, 200, "application/json", doc, strlen(doc));
    else if (strcmp(m, "POST") == 0 && strcmp(tm_http_req_path(req), "/mcp") == 0)
        on_post(req);
    else if (strcmp(tm_http_req_path(req), "/mcp") == 0)
        tm_http_reply(req, 405, NULL, "", 0);
    else
        tm_http_reply(req, 404, NULL, "", 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_auth_http ISSUER JWKS_URI\n");
        return 2;
    }
    tm_http_config hc = {.host = "127.0.0.1", .max_body = 65536};
    tm_http *h = NULL;
    if (tm_http_new(&hc, handler, NULL, &h) != 0)
        return 1;
    char resource[128];
    snprintf(resource, sizeof resource, "http://127.0.0.1:%u/mcp", tm_http_port(h));
    static const char *const rules[] = {"tool:admin_reset=mcp:admin", "tool:*=mcp:tools", NULL};
    static const char *const implies[] = {"mcp:admin=mcp:tools", NULL};
    tm_auth_config ac = {.resource = resource, .issuer = argv[1], .jwks_uri = argv[2],
                         .scopes_supported = "mcp:tools", .scope_rules = rules,
                         .scope_implies = implies, .jwks_min_refresh_ms = 1000};
    if (tm_auth_new(&ac, &g_auth) != 0 || tm_http_listen(h) != 0) {
        tm_http_free(h);
        tm_auth_free(g_auth);
        return 1;
    }
    printf("URL %s\n", resource);
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin))
        ;
    tm_http_stop(h);
    tm_http_free(h);
    tm_auth_free(g_auth);
    return 0;
}
