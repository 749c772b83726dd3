/*
 * gateway.c - a stdio MCP server behind a Tidemark server (gateway.h).
 *
 * Threads: the Tidemark server's workers run the handlers here; each waits
 * for its request at the child (ask), running on its own thread whatever
 * the request brings (progress, log messages, the child's requests to the
 * client) through the call API, so all of it is committed by the library
 * before it is emitted. The children's reader threads (upstream.h) only
 * queue into a request's pending record and signal it. A janitor thread
 * stops idle children and lists the catalog again after a list change.
 *
 * Locks, in this order: g->start_mu (one child started at a time) before
 * g->mu (the child list, each child's busy count and age); ch->mu (a
 * child's requests in flight) before p->mu (one pending request). No lock
 * is held while calling the upstream or the server.
 */
#include "gateway/gateway_int.h"
#include "base/clock.h"
#include "base/log.h"
#include "mcp/jsonrpc.h"
#include "server/call_trace.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEGACY_VERSION "2025-11-25"
#define MODERN_VERSION "2026-07-28"
#define IDEM_KEY "dev.tidemark/idempotency-key"
#define LIST_TIMEOUT_MS 30000
#define PROBE_TIMEOUT_MS 5000 /* a child that ignores what it does not know costs this */
#define ASK_TIMEOUT_MS 600000 /* a client's answer to sampling / elicitation */
#define RPC_RESOURCE_NOT_FOUND -32002
#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_INFO "io.modelcontextprotocol/clientInfo"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_LOG "io.modelcontextprotocol/logLevel"
#define MAX_ROUNDS 16

/* ---- pending requests ------------------------------------------------------------ */

int tm_gw_pending_init(pending *p)
{
    memset(p, 0, sizeof *p);
    p->notes = json_array();
    p->asks = json_array();
    if (!p->notes || !p->asks || pthread_mutex_init(&p->mu, NULL) != 0) {
        json_decref(p->notes);
        json_decref(p->asks);
        return TIDEMARK_ENOMEM;
    }
    if (tm_cond_init_monotonic(&p->cv) != 0) {
        pthread_mutex_destroy(&p->mu);
        json_decref(p->notes);
        json_decref(p->asks);
        return TIDEMARK_ENOMEM;
    }
    return 0;
}

void tm_gw_pending_destroy(pending *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    json_decref(p->response);
    json_decref(p->notes);
    json_decref(p->asks);
}

enum { NOTES, ASKS };

/* Queue v (taken) on p's notes or asks: the array is read under p->mu, as
 * tm_gw_take swaps it. */
