/* dispatch.c - MCP methods: lifecycle, tools, resources, prompts,
 * completion, logging, ping. Runs on worker threads. */
#include "server_int.h"
#include "../base/clock.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static json_t *err(json_t *id, int code, const char *reason, const char *msg)
{
    return tm_jsonrpc_error(id, code, msg, reason, NULL);
}

/* initialize over a limit on sessions: typed, with the limit and whose. */
static json_t *too_many_sessions(tidemark_server_t *srv, json_t *id, int status)
{
    int per = status == 429;
    return tm_jsonrpc_error(
        id, TM_RPC_SERVER_ERROR,
        per ? "Too Many Requests: this address has as many sessions as it may"
            : "Service Unavailable: the server holds as many sessions as it may",
        "too_many_sessions",
        json_pack("{s:s,s:I}", "scope", per ? "address" : "server", "limit",
                  (json_int_t)(per ? srv->cfg.max_sessions_per_address : srv->cfg.max_sessions)));
}

json_t *tm_dispatch_initialize(tidemark_server_t *srv, const tm_msg *m, const char *principal,
                               const char *addr, tm_sess **out)
{
    *out = NULL;
    json_t *params = m->params;
    json_t *pv = json_object_get(params, "protocolVersion");
    if (!json_is_object(params) || !json_is_string(pv))
        return err(m->id, TM_RPC_INVALID_PARAMS, "invalid_params",
                   "initialize needs params.protocolVersion");
    const char *want = json_string_value(pv);
    const char *chosen = tm_protocol_version_supported(want) ? want : tm_protocol_versions[0];
    char id[TM_SESSION_ID_LEN + 1];
    if (tm_random_hex(id, TM_SESSION_ID_LEN / 2) != 0)
        return err(m->id, TM_RPC_INTERNAL_ERROR, "internal_error", "no randomness");
    int rc = tm_sess_bound_admit(srv, addr, id); /* its place, taken before it exists */
    if (rc > 0)
        return too_many_sessions(srv, m->id, rc);
    if (rc)
        return err(m->id, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory");
    json_t *client = json_object();
    json_object_set(client, "clientInfo", json_object_get(params, "clientInfo"));
    json_t *caps = json_object_get(params, "capabilities");
    json_object_set(client, "capabilities", json_is_object(caps) ? caps : json_object());
    json_object_set_new(client, TM_CLIENT_PRINCIPAL, json_string(principal)); /* its owner */
    if (addr) /* where its place is counted, after a restart too */
        json_object_set_new(client, TM_CLIENT_ADDRESS, json_string(addr));
    char *client_txt = json_dumps(client, JSON_COMPACT);
    int64_t now = tm_wall_ms();
    tm_session_rec rec = {.id = id, .protocol_version = (char *)chosen, .client = client_txt,
                          .created_ms = now, .last_seen_ms = now};
    rc = tm_store_session_create(srv->store, &rec);
    char g[TM_STREAM_MAX];
    if (rc == 0)
        rc = tm_store_stream_open(srv->store, id, "g", g);
    free(client_txt);
    tm_sess *s = rc == 0 ? tm_sess_new(id, chosen, client) : NULL;
    json_decref(client);
    if (!s)
        tm_sess_bound_drop(srv, id);
    if (!s && rc == TIDEMARK_EIO)
        return err(m->id, TM_RPC_INTERNAL_ERROR, tm_store_unavailable_reason(srv->store),
                   "the store does not take writes now");
    if (!s)
        return err(m->id, TM_RPC_INTERNAL_ERROR, "store_error", "cannot create session");
    if (!tm_store_shared(srv->store)) /* no other node begins its records */
        tm_sess_know_records(s);
    pthread_mutex_lock(&srv->mu);
    rc = tm_map_put(srv->sessions, s->id, tm_sess_ref(s));
    if (rc == 0)
        tm_gauge_add(srv->m.sessions_open, 1);
    pthread_mutex_unlock(&srv->mu);
    if (rc) {
        tm_sess_unref(s);
        tm_sess_unref(s);
        return err(m->id, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory");
    }
    char tag[16];
    TM_INFO("session %s initialized (%s)", tm_sid_tag(s->id, tag), chosen);
    json_t *res = json_pack(
        "{s:s,s:{s:{s:b},s:{s:b,s:b},s:{s:b},s:{},s:{}},s:{s:s,s:s}}", "protocolVersion", chosen,
        "capabilities", "tools", "listChanged", 1, "resources", "subscribe", 1, "listChanged", 1,
        "prompts", "listChanged", 1, "logging", "completions", "serverInfo", "name", srv->name,
        "version", srv->version);
    if (srv->instructions)
        json_object_set_new(res, "instructions", json_string(srv->instructions));
    *out = s;
    return tm_jsonrpc_result(m->id, res);
}

static const char *cursor_of(json_t *params)
{
    return json_string_value(json_object_get(params, "cursor"));
}

static json_t *list(tidemark_call_t *c, tm_reg_kind k, const char *field)
{
    json_t *page;
    json_t *cur = json_object_get(c->params, "cursor");
    if (cur && !json_is_string(cur))
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_cursor", "cursor must be a string");
    if (tm_registry_page(c->srv->reg, k, field, cursor_of(c->params), c->srv->cfg.page_size,
                         &page) != 0)
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_cursor", "Invalid cursor");
    return tm_jsonrpc_result(c->id, page);
}

/* The error a handler chose (TIDEMARK_EPEER with a JSON-RPC error object in
 * out: a gateway passing its upstream's on): a response with the call's id,
 * or NULL when out is not such an object. Takes out. */
static json_t *handler_error(tidemark_call_t *c, json_t *out)
{
    json_t *code = json_object_get(out, "code");
    json_t *msg = json_object_get(out, "message");
    json_t *resp = NULL;
    if (json_is_integer(code) && json_is_string(msg))
        resp = json_pack("{s:s,s:O,s:O}", "jsonrpc", "2.0", "id", c->id, "error", out);
    json_decref(out);
    return resp;
}

/* A handler returned rc (out: what it left in its OUT parameter; taken). */
static json_t *handler_failed(tidemark_call_t *c, int rc, json_t *out)
{
    if (rc == TIDEMARK_ECANCELED || atomic_load(&c->cancelled)) {
        json_decref(out);
        return NULL; /* no response after cancellation */
    }
    json_t *cap = tm_mrtr_missing_capability(c);
    if (cap) {
        json_decref(out);
        return cap;
    }
    json_t *chosen = rc == TIDEMARK_EPEER ? handler_error(c, out) : (json_decref(out), NULL);
    if (chosen)
        return chosen;
    json_t *x = json_pack("{s:s}", "error", tidemark_strerror(rc));
    return tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR, "Handler failed", "handler_failed", x);
}

static json_t *tools_call(tidemark_call_t *c)
{
    const char *name = json_string_value(json_object_get(c->params, "name"));
    if (!name)
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "tools/call needs params.name");
    json_t *args = json_object_get(c->params, "arguments");
    if (args && !json_is_object(args))
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "arguments must be an object");
    tm_reg_entry e;
    if (tm_registry_get(c->srv->reg, TM_REG_TOOL, name, &e) != 0) {
        json_t *x = json_pack("{s:s}", "tool", name);
        return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS, "Unknown tool", "unknown_tool", x);
    }
    json_decref(e.desc);
    c->hints = e.hints;
    /* The "started" record was queued with the stream's first event; a
     * tool that is not idempotent runs only once it is durable: exactly,
     * by the store position taken before it was queued. */
    if (c->recorded && !c->recovering && !c->inline_run && !(e.hints & TIDEMARK_TOOL_IDEMPOTENT)) {
        int rc = tm_store_sync_since(c->srv->store, c->mark);
        c->unrecorded = rc != 0;
        if (rc)
            return tm_jsonrpc_error(c->id, TM_RPC_INTERNAL_ERROR,
                                    "The request could not be recorded; the tool did not run",
                                    "store_failed", NULL);
    }
    TM_CRASH_POINT("TIDEMARK_SERVER_CRASH", "started_before_run");
    json_t *refused = c->modern ? tm_mrtr_begin(c) : NULL;
    if (refused)
        return refused;
    json_t *owned_args = args ? json_incref(args) : json_object();
    json_t *result = NULL;
    int rc = ((tidemark_tool_fn)e.fn)(c, owned_args, &result, e.ud);
    json_decref(owned_args);
    if (rc == TIDEMARK_EAGAIN && c->inline_run) { /* to a worker, from the start */
        json_decref(result);
        tm_call_unrun(c);
        return NULL;
    }
    json_t *more = tm_mrtr_end(c);
    if (more) { /* input required: whatever the handler returned */
        json_decref(result);
        return more;
    }
    if (rc) {
        return handler_failed(c, rc, result);
    }
    if (atomic_load(&c->cancelled)) {
        json_decref(result);
        return NULL;
    }
    if (!json_is_object(result)) {
        json_decref(result);
        result = tidemark_result_text("");
    }
    return tm_jsonrpc_result(c->id, result);
}

