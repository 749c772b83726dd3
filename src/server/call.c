/* call.c - the API a running handler uses (progress, logging, requests to
 * the client, stream close), the registration API, result helpers. */
#include "server_int.h"
#include "../base/abi.h"
#include "feed.h"
#include "tasks.h"
#include "../base/log.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tm_sess_request(tidemark_server_t *srv, tidemark_call_t *call, const char *stream,
                    const char *method, json_t *params, int timeout_ms, json_t **result);

static json_t *number(double v);

const char *tidemark_call_session(const tidemark_call_t *c) { return c->sess->id; }
const char *tidemark_call_protocol_version(const tidemark_call_t *c) { return c->sess->version; }
const char *tidemark_call_idempotency_key(const tidemark_call_t *c) { return c->idem; }

int tidemark_call_is_inline(const tidemark_call_t *c) { return c && c->inline_run; }

int tidemark_call_cancelled(const tidemark_call_t *c)
{
    return atomic_load(&((tidemark_call_t *)c)->cancelled) || atomic_load(&c->sess->closed) ||
           atomic_load(&c->srv->stopping);
}

int tidemark_call_client_has(const tidemark_call_t *c, const char *capability)
{
    return tm_sess_client_has(c->sess, capability);
}

const char *tidemark_call_principal(const tidemark_call_t *c)
{
    return c && c->sess ? c->sess->principal : "";
}

int tidemark_call_client_params(const tidemark_call_t *c, json_t **params)
{
    if (!c || !params)
        return TIDEMARK_EINVAL;
    json_t *p = c->sess->client ? json_deep_copy(c->sess->client) : json_object();
    if (!p)
        return TIDEMARK_ENOMEM;
    (void)json_object_del(p, TM_CLIENT_PRINCIPAL); /* -1 only when absent */
    (void)json_object_del(p, TM_CLIENT_ADDRESS);
    if (!json_is_object(json_object_get(p, "capabilities")))
        json_object_set_new(p, "capabilities", json_object());
    if (!json_is_string(json_object_get(p, "protocolVersion")))
        json_object_set_new(p, "protocolVersion", json_string(tidemark_call_protocol_version(c)));
    *params = p;
    return 0;
}

/* The stream the call's messages go to, or NULL (JSON-answered requests).
 * A quiet 2025 call gets its stream here, the first time it needs one. */
static const char *call_stream(tidemark_call_t *c)
{
    if (c->job && c->job->deferred && c->job->open_deferred(c->job, c) != 0)
        return NULL;
    return c->job && c->job->sse ? c->job->stream : NULL;
}

/* Every FLOW_EVENTS notifications, a call on a worker waits while more
 * than FLOW_BACKLOG writes are queued before it (tm_store_wait_settled):
 * nothing else slows a handler to the writer's pace (200 calls of 10,000
 * events each on workers queued most of their 2,000,000 events, 900 MB,
 * and an initialize behind them waited over 10 s). The bound is on the
 * queue, not on a call: one call alone still has the writer commit big
 * batches (a call that waited for each 128 of its events to be durable
 * went from 58,000 to 20,000 events/s on SQLite power: an fsync per
 * wait), and any other write waits behind at most about FLOW_BACKLOG.
 * An inline call never waits (its thread serves connections; its hold
 * commits every TM_HOLD_MAX_OPS). A failed write is the result's commit's
 * to report. */
#define FLOW_EVENTS 64
#define FLOW_BACKLOG 4096

static void flow_control(tidemark_call_t *c)
{
    if (c->inline_run || ++c->unsynced < FLOW_EVENTS)
        return;
    c->unsynced = 0;
    uint64_t next = tm_store_mark(c->srv->store); /* 0: no queue */
    if (next > FLOW_BACKLOG)
        tm_store_wait_settled(c->srv->store, next - FLOW_BACKLOG);
}

/* The stream a notification of the call goes to (NULL: none, dropped). */
static const char *notify_stream(tidemark_call_t *c, const char *method)
{
    const char *st = call_stream(c);
    if (!st) {
        TM_DEBUG("%s dropped: request answered as JSON", method);
        return NULL;
    }
    if (c->job->lazy)
        tm_modern_attach(c->job); /* a modern call streams from its first notification */
    return st;
}

int tidemark_call_notify(tidemark_call_t *c, const char *method, json_t *params)
{
    const char *st = notify_stream(c, method);
    if (!st)
        return TIDEMARK_ENOTSUP;
    json_t *msg = tm_jsonrpc_notification(method, params ? json_incref(params) : NULL);
    int rc = tm_sess_append(c->srv, c->sess, st, msg, 0);
    json_decref(msg);
    if (rc == 0)
        flow_control(c);
    return rc;
}

