/*
 * modern.c - requests of the 2026-07-28 era on the same endpoint as the
 * session-based versions. No protocol session: every request carries its
 * version, client info and capabilities in _meta. Checked first (era.c),
 * then routed:
 *  - server/discover is answered here;
 *  - subscriptions/listen opens a listener: a store session of its own whose
 *    attributes say what it listens to, so a change made through any node
 *    reaches it (call.c's fan-out), fed from its "g" stream;
 *  - tools/call runs in a store session (its stream, request record, atomic
 *    effect and recovery work as for a 2025 call): one per call (deleted once
 *    answered), or one per idempotency key, its id derived from (principal,
 *    key), where a re-issue finds the recorded result on any node;
 *  - the other methods run in an in-memory context (a session object the
 *    store never sees) and are answered as JSON.
 * A call's POST is answered as JSON unless the handler sends a notification
 * (progress, log) first; then it is attached to the call's stream.
 */
#include "server_int.h"
#include "era.h"
#include "record.h"
#include "feed.h"
#include "seal.h"
#include "tasks.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDEM_KEY TM_META_IDEM_KEY
#define REISSUE_WAIT_MS 30000

static const char *hdr(void *ud, const char *name)
{
    return tm_req_header(ud, name);
}

static json_t *meta_of(const tm_msg *m)
{
    return json_object_get(m->params, "_meta");
}

static void reply(tidemark_server_t *srv, tm_req *r, const char *method, json_t *resp)
{
    tm_modern_decorate(srv, method, resp);
    tm_reply_json(r, tm_modern_status(resp), resp);
}

static json_t *discover(tidemark_server_t *srv, const tm_msg *m)
{
    json_t *res = json_pack("{s:o,s:{s:{s:b},s:{s:b,s:b},s:{s:b},s:{},s:{}}}", "supportedVersions",
                            tm_era_served_json(), "capabilities", "tools", "listChanged", 1,
                            "resources", "subscribe", 1, "listChanged", 1, "prompts",
                            "listChanged", 1, "logging", "completions");
    if (srv->instructions)
        json_object_set_new(res, "instructions", json_string(srv->instructions));
    json_object_set_new(json_object_get(res, "capabilities"), "extensions",
                        json_pack("{s:{}}", TM_TASKS_EXT));
    return tm_jsonrpc_result(m->id, res);
}

/* ---- the context of a request --------------------------------------------- */

/* The client as _meta describes it, in the shape a 2025 session keeps,
 * with the request's principal (its owner). Built once per request: the
 * store's record and the in-memory context are the same object (the
 * values are _meta's own, shared, not copied). NULL without capabilities
 * (era.c lets no such request through) or memory. */
static json_t *client_of(const tm_msg *m, const char *principal)
{
    json_t *meta = meta_of(m);
    json_t *c = json_object();
    json_t *info = json_object_get(meta, TM_META_INFO);
    if (!c || json_object_set(c, "capabilities", json_object_get(meta, TM_META_CAPS)) != 0 ||
        json_object_set_new(c, TM_CLIENT_PRINCIPAL, json_string(principal)) != 0 ||
        (info && json_object_set(c, "clientInfo", info) != 0)) {
        json_decref(c);
        return NULL;
    }
    return c;
}

static tm_sess *context_new(const char *id, const tm_msg *m, json_t *client)
{
    tm_sess *s = client ? tm_sess_new(id, TM_MODERN_VERSION, client) : NULL;
    if (!s)
        return NULL;
    int lvl = tm_log_level_index(json_string_value(json_object_get(meta_of(m), TM_META_LOG)));
    s->log_level = lvl < 0 ? 8 : lvl; /* none unless the request asks for a level */
    return s;
}

/* ---- idempotency keys ------------------------------------------------------ */

typedef struct reissue {
    tidemark_server_t *srv;
    tm_req *r;
    char sid[TM_SESSION_ID_LEN + 1];
    char key[TM_REQ_KEY_MAX];
    json_t *raw;  /* the re-issue (a reference) */
    int counted;  /* already counted as deduplicated */
} reissue;

