/*
 * tidemark-everything - a server offering every tool, resource and prompt
 * the official MCP conformance suite exercises (docs/notes/conformance-server.md),
 * plus the demo tools of tidemark-server (echo, stream). Same flags as tidemark-server.
 */
#include "common/demo_tools.h"
#include "common/server_cli.h"
#include "tidemark/server.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PNG_1X1 "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
#define WAV_TINY "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAAAAA=="
#define EMPTY_SCHEMA "{\"type\":\"object\",\"properties\":{}}"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static json_t *content_result(json_t *items /* stolen array */)
{
    return json_pack("{s:o}", "content", items);
}

static json_t *image(void)
{
    return json_pack("{s:s,s:s,s:s}", "type", "image", "data", PNG_1X1, "mimeType", "image/png");
}

/* ---- tools ------------------------------------------------------------------ */

static int t_simple_text(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = tidemark_result_text("This is a simple text response for testing.");
    return 0;
}

static int t_image(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = content_result(json_pack("[o]", image()));
    return 0;
}

static int t_audio(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = content_result(json_pack("[{s:s,s:s,s:s}]", "type", "audio", "data", WAV_TINY, "mimeType",
                                  "audio/wav"));
    return 0;
}

static int t_embedded(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = content_result(json_pack("[{s:s,s:{s:s,s:s,s:s}}]", "type", "resource", "resource", "uri",
                                  "test://embedded-resource", "mimeType", "text/plain", "text",
                                  "This is an embedded resource content."));
    return 0;
}

static int t_mixed(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = content_result(json_pack("[{s:s,s:s},o,{s:s,s:{s:s,s:s,s:s}}]", "type", "text", "text",
                                  "Multiple content types test:", image(), "type", "resource",
                                  "resource", "uri", "test://mixed-content-resource", "mimeType",
                                  "application/json", "text", "{\"test\":\"data\",\"value\":123}"));
    return 0;
}

static int t_logging(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    static const char *msgs[] = {"Tool execution started", "Tool processing data",
                                 "Tool execution completed"};
    for (int i = 0; i < 3; i++) {
        if (i)
            sleep_ms(50);
        json_t *d = json_string(msgs[i]);
        tidemark_call_log(c, "info", "tidemark-everything", d);
        json_decref(d);
    }
    *r = tidemark_result_text("Tool with logging executed successfully");
    return 0;
}

/* Tells every session subscribed to uri (default test://watched-resource),
 * on every node of a shared store, that the resource changed. */
/* effect_refused: a tool on the atomic path whose effect is refused when
 * it commits (as a constraint would refuse it): the call must be answered
 * effect_failed, in both eras, never the result its handler returned. */
static int refuse_effect(tidemark_txn_t *txn, void *ud)
{
    (void)txn;
    (void)ud;
    return TIDEMARK_EINVAL;
}

static int t_effect_refused(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)args;
    (void)ud;
    int rc = tidemark_call_set_effect(call, refuse_effect, NULL, NULL);
    if (rc)
        return rc;
    *result = tidemark_result_text("this answer must never reach the client");
    return 0;
}

static int t_update_resource(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c;
    const char *uri = json_string_value(json_object_get(a, "uri"));
    int rc = tidemark_server_resource_updated(ud, uri ? uri : "test://watched-resource");
    *r = rc ? tidemark_result_error(tidemark_strerror(rc)) : tidemark_result_text("updated");
    return 0;
}

static int t_progress(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    for (int p = 0; p <= 100; p += 50) {
        if (p)
            sleep_ms(50);
        char msg[64];
        snprintf(msg, sizeof msg, "Completed step %d of 100", p);
        tidemark_call_progress(c, p, 100, msg);
    }
    *r = tidemark_result_text("Progress tool completed");
    return 0;
}

static int t_error(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = tidemark_result_error("This tool intentionally returns an error for testing");
    return 0;
}

static int t_reconnection(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    tidemark_call_close_stream(c); /* SEP-1699: the client resumes with GET */
    sleep_ms(100);
    *r = tidemark_result_text("Reconnection test completed successfully. If you received this, "
                              "the client properly reconnected after stream closure.");
    return 0;
}