/* v, integral and exact in a double (as number() writes it: an integer),
 * in decimal at out (at least 22 bytes); its length, or 0 when v is not
 * one (number() would write a real). */
static size_t int_text(char *out, double v)
{
    if (!(v > -9007199254740992.0 && v < 9007199254740992.0) || v != (double)(int64_t)v)
        return 0;
    int64_t i = (int64_t)v;
    if (i >= 0)
        return tm_u64_dec(out, (uint64_t)i);
    out[0] = '-';
    return 1 + tm_u64_dec(out + 1, (uint64_t)-i);
}

/* A progress notification without a message whose numbers are integers,
 * written out directly: the same bytes as the notification built with
 * jansson and dumped (compact, keys in the order they were set), without
 * building and walking three objects per event (callgrind, one stream of
 * 2,000 events on SQLite power: about 16,000 of the worker's 21,000
 * instructions per event). 1: not such a notification, take the general
 * path. */
static int progress_fast(tidemark_call_t *c, double progress, double total, int *rc)
{
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                               "\"params\":{\"progressToken\":";
    char num[2][24];
    size_t nl = int_text(num[0], progress), tl = total >= 0 ? int_text(num[1], total) : 0;
    if (!nl || (total >= 0 && !tl))
        return 1;
    if (!c->progress_text) {
        size_t len;
        c->progress_text = tm_jsonrpc_dump(c->progress_token, &len);
        if (!c->progress_text)
            return 1;
    }
    size_t pl = strlen(c->progress_text);
    char stackbuf[256], *buf = stackbuf;
    size_t need = sizeof head - 1 + pl + 12 + nl + 9 + tl + 3;
    if (need > sizeof stackbuf && !(buf = malloc(need)))
        return 1;
    size_t n = 0;
#define PUT(p, l) (memcpy(buf + n, (p), (l)), n += (l))
    PUT(head, sizeof head - 1);
    PUT(c->progress_text, pl);
    PUT(",\"progress\":", 12);
    PUT(num[0], nl);
    if (total >= 0) {
        PUT(",\"total\":", 9);
        PUT(num[1], tl);
    }
    PUT("}}", 2);
#undef PUT
    const char *st = notify_stream(c, "notifications/progress");
    *rc = st ? tm_session_append_bytes(c->srv, c->sess->id, st, buf, n, 0) : TIDEMARK_ENOTSUP;
    if (buf != stackbuf)
        free(buf);
    if (*rc == 0)
        flow_control(c);
    return 0;
}

int tidemark_call_progress(tidemark_call_t *c, double progress, double total, const char *message)
{
    if (!c->progress_token)
        return 0;
    /* After a re-run, progress never goes backwards on the stream. */
    if (progress <= c->progress_floor)
        return 0;
    int rc;
    if (!message && progress_fast(c, progress, total, &rc) == 0)
        return rc;
    json_t *p = json_object();
    json_object_set(p, "progressToken", c->progress_token);
    json_object_set_new(p, "progress", number(progress));
    if (total >= 0)
        json_object_set_new(p, "total", number(total));
    if (message)
        json_object_set_new(p, "message", json_string(message));
    rc = tidemark_call_notify(c, "notifications/progress", p);
    json_decref(p);
    return rc;
}

int tidemark_call_log(tidemark_call_t *c, const char *level, const char *logger, json_t *data)
{
    int lvl = tm_log_level_index(level);
    if (lvl < 0)
        return TIDEMARK_EINVAL;
    pthread_mutex_lock(&c->sess->mu);
    int min = c->sess->log_level;
    pthread_mutex_unlock(&c->sess->mu);
    if (lvl < min)
        return 0;
    json_t *p = json_object();
    json_object_set_new(p, "level", json_string(level));
    if (logger)
        json_object_set_new(p, "logger", json_string(logger));
    json_object_set(p, "data", data ? data : json_null());
    int rc = tidemark_call_notify(c, "notifications/message", p);
    json_decref(p);
    return rc;
}

int tidemark_call_request(tidemark_call_t *c, const char *method, json_t *params, int timeout_ms,
                          json_t **result)
{
    return tidemark_call_input(c, NULL, method, params, timeout_ms, result);
}