/* -32002 in the 2025 versions, -32602 in 2026-07-28; data.uri either way. */
static json_t *not_found(tidemark_call_t *c, const char *uri)
{
    json_t *x = json_pack("{s:s}", "uri", uri);
    return tm_jsonrpc_error(c->id, c->modern ? TM_RPC_INVALID_PARAMS : TM_RPC_RESOURCE_NOT_FOUND,
                            "Resource not found", "resource_not_found", x);
}

static json_t *resources_read(tidemark_call_t *c)
{
    const char *uri = json_string_value(json_object_get(c->params, "uri"));
    if (!uri)
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "resources/read needs params.uri");
    tm_reg_entry e;
    if (tm_registry_get(c->srv->reg, TM_REG_RESOURCE, uri, &e) != 0 &&
        tm_registry_match_template(c->srv->reg, uri, &e) != 0)
        return not_found(c, uri);
    json_decref(e.desc);
    json_t *refused = c->modern ? tm_mrtr_begin(c) : NULL;
    if (refused)
        return refused;
    json_t *contents = NULL;
    int rc = ((tidemark_resource_fn)e.fn)(c, uri, &contents, e.ud);
    json_t *more = tm_mrtr_end(c);
    if (more) {
        json_decref(contents);
        return more;
    }
    if (rc == TIDEMARK_ENOTFOUND) {
        json_decref(contents);
        return not_found(c, uri);
    }
    if (rc) {
        return handler_failed(c, rc, contents);
    }
    if (!json_is_array(contents)) {
        json_decref(contents);
        contents = json_array();
    }
    return tm_jsonrpc_result(c->id, json_pack("{s:o}", "contents", contents));
}