/* A completed record's response (stolen), under the re-issue's own id. */
static void answer_recorded(tm_req *r, json_t *resp)
{
    if (!resp)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "store_error",
                              "stored response unreadable", NULL);
    tm_reply_json(r, tm_modern_status(resp), resp);
}

/* On a worker: wait for the first request under the key (here or on any
 * node: the store's record, read again at each commit of its session) and
 * answer with its result, or refuse when it is another request. */
static void wait_reissue(void *arg)
{
    reissue *w = arg;
    json_t *answer = NULL;
    tm_rec_verdict v =
        tm_record_wait(w->srv, w->sid, w->key, w->raw, REISSUE_WAIT_MS, w->counted, &answer);
    if (v == TM_REC_ANSWERED) {
        answer_recorded(w->r, answer);
    } else if (v == TM_REC_REUSED) {
        tm_reply_json(w->r, tm_modern_status(answer), answer);
    } else {
        json_decref(answer);
        tm_req_add_header(w->r, "Retry-After", "1");
        tm_reply_error(w->r, 409, TM_RPC_INVALID_REQUEST, "request_in_flight",
                       "The request with this idempotency key is still running", NULL);
    }
    json_decref(w->raw);
    free(w);
}

/* Answer r with the result of the request (sid, key) once it completes. */
static void wait_for(tidemark_server_t *srv, tm_req *r, const char *sid, const char *key,
                     json_t *raw, int counted)
{
    reissue *w = calloc(1, sizeof *w);
    if (w) {
        w->srv = srv;
        w->r = r;
        snprintf(w->sid, sizeof w->sid, "%s", sid);
        snprintf(w->key, sizeof w->key, "%s", key);
        w->raw = json_incref(raw);
        w->counted = counted;
    }
    if (!w || tm_pool_submit(srv->pool, wait_reissue, w) != 0) {
        if (w)
            json_decref(w->raw);
        free(w);
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    }
}

void tm_modern_setup_failed(tidemark_server_t *srv, tm_req *r, tm_sess *sess,
                            const tm_msg *m, int ephemeral, int rc)
{
    char key[TM_REQ_KEY_MAX];
    if (rc == TIDEMARK_EEXIST && !ephemeral && tm_request_key(m, key) == 0) {
        TM_DEBUG("session %s: its key's first request began elsewhere: waiting for it", sess->id);
        wait_for(srv, r, sess->id, key, m->raw, 0);
    } else {
        tm_reply_store_error(r, rc);
    }
    if (ephemeral)
        tm_modern_doom(srv, sess->id);
    tm_modern_release(srv, sess);
}

/* A request under this key exists: answer from it (record.h). 1 when
 * answered. */
static int keyed_replay(tidemark_server_t *srv, tm_req *r, const char *sid, const tm_msg *m)
{
    char key[TM_REQ_KEY_MAX];
    if (tm_request_key(m, key) != 0)
        return 0;
    tm_rec_look look;
    tm_record_look_store(srv, sid, key, m, &look);
    if (look.verdict == TM_REC_REUSED)
        reply(srv, r, m->method, look.answer);
    else if (look.verdict == TM_REC_ANSWERED)
        answer_recorded(r, look.answer);
    else if (look.verdict == TM_REC_RUNNING)
        wait_for(srv, r, sid, key, m->raw, 1);
    if (look.verdict == TM_REC_REUSED || look.verdict == TM_REC_ANSWERED)
        look.answer = NULL; /* replied with */
    int answered = look.verdict != TM_REC_NEW;
    tm_rec_look_clear(&look);
    return answered;
}

/* ---- tools/call ------------------------------------------------------------ */

/* The store session of a call: derived from (principal, key), or new. OUT
 * *ephemeral. 1 when the POST was answered (a re-issue, an error). Another
 * principal's key derives another id: its own new call, never this one's. */
