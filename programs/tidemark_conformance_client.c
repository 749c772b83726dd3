/*
 * tidemark-conformance-client - the client side of the official MCP
 * conformance suite (@modelcontextprotocol/conformance), over libtidemark.
 *
 *   tidemark-conformance-client [--scenario NAME] URL
 *
 * The suite's runner starts its scenario server, then runs this program with
 * the server URL as the last argument and the scenario's name in the
 * environment variable MCP_CONFORMANCE_SCENARIO (--scenario overrides it).
 * What the program does per scenario:
 *
 *   initialize                          connect (initialize + initialized), list tools
 *   tools_call                          connect, list tools, call add_numbers {a:5, b:3}
 *   elicitation-sep1034-client-defaults connect, list tools, open the standalone GET stream, call
 *                                       test_client_elicitation_defaults; the server
 *                                       sends its elicitation/create on the GET stream
 *                                       (it is not related to the call's request id),
 *                                       the program accepts it with empty content and
 *                                       the library fills in the schema's defaults
 *   sse-retry                           connect, list tools, call test_reconnection; the server cuts
 *                                       the call's stream after a priming event with
 *                                       retry: 500, the library resumes with GET +
 *                                       Last-Event-ID after exactly that delay
 *   auth/...                            connect, list tools, call test-tool: the first
 *                                       request meets the 401 and the library authorizes
 *                                       (the runner's MCP_CONFORMANCE_CONTEXT names a
 *                                       pre-registered client where there is one; the
 *                                       authorization server's redirect is taken as it
 *                                       comes: tidemark_authorize_follow); the call sees
 *                                       the token hold, or re-authorizes after a change
 *                                       of authorization server
 *   anything else                       connect and list tools
 *
 * Under MCP_CONFORMANCE_PROTOCOL_VERSION=2026-07-28 the client starts in
 * auto mode (server/discover first, modern when the server is); otherwise it
 * speaks legacy only. The 2026-07-28 scenarios:
 *
 *   request-metadata, json-schema-ref-no-deref   list tools
 *   sep-2322-client-request-state,
 *   http-invalid-tool-headers                    list tools, call every tool listed (a tool
 *                                                with invalid x-mcp-header is not listed)
 *   http-standard-headers                        every tool, resource and prompt: listed,
 *                                                then called, read, got
 *   http-custom-headers                          the calls the runner names in
 *                                                MCP_CONFORMANCE_CONTEXT (toolCalls)
 *   json-schema-2020-12-preservation             list tools, send json_schema_2020_12_tool's
 *                                                inputSchema back through json_schema_echo
 *
 * Exit codes: 0 the scenario ran through; 1 a step failed; 2 usage.
 */
#include "tidemark/client.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *prog = "tidemark-conformance-client";

static void print_json(const char *what, json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    fprintf(stderr, "%s: %s: %s\n", prog, what, s ? s : "(none)");
    free(s);
}

/*
 * Requests from the server. An elicitation is accepted with no fields of its
 * own: the library applies the requested schema's defaults (SEP-1034), which
 * is what the elicitation-defaults scenario checks. Sampling is answered with
 * a fixed text so a scenario that samples gets a well-formed result.
 */