/* Room for one more subscription to uri (already subscribed: always). */
static int subscription_room(tidemark_call_t *c, const char *uri)
{
    tm_sess *s = c->sess;
    pthread_mutex_lock(&s->mu);
    int ok = json_object_get(s->subs, uri) ||
             json_object_size(s->subs) < c->srv->cfg.max_subscriptions;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static json_t *subscribe(tidemark_call_t *c, int on)
{
    json_t *juri = json_object_get(c->params, "uri");
    const char *uri = json_string_value(juri);
    if (!uri || strlen(uri) != json_string_length(juri))
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params",
                   "params.uri is required (a string without NUL)");
    if (strlen(uri) > c->srv->cfg.max_uri_length) {
        json_t *x = json_pack("{s:I}", "limit", (json_int_t)c->srv->cfg.max_uri_length);
        return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS, "params.uri is too long",
                                "uri_too_long", x);
    }
    if (on && !subscription_room(c, uri)) {
        json_t *x = json_pack("{s:I}", "limit", (json_int_t)c->srv->cfg.max_subscriptions);
        return tm_jsonrpc_error(c->id, TM_RPC_SERVER_ERROR,
                                "This session has too many subscriptions", "too_many_subscriptions",
                                x);
    }
    /* Recorded in the store before the reply: any node sends the updates. */
    char name[TM_URI_MAX + 8];
    snprintf(name, sizeof name, "sub:%s", uri);
    if (tm_sess_set_attr(c->srv, c->sess, name, on ? "true" : NULL) != 0)
        return err(c->id, TM_RPC_INTERNAL_ERROR, "store_failed", "Could not record the subscription");
    pthread_mutex_lock(&c->sess->mu);
    if (on)
        json_object_set(c->sess->subs, uri, json_true());
    else
        json_object_del(c->sess->subs, uri);
    pthread_mutex_unlock(&c->sess->mu);
    return tm_jsonrpc_result(c->id, json_object());
}