static int call_session(tidemark_server_t *srv, tm_req *r, const tm_msg *m,
                        const char *principal, const json_t *client,
                        char sid[TM_SESSION_ID_LEN + 1], int *ephemeral, int *pooled)
{
    json_t *k = json_object_get(meta_of(m), IDEM_KEY);
    *ephemeral = !k;
    *pooled = !k && tm_store_can_queue_session_create(srv->store);
    if (*pooled) { /* key-less: a session shared with the principal's other calls */
        int rc = tm_modern_pool_take(srv, principal, client, sid);
        if (rc)
            tm_reply_store_error(r, rc);
        return rc != 0;
    }
    int rc = k ? tm_seal_derive_id(srv->sealer, principal, strlen(principal), json_string_value(k),
                                   json_string_length(k), sid)
               : tm_modern_sid_new(sid);
    if (rc) {
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", tidemark_strerror(rc), NULL);
        return 1;
    }
    if (k && keyed_replay(srv, r, sid, m))
        return 1;
    /* A random id's session need not be durable before its record is
     * queued behind it: created without waiting where the store can. */
    rc = tm_modern_session_store(srv, sid, client, !k && tm_store_can_queue_session_create(srv->store));
    if (rc == TIDEMARK_EEXIST && k)
        rc = 0; /* an earlier request under the key made it */
    if (rc) {
        tm_reply_store_error(r, rc);
        return 1;
    }
    return 0;
}

/* A key-less call of a tool declared non-blocking, read-only and
 * idempotent, that asks for no progress and no log messages, has nothing to
 * make durable: no effect to keep once, no event id to put on the wire, no
 * key a re-issue could name. It runs inline and is answered as JSON with
 * no store session, stream or record. 1 when it was taken. */
static int light_call(tidemark_server_t *srv, tm_req *r, post_msgs *pm,
                      const char *principal)
{
    const tm_msg *m = &pm->m[0];
    json_t *meta = meta_of(m);
    if (json_object_get(meta, "progressToken") || json_object_get(meta, TM_META_LOG) ||
        !tm_tool_quiet(tm_call_tool_hints(srv, m)))
        return 0;
    char sid[TM_SESSION_ID_LEN + 1];
    json_t *client = tm_modern_sid_new(sid) == 0 ? client_of(m, principal) : NULL;
    tm_sess *sess = client ? context_new(sid, m, client) : NULL;
    json_decref(client);
    if (!sess)
        tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
    else
        tm_post_submit(srv, r, sess, pm, TM_POST_MODERN | TM_POST_LIGHT);
    return 1;
}

static void modern_call(tidemark_server_t *srv, tm_req *r, post_msgs *pm,
                        const char *principal)
{
    const tm_msg *m = &pm->m[0];
    char sid[TM_SESSION_ID_LEN + 1];
    int ephemeral = 1;
    int keyed = json_object_get(meta_of(m), IDEM_KEY) != NULL;
    json_t *client = client_of(m, principal); /* the store's record and the context's */
    if (keyed) /* the replay check and the record's start, as one on this node */
        pthread_mutex_lock(&srv->keyed_mu);
    int pooled = 0;
    int answered = client && call_session(srv, r, m, principal, client, sid, &ephemeral, &pooled);
    tm_sess *sess = client && !answered ? context_new(sid, m, client) : NULL;
    json_decref(client);
    if (!sess) {
        if (keyed)
            pthread_mutex_unlock(&srv->keyed_mu);
        if (!answered)
            tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory", NULL);
        return;
    }
    tm_modern_hold(srv, sess);
    tm_post_submit(srv, r, sess, pm,
                   TM_POST_MODERN | (ephemeral ? TM_POST_EPHEMERAL : 0) | (pooled ? TM_POST_POOLED : 0));
    if (keyed)
        pthread_mutex_unlock(&srv->keyed_mu);
}