int tidemark_call_input(tidemark_call_t *c, const char *key, const char *method, json_t *params,
                        int timeout_ms, json_t **result)
{
    if (!result || !method)
        return TIDEMARK_EINVAL;
    *result = NULL;
    if (c->modern)
        return tm_mrtr_input(c, key, method, params, result);
    if (c->inline_run) {
        TM_WARN("tool declared TIDEMARK_TOOL_NONBLOCKING asked the client (%s): refused", method);
        return TIDEMARK_ENOTSUP;
    }
    const char *st = call_stream(c);
    if (!st)
        return TIDEMARK_ENOTSUP;
    return tm_sess_request(c->srv, c, st, method, params, timeout_ms, result);
}

int tidemark_call_close_stream(tidemark_call_t *c)
{
    const char *st = call_stream(c);
    if (!st)
        return TIDEMARK_ENOTSUP;
    /* Close after everything this call already appended (even if not yet
     * durable), so the client holds a cursor to resume from. */
    tm_stream_bounds b;
    int rc = tm_store_bounds(c->srv->store, c->sess->id, st, &b);
    if (rc)
        return rc;
    tm_feed_close_after(c->srv, c->sess->id, st, b.assigned);
    return 0;
}

int tidemark_call_set_effect(tidemark_call_t *c, tidemark_effect_fn fn, void *ud,
                             void (*free_ud)(void *))
{
    if (!fn)
        return TIDEMARK_EINVAL;
    if (c->effect)
        return TIDEMARK_EEXIST;
    if (!call_stream(c)) /* the effect commits with the call's record */
        return TIDEMARK_ENOTSUP;
    c->effect = fn;
    c->effect_ud = ud;
    c->effect_free = free_ud;
    return 0;
}

int tidemark_server_add_schema(tidemark_server_t *srv, const char *sql)
{
    if (!sql || atomic_load(&srv->running))
        return TIDEMARK_EINVAL;
    char **v = realloc(srv->schemas, (srv->nschemas + 1) * sizeof *v);
    if (!v)
        return TIDEMARK_ENOMEM;
    srv->schemas = v;
    if (!(v[srv->nschemas] = strdup(sql)))
        return TIDEMARK_ENOMEM;
    srv->nschemas++;
    return 0;
}

int tidemark_server_query(tidemark_server_t *srv, const char *sql, const char *const *args,
                          size_t nargs, json_t **rows)
{
    *rows = NULL;
    if (!srv->store)
        return TIDEMARK_ECLOSED;
    return tm_store_query(srv->store, sql, args, nargs, rows);
}

int tidemark_server_rows(tidemark_server_t *srv, const char *table, json_t *match, json_t **rows)
{
    if (!rows)
        return TIDEMARK_EINVAL;
    *rows = NULL;
    if (match && !json_is_object(match))
        return TIDEMARK_EINVAL;
    if (!srv->store)
        return TIDEMARK_ECLOSED;
    json_t *all = NULL;
    int rc = tm_store_rows(srv->store, table, &all);
    if (rc)
        return rc;
    if (match && json_object_size(match) > 0) {
        json_t *kept = json_array();
        size_t i;
        json_t *row;
        json_array_foreach(all, i, row) {
            const char *k;
            json_t *want;
            int ok = 1;
            json_object_foreach(match, k, want) {
                if (!json_equal(json_object_get(row, k), want)) {
                    ok = 0;
                    break;
                }
            }
            if (ok)
                json_array_append(kept, row);
        }
        json_decref(all);
        all = kept;
    }
    *rows = all;
    return 0;
}

/* ---- registration ---------------------------------------------------------- */

static json_t *parse_or(const char *txt, json_t *def)
{
    if (!txt)
        return def;
    json_t *v = json_loads(txt, 0, NULL);
    if (!v)
        return NULL;
    json_decref(def);
    return v;
}