static int on_request(const char *method, json_t *params, json_t **result, void *ud)
{
    (void)params, (void)ud;
    fprintf(stderr, "%s: server request %s\n", prog, method);
    if (!strcmp(method, "elicitation/create")) {
        *result = json_pack("{s:s,s:{}}", "action", "accept", "content");
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    if (!strcmp(method, "sampling/createMessage")) {
        *result = json_pack("{s:s,s:{s:s,s:s},s:s,s:s}", "role", "assistant", "content", "type",
                            "text", "text", "This is a response from the conformance client.",
                            "model", "tidemark-conformance", "stopReason", "endTurn");
        return *result ? 0 : TIDEMARK_ENOMEM;
    }
    return TIDEMARK_ENOTSUP;
}

static void on_notification(json_t *msg, void *ud)
{
    (void)ud;
    print_json("notification", msg);
}

/* The tool's result, printed; 0 unless the call failed or returned isError.
 * args NULL: an empty object (passed explicitly, not as NULL). */
static int call_tool(tidemark_client_t *c, const char *name, json_t *args)
{
    json_t *res = NULL;
    json_t *none = args ? NULL : json_object();
    int rc = tidemark_client_call_tool(c, name, args ? args : none, NULL, NULL, &res);
    json_decref(none);
    if (rc) {
        fprintf(stderr, "%s: tools/call %s: %s\n", prog, name, tidemark_strerror(rc));
        print_json("error", res);
        json_decref(res);
        return 1;
    }
    print_json(name, res);
    int is_error = json_is_true(json_object_get(res, "isError"));
    json_decref(res);
    return is_error ? 1 : 0;
}

static int list_tools(tidemark_client_t *c)
{
    json_t *tools = NULL;
    int rc = tidemark_client_list(c, "tools/list", "tools", &tools);
    if (rc) {
        fprintf(stderr, "%s: tools/list: %s\n", prog, tidemark_strerror(rc));
        print_json("error", tools);
        json_decref(tools);
        return 1;
    }
    fprintf(stderr, "%s: %zu tool(s)\n", prog, json_array_size(tools));
    json_decref(tools);
    return 0;
}

/* Arguments for a tool: a plain value for each required property. */
static json_t *minimal_args(json_t *tool)
{
    json_t *schema = json_object_get(tool, "inputSchema"), *args = json_object();
    size_t i;
    json_t *req;
    json_array_foreach(json_object_get(schema, "required"), i, req) {
        const char *k = json_string_value(req);
        const char *t = json_string_value(
            json_object_get(json_object_get(json_object_get(schema, "properties"), k), "type"));
        json_t *v = !t || !strcmp(t, "string") ? json_string("x")
                    : !strcmp(t, "boolean")     ? json_true()
                    : !strcmp(t, "object")      ? json_object()
                    : !strcmp(t, "array")       ? json_array()
                                                : json_integer(1);
        if (!k || !args || json_object_set_new(args, k, v) != 0) {
            if (!k || !args)
                json_decref(v); /* set_new takes v, also when it fails */
            fprintf(stderr, "%s: cannot build the arguments of a tool\n", prog);
        }
    }
    return args;
}

/* List tools and call every one listed. */
static int call_every_tool(tidemark_client_t *c)
{
    json_t *tools = NULL;
    if (tidemark_client_list(c, "tools/list", "tools", &tools) != 0) {
        print_json("tools/list error", tools);
        json_decref(tools);
        return 1;
    }
    int code = 0;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *args = minimal_args(t);
        code |= call_tool(c, json_string_value(json_object_get(t, "name")), args);
        json_decref(args);
    }
    json_decref(tools);
    return code;
}

/* A request whose result is only printed. */
static int request(tidemark_client_t *c, const char *method, json_t *params)
{
    json_t *res = NULL;
    int rc = tidemark_client_request(c, method, params, NULL, NULL, &res);
    print_json(method, res);
    json_decref(res);
    json_decref(params);
    return rc ? 1 : 0;
}

/* Every resource read and every prompt got, after every tool called. */
static int everything(tidemark_client_t *c)
{
    int code = call_every_tool(c);
    json_t *items = NULL;
    size_t i;
    json_t *e;
    if (tidemark_client_list(c, "resources/list", "resources", &items) != 0)
        code = 1;
    else
        json_array_foreach(items, i, e)
            code |= request(c, "resources/read", json_pack("{s:O}", "uri", json_object_get(e, "uri")));
    json_decref(items);
    items = NULL;
    if (tidemark_client_list(c, "prompts/list", "prompts", &items) != 0)
        code = 1;
    else
        json_array_foreach(items, i, e)
            code |= request(c, "prompts/get", json_pack("{s:O,s:{}}", "name",
                                                        json_object_get(e, "name"), "arguments"));
    json_decref(items);
    return code;
}