/* ---- subscriptions/listen -------------------------------------------------- */

/* The part of the filter we honour (all four kinds). */
static json_t *honoured(const json_t *f)
{
    static const char *const flags[] = {"toolsListChanged", "promptsListChanged",
                                        "resourcesListChanged"};
    json_t *h = json_object();
    for (size_t i = 0; i < 3; i++)
        if (json_is_true(json_object_get(f, flags[i])))
            json_object_set_new(h, flags[i], json_true());
    json_t *subs = json_object_get(f, "resourceSubscriptions");
    if (json_is_array(subs))
        json_object_set(h, "resourceSubscriptions", subs);
    return h;
}

/* One attribute, one durable write: "listen" {"f": the honoured filter,
 * "id": the listen request's id}. The fan-out looks for it. */
static int listener_attrs(tidemark_server_t *srv, const char *id, const tm_msg *m, json_t *h)
{
    json_t *a = json_pack("{s:O,s:O}", "f", h, "id", m->id);
    char *txt = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    int rc = txt ? tm_store_session_set_attr(srv->store, id, "listen", txt) : TIDEMARK_ENOMEM;
    free(txt);
    return rc;
}

/* A filter we can keep: NULL, or the error. */
static json_t *filter_check(tidemark_server_t *srv, const tm_msg *m, const json_t *f)
{
    if (!json_is_object(f))
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                "subscriptions/listen needs params.notifications (an object)",
                                "invalid_params", NULL);
    json_t *subs = json_object_get(f, "resourceSubscriptions");
    if (subs && !json_is_array(subs))
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                "resourceSubscriptions must be an array of URIs", "invalid_params",
                                NULL);
    if (json_array_size(subs) > srv->cfg.max_subscriptions)
        return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS, "Too many resource subscriptions",
                                "too_many_subscriptions",
                                json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_subscriptions));
    size_t i;
    json_t *u;
    json_array_foreach(subs, i, u) {
        if (!json_is_string(u) || strlen(json_string_value(u)) != json_string_length(u))
            return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS,
                                    "resourceSubscriptions must be URIs (strings without NUL)",
                                    "invalid_params", NULL);
        if (json_string_length(u) > srv->cfg.max_uri_length)
            return tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS, "A subscribed URI is too long",
                                    "uri_too_long",
                                    json_pack("{s:I}", "limit", (json_int_t)srv->cfg.max_uri_length));
    }
    return NULL;
}

static void listen_open(tidemark_server_t *srv, tm_req *r, const tm_msg *m,
                        const char *principal)
{
    json_t *f = json_object_get(m->params, "notifications");
    json_t *bad = filter_check(srv, m, f), *tids = NULL;
    if (!bad) /* tasks.h: notifications/tasks for these */
        bad = tm_tasks_listen_ids(srv, m, principal, f, &tids);
    if (bad)
        return reply(srv, r, m->method, bad);
    char id[TM_SESSION_ID_LEN + 1], g[TM_STREAM_MAX];
    int rc = tm_modern_sid_new(id);
    json_t *client = rc == 0 ? client_of(m, principal) : NULL;
    if (rc == 0)
        rc = client ? tm_modern_session_store(srv, id, client, 0) : TIDEMARK_ENOMEM;
    if (rc == 0)
        rc = tm_store_stream_open(srv->store, id, "g", g);
    json_t *h = honoured(f);
    if (tids)
        json_object_set_new(h, "taskIds", tids);
    json_t *ack = tm_jsonrpc_notification("notifications/subscriptions/acknowledged",
                                          json_pack("{s:O,s:{s:O}}", "notifications", h, "_meta",
                                                    TM_META_SUB, m->id));
    if (rc == 0) /* first on the stream, before anything can fan out to it */
        rc = tm_session_append(srv, id, "g", ack, 0);
    json_decref(ack);
    if (rc == 0)
        rc = listener_attrs(srv, id, m, h);
    json_decref(h);
    tm_sess *s = rc == 0 ? context_new(id, m, client) : NULL;
    json_decref(client);
    if (s)
        tm_modern_hold(srv, s);
    if (rc == 0)
        rc = s ? tm_modern_attach_stream(srv, r, s, "g", 0, 1) : TIDEMARK_ENOMEM;
    if (rc && s)
        tm_modern_release(srv, s);
    if (s)
        tm_sess_unref(s);
    if (rc) {
        tm_modern_doom(srv, id);
        tm_reply_store_error(r, rc);
    }
}