/* Integral values stay integers on the wire ("3", not "3.0"). */
static json_t *number(double v)
{
    if (v == (double)(json_int_t)v)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static void set_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static void list_changed(tidemark_server_t *srv, const char *kind)
{
    if (atomic_load(&srv->running))
        if (tidemark_server_list_changed(srv, kind) != 0)
            TM_WARN("%s/list_changed not sent to every session", kind);
}

int tidemark_server_add_tool_sized(tidemark_server_t *srv, const tidemark_tool_t *tool, size_t size)
{
    tidemark_tool_t tt = {0};
    int rc = tool ? tm_abi_copy(&tt, sizeof tt, tool, size) : TIDEMARK_EINVAL;
    if (rc)
        return rc;
    const tidemark_tool_t *t = &tt;
    if (!t->name || !t->fn)
        return TIDEMARK_EINVAL;
    json_t *d = json_object();
    set_str(d, "name", t->name);
    set_str(d, "title", t->title);
    set_str(d, "description", t->description);
    json_t *in = parse_or(t->input_schema, json_pack("{s:s}", "type", "object"));
    if (!in) {
        json_decref(d);
        return TIDEMARK_EINVAL;
    }
    json_object_set_new(d, "inputSchema", in);
    if (t->output_schema) {
        json_t *out = parse_or(t->output_schema, NULL);
        if (!out) {
            json_decref(d);
            return TIDEMARK_EINVAL;
        }
        json_object_set_new(d, "outputSchema", out);
    }
    if (t->hints) {
        json_t *a = json_object();
        json_object_set_new(a, "readOnlyHint", json_boolean(t->hints & TIDEMARK_TOOL_READ_ONLY));
        json_object_set_new(a, "destructiveHint", json_boolean(t->hints & TIDEMARK_TOOL_DESTRUCTIVE));
        json_object_set_new(a, "idempotentHint", json_boolean(t->hints & TIDEMARK_TOOL_IDEMPOTENT));
        json_object_set_new(a, "openWorldHint", json_boolean(t->hints & TIDEMARK_TOOL_OPEN_WORLD));
        json_object_set_new(d, "annotations", a);
    }
    rc = tm_tasks_tool_policy(srv, t->name, t->task, t->task_ttl_ms); /* tasks.h */
    if (rc == 0)
        rc = tm_registry_put(srv->reg, TM_REG_TOOL, t->name, d, (void *)t->fn, t->ud, t->hints);
    else
        json_decref(d);
    if (rc == 0)
        list_changed(srv, "tools");
    return rc;
}

int tidemark_server_remove_tool(tidemark_server_t *srv, const char *name)
{
    int rc = tm_registry_remove(srv->reg, TM_REG_TOOL, name);
    if (rc == 0)
        list_changed(srv, "tools");
    return rc;
}

static int add_res(tidemark_server_t *srv, const tidemark_resource_t *r, tm_reg_kind k)
{
    if (!r || !r->uri || !r->name || !r->fn)
        return TIDEMARK_EINVAL;
    json_t *d = json_object();
    set_str(d, k == TM_REG_TEMPLATE ? "uriTemplate" : "uri", r->uri);
    set_str(d, "name", r->name);
    set_str(d, "title", r->title);
    set_str(d, "description", r->description);
    set_str(d, "mimeType", r->mime_type);
    int rc = tm_registry_put(srv->reg, k, r->uri, d, (void *)r->fn, r->ud, 0);
    if (rc == 0)
        list_changed(srv, "resources");
    return rc;
}

static int add_res_sized(tidemark_server_t *srv, const tidemark_resource_t *r, size_t size,
                         tm_reg_kind k)
{
    tidemark_resource_t rr = {0};
    int rc = r ? tm_abi_copy(&rr, sizeof rr, r, size) : TIDEMARK_EINVAL;
    return rc ? rc : add_res(srv, &rr, k);
}

int tidemark_server_add_resource_sized(tidemark_server_t *srv, const tidemark_resource_t *r,
                                       size_t size)
{
    return add_res_sized(srv, r, size, TM_REG_RESOURCE);
}

int tidemark_server_add_resource_template_sized(tidemark_server_t *srv, const tidemark_resource_t *r,
                                                size_t size)
{
    return add_res_sized(srv, r, size, TM_REG_TEMPLATE);
}

int tidemark_server_add_prompt_sized(tidemark_server_t *srv, const tidemark_prompt_t *prompt,
                                     size_t size)
{
    tidemark_prompt_t pp = {0};
    int prc = prompt ? tm_abi_copy(&pp, sizeof pp, prompt, size) : TIDEMARK_EINVAL;
    if (prc)
        return prc;
    const tidemark_prompt_t *p = &pp;
    if (!p->name || !p->fn)
        return TIDEMARK_EINVAL;
    json_t *d = json_object();
    set_str(d, "name", p->name);
    set_str(d, "title", p->title);
    set_str(d, "description", p->description);
    if (p->arguments) {
        json_t *a = parse_or(p->arguments, NULL);
        if (!json_is_array(a)) {
            json_decref(a);
            json_decref(d);
            return TIDEMARK_EINVAL;
        }
        json_object_set_new(d, "arguments", a);
    }
    int rc = tm_registry_put(srv->reg, TM_REG_PROMPT, p->name, d, (void *)p->fn, p->ud, 0);
    if (rc == 0)
        list_changed(srv, "prompts");
    return rc;
}

int tidemark_server_set_completion(tidemark_server_t *srv, tidemark_complete_fn fn, void *ud)
{
    srv->complete_fn = fn;
    srv->complete_ud = ud;
    return 0;
}

/* ---- notifications to sessions -------------------------------------------- */

/* A notification for every session of the store (all nodes' sessions on a
 * shared store) that opened its standalone stream and, for a resource
 * update, subscribed to the uri; and for every 2026-07-28 listener whose
 * filter asks for it. A resource update asks the store for the sessions
 * with the attribute sub:<uri> or listen only (tm_store_sessions_with_attr:
 * on SQLite an index, not a read of every session). */
typedef struct fanout {
    tidemark_server_t *srv;
    const char *method;
    const char *attr; /* NULL, or the attribute that must be true */
    json_t *params;   /* borrowed; copied into each message */
    size_t failed;    /* sessions it could not be appended for */
} fanout;

static int notify_one(void *ud, const tm_session_rec *rec)
{
    fanout *f = ud;
    json_t *a = tm_session_rec_attrs(rec);
    json_t *lmsg = NULL;
    if (json_object_get(a, "listen")) { /* a 2026-07-28 listener: its filter decides */
        if (tm_modern_listener_msg(a, f->method, f->params, &lmsg) &&
            tm_session_append(f->srv, rec->id, "g", lmsg, 0) != 0)
            f->failed++;
        json_decref(lmsg);
        json_decref(a);
        return 0;
    }
    int want = json_is_true(json_object_get(a, "get")) &&
               (!f->attr || json_is_true(json_object_get(a, f->attr)));
    json_decref(a);
    if (want) {
        json_t *msg = tm_jsonrpc_notification(f->method, f->params ? json_deep_copy(f->params) : NULL);
        if (tm_session_append(f->srv, rec->id, "g", msg, 0) != 0) /* it logged why */
            f->failed++;
        json_decref(msg);
    }
    return 0;
}

int tidemark_server_list_changed(tidemark_server_t *srv, const char *kind)
{
    char method[64];
    snprintf(method, sizeof method, "notifications/%s/list_changed", kind);
    fanout f = {srv, method, NULL, NULL, 0};
    int rc = srv->store ? tm_store_sessions_each(srv->store, notify_one, &f) : 0;
    return rc ? rc : f.failed ? TIDEMARK_EIO : 0;
}

int tidemark_server_resource_updated(tidemark_server_t *srv, const char *uri)
{
    if (!uri || strlen(uri) > TM_URI_MAX)
        return TIDEMARK_EINVAL;
    char attr[TM_URI_MAX + 8];
    snprintf(attr, sizeof attr, "sub:%s", uri);
    json_t *params = json_pack("{s:s}", "uri", uri);
    fanout f = {srv, "notifications/resources/updated", attr, params, 0};
    const char *const names[] = {attr, "listen"};
    int rc = srv->store ? tm_store_sessions_with_attr(srv->store, names, 2, notify_one, &f) : 0;
    json_decref(params);
    return rc ? rc : f.failed ? TIDEMARK_EIO : 0;
}

/* ---- result helpers -------------------------------------------------------- */

/* Built value by value, not by json_pack, which parses its format on every
 * call (a third of these helpers' cost, on every tool answer). NULL when text
 * is not UTF-8 or memory ran out, as json_pack would give. */
json_t *tidemark_content_text(const char *text)
{
    json_t *o = json_object();
    if (o && json_object_set_new(o, "type", json_string("text")) == 0 &&
        json_object_set_new(o, "text", json_string(text ? text : "")) == 0)
        return o;
    json_decref(o);
    return NULL;
}

/* {"content":[{"type":"text","text":text}]}, and "isError":true if error. */
static json_t *result_of_text(const char *text, int error)
{
    json_t *o = json_object(), *content = json_array();
    if (!o || !content || json_array_append_new(content, tidemark_content_text(text)) != 0) {
        json_decref(content);
        json_decref(o);
        return NULL;
    }
    if (json_object_set_new(o, "content", content) != 0 ||
        (error && json_object_set_new(o, "isError", json_true()) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *tidemark_result_text(const char *text) { return result_of_text(text, 0); }

json_t *tidemark_result_error(const char *text) { return result_of_text(text, 1); }