/* The calls the runner's context names (toolCalls: [{name, arguments}]). */
static int context_calls(tidemark_client_t *c)
{
    const char *ctx = getenv("MCP_CONFORMANCE_CONTEXT");
    json_t *v = ctx ? json_loads(ctx, 0, NULL) : NULL;
    if (list_tools(c)) {
        json_decref(v);
        return 1;
    }
    int code = json_array_size(json_object_get(v, "toolCalls")) ? 0 : 1;
    size_t i;
    json_t *call;
    json_array_foreach(json_object_get(v, "toolCalls"), i, call)
        code |= call_tool(c, json_string_value(json_object_get(call, "name")),
                          json_object_get(call, "arguments"));
    json_decref(v);
    return code;
}

/* The input schema of one listed tool, sent back as it came through another. */
static int echo_schema(tidemark_client_t *c, const char *from, const char *echo)
{
    json_t *tools = NULL;
    int code = tidemark_client_list(c, "tools/list", "tools", &tools) != 0;
    json_t *schema = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (name && !strcmp(name, from))
            schema = json_object_get(t, "inputSchema");
    }
    json_t *args = schema ? json_pack("{s:O}", "schema", schema) : NULL;
    code = args ? call_tool(c, echo, args) : 1;
    json_decref(args);
    json_decref(tools);
    return code;
}

static int run_scenario(tidemark_client_t *c, const char *scenario)
{
    if (!strcmp(scenario, "json-schema-2020-12-preservation"))
        return echo_schema(c, "json_schema_2020_12_tool", "json_schema_echo");
    if (!strcmp(scenario, "sep-2322-client-request-state") ||
        !strcmp(scenario, "http-invalid-tool-headers"))
        return call_every_tool(c);
    if (!strcmp(scenario, "http-standard-headers"))
        return everything(c);
    if (!strcmp(scenario, "http-custom-headers"))
        return context_calls(c);
    if (!strcmp(scenario, "tools_call")) {
        if (list_tools(c))
            return 1;
        json_t *args = json_pack("{s:i,s:i}", "a", 5, "b", 3);
        int rc = call_tool(c, "add_numbers", args);
        json_decref(args);
        return rc;
    }
    if (!strcmp(scenario, "elicitation-sep1034-client-defaults")) {
        if (list_tools(c))
            return 1;
        /* The server sends its elicitation on the standalone stream and
         * drops it while none is open: wait until ours is. */
        if (tidemark_client_wait_standalone(c, 10000) != 0) {
            fprintf(stderr, "%s: the standalone stream did not open\n", prog);
            return 1;
        }
        return call_tool(c, "test_client_elicitation_defaults", NULL);
    }
    if (!strcmp(scenario, "sse-retry")) {
        if (list_tools(c))
            return 1;
        return call_tool(c, "test_reconnection", NULL);
    }
    if (!strncmp(scenario, "auth/", 5)) {
        /* Authorization: the first request meets the 401 and is authorized;
         * a second one (a call) sees whether the token holds, or, when the
         * server moved to another authorization server, re-authorizes. */
        if (list_tools(c))
            return 1;
        return call_tool(c, "test-tool", NULL);
    }
    /* initialize, and scenarios this program has no script for. */
    return list_tools(c);
}