static int t_sampling(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)ud;
    const char *prompt = json_string_value(json_object_get(a, "prompt"));
    if (!prompt)
        prompt = "";
    if (!tidemark_call_client_has(c, "sampling")) {
        *r = tidemark_result_error("client does not support sampling");
        return 0;
    }
    json_t *params = json_pack("{s:[{s:s,s:{s:s,s:s}}],s:i}", "messages", "role", "user", "content",
                               "type", "text", "text", prompt, "maxTokens", 100);
    json_t *res = NULL;
    int rc = tidemark_call_request(c, "sampling/createMessage", params, 60000, &res);
    json_decref(params);
    if (rc) {
        json_decref(res);
        *r = tidemark_result_error("sampling failed");
        return 0;
    }
    const char *text = json_string_value(json_object_get(json_object_get(res, "content"), "text"));
    char *out = malloc(strlen(text ? text : "") + 32);
    sprintf(out, "LLM response: %s", text ? text : "");
    *r = tidemark_result_text(out);
    free(out);
    json_decref(res);
    return 0;
}

/* Elicit with the given schema; result text "<prefix>action=.., content=..". */
static int elicit(tidemark_call_t *c, const char *message, const char *schema, const char *prefix,
                  json_t **r)
{
    if (!tidemark_call_client_has(c, "elicitation")) {
        *r = tidemark_result_error("client does not support elicitation");
        return 0;
    }
    json_t *params = json_pack("{s:s,s:s,s:o}", "mode", "form", "message", message,
                               "requestedSchema", json_loads(schema, 0, NULL));
    json_t *res = NULL;
    int rc = tidemark_call_request(c, "elicitation/create", params, 60000, &res);
    json_decref(params);
    if (rc) {
        json_decref(res);
        *r = tidemark_result_error("elicitation failed");
        return 0;
    }
    const char *action = json_string_value(json_object_get(res, "action"));
    json_t *content = json_object_get(res, "content");
    char *ctext = json_dumps(content ? content : json_object(), JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t n = strlen(prefix) + strlen(ctext ? ctext : "") + 64;
    char *out = malloc(n);
    snprintf(out, n, "%saction=%s, content=%s", prefix, action ? action : "", ctext ? ctext : "{}");
    *r = tidemark_result_text(out);
    free(out);
    free(ctext);
    json_decref(res);
    return 0;
}

static int t_elicitation(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)ud;
    const char *msg = json_string_value(json_object_get(a, "message"));
    return elicit(c, msg ? msg : "Please provide your information",
                  "{\"type\":\"object\",\"properties\":{\"username\":{\"type\":\"string\","
                  "\"description\":\"User's response\"},\"email\":{\"type\":\"string\","
                  "\"description\":\"User's email address\"}},\"required\":[\"username\",\"email\"]}",
                  "User response: ", r);
}

static int t_sep1034(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    return elicit(
        c, "Please review and update the form fields with defaults",
        "{\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\",\"description\":\"User name\",\"default\":\"John Doe\"},"
        "\"age\":{\"type\":\"integer\",\"description\":\"User age\",\"default\":30},"
        "\"score\":{\"type\":\"number\",\"description\":\"User score\",\"default\":95.5},"
        "\"status\":{\"type\":\"string\",\"description\":\"User status\",\"enum\":[\"active\","
        "\"inactive\",\"pending\"],\"default\":\"active\"},"
        "\"verified\":{\"type\":\"boolean\",\"description\":\"Verification status\",\"default\":true}"
        "},\"required\":[]}",
        "Elicitation completed: ", r);
}

static int t_sep1330(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    return elicit(
        c, "Please select options from the enum fields",
        "{\"type\":\"object\",\"properties\":{"
        "\"untitledSingle\":{\"type\":\"string\",\"description\":\"Select one option\",\"enum\":"
        "[\"option1\",\"option2\",\"option3\"]},"
        "\"titledSingle\":{\"type\":\"string\",\"description\":\"Select one option with titles\","
        "\"oneOf\":[{\"const\":\"value1\",\"title\":\"First Option\"},{\"const\":\"value2\",\"title\":"
        "\"Second Option\"},{\"const\":\"value3\",\"title\":\"Third Option\"}]},"
        "\"legacyEnum\":{\"type\":\"string\",\"description\":\"Select one option (legacy)\",\"enum\":"
        "[\"opt1\",\"opt2\",\"opt3\"],\"enumNames\":[\"Option One\",\"Option Two\",\"Option Three\"]},"
        "\"untitledMulti\":{\"type\":\"array\",\"description\":\"Select multiple options\","
        "\"minItems\":1,\"maxItems\":3,\"items\":{\"type\":\"string\",\"enum\":[\"option1\","
        "\"option2\",\"option3\"]}},"
        "\"titledMulti\":{\"type\":\"array\",\"description\":\"Select multiple options with titles\","
        "\"minItems\":1,\"maxItems\":3,\"items\":{\"anyOf\":[{\"const\":\"value1\",\"title\":"
        "\"First Choice\"},{\"const\":\"value2\",\"title\":\"Second Choice\"},{\"const\":\"value3\","
        "\"title\":\"Third Choice\"}]}}},\"required\":[]}",
        "Elicitation completed: ", r);
}