/* ---- routing --------------------------------------------------------------- */

static int removed(const char *method)
{
    static const char *const m[] = {"initialize", "ping", "logging/setLevel",
                                    "resources/subscribe", "resources/unsubscribe"};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strcmp(method, m[i]) == 0)
            return 1;
    return 0;
}

static int served(const char *method)
{
    static const char *const m[] = {"tools/list", "tools/call", "resources/list",
                                    "resources/templates/list", "resources/read", "prompts/list",
                                    "prompts/get", "completion/complete"};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strcmp(method, m[i]) == 0)
            return 1;
    return 0;
}

/* Notifications and responses from the client. */
static void non_request(tidemark_server_t *srv, tm_req *r, const tm_msg *m)
{
    if (m->kind != TM_MSG_NOTIFICATION)
        return tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "response_not_expected",
                              "Bad Request: this protocol version sends the client no requests "
                              "(input goes in inputResponses)", NULL);
    if (strcmp(m->method, "notifications/roots/list_changed") == 0 ||
        strcmp(m->method, "notifications/elicitation/complete") == 0)
        return tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "notification_not_supported",
                              "Bad Request: this notification is not part of protocol version "
                              "2026-07-28", json_pack("{s:s}", "method", m->method));
    tm_notification_trace(srv, r, m, r->session_id, r->protocol_version);
    tm_req_reply(r, 202, NULL, NULL, 0); /* cancellation is the closed stream */
}

/* The input schema the x-mcp-header checks read (new ref), or NULL. */
static json_t *input_schema(tidemark_server_t *srv, const tm_msg *m)
{
    const char *name = json_string_value(json_object_get(m->params, "name"));
    tm_reg_entry e;
    if (strcmp(m->method, "tools/call") != 0 || !name ||
        tm_registry_get(srv->reg, TM_REG_TOOL, name, &e) != 0)
        return NULL;
    json_t *s = json_incref(json_object_get(e.desc, "inputSchema"));
    json_decref(e.desc);
    return s;
}

/* A call or listen is set up on a worker: creating its store session waits
 * for a commit, which must not hold an I/O thread. */
typedef struct setup {
    tidemark_server_t *srv;
    tm_req *r;
    post_msgs pm;
    char principal[TM_PRINCIPAL_MAX];
} setup;

static void run_setup(void *arg)
{
    setup *w = arg;
    const tm_msg *m = &w->pm.m[0];
    if (tm_is_call(m))
        modern_call(w->srv, w->r, &w->pm, w->principal);
    else
        listen_open(w->srv, w->r, m, w->principal);
    post_msgs_free(&w->pm);
    free(w);
}

static void later(tidemark_server_t *srv, tm_req *r, post_msgs *pm, const tm_reqctx *ctx)
{
    setup *w = calloc(1, sizeof *w);
    if (!w)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    *w = (setup){srv, r, *pm, {0}};
    snprintf(w->principal, sizeof w->principal, "%s", ctx->principal);
    pm->root = NULL; /* the worker's now */
    pm->m = NULL;
    if (ctx->on_worker) /* already off the I/O thread (the authorization gate) */
        return run_setup(w);
    if (tm_pool_submit(srv->pool, run_setup, w) != 0) {
        post_msgs_free(&w->pm);
        free(w);
        tm_reply_error(r, 503, TM_RPC_INTERNAL_ERROR, "shutting_down", "Server is stopping", NULL);
    }
}