int main(int argc, char **argv)
{
    const char *scenario = getenv("MCP_CONFORMANCE_SCENARIO");
    const char *url = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scenario") && i + 1 < argc) {
            scenario = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("Usage: %s [--scenario NAME] URL\n"
                   "  The scenario defaults to $MCP_CONFORMANCE_SCENARIO.\n"
                   "  --version  print the version and exit\n", prog);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("%s %s\n", prog, tidemark_version(NULL));
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "%s: unknown option %s\n", prog, argv[i]);
            return 2;
        } else {
            url = argv[i]; /* the runner appends the URL last */
        }
    }
    if (!url) {
        fprintf(stderr, "Usage: %s [--scenario NAME] URL\n", prog);
        return 2;
    }
    if (!scenario || !scenario[0])
        scenario = "initialize";
    fprintf(stderr, "%s: scenario %s, server %s\n", prog, scenario, url);

    tidemark_client_config_t cfg;
    if (tidemark_client_config_init(&cfg) != 0)
        return 1;
    cfg.url = url;
    cfg.state_path = NULL; /* in memory: every run is a fresh session */
    cfg.name = "tidemark-conformance-client";
    cfg.timeout_ms = 20000; /* inside the runner's 30 s */
    cfg.on_request = on_request;
    cfg.on_notification = on_notification;
    /* The suite's servers use their own event ids: resume their streams
     * anyway (deduplicated by event id), and keep the standalone stream
     * open as SDK clients do, since some scenarios send requests there. */
    cfg.opaque_policy = TIDEMARK_OPAQUE_RESUME;
    cfg.open_standalone = scenario && !strcmp(scenario, "elicitation-sep1034-client-defaults");
    /* The runner says which revision it tests: 2026-07-28 finds the era out
     * (discover first), an older one is a legacy run. */
    const char *rev = getenv("MCP_CONFORMANCE_PROTOCOL_VERSION");
    cfg.protocol = rev && !strcmp(rev, TIDEMARK_CLIENT_MODERN_VERSION) ? TIDEMARK_PROTOCOL_AUTO
                                                                       : TIDEMARK_PROTOCOL_LEGACY;
    /* Authorization as the suite's scenarios expect it: a client metadata
     * document URL (used where the server supports it), the pre-registered
     * client the runner names in MCP_CONFORMANCE_CONTEXT, and the
     * authorization server's redirect taken as it comes (its scenarios
     * approve at once, without a person). */
    json_t *ctx = getenv("MCP_CONFORMANCE_CONTEXT")
                      ? json_loads(getenv("MCP_CONFORMANCE_CONTEXT"), 0, NULL)
                      : NULL;
    cfg.client_metadata_url = "https://conformance-test.local/client-metadata.json";
    cfg.client_id = json_string_value(json_object_get(ctx, "client_id"));
    cfg.client_secret = json_string_value(json_object_get(ctx, "client_secret"));
    cfg.client_issuer = json_string_value(json_object_get(ctx, "issuer"));
    cfg.redirect_uri = "http://localhost:3000/callback";
    cfg.on_authorize = tidemark_authorize_follow;
    json_t *roots = json_pack("[{s:s,s:s}]", "uri", "file:///tmp/tidemark-conformance", "name",
                              "conformance");
    cfg.roots = roots; /* copied: the roots capability is declared */

    tidemark_client_t *c = NULL;
    int rc = tidemark_client_new(&cfg, &c);
    json_decref(roots);
    json_decref(ctx); /* the client copied what it needs */
    if (rc) {
        fprintf(stderr, "%s: %s\n", prog, tidemark_strerror(rc));
        return 1;
    }
    json_t *err = NULL;
    rc = tidemark_client_connect(c, &err);
    if (rc) {
        fprintf(stderr, "%s: connect: %s\n", prog, tidemark_strerror(rc));
        print_json("error", err);
        json_decref(err);
        tidemark_client_free(c);
        return 1;
    }
    char version[64], session[256];
    int has_session = tidemark_client_session(c, session, sizeof session) == 0;
    if (tidemark_client_protocol_version(c, version, sizeof version) != 0)
        snprintf(version, sizeof version, "(unknown)");
    fprintf(stderr, "%s: connected, protocol %s, session %s\n", prog, version,
            has_session ? session : "(none)");
    int code = run_scenario(c, scenario);
    /* End the session where the server gave one; its answer does not
     * change the scenario's outcome, but a failure is said. */
    if (has_session && (rc = tidemark_client_end_session(c)) != 0)
        fprintf(stderr, "%s: ending the session: %s\n", prog, tidemark_strerror(rc));
    tidemark_client_free(c);
    fprintf(stderr, "%s: %s\n", prog, code ? "FAILED" : "done");
    return code;
}