static int t_schema2020(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)ud;
    char *args = json_dumps(a, JSON_COMPACT);
    size_t n = strlen(args ? args : "") + 64;
    char *out = malloc(n);
    snprintf(out, n, "JSON Schema 2020-12 tool called with: %s", args ? args : "{}");
    *r = tidemark_result_text(out);
    free(out);
    free(args);
    return 0;
}

/* ---- 2026-07-28: multi round-trip requests (tidemark_call_input) ------------- */

#define NAME_SCHEMA(field)                                                                   \
    "{\"type\":\"object\",\"properties\":{\"" field "\":{\"type\":\"string\"}},\"required\":[\"" field "\"]}"

/* Ask the client for one input; 0 with *res, else the code (TIDEMARK_EINPUT:
 * the call ends with an InputRequiredResult and comes back with the answer). */
static int ask_elicit(tidemark_call_t *c, const char *key, const char *message, const char *schema,
                      json_t **res)
{
    json_t *p = json_pack("{s:s,s:s,s:o}", "mode", "form", "message", message, "requestedSchema",
                          json_loads(schema, 0, NULL));
    int rc = tidemark_call_input(c, key, "elicitation/create", p, 60000, res);
    json_decref(p);
    return rc;
}

static int ask_sample(tidemark_call_t *c, const char *key, const char *question, json_t **res)
{
    json_t *p = json_pack("{s:[{s:s,s:{s:s,s:s}}],s:i}", "messages", "role", "user", "content",
                          "type", "text", "text", question, "maxTokens", 100);
    int rc = tidemark_call_input(c, key, "sampling/createMessage", p, 60000, res);
    json_decref(p);
    return rc;
}

static const char *content_str(json_t *res, const char *field)
{
    const char *v = json_string_value(json_object_get(json_object_get(res, "content"), field));
    return v ? v : "";
}

static int text_result(json_t **r, const char *fmt, const char *a, const char *b)
{
    char *t = NULL;
    if (asprintf(&t, fmt, a, b) < 0)
        return TIDEMARK_ENOMEM;
    *r = tidemark_result_text(t);
    free(t);
    return 0;
}

static int t_irr_elicitation(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_elicit(c, "user_name", "What is your name?", NAME_SCHEMA("name"), &res);
    if (rc)
        return rc;
    rc = text_result(r, "Hello, %s!%s", content_str(res, "name"), "");
    json_decref(res);
    return rc;
}

static int t_irr_sampling(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_sample(c, "capital_question", "What is the capital of France?", &res);
    if (rc)
        return rc;
    rc = text_result(r, "LLM response: %s%s", content_str(res, "text"), "");
    json_decref(res);
    return rc;
}

static int t_irr_roots(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = tidemark_call_input(c, "client_roots", "roots/list", NULL, 60000, &res);
    if (rc)
        return rc;
    char *roots = json_dumps(json_object_get(res, "roots"), JSON_COMPACT | JSON_ENCODE_ANY);
    rc = text_result(r, "Client roots: %s%s", roots ? roots : "[]", "");
    free(roots);
    json_decref(res);
    return rc;
}

static int t_irr_state(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_elicit(c, "confirm", "Please confirm to continue",
                        "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}}}", &res);
    if (rc)
        return rc;
    json_decref(res);
    *r = tidemark_result_text("state-ok: the request state was verified");
    return 0;
}

/* All three at once: every unanswered one goes out in the same round. */
static int t_irr_multiple(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *name = NULL, *llm = NULL, *roots = NULL;
    int r1 = ask_elicit(c, "user_name", "What is your name?", NAME_SCHEMA("name"), &name);
    int r2 = ask_sample(c, "capital_question", "What is the capital of France?", &llm);
    int r3 = tidemark_call_input(c, "client_roots", "roots/list", NULL, 60000, &roots);
    int rc = r1 ? r1 : r2 ? r2 : r3;
    if (rc == 0)
        rc = text_result(r, "name=%s, llm=%s", content_str(name, "name"), content_str(llm, "text"));
    json_decref(name);
    json_decref(llm);
    json_decref(roots);
    return rc;
}