static void push(pending *p, int which, json_t *v)
{
    pthread_mutex_lock(&p->mu);
    if (json_array_append_new(which == NOTES ? p->notes : p->asks, v) != 0)
        TM_WARN("gateway: a message of the child was dropped (out of memory)");
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void tm_gw_track(child *ch, pending *p)
{
    pthread_mutex_lock(&ch->mu);
    p->next = ch->flight;
    ch->flight = p;
    pthread_mutex_unlock(&ch->mu);
}

void tm_gw_untrack(child *ch, pending *p)
{
    pthread_mutex_lock(&ch->mu);
    for (pending **pp = &ch->flight; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&ch->mu);
}

/* ---- the upstream's callbacks (the child's reader and supervisor threads) --------- */

static void on_ready(void *ud, unsigned gen, json_t *init)
{
    (void)init;
    TM_INFO("gateway: child %s ready (generation %u)", ((child *)ud)->key, gen);
}

static void on_down(void *ud, unsigned gen, const tm_child_exit *ex, int restarting)
{
    TM_WARN("gateway: child %s (generation %u, pid %d) died%s", ((child *)ud)->key, gen,
            (int)ex->pid, restarting ? "; restarting it" : "");
}

static void on_response(void *ud, void *tag, json_t *response)
{
    (void)ud;
    pending *p = tag;
    pthread_mutex_lock(&p->mu);
    json_decref(p->response);
    p->response = json_incref(response);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void on_lost(void *ud, void *tag, const json_t *request, int err)
{
    (void)ud, (void)request;
    pending *p = tag;
    pthread_mutex_lock(&p->mu);
    p->lost = err ? err : TIDEMARK_ECLOSED;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* A notification of no request: what changed at the child. */
void tm_gw_changed(tm_gateway *g, json_t *msg)
{
    const char *m = json_string_value(json_object_get(msg, "method"));
    if (m && !strcmp(m, "notifications/resources/updated")) {
        const char *uri = json_string_value(json_object_get(json_object_get(msg, "params"), "uri"));
        pthread_mutex_lock(&g->mu);
        int go = uri && !g->stopping; /* the server stops after quiesce: not under it */
        g->users += go;
        pthread_mutex_unlock(&g->mu);
        if (go && tidemark_server_resource_updated(g->srv, uri) != 0)
            TM_WARN("gateway: resources/updated for %s not delivered to every session", uri);
        pthread_mutex_lock(&g->mu);
        g->users -= go;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    } else if (m && strstr(m, "list_changed")) {
        pthread_mutex_lock(&g->mu);
        g->relist = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
}

/* A notification without a progress token (a log message, say) goes with
 * the call in flight on the child (the newest), as its requests do; what
 * changed at the child goes to every session. */
static void on_notification(void *ud, void *tag, json_t *msg)
{
    child *ch = ud;
    const char *m = json_string_value(json_object_get(msg, "method"));
    if (tag) {
        push(tag, NOTES, json_incref(msg));
        return;
    }
    if (!m || strstr(m, "list_changed") || !strcmp(m, "notifications/resources/updated")) {
        tm_gw_changed(ch->g, msg);
        return;
    }
    pthread_mutex_lock(&ch->mu);
    if (ch->flight)
        push(ch->flight, NOTES, json_incref(msg));
    pthread_mutex_unlock(&ch->mu);
}

static void answer_error(child *ch, unsigned gen, json_t *id, const char *reason, const char *msg)
{
    json_t *r = tm_jsonrpc_error(id, TM_RPC_INTERNAL_ERROR, msg, reason, NULL);
    if (!r || tm_upstream_answer(ch->u, gen, r) != 0)
        TM_DEBUG("gateway: an answer to child %s was not delivered", ch->key);
    json_decref(r);
}

/* The child asks the client something: it goes on the stream of the call
 * in flight on this child (the newest), whose handler asks the client. */
static void on_request(void *ud, unsigned gen, json_t *msg)
{
    child *ch = ud;
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *id = json_object_get(msg, "id");
    if (m && !strcmp(m, "ping")) {
        json_t *r = tm_jsonrpc_result(id, json_object());
        if (!r || tm_upstream_answer(ch->u, gen, r) != 0)
            TM_DEBUG("gateway: a ping of child %s was not answered", ch->key);
        json_decref(r);
        return;
    }
    pthread_mutex_lock(&ch->mu);
    pending *p = ch->flight;
    if (p)
        push(p, ASKS, json_pack("[I,O]", (json_int_t)gen, msg));
    pthread_mutex_unlock(&ch->mu);
    if (!p)
        answer_error(ch, gen, id, "no_call_in_flight",
                     "the gateway has no client request in flight to carry this request");
}

/* ---- children ------------------------------------------------------------------ */

static void child_free(child *ch)
{
    if (!ch)
        return;
    tm_upstream_free(ch->u);
    tm_gw_remote_stop(ch);
    pthread_mutex_destroy(&ch->mu);
    free(ch->key);
    free(ch);
}

/* Spawn and initialize a child with params (its initialize params). */
static int child_start(tm_gateway *g, const char *key, json_t *params, child **out)
{
    child *ch = calloc(1, sizeof *ch);
    if (!ch || !(ch->key = strdup(key)) || pthread_mutex_init(&ch->mu, NULL) != 0) {
        if (ch)
            free(ch->key);
        free(ch);
        return TIDEMARK_ENOMEM;
    }
    ch->g = g;
    if (g->cfg.url) {
        int rrc = tm_gw_remote_start(ch, g->cfg.url, params, g->cfg.call_timeout_ms);
        if (!rrc) {
            *out = ch;
            return 0;
        }
        pthread_mutex_destroy(&ch->mu);
        free(ch->key);
        free(ch);
        return rrc;
    }
    tm_upstream_config uc = {.argv = g->cfg.argv, .init_params = params};
    uc.cb = (tm_upstream_callbacks){.on_ready = on_ready, .on_response = on_response,
                                    .on_notification = on_notification, .on_request = on_request,
                                    .on_lost = on_lost, .on_down = on_down, .ud = ch};
    int rc = tm_upstream_start(&uc, &ch->u);
    if (rc) {
        TM_WARN("gateway: child %s did not start: %s", key, tidemark_strerror(rc));
        pthread_mutex_destroy(&ch->mu);
        free(ch->key);
        free(ch);
        return rc;
    }
    *out = ch;
    return 0;
}

/* The child for key with busy taken, or NULL. Holds g->mu. */
static child *find_locked(tm_gateway *g, const char *key)
{
    for (child *ch = g->children; ch; ch = ch->next)
        if (!strcmp(ch->key, key)) {
            ch->busy++;
            ch->last_used = tm_now_ms();
            return ch;
        }
    return NULL;
}

/* Unlink ch from the list. Holds g->mu. */
static void unlink_locked(tm_gateway *g, child *ch)
{
    for (child **pp = &g->children; *pp; pp = &(*pp)->next)
        if (*pp == ch) {
            *pp = ch->next;
            g->n--;
            return;
        }
}

/* The idle child used longest ago (not the catalog), unlinked; NULL when
 * every child is busy. Holds g->mu. */
static child *evict_locked(tm_gateway *g, int64_t idle_before)
{
    child *old = NULL;
    for (child *ch = g->children; ch; ch = ch->next)
        if (ch != g->catalog && ch->busy == 0 && ch->last_used < idle_before &&
            (!old || ch->last_used < old->last_used))
            old = ch;
    if (old)
        unlink_locked(g, old);
    return old;
}

static void release(tm_gateway *g, child *ch)
{
    pthread_mutex_lock(&g->mu);
    ch->busy--;
    ch->last_used = tm_now_ms();
    pthread_mutex_unlock(&g->mu);
}

/* The child a call goes to, and the params it is initialized with. OUT
 * key, params (the caller frees both). */
static int key_of(tidemark_call_t *call, char **key, json_t **params)
{
    int rc = tidemark_call_client_params(call, params);
    if (rc)
        return rc;
    const char *v = tidemark_call_protocol_version(call);
    char *k = NULL;
    if (v && !strcmp(v, MODERN_VERSION)) {
        /* No session: one child per set of capabilities; a child speaks
         * the 2025 protocol whatever the client does (the era bridge). */
        json_object_set_new(*params, "protocolVersion", json_string(LEGACY_VERSION));
        char *caps = json_dumps(json_object_get(*params, "capabilities"), JSON_COMPACT | JSON_SORT_KEYS);
        if (caps && asprintf(&k, "m:%s\n%s", tidemark_call_principal(call), caps) < 0)
            k = NULL;
        free(caps);
    } else if (asprintf(&k, "s:%s", tidemark_call_session(call)) < 0) {
        k = NULL;
    }
    if (!json_object_get(*params, "clientInfo"))
        json_object_set_new(*params, "clientInfo",
                            json_pack("{s:s,s:s}", "name", "tidemark-gateway", "version", TIDEMARK_VERSION));
    *key = k;
    return k ? 0 : TIDEMARK_ENOMEM;
}

static int ask(child *ch, tidemark_call_t *call, const char *method, json_t *params, unsigned flags,
               int timeout_ms, json_t **out);

/* A child that logs is asked for everything: the client's own level is
 * applied by the Tidemark server to what the child sends. And a child that
 * answers server/discover speaks 2026-07-28 too: calls go to it in that
 * era, where its idempotency keys hold across its sessions and processes
 * (a new child after a crash runs a re-sent call once) and its input
 * requests come back named, as multi round-trip results. */
static void probe(child *ch, json_t *params)
{
    json_t *init = NULL, *p = json_pack("{s:s}", "level", "debug"), *res = NULL;
    if (tm_upstream_init_result(ch->u, &init) == 0 &&
        json_object_get(json_object_get(init, "capabilities"), "logging") && p &&
        ask(ch, NULL, "logging/setLevel", p, TM_UPSTREAM_RESEND, PROBE_TIMEOUT_MS, &res) != 0)
        TM_WARN("gateway: child %s refused logging/setLevel", ch->key);
    json_decref(res);
    json_decref(p);
    json_decref(init);
    res = NULL;
    p = json_pack("{s:{s:s,s:O,s:O}}", "_meta", META_VERSION, MODERN_VERSION, META_INFO,
                  json_object_get(params, "clientInfo"), META_CAPS,
                  json_object_get(params, "capabilities"));
    ch->modern = p && ask(ch, NULL, "server/discover", p, TM_UPSTREAM_RESEND, PROBE_TIMEOUT_MS,
                          &res) == 0;
    json_decref(res);
    json_decref(p);
}

/* A new child for key, room made first (an idle child stopped). Holds
 * g->start_mu. */
static int child_new(tm_gateway *g, const char *key, json_t *params, child **out)
{
    pthread_mutex_lock(&g->mu);
    child *victim = g->n >= g->cfg.max_children ? evict_locked(g, INT64_MAX) : NULL;
    int full = g->n >= g->cfg.max_children;
    pthread_mutex_unlock(&g->mu);
    child_free(victim);
    if (full)
        return TIDEMARK_EBUSY;
    int rc = child_start(g, key, params, out);
    if (rc)
        return rc;
    if ((*out)->u)
        probe(*out, params);
    pthread_mutex_lock(&g->mu);
    (*out)->busy = 1;
    (*out)->last_used = tm_now_ms();
    (*out)->next = g->children;
    g->children = *out;
    g->n++;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int child_for(tm_gateway *g, tidemark_call_t *call, child **out)
{
    char *key = NULL;
    json_t *params = NULL;
    int rc = key_of(call, &key, &params);
    if (!rc) {
        pthread_mutex_lock(&g->mu);
        *out = find_locked(g, key);
        pthread_mutex_unlock(&g->mu);
    }
    if (!rc && !*out) {
        pthread_mutex_lock(&g->start_mu);
        pthread_mutex_lock(&g->mu);
        *out = find_locked(g, key); /* started meanwhile */
        pthread_mutex_unlock(&g->mu);
        if (!*out)
            rc = child_new(g, key, params, out);
        pthread_mutex_unlock(&g->start_mu);
    }
    free(key);
    json_decref(params);
    return rc;
}

/* ---- one request at a child ------------------------------------------------------ */

static void relay_note(tidemark_call_t *call, json_t *msg)
{
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *p = json_object_get(msg, "params");
    int rc = 0;
    if (!m)
        return;
    if (!strcmp(m, "notifications/progress")) {
        json_t *total = json_object_get(p, "total");
        rc = tidemark_call_progress(call, json_number_value(json_object_get(p, "progress")),
                                    json_is_number(total) ? json_number_value(total) : -1,
                                    json_string_value(json_object_get(p, "message")));
    } else if (!strcmp(m, "notifications/message")) {
        const char *level = json_string_value(json_object_get(p, "level"));
        rc = tidemark_call_log(call, level ? level : "info",
                               json_string_value(json_object_get(p, "logger")),
                               json_object_get(p, "data"));
    } else {
        rc = tidemark_call_notify(call, m, p);
    }
    if (rc && rc != TIDEMARK_ENOTSUP)
        TM_DEBUG("gateway: %s not relayed: %s", m, tidemark_strerror(rc));
}

/* The child's request [gen, msg] put to the client; the answer back to the
 * child. TIDEMARK_EINPUT: a 2026-07-28 call must first return for it. */
static int relay_ask(child *ch, tidemark_call_t *call, json_t *ask, unsigned flags)
{
    unsigned gen = (unsigned)json_integer_value(json_array_get(ask, 0));
    json_t *msg = json_array_get(ask, 1), *id = json_object_get(msg, "id"), *res = NULL;
    const char *m = json_string_value(json_object_get(msg, "method"));
    const char *v = tidemark_call_protocol_version(call);
    if (!(flags & TM_UPSTREAM_RESEND) && v && !strcmp(v, MODERN_VERSION)) {
        /* A 2026-07-28 client answers by retrying the call, which runs the
         * child's tool again: only a tool safe to run twice may ask. */
        answer_error(ch, gen, id, "input_not_repeatable",
                     "the gateway cannot put this request to a 2026-07-28 client: the tool "
                     "is not safe to run again");
        return 0;
    }
    int rc = m ? tidemark_call_request(call, m, json_object_get(msg, "params"), ASK_TIMEOUT_MS, &res)
               : TIDEMARK_EINVAL;
    if (rc == TIDEMARK_EINPUT) {
        json_decref(res);
        return rc;
    }
    json_t *r = NULL;
    if (rc == 0)
        r = tm_jsonrpc_result(id, res ? res : json_object());
    else if (rc == TIDEMARK_EPEER && json_is_object(res))
        r = json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "error", res);
    else {
        json_decref(res);
        answer_error(ch, gen, id, "client_request_failed", tidemark_strerror(rc));
        return 0;
    }
    if (!r || tm_upstream_answer(ch->u, gen, r) != 0)
        TM_DEBUG("gateway: the client's answer did not reach child %s", ch->key);
    json_decref(r);
    return 0;
}

/* Take what arrived for p (OUT notes, asks) and whether it is over. */
int tm_gw_take(pending *p, int64_t until, json_t **notes, json_t **asks)
{
    pthread_mutex_lock(&p->mu);
    while (!p->response && !p->lost && !json_array_size(p->notes) && !json_array_size(p->asks) &&
           !p->boxes) {
        int64_t now = tm_now_ms();
        if (now >= until)
            break;
        struct timespec ts = tm_deadline_ms(until - now);
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
    *notes = p->notes;
    *asks = p->asks;
    p->notes = json_array();
    p->asks = json_array();
    int over = p->response || p->lost;
    pthread_mutex_unlock(&p->mu);
    return over;
}

/* Run what arrived for the call; a code when the call must stop. */
int tm_gw_relay(child *ch, tidemark_call_t *call, json_t *notes, json_t *asks, unsigned flags)
{
    size_t i;
    json_t *v;
    int rc = 0;
    json_array_foreach(notes, i, v) if (call) relay_note(call, v);
    json_array_foreach(asks, i, v) {
        if (rc || !call)
            answer_error(ch, (unsigned)json_integer_value(json_array_get(v, 0)),
                         json_object_get(json_array_get(v, 1), "id"), "no_call_in_flight",
                         "the request the child asked for is over");
        else
            rc = relay_ask(ch, call, v, flags);
    }
    json_decref(notes);
    json_decref(asks);
    return rc;
}

/* Wait for p at ch, relaying for call (NULL: nobody to relay to). */
static int wait_for(child *ch, pending *p, tidemark_call_t *call, int64_t deadline, unsigned flags)
{
    for (;;) {
        json_t *notes, *asks;
        int64_t step = tm_now_ms() + 100;
        int over = tm_gw_take(p, step < deadline ? step : deadline, &notes, &asks);
        int rc = tm_gw_relay(ch, call, notes, asks, flags);
        if (over)
            return 0;
        if (!rc && call && tidemark_call_cancelled(call))
            rc = TIDEMARK_ECANCELED;
        if (!rc && tm_now_ms() >= deadline)
            rc = TIDEMARK_ETIMEDOUT;
        if (rc) {
            if (tm_upstream_cancel(ch->u, p, rc == TIDEMARK_ECANCELED ? "cancelled" : NULL) != 0)
                TM_DEBUG("gateway: the request at child %s ended meanwhile", ch->key);
            return rc;
        }
    }
}

/* The typed error a call ends with when its child died. */
static json_t *lost_error(int err)
{
    return json_pack("{s:i,s:s,s:{s:s,s:s}}", "code", TM_RPC_OUTCOME_UNKNOWN, "message",
                     "The stdio server died during the request: its outcome is unknown", "data",
                     "reason", "outcome_unknown", "error", tidemark_strerror(err));
}

/* Send method(params) to ch and wait. OUT out: the result (0) or the
 * error object (TIDEMARK_EPEER); other codes: nothing. */
static int ask(child *ch, tidemark_call_t *call, const char *method, json_t *params, unsigned flags,
               int timeout_ms, json_t **out)
{
    pending p;
    int rc = tm_gw_pending_init(&p);
    json_t *req = rc ? NULL : tm_jsonrpc_request(json_integer(1), method, json_incref(params));
    if (!req) {
        if (!rc)
            tm_gw_pending_destroy(&p);
        return TIDEMARK_ENOMEM;
    }
    tm_gw_track(ch, &p);
    rc = tm_upstream_request(ch->u, req, flags, &p);
    json_decref(req);
    if (!rc)
        rc = wait_for(ch, &p, call, tm_now_ms() + timeout_ms, flags);
    tm_gw_untrack(ch, &p);
    json_t *notes, *asks; /* what came after the last look: nobody to relay it to */
    (void)tm_gw_take(&p, 0, &notes, &asks);
    (void)tm_gw_relay(ch, NULL, notes, asks, flags);
    if (!rc && p.lost) {
        *out = lost_error(p.lost);
        rc = TIDEMARK_EPEER;
    } else if (!rc) {
        json_t *err = json_object_get(p.response, "error");
        *out = json_incref(err ? err : json_object_get(p.response, "result"));
        rc = err ? TIDEMARK_EPEER : *out ? 0 : TIDEMARK_EPROTO;
    } else if (rc == TIDEMARK_ECLOSED) {
        *out = lost_error(rc);
        rc = TIDEMARK_EPEER;
    }
    tm_gw_pending_destroy(&p);
    return rc;
}

/* params for the n-th round of a 2026-07-28 request at a child: the
 * client's _meta (as initialize params had it), the call's key (one per
 * round), every log level, and the answers of the round before. */
static json_t *modern_params(child *ch, tidemark_call_t *call, json_t *params, int round,
                             json_t *responses, json_t *state)
{
    json_t *cp = NULL, *p = json_deep_copy(params);
    if (!p || tidemark_call_client_params(call, &cp) != 0) {
        json_decref(p);
        return NULL;
    }
    json_t *meta = json_object_get(p, "_meta");
    if (!json_is_object(meta))
        json_object_set_new(p, "_meta", meta = json_object());
    json_object_set_new(meta, META_VERSION, json_string(MODERN_VERSION));
    json_object_set(meta, META_CAPS, json_object_get(cp, "capabilities"));
    if (json_object_get(cp, "clientInfo"))
        json_object_set(meta, META_INFO, json_object_get(cp, "clientInfo"));
    json_object_set_new(meta, META_LOG, json_string("debug"));
    const char *k = json_string_value(json_object_get(meta, IDEM_KEY));
    if (k && round > 1)
        json_object_set_new(meta, IDEM_KEY, json_sprintf("%s#%d", k, round));
    if (responses)
        json_object_set(p, "inputResponses", responses);
    if (state)
        json_object_set(p, "requestState", state);
    json_decref(cp);
    (void)ch;
    return p;
}

/* The inputRequests of a child's InputRequiredResult put to the client
 * (by their own names). OUT responses; TIDEMARK_EINPUT when a 2026-07-28
 * client must answer first (the call then ends with its own
 * InputRequiredResult, and its retry comes back here). */
static int answer_inputs(tidemark_call_t *call, json_t *requests, json_t **responses, json_t **err)
{
    *responses = json_object();
    const char *key;
    json_t *req;
    int need = 0;
    json_object_foreach(requests, key, req) {
        json_t *ans = NULL;
        const char *m = json_string_value(json_object_get(req, "method"));
        int rc = m ? tidemark_call_input(call, key, m, json_object_get(req, "params"),
                                         ASK_TIMEOUT_MS, &ans)
                   : TIDEMARK_EPROTO;
        if (rc == TIDEMARK_EINPUT) {
            need = 1;
            continue;
        }
        if (rc) {
            json_decref(*err);
            *err = rc == TIDEMARK_EPEER && json_is_object(ans) ? ans : NULL;
            if (!*err)
                json_decref(ans);
            return rc;
        }
        json_object_set_new(*responses, key, ans);
    }
    return need ? TIDEMARK_EINPUT : 0;
}

static int input_required(json_t *res)
{
    const char *t = json_string_value(json_object_get(res, "resultType"));
    return t && !strcmp(t, "input_required");
}

/* A call's request at a 2026-07-28 child: its rounds of input answered. */
static int modern_ask(child *ch, tidemark_call_t *call, const char *method, json_t *params,
                      unsigned flags, int timeout_ms, json_t **out)
{
    json_t *responses = NULL, *state = NULL;
    for (int round = 1; round <= MAX_ROUNDS; round++) {
        json_t *p = modern_params(ch, call, params, round, responses, state), *res = NULL;
        json_decref(responses);
        json_decref(state);
        responses = state = NULL;
        int rc = p ? ask(ch, call, method, p, flags, timeout_ms, &res) : TIDEMARK_ENOMEM;
        json_decref(p);
        if (rc || !input_required(res)) {
            if (!rc) { /* the client's era says these its own way */
                (void)json_object_del(res, "resultType");
                (void)json_object_del(json_object_get(res, "_meta"), "io.modelcontextprotocol/serverInfo");
            }
            *out = res;
            return rc;
        }
        state = json_incref(json_object_get(res, "requestState"));
        json_t *err = NULL;
        rc = answer_inputs(call, json_object_get(res, "inputRequests"), &responses, &err);
        json_decref(res);
        if (rc) {
            json_decref(responses);
            json_decref(state);
            *out = err;
            return rc;
        }
    }
    json_decref(responses);
    json_decref(state);
    *out = tm_gw_error("input_rounds_exceeded", "The stdio server asked for input too many times");
    return TIDEMARK_EPEER;
}

json_t *tm_gw_error(const char *reason, const char *message)
{
    return json_pack("{s:i,s:s,s:{s:s}}", "code", TM_RPC_INTERNAL_ERROR, "message", message,
                     "data", "reason", reason);
}

/* The gateway's CLIENT span to a stdio child, child of the call's
 * SERVER span, its traceparent put in params._meta. An HTTP upstream is
 * reached through the client library, which makes that span itself under
 * the SERVER span's traceparent put there. NULL when tracing is off. */
static tm_span *forward_span(tm_gateway *g, tidemark_call_t *call, const child *ch,
                             const char *method, json_t *params)
{
    const tm_span *server = tm_call_span(call);
    if (!server)
        return NULL;
    if (ch->hc) {
        (void)tm_mcp_inject(server, params); /* no _meta: the call goes untraced */
        return NULL;
    }
    tm_span *sp = tm_mcp_span_start(tm_server_otel(g->srv), TM_SPAN_CLIENT, method, params, NULL,
                                    tm_span_ctx(server), tm_span_tracestate(server));
    tm_span_set_str(sp, "network.transport", "pipe");
    (void)tm_mcp_inject(sp, params);
    return sp;
}

/* A call's request at its child: typed errors for what is not the
 * child's own answer. */
static int forward(tm_gateway *g, tidemark_call_t *call, const char *method, json_t *params,
                   unsigned flags, json_t **out)
{
    child *ch = NULL;
    int rc = child_for(g, call, &ch);
    if (rc) {
        *out = rc == TIDEMARK_EBUSY
                   ? tm_gw_error("gateway_busy", "Every stdio server of the gateway is busy")
                   : tm_gw_error("upstream_unavailable", "The stdio server cannot be started");
        return TIDEMARK_EPEER;
    }
    tm_span *sp = forward_span(g, call, ch, method, params);
    rc = ch->hc ? tm_gw_remote_ask(ch, call, method, params, out)
         : ch->modern ? modern_ask(ch, call, method, params, flags, g->cfg.call_timeout_ms, out)
                    : ask(ch, call, method, params, flags, g->cfg.call_timeout_ms, out);
    release(g, ch);
    if (rc == TIDEMARK_ETIMEDOUT) {
        *out = tm_gw_error("upstream_timeout", "The stdio server did not answer in time");
        rc = TIDEMARK_EPEER;
    }
    tm_mcp_span_finish(sp, rc, *out);
    return rc;
}

/* ---- handlers (the Tidemark server's workers) ------------------------------------ */

/* The call's key for the child: the same on a re-issue, a recovery's
 * re-run and every node, so a Tidemark child runs a re-sent call once. */
static json_t *with_key(tidemark_call_t *call, json_t *params)
{
    const char *k = tidemark_call_idempotency_key(call);
    if (params && k && json_object_set_new(params, "_meta", json_pack("{s:s,s:s}", IDEM_KEY, k,
                                                                      "progressToken", "gw")) != 0) {
        json_decref(params);
        return NULL;
    }
    return params;
}

static int gw_tool(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    entry *e = ud;
    json_t *p = with_key(call, json_pack("{s:s,s:O}", "name", e->name, "arguments", args));
    if (!p)
        return TIDEMARK_ENOMEM;
    int rc = forward(e->g, call, "tools/call", p, e->safe ? TM_UPSTREAM_RESEND : 0, result);
    json_decref(p);
    return rc;
}

static int gw_prompt(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    entry *e = ud;
    json_t *p = json_pack("{s:s,s:O}", "name", e->name, "arguments", args ? args : json_null());
    if (p && !args)
        (void)json_object_del(p, "arguments");
    int rc = p ? forward(e->g, call, "prompts/get", p, TM_UPSTREAM_RESEND, result) : TIDEMARK_ENOMEM;
    json_decref(p);
    return rc;
}

static int gw_resource(tidemark_call_t *call, const char *uri, json_t **contents, void *ud)
{
    json_t *p = json_pack("{s:s}", "uri", uri), *res = NULL;
    int rc = p ? forward(ud, call, "resources/read", p, TM_UPSTREAM_RESEND, &res) : TIDEMARK_ENOMEM;
    json_decref(p);
    if (rc == TIDEMARK_EPEER && json_integer_value(json_object_get(res, "code")) == RPC_RESOURCE_NOT_FOUND) {
        json_decref(res);
        return TIDEMARK_ENOTFOUND; /* said in the client's era's own way */
    }
    if (rc == 0) {
        *contents = json_incref(json_object_get(res, "contents"));
        json_decref(res);
        return 0;
    }
    *contents = res;
    return rc;
}

static int gw_complete(tidemark_call_t *call, json_t *ref, json_t *argument, json_t *context,
                       json_t **values, void *ud)
{
    json_t *p = json_pack("{s:O,s:O}", "ref", ref, "argument", argument), *res = NULL;
    if (p && context)
        json_object_set(p, "context", context);
    int rc = p ? forward(ud, call, "completion/complete", p, TM_UPSTREAM_RESEND, &res) : TIDEMARK_ENOMEM;
    json_decref(p);
    if (rc == 0) {
        *values = json_incref(json_object_get(json_object_get(res, "completion"), "values"));
        json_decref(res);
        return 0;
    }
    *values = res;
    return rc;
}

/* ---- the catalog ------------------------------------------------------------------ */

/* Every page of a list of the catalog child. OUT items. */
static int list_all(tm_gateway *g, const char *method, const char *field, json_t **items)
{
    json_t *all = json_array(), *cursor = NULL;
    int rc = all ? 0 : TIDEMARK_ENOMEM;
    if (g->catalog->hc) {
        json_decref(all);
        return tm_gw_remote_list(g->catalog, method, field, items);
    }
    for (int page = 0; !rc && page < 1000; page++) {
        json_t *p = cursor ? json_pack("{s:O}", "cursor", cursor) : json_object(), *res = NULL;
        rc = p ? ask(g->catalog, NULL, method, p, TM_UPSTREAM_RESEND, LIST_TIMEOUT_MS, &res)
               : TIDEMARK_ENOMEM;
        json_decref(p);
        json_decref(cursor);
        cursor = NULL;
        json_t *page_items = json_object_get(res, field);
        if (!rc && json_is_array(page_items) && json_array_extend(all, page_items) != 0)
            rc = TIDEMARK_ENOMEM;
        if (!rc && json_is_string(json_object_get(res, "nextCursor")))
            cursor = json_incref(json_object_get(res, "nextCursor"));
        json_decref(res);
        if (!cursor)
            break;
    }
    json_decref(cursor);
    if (rc)
        json_decref(all);
    else
        *items = all;
    return rc;
}

/* The entry of name (listed again: the same one, its safety updated), or a
 * new one. */
static entry *entry_new(tm_gateway *g, const char *name, int safe)
{
    pthread_mutex_lock(&g->mu);
    for (entry *o = g->entries; o; o = o->next)
        if (!strcmp(o->name, name)) {
            o->safe = safe;
            pthread_mutex_unlock(&g->mu);
            return o;
        }
    pthread_mutex_unlock(&g->mu);
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        return NULL;
    }
    e->g = g;
    e->safe = safe;
    pthread_mutex_lock(&g->mu);
    e->next = g->entries;
    g->entries = e;
    pthread_mutex_unlock(&g->mu);
    return e;
}

static int named_safe(const tm_gateway *g, const char *name)
{
    for (const char *const *s = g->cfg.safe_tools; s && *s; s++)
        if (!strcmp(*s, name))
            return 1;
    return 0;
}

/* The child's annotations as hints; idempotentHint only when the call is
 * safe to send twice (Tidemark acts on it: a re-run after a crash). */
static unsigned hints_of(json_t *ann, int safe)
{
    unsigned h = 0;
    if (json_is_true(json_object_get(ann, "readOnlyHint")))
        h |= TIDEMARK_TOOL_READ_ONLY;
    if (json_is_true(json_object_get(ann, "destructiveHint")))
        h |= TIDEMARK_TOOL_DESTRUCTIVE;
    if (json_is_true(json_object_get(ann, "openWorldHint")))
        h |= TIDEMARK_TOOL_OPEN_WORLD;
    return safe ? h | TIDEMARK_TOOL_IDEMPOTENT : h;
}

static char *text_of(json_t *v)
{
    return v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

static int add_tool(tm_gateway *g, json_t *t)
{
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name)
        return 0; /* nothing to call it by: left out */
    json_t *ann = json_object_get(t, "annotations");
    int safe = named_safe(g, name) ||
               (g->cfg.trust_annotations && (json_is_true(json_object_get(ann, "readOnlyHint")) ||
                                             json_is_true(json_object_get(ann, "idempotentHint"))));
    entry *e = entry_new(g, name, safe);
    char *in = text_of(json_object_get(t, "inputSchema")), *out = text_of(json_object_get(t, "outputSchema"));
    tidemark_tool_t tool = {.name = name, .title = json_string_value(json_object_get(t, "title")),
                            .description = json_string_value(json_object_get(t, "description")),
                            .input_schema = in, .output_schema = out, .hints = hints_of(ann, safe),
                            .fn = gw_tool, .ud = e};
    int rc = e ? tidemark_server_add_tool(g->srv, &tool) : TIDEMARK_ENOMEM; /* replaces */
    free(in);
    free(out);
    if (rc == TIDEMARK_EINVAL) { /* one bad definition: that tool left out, not the others */
        TM_WARN("gateway: the child's tool %s is left out (its definition is refused)", name);
        return 0;
    }
    return rc;
}

/* The child's tools registered: a tool listed as before is left as it is
 * (a call of it may be running, and its definition is being read), a new or
 * changed one is registered (replacing in place), one gone is removed.
 * g->tools: name -> the definition as last listed. */
static int add_tools(tm_gateway *g)
{
    json_t *tools = NULL, *now = json_object();
    int rc = now ? list_all(g, "tools/list", "tools", &tools) : TIDEMARK_ENOMEM;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (rc || !name)
            continue;
        if (!json_equal(json_object_get(g->tools, name), t))
            rc = add_tool(g, t);
        if (!rc && json_object_set(now, name, t) != 0)
            rc = TIDEMARK_ENOMEM;
    }
    const char *name;
    json_object_foreach(g->tools, name, t) if (!rc && !json_object_get(now, name))
        (void)tidemark_server_remove_tool(g->srv, name);
    json_decref(tools);
    if (rc) {
        json_decref(now);
        return rc;
    }
    json_decref(g->tools);
    g->tools = now;
    return 0;
}

static int add_resources(tm_gateway *g, const char *method, const char *field, int templates)
{
    json_t *items = NULL;
    int rc = list_all(g, method, field, &items);
    size_t i;
    json_t *r;
    json_array_foreach(items, i, r) {
        const char *uri = json_string_value(json_object_get(r, templates ? "uriTemplate" : "uri"));
        tidemark_resource_t res = {.uri = uri, .name = json_string_value(json_object_get(r, "name")),
                                   .title = json_string_value(json_object_get(r, "title")),
                                   .description = json_string_value(json_object_get(r, "description")),
                                   .mime_type = json_string_value(json_object_get(r, "mimeType")),
                                   .fn = gw_resource, .ud = g};
        if (!uri || !res.name || rc)
            continue;
        rc = templates ? tidemark_server_add_resource_template(g->srv, &res)
                       : tidemark_server_add_resource(g->srv, &res);
        if (rc == TIDEMARK_EEXIST)
            rc = 0; /* listed again: the same URI keeps its entry */
    }
    json_decref(items);
    return rc;
}

static int add_prompts(tm_gateway *g)
{
    json_t *items = NULL;
    int rc = list_all(g, "prompts/list", "prompts", &items);
    size_t i;
    json_t *p;
    json_array_foreach(items, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        if (!name || rc)
            continue;
        entry *e = entry_new(g, name, 1);
        char *args = text_of(json_object_get(p, "arguments"));
        tidemark_prompt_t pr = {.name = name, .title = json_string_value(json_object_get(p, "title")),
                                .description = json_string_value(json_object_get(p, "description")),
                                .arguments = args, .fn = gw_prompt, .ud = e};
        rc = e ? tidemark_server_add_prompt(g->srv, &pr) : TIDEMARK_ENOMEM;
        if (rc == TIDEMARK_EEXIST)
            rc = 0;
        free(args);
    }
    json_decref(items);
    return rc;
}

/* Register what the catalog child offers, by its capabilities; first: at
 * start (completion is set then only: it may not change while serving). */
static int add_catalog(tm_gateway *g, int first)
{
    json_t *init = NULL, *caps = NULL;
    int rc = g->catalog->hc ? tm_gw_remote_caps(g->catalog, &caps)
                            : tm_upstream_init_result(g->catalog->u, &init);
    if (init)
        caps = json_incref(json_object_get(init, "capabilities"));
    if (!rc && json_object_get(caps, "tools"))
        rc = add_tools(g);
    if (!rc && json_object_get(caps, "resources"))
        rc = add_resources(g, "resources/list", "resources", 0);
    if (!rc && json_object_get(caps, "resources"))
        rc = add_resources(g, "resources/templates/list", "resourceTemplates", 1);
    if (!rc && json_object_get(caps, "prompts"))
        rc = add_prompts(g);
    if (!rc && first && json_object_get(caps, "completions"))
        rc = tidemark_server_set_completion(g->srv, gw_complete, g);
    json_decref(caps);
    json_decref(init);
    return rc;
}

/* ---- the janitor -------------------------------------------------------------------- */

static void *janitor_main(void *arg)
{
    tm_gateway *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        struct timespec ts = tm_deadline_ms(1000);
        (void)pthread_cond_timedwait(&g->cv, &g->mu, &ts); /* a timeout is the point */
        child *idle = evict_locked(g, tm_now_ms() - g->cfg.idle_ms);
        int relist = g->relist && !g->stopping;
        g->relist = 0;
        pthread_mutex_unlock(&g->mu);
        if (idle)
            TM_INFO("gateway: child %s idle: stopped", idle->key);
        child_free(idle);
        if (relist && add_catalog(g, 0) != 0)
            TM_WARN("gateway: what the child offers could not be listed again");
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* ---- new and free -------------------------------------------------------------------- */

static void settle(tm_gateway_config *c)
{
    if (!c->max_children)
        c->max_children = 64;
    if (c->idle_ms <= 0)
        c->idle_ms = 300000;
    if (c->call_timeout_ms <= 0)
        c->call_timeout_ms = 600000;
}

static int gateway_alloc(tidemark_server_t *srv, const tm_gateway_config *cfg, tm_gateway **out)
{
    tm_gateway *g = calloc(1, sizeof *g);
    if (!g)
        return TIDEMARK_ENOMEM;
    g->srv = srv;
    g->cfg = *cfg; /* the caller's strings live as long as the gateway */
    settle(&g->cfg);
    g->tools = json_object();
    if (!g->tools || pthread_mutex_init(&g->mu, NULL) != 0) {
        json_decref(g->tools);
        free(g);
        return TIDEMARK_ENOMEM;
    }
    if (pthread_mutex_init(&g->start_mu, NULL) != 0 || tm_cond_init_monotonic(&g->cv) != 0) {
        pthread_mutex_destroy(&g->mu);
        json_decref(g->tools);
        free(g);
        return TIDEMARK_ENOMEM;
    }
    *out = g;
    return 0;
}

int tm_gateway_new(tidemark_server_t *srv, const tm_gateway_config *cfg, tm_gateway **out)
{
    if (!srv || !cfg || !out || (!cfg->url && (!cfg->argv || !cfg->argv[0])))
        return TIDEMARK_EINVAL;
    tm_gateway *g;
    int rc = gateway_alloc(srv, cfg, &g);
    if (rc)
        return rc;
    json_t *params = json_pack("{s:s,s:{},s:{s:s,s:s}}", "protocolVersion", LEGACY_VERSION,
                               "capabilities", "clientInfo", "name", "tidemark-gateway", "version",
                               TIDEMARK_VERSION);
    rc = params ? child_start(g, "catalog", params, &g->catalog) : TIDEMARK_ENOMEM;
    json_decref(params);
    if (!rc) {
        g->catalog->next = g->children;
        g->children = g->catalog;
        g->n = 1;
        rc = add_catalog(g, 1);
    }
    if (!rc)
        rc = pthread_create(&g->janitor, NULL, janitor_main, g) ? TIDEMARK_ENOMEM : 0;
    g->janitor_on = rc == 0;
    if (rc) {
        tm_gateway_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void tm_gateway_quiesce(tm_gateway *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_broadcast(&g->cv);
    while (g->users > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    if (g->janitor_on && pthread_join(g->janitor, NULL) != 0)
        TM_WARN("gateway: the janitor could not be joined");
    g->janitor_on = 0;
}

void tm_gateway_free(tm_gateway *g)
{
    if (!g)
        return;
    tm_gateway_quiesce(g);
    while (g->children) {
        child *ch = g->children;
        g->children = ch->next;
        child_free(ch);
    }
    while (g->entries) {
        entry *e = g->entries;
        g->entries = e->next;
        free(e->name);
        free(e);
    }
    json_decref(g->tools);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->start_mu);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