static json_t *prompts_get(tidemark_call_t *c)
{
    const char *name = json_string_value(json_object_get(c->params, "name"));
    if (!name)
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "prompts/get needs params.name");
    tm_reg_entry e;
    if (tm_registry_get(c->srv->reg, TM_REG_PROMPT, name, &e) != 0) {
        json_t *x = json_pack("{s:s}", "prompt", name);
        return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS, "Unknown prompt", "unknown_prompt", x);
    }
    json_t *args = json_object_get(c->params, "arguments");
    if (args && !json_is_object(args)) {
        json_decref(e.desc);
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "arguments must be an object");
    }
    /* Required arguments must be present. */
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(e.desc, "arguments"), i, a) {
        const char *an = json_string_value(json_object_get(a, "name"));
        if (an && json_is_true(json_object_get(a, "required")) && !json_object_get(args, an)) {
            json_decref(e.desc);
            json_t *x = json_pack("{s:s}", "argument", an);
            return tm_jsonrpc_error(c->id, TM_RPC_INVALID_PARAMS, "Missing required argument",
                                    "missing_argument", x);
        }
    }
    json_decref(e.desc);
    json_t *refused = c->modern ? tm_mrtr_begin(c) : NULL;
    if (refused)
        return refused;
    json_t *owned = args ? json_incref(args) : json_object();
    json_t *result = NULL;
    int rc = ((tidemark_prompt_fn)e.fn)(c, owned, &result, e.ud);
    json_decref(owned);
    json_t *more = tm_mrtr_end(c);
    if (more) {
        json_decref(result);
        return more;
    }
    if (rc) {
        return handler_failed(c, rc, result);
    }
    return tm_jsonrpc_result(c->id, json_is_object(result) ? result : json_object());
}

static json_t *complete(tidemark_call_t *c)
{
    json_t *ref = json_object_get(c->params, "ref");
    json_t *arg = json_object_get(c->params, "argument");
    if (!json_is_object(ref) || !json_is_object(arg))
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params",
                   "completion/complete needs ref and argument");
    json_t *values = NULL;
    if (c->srv->complete_fn) {
        int rc = c->srv->complete_fn(c, ref, arg, json_object_get(c->params, "context"), &values,
                                     c->srv->complete_ud);
        if (rc) {
            return handler_failed(c, rc, values);
        }
    }
    if (!json_is_array(values)) {
        json_decref(values);
        values = json_array();
    }
    size_t total = json_array_size(values);
    while (json_array_size(values) > 100)
        json_array_remove(values, json_array_size(values) - 1);
    return tm_jsonrpc_result(c->id, json_pack("{s:{s:o,s:I,s:b}}", "completion", "values", values,
                                              "total", (json_int_t)total, "hasMore", total > 100));
}

static json_t *set_level(tidemark_call_t *c)
{
    int lvl = tm_log_level_index(json_string_value(json_object_get(c->params, "level")));
    if (lvl < 0)
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_log_level", "Unknown logging level");
    char value[32];
    snprintf(value, sizeof value, "\"%s\"", tm_log_levels[lvl]);
    if (tm_sess_set_attr(c->srv, c->sess, "log_level", value) != 0)
        return err(c->id, TM_RPC_INTERNAL_ERROR, "store_failed", "Could not record the logging level");
    pthread_mutex_lock(&c->sess->mu);
    c->sess->log_level = lvl;
    pthread_mutex_unlock(&c->sess->mu);
    return tm_jsonrpc_result(c->id, json_object());
}

json_t *tm_dispatch(tidemark_call_t *c)
{
    const char *m = c->method;
    if (c->params && !json_is_object(c->params))
        return err(c->id, TM_RPC_INVALID_PARAMS, "invalid_params", "params must be an object");
    if (strcmp(m, "ping") == 0)
        return tm_jsonrpc_result(c->id, json_object());
    if (strcmp(m, "tools/list") == 0)
        return list(c, TM_REG_TOOL, "tools");
    if (strcmp(m, "tools/call") == 0)
        return tools_call(c);
    if (strcmp(m, "resources/list") == 0)
        return list(c, TM_REG_RESOURCE, "resources");
    if (strcmp(m, "resources/templates/list") == 0)
        return list(c, TM_REG_TEMPLATE, "resourceTemplates");
    if (strcmp(m, "resources/read") == 0)
        return resources_read(c);
    if (strcmp(m, "resources/subscribe") == 0)
        return subscribe(c, 1);
    if (strcmp(m, "resources/unsubscribe") == 0)
        return subscribe(c, 0);
    if (strcmp(m, "prompts/list") == 0)
        return list(c, TM_REG_PROMPT, "prompts");
    if (strcmp(m, "prompts/get") == 0)
        return prompts_get(c);
    if (strcmp(m, "completion/complete") == 0)
        return complete(c);
    if (strcmp(m, "logging/setLevel") == 0)
        return set_level(c);
    json_t *x = json_pack("{s:s}", "method", m);
    return tm_jsonrpc_error(c->id, TM_RPC_METHOD_NOT_FOUND, "Method not found", "method_not_found", x);
}