static int t_irr_rounds(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *n = NULL, *col = NULL;
    int rc = ask_elicit(c, "step1", "Step 1: What is your name?", NAME_SCHEMA("name"), &n);
    if (rc == 0)
        rc = ask_elicit(c, "step2", "Step 2: What is your favorite color?", NAME_SCHEMA("color"),
                        &col);
    if (rc == 0)
        rc = text_result(r, "%s likes %s", content_str(n, "name"), content_str(col, "color"));
    json_decref(n);
    json_decref(col);
    return rc;
}

/* Asks only for what the request's capabilities allow. */
static int t_irr_caps(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *x = NULL, *y = NULL;
    int rc = 0;
    if (tidemark_call_client_has(c, "elicitation"))
        rc = ask_elicit(c, "user_name", "What is your name?", NAME_SCHEMA("name"), &x);
    if (tidemark_call_client_has(c, "sampling")) {
        int rs = ask_sample(c, "capital_question", "What is the capital of France?", &y);
        rc = rc ? rc : rs;
    }
    json_decref(x);
    json_decref(y);
    if (rc)
        return rc;
    *r = tidemark_result_text("capabilities respected");
    return 0;
}

/* Counts its runs (a retry re-runs it from the start): "runs=N" once the
 * client answered "go"; a refused requestState never runs it. */
static int t_mrtr_runs(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    static atomic_int runs;
    int n = atomic_fetch_add(&runs, 1) + 1;
    json_t *res = NULL;
    int rc = ask_elicit(c, "go", "Go on?", NAME_SCHEMA("go"), &res);
    json_decref(res);
    if (rc)
        return rc;
    char txt[32];
    snprintf(txt, sizeof txt, "runs=%d", n);
    return text_result(r, "%s%s", txt, "");
}

/* Needs sampling whatever the client declared: MissingRequiredClientCapability. */
static int t_missing_cap(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_sample(c, NULL, "Hello", &res);
    json_decref(res);
    if (rc)
        return rc;
    *r = tidemark_result_text("sampled");
    return 0;
}

static tidemark_server_t *g_srv;

static int p_dynamic(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = json_pack("{s:[o]}", "messages", json_pack("{s:s,s:o}", "role", "user", "content",
                                                    tidemark_content_text("dynamic")));
    return 0;
}

/* (Re)registers a tool or prompt (ud "tool" / "prompt"): list_changed
 * reaches every session and listener, on every node of a shared store. */
static int t_trigger(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a;
    int rc;
    if (strcmp(ud, "prompt") == 0) {
        tidemark_prompt_t p = {.name = "test_dynamic_prompt", .description = "Added at run time",
                               .fn = p_dynamic};
        rc = tidemark_server_add_prompt(g_srv, &p);
    } else {
        tidemark_tool_t t = {.name = "test_dynamic_tool", .description = "Added at run time",
                             .input_schema = EMPTY_SCHEMA, .fn = t_simple_text};
        rc = tidemark_server_add_tool(g_srv, &t);
    }
    *r = rc ? tidemark_result_error(tidemark_strerror(rc)) : tidemark_result_text("list changed");
    return 0;
}

/* Its region argument is mirrored in the Mcp-Param-Region header. */
static int t_header(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)ud;
    const char *region = json_string_value(json_object_get(a, "region"));
    return text_result(r, "region=%s%s", region ? region : "", "");
}

/* ---- resources ---------------------------------------------------------------- */

/* ---- tasks (io.modelcontextprotocol/tasks): the conformance suite's fixtures ---- */

/* Sleep ms in steps, 1 as soon as the call is cancelled. */
static int sleep_cancellable(tidemark_call_t *c, long ms)
{
    for (long t = 0; t < ms; t += 10) {
        if (tidemark_call_cancelled(c))
            return 1;
        sleep_ms(ms - t < 10 ? ms - t : 10);
    }
    return tidemark_call_cancelled(c);
}

static int t_greet(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)ud;
    const char *name = json_string_value(json_object_get(a, "name"));
    return text_result(r, "Hello, %s!%s", name ? name : "World", "");
}

static int t_slow_compute(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)ud;
    double s = json_number_value(json_object_get(a, "seconds"));
    const char *label = json_string_value(json_object_get(a, "label"));
    if (s < 0 || s > 600)
        s = 0;
    if (sleep_cancellable(c, (long)(s * 1000))) /* the task ends cancelled */
        return text_result(r, "cancelled %s%s", label ? label : "", "");
    char secs[32];
    snprintf(secs, sizeof secs, "%g", s);
    return text_result(r, "Computed %s in %ss", label ? label : "result", secs);
}