void tm_modern_route(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, post_msgs *pm)
{
    const tm_msg *m = &pm->m[0];
    if (m->kind != TM_MSG_REQUEST)
        return non_request(srv, r, m);
    if (tm_tasks_route(srv, r, ctx, pm)) /* tasks.c: the tasks methods, task tools */
        return;
    if (removed(m->method) || (!served(m->method) && strcmp(m->method, "server/discover") != 0 &&
                               strcmp(m->method, "subscriptions/listen") != 0)) {
        json_t *x = json_pack("{s:s}", "method", m->method);
        return reply(srv, r, m->method,
                     tm_jsonrpc_error(m->id, TM_RPC_METHOD_NOT_FOUND, "Method not found",
                                      removed(m->method) ? "method_removed" : "method_not_found",
                                      x));
    }
    if (strcmp(m->method, "server/discover") == 0)
        return reply(srv, r, m->method, discover(srv, m));
    /* A key-less call's setup waits for nothing where the store queues its
     * session: it runs here, as a 2025 call's does (else on a worker). */
    if (tm_is_call(m) && !json_object_get(meta_of(m), IDEM_KEY) &&
        light_call(srv, r, pm, ctx->principal))
        return;
    if (tm_is_call(m) && !json_object_get(meta_of(m), IDEM_KEY) &&
        tm_store_can_queue_session_create(srv->store)) {
        tm_store_hold(srv->store); /* its session in the call's transaction */
        modern_call(srv, r, pm, ctx->principal);
        tm_store_release(srv->store);
        return;
    }
    if (strcmp(m->method, "subscriptions/listen") == 0 || tm_is_call(m))
        return later(srv, r, pm, ctx); /* they write durably before answering */
    char id[TM_SESSION_ID_LEN + 1];
    json_t *client = client_of(m, ctx->principal);
    tm_sess *s = client && tm_modern_sid_new(id) == 0 ? context_new(id, m, client) : NULL;
    json_decref(client);
    if (!s)
        return tm_reply_error(r, 500, TM_RPC_INTERNAL_ERROR, "internal_error", "out of memory",
                              NULL);
    tm_post_submit(srv, r, s, pm, TM_POST_MODERN);
}

int tm_modern_post(tidemark_server_t *srv, tm_req *r, post_msgs *pm)
{
    if (pm->batch) {
        tm_reply_error(r, 400, TM_RPC_INVALID_REQUEST, "batch_not_supported",
                       "Invalid Request: JSON-RPC batches are not part of protocol version "
                       "2026-07-28", NULL);
        return 1;
    }
    const tm_msg *m = &pm->m[0];
    if (m->kind == TM_MSG_INVALID) {
        tm_reply_json(r, 400, tm_jsonrpc_error(m->id, tm_invalid_code(m), m->detail, m->why, NULL));
        return 1;
    }
    if (m->kind != TM_MSG_REQUEST)
        return 0;
    unsigned status = 400;
    json_t *schema = input_schema(srv, m);
    /* Without headers (stdio) the body alone is the request: nothing to
     * compare it with but its own _meta. */
    json_t *e = r->flags & TM_REQ_BODY_ONLY ? tm_era_check_body(m, &status)
                                            : tm_era_check(m, hdr, r, schema, &status);
    json_decref(schema);
    if (e) {
        tm_reply_json(r, status, e);
        return 1;
    }
    return 0;
}

int tm_modern_refuse_method(tm_req *r)
{
    const char *pv = r->protocol_version;
    if (!pv || strcmp(pv, TM_MODERN_VERSION) != 0)
        return 0;
    tm_req_add_header(r, "Allow", "POST");
    tm_reply_error(r, 405, TM_RPC_INVALID_REQUEST, "method_not_allowed",
                   "Method Not Allowed: protocol version 2026-07-28 has no GET or DELETE stream "
                   "(use subscriptions/listen)", NULL);
    return 1;
}