static int t_failing_job(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    if (sleep_cancellable(c, 1000))
        return text_result(r, "cancelled%s%s", "", "");
    *r = tidemark_result_error("The job failed (as it always does)");
    return 0;
}

static int t_protocol_error_job(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)r, (void)ud;
    return TIDEMARK_EINVAL; /* a JSON-RPC error: the task ends failed */
}

#define CONFIRM_SCHEMA "{\"type\":\"object\",\"properties\":{\"confirm\":{\"type\":\"boolean\"}}}"

static int t_confirm_delete(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)ud;
    const char *file = json_string_value(json_object_get(a, "filename"));
    json_t *res = NULL;
    int rc = ask_elicit(c, "confirm", "Delete this file?", CONFIRM_SCHEMA, &res);
    if (rc)
        return rc;
    const char *action = json_string_value(json_object_get(res, "action"));
    int yes = action && strcmp(action, "accept") == 0 &&
              json_is_true(json_object_get(json_object_get(res, "content"), "confirm"));
    json_decref(res);
    return text_result(r, yes ? "Deleted %s%s" : "Kept %s%s", file ? file : "the file", "");
}

static int t_multi_input(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *one = NULL, *two = NULL;
    int rc1 = ask_elicit(c, "first", "First input", NAME_SCHEMA("name"), &one);
    int rc2 = ask_elicit(c, "second", "Second input", NAME_SCHEMA("name"), &two);
    int rc = rc1 ? rc1 : rc2;
    if (rc == 0)
        rc = text_result(r, "Got %s and %s", content_str(one, "name"), content_str(two, "name"));
    json_decref(one);
    json_decref(two);
    return rc;
}

static int t_tool_with_task(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_elicit(c, "user_name", "What is your name?", NAME_SCHEMA("name"), &res);
    if (rc)
        return rc;
    rc = text_result(r, "Hello, %s! (from a task)%s", content_str(res, "name"), "");
    json_decref(res);
    return rc;
}

static int tasks_register(tidemark_server_t *srv)
{
    static const struct {
        const char *name, *desc, *schema;
        tidemark_tool_fn fn;
        unsigned task;
    } t[] = {
        {"greet", "Says hello (never a task)", NAME_SCHEMA("name"), t_greet, TIDEMARK_TASK_NEVER},
        {"slow_compute", "Sleeps for seconds, then answers (a task when the client can)",
         "{\"type\":\"object\",\"properties\":{\"seconds\":{\"type\":\"number\"},"
         "\"label\":{\"type\":\"string\"}}}",
         t_slow_compute, TIDEMARK_TASK_OPTIONAL},
        {"failing_job", "Fails with a tool error after a second (always a task)", EMPTY_SCHEMA,
         t_failing_job, TIDEMARK_TASK_REQUIRED},
        {"protocol_error_job", "Fails with a JSON-RPC error (a task)", EMPTY_SCHEMA,
         t_protocol_error_job, TIDEMARK_TASK_OPTIONAL},
        {"confirm_delete", "Asks for confirmation inside the task",
         "{\"type\":\"object\",\"properties\":{\"filename\":{\"type\":\"string\"}}}",
         t_confirm_delete, TIDEMARK_TASK_OPTIONAL},
        {"multi_input", "Asks for two inputs at once inside the task", EMPTY_SCHEMA,
         t_multi_input, TIDEMARK_TASK_OPTIONAL},
        {"test_tool_with_task", "Asks for a name by multi round-trip, then runs as a task",
         EMPTY_SCHEMA, t_tool_with_task, TIDEMARK_TASK_REQUIRED | TIDEMARK_TASK_INPUTS_FIRST},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tidemark_tool_t tool = {.name = t[i].name, .description = t[i].desc,
                                .input_schema = t[i].schema, .fn = t[i].fn, .task = t[i].task};
        if (tidemark_server_add_tool(srv, &tool) != 0) {
            fprintf(stderr, "cannot register tool %s\n", t[i].name);
            return 1;
        }
    }
    /* tests of retention: a task readable for 1.5 s only */
    const tidemark_tool_t brief = {.name = "short_lived_task", .description = "slow_compute, kept 1.5 s",
                                   .input_schema = t[1].schema, .fn = t_slow_compute,
                                   .task = TIDEMARK_TASK_REQUIRED, .task_ttl_ms = 1500};
    return tidemark_server_add_tool(srv, &brief) != 0;
}

static int r_text(tidemark_call_t *c, const char *uri, json_t **out, void *ud)
{
    (void)c;
    *out = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "text/plain", "text", (const char *)ud);
    return 0;
}

static int r_binary(tidemark_call_t *c, const char *uri, json_t **out, void *ud)
{
    (void)c, (void)ud;
    *out = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "image/png", "blob", PNG_1X1);
    return 0;
}

static int r_template(tidemark_call_t *c, const char *uri, json_t **out, void *ud)
{
    (void)c, (void)ud;
    const char *prefix = "test://template/";
    const char *start = uri + strlen(prefix), *end = strstr(start, "/data");
    if (strncmp(uri, prefix, strlen(prefix)) != 0 || !end)
        return TIDEMARK_ENOTFOUND;
    char id[256];
    snprintf(id, sizeof id, "%.*s", (int)(end - start), start);
    char data[300];
    snprintf(data, sizeof data, "Data for ID: %s", id);
    json_t *body = json_pack("{s:s,s:b,s:s}", "id", id, "templateTest", 1, "data", data);
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(body);
    *out = json_pack("[{s:s,s:s,s:s}]", "uri", uri, "mimeType", "application/json", "text", text);
    free(text);
    return 0;
}

/* ---- prompts ---------------------------------------------------------------- */

static json_t *user(json_t *content) { return json_pack("{s:s,s:o}", "role", "user", "content", content); }

static int p_simple(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = json_pack("{s:[o]}", "messages", user(tidemark_content_text("This is a simple prompt for testing.")));
    return 0;
}

static int p_args(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)ud;
    const char *a1 = json_string_value(json_object_get(a, "arg1"));
    const char *a2 = json_string_value(json_object_get(a, "arg2"));
    char *text = NULL;
    if (asprintf(&text, "Prompt with arguments: arg1='%s', arg2='%s'", a1 ? a1 : "", a2 ? a2 : "") < 0)
        return TIDEMARK_ENOMEM;
    *r = json_pack("{s:[o]}", "messages", user(tidemark_content_text(text)));
    free(text);
    return 0;
}

static int p_embedded(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)ud;
    const char *uri = json_string_value(json_object_get(a, "resourceUri"));
    *r = json_pack("{s:[o,o]}", "messages",
                   user(json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "resource", "resource", "uri",
                                  uri ? uri : "test://example-resource", "mimeType", "text/plain",
                                  "text", "Embedded resource content for testing.")),
                   user(tidemark_content_text("Please process the embedded resource above.")));
    return 0;
}

static int p_image(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)c, (void)a, (void)ud;
    *r = json_pack("{s:[o,o]}", "messages", user(image()),
                   user(tidemark_content_text("Please analyze the image above.")));
    return 0;
}

static int p_irr(tidemark_call_t *c, json_t *a, json_t **r, void *ud)
{
    (void)a, (void)ud;
    json_t *res = NULL;
    int rc = ask_elicit(c, "user_context", "What context should the prompt use?",
                        NAME_SCHEMA("context"), &res);
    if (rc)
        return rc;
    char *t = NULL;
    if (asprintf(&t, "Use this context: %s", content_str(res, "context")) < 0)
        t = NULL;
    json_decref(res);
    *r = json_pack("{s:[o]}", "messages", user(tidemark_content_text(t ? t : "")));
    free(t);
    return 0;
}

static int complete(tidemark_call_t *c, json_t *ref, json_t *arg, json_t *ctx, json_t **values, void *ud)
{
    (void)c, (void)ref, (void)ctx, (void)ud;
    static const char *words[] = {"paris", "park", "party", "testValue1", "testValue2", NULL};
    const char *prefix = json_string_value(json_object_get(arg, "value"));
    *values = json_array();
    for (int i = 0; words[i]; i++)
        if (!prefix || strncmp(words[i], prefix, strlen(prefix)) == 0)
            json_array_append_new(*values, json_string(words[i]));
    return 0;
}

int main(int argc, char **argv)
{
    server_cli cli;
    int rc = server_cli_parse(&cli, argc, argv, "tidemark-everything",
                              "Tidemark MCP server with every fixture of the MCP conformance suite.");
    if (rc)
        return rc > 0 ? 0 : 2;
    cli.cfg.name = "tidemark-everything";
    tidemark_server_t *srv;
    if (tidemark_server_new(&cli.cfg, &srv) != 0)
        return 1;
    g_srv = srv;

    static const struct {
        const char *name, *desc, *schema;
        tidemark_tool_fn fn;
    } tools[] = {
        {"test_simple_text", "Tests simple text content response", EMPTY_SCHEMA, t_simple_text},
        {"test_image_content", "Tests image content response", EMPTY_SCHEMA, t_image},
        {"test_audio_content", "Tests audio content response", EMPTY_SCHEMA, t_audio},
        {"test_embedded_resource", "Tests embedded resource content response", EMPTY_SCHEMA, t_embedded},
        {"test_multiple_content_types", "Tests response with multiple content types (text, image, resource)",
         EMPTY_SCHEMA, t_mixed},
        {"test_tool_with_logging", "Tests tool that emits log messages during execution", EMPTY_SCHEMA, t_logging},
        {"test_tool_with_progress", "Tests tool that reports progress notifications", EMPTY_SCHEMA, t_progress},
        {"test_error_handling", "Tests error response handling", EMPTY_SCHEMA, t_error},
        {"test_reconnection",
         "Tests SSE stream disconnection and client reconnection (SEP-1699). Server will close the "
         "stream mid-call and send the result after client reconnects.",
         EMPTY_SCHEMA, t_reconnection},
        {"test_sampling", "Tests server-initiated sampling (LLM completion request)",
         "{\"type\":\"object\",\"properties\":{\"prompt\":{\"type\":\"string\",\"description\":"
         "\"The prompt to send to the LLM\"}},\"required\":[\"prompt\"]}",
         t_sampling},
        {"test_elicitation", "Tests server-initiated elicitation (user input request)",
         "{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\",\"description\":"
         "\"The message to show the user\"}},\"required\":[\"message\"]}",
         t_elicitation},
        {"test_elicitation_sep1034_defaults", "Tests elicitation with default values per SEP-1034",
         EMPTY_SCHEMA, t_sep1034},
        {"test_elicitation_sep1330_enums", "Tests elicitation with enum schema improvements per SEP-1330",
         EMPTY_SCHEMA, t_sep1330},
        {"json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features",
         "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
         "\"$defs\":{\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
         "\"city\":{\"type\":\"string\"}}}},\"properties\":{\"name\":{\"type\":\"string\"},"
         "\"address\":{\"$ref\":\"#/$defs/address\"}},\"additionalProperties\":false}",
         t_schema2020},
    };
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        tidemark_tool_t t = {.name = tools[i].name, .description = tools[i].desc,
                             .input_schema = tools[i].schema, .fn = tools[i].fn};
        if (tidemark_server_add_tool(srv, &t) != 0) {
            fprintf(stderr, "cannot register tool %s\n", tools[i].name);
            return 1;
        }
    }
    static const struct {
        const char *name, *desc, *schema;
        tidemark_tool_fn fn;
        void *ud;
    } modern[] = {
        {"test_input_required_result_elicitation", "Asks for the user's name (input_required)",
         EMPTY_SCHEMA, t_irr_elicitation, NULL},
        {"test_input_required_result_sampling", "Asks the client's LLM a question (input_required)",
         EMPTY_SCHEMA, t_irr_sampling, NULL},
        {"test_input_required_result_list_roots", "Asks for the client's roots (input_required)",
         EMPTY_SCHEMA, t_irr_roots, NULL},
        {"test_input_required_result_request_state", "Round trip with a sealed requestState",
         EMPTY_SCHEMA, t_irr_state, NULL},
        {"test_input_required_result_multiple_inputs", "Elicitation, sampling and roots at once",
         EMPTY_SCHEMA, t_irr_multiple, NULL},
        {"test_input_required_result_multi_round", "Two rounds of input", EMPTY_SCHEMA,
         t_irr_rounds, NULL},
        {"test_input_required_result_tampered_state", "Rejects a tampered requestState",
         EMPTY_SCHEMA, t_irr_state, NULL},
        {"test_input_required_result_capabilities", "Asks only for declared capabilities",
         EMPTY_SCHEMA, t_irr_caps, NULL},
        {"test_streaming_elicitation", "Elicitation through an InputRequiredResult", EMPTY_SCHEMA,
         t_irr_elicitation, NULL},
        {"test_mrtr_runs", "Counts how often it ran (one input)", EMPTY_SCHEMA, t_mrtr_runs,
         NULL},
        {"test_logging_tool", "Logs three messages (only with a requested log level)",
         EMPTY_SCHEMA, t_logging, NULL},
        {"test_missing_capability", "Needs sampling, whatever the client declared", EMPTY_SCHEMA,
         t_missing_cap, NULL},
        {"test_trigger_tool_change", "Changes the tool list", EMPTY_SCHEMA, t_trigger, "tool"},
        {"test_trigger_prompt_change", "Changes the prompt list", EMPTY_SCHEMA, t_trigger,
         "prompt"},
        {"test_custom_header", "Its region is mirrored in the Mcp-Param-Region header",
         "{\"type\":\"object\",\"properties\":{\"region\":{\"type\":\"string\","
         "\"x-mcp-header\":\"Region\"}},\"required\":[\"region\"]}",
         t_header, NULL},
    };
    for (size_t i = 0; i < sizeof modern / sizeof modern[0]; i++) {
        tidemark_tool_t t = {.name = modern[i].name, .description = modern[i].desc,
                             .input_schema = modern[i].schema, .fn = modern[i].fn,
                             .ud = modern[i].ud};
        if (tidemark_server_add_tool(srv, &t) != 0) {
            fprintf(stderr, "cannot register tool %s\n", modern[i].name);
            return 1;
        }
    }
    const tidemark_tool_t update = {
        .name = "update_resource",
        .description = "Sends notifications/resources/updated for uri (default "
                       "test://watched-resource) to every subscribed session",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"uri\":{\"type\":\"string\"}}}",
        .fn = t_update_resource,
        .ud = srv,
    };
    if (tidemark_server_add_tool(srv, &update) != 0) {
        fprintf(stderr, "cannot register tool update_resource\n");
        return 1;
    }
    const tidemark_tool_t refused = {
        .name = "effect_refused",
        .description = "Its atomic effect is refused at commit: answered effect_failed",
        .fn = t_effect_refused,
        .hints = TIDEMARK_TOOL_ATOMIC,
    };
    if (tidemark_server_add_tool(srv, &refused) != 0) {
        fprintf(stderr, "cannot register tool effect_refused\n");
        return 1;
    }

    tidemark_resource_t res[] = {
        {.uri = "test://static-text", .name = "static-text", .title = "Static Text Resource",
         .description = "A static text resource for testing", .mime_type = "text/plain", .fn = r_text,
         .ud = "This is the content of the static text resource."},
        {.uri = "test://static-binary", .name = "static-binary", .title = "Static Binary Resource",
         .description = "A static binary resource (image) for testing", .mime_type = "image/png",
         .fn = r_binary},
        {.uri = "test://watched-resource", .name = "watched-resource", .title = "Watched Resource",
         .description = "A resource that can be subscribed to", .mime_type = "text/plain",
         .fn = r_text, .ud = "Watched resource content"},
    };
    for (size_t i = 0; i < sizeof res / sizeof res[0]; i++)
        tidemark_server_add_resource(srv, &res[i]);
    tidemark_resource_t tpl = {.uri = "test://template/{id}/data", .name = "template",
                               .title = "Resource Template",
                               .description = "A resource template with parameter substitution",
                               .mime_type = "application/json", .fn = r_template};
    tidemark_server_add_resource_template(srv, &tpl);

    tidemark_prompt_t prompts[] = {
        {.name = "test_simple_prompt", .title = "Simple Test Prompt",
         .description = "A simple prompt without arguments", .fn = p_simple},
        {.name = "test_prompt_with_arguments", .title = "Prompt With Arguments",
         .description = "A prompt with required arguments",
         .arguments = "[{\"name\":\"arg1\",\"description\":\"First test argument\",\"required\":true},"
                      "{\"name\":\"arg2\",\"description\":\"Second test argument\",\"required\":true}]",
         .fn = p_args},
        {.name = "test_prompt_with_embedded_resource", .title = "Prompt With Embedded Resource",
         .description = "A prompt that includes an embedded resource",
         .arguments = "[{\"name\":\"resourceUri\",\"description\":\"URI of the resource to embed\","
                      "\"required\":true}]",
         .fn = p_embedded},
        {.name = "test_prompt_with_image", .title = "Prompt With Image",
         .description = "A prompt that includes image content", .fn = p_image},
        {.name = "test_input_required_result_prompt", .title = "Prompt With Input",
         .description = "Asks the client for context first (input_required)", .fn = p_irr},
    };
    for (size_t i = 0; i < sizeof prompts / sizeof prompts[0]; i++)
        tidemark_server_add_prompt(srv, &prompts[i]);
    tidemark_server_set_completion(srv, complete, NULL);
    if (tasks_register(srv) != 0)
        return 1;
    if (demo_tools_register(srv) != 0)
        return 1;

    rc = server_cli_run(srv, &cli);
    tidemark_server_free(srv);
    return rc;
}
