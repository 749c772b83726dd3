/*
 * remote.c - the gateway's upstream is a Streamable HTTP MCP server
 * (tidemark-gateway --upstream URL), spoken to by the Tidemark client: it
 * finds the upstream's era, resumes a cut stream with Last-Event-ID
 * (deduplicating by event id; a stream it cannot prove continuous is a
 * typed error — continuity_lost, resumption_gap, ... — passed to the
 * gateway's client, never a silent resume), and answers the upstream's
 * input rounds.
 *
 * Threads. The upstream request runs on a runner thread of its own
 * (tidemark_client_request blocks, and its progress and notifications come
 * on that thread); the handler's thread stays free to relay what arrives
 * through the call API, as for a stdio child. The upstream's requests to
 * the client (the Tidemark client's on_request, on its worker thread) are
 * boxes queued on the newest call in flight on that upstream, answered by
 * that call's handler thread. Locks as in gateway.c: ch->mu before p->mu.
 */
#include "gateway/gateway_int.h"
#include "base/clock.h"
#include "base/log.h"
#include "client/client_metrics.h"
#include "server/server_metrics.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ANSWER_WAIT_MS 600000 /* an upstream's request waits this long for the client */

/* The pending call the running request belongs to (set by its runner). */
static __thread pending *tl_pending;

static void on_progress(double progress, double total, const char *message, void *ud)
{
    json_t *n = json_pack("{s:s,s:s,s:{s:f}}", "jsonrpc", "2.0", "method",
                          "notifications/progress", "params", "progress", progress);
    json_t *p = json_object_get(n, "params");
    if (p && total >= 0)
        json_object_set_new(p, "total", json_real(total));
    if (p && message)
        json_object_set_new(p, "message", json_string(message));
    pending *pd = ud;
    pthread_mutex_lock(&pd->mu);
    if (!n || json_array_append_new(pd->notes, n) != 0)
        TM_WARN("gateway: a progress notification of the upstream was dropped");
    pthread_cond_broadcast(&pd->cv);
    pthread_mutex_unlock(&pd->mu);
}

/* A notification of the upstream: with the request it came with (its
 * runner's thread), else what changed there. Progress came by on_progress. */
static void on_notification(json_t *msg, void *ud)
{
    child *ch = ud;
    const char *m = json_string_value(json_object_get(msg, "method"));
    if (m && !strcmp(m, "notifications/progress"))
        return;
    pending *p = tl_pending;
    if (!p || (m && (strstr(m, "list_changed") || !strcmp(m, "notifications/resources/updated")))) {
        tm_gw_changed(ch->g, msg);
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (json_array_append(p->notes, msg) != 0)
        TM_WARN("gateway: a notification of the upstream was dropped");
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* The upstream asks the client: a box on the newest call in flight, then
 * wait for its handler to answer. */
static int on_request(const char *method, json_t *params, json_t **result, void *ud)
{
    child *ch = ud;
    box b = {.method = method, .params = params};
    pthread_mutex_lock(&ch->mu);
    pending *p = ch->flight;
    if (p) {
        pthread_mutex_lock(&p->mu);
        b.next = p->boxes;
        p->boxes = &b;
        p->waiters++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&ch->mu);
    if (!p)
        return TIDEMARK_ENOTSUP; /* no call to carry it to a client */
    int64_t until = tm_now_ms() + ANSWER_WAIT_MS;
    while (!b.done && (b.taken || tm_now_ms() < until)) {
        /* Once a handler took the box it writes to it: wait for that (its
         * own request to the client has the same bound). */
        struct timespec ts = tm_deadline_ms(b.taken ? 1000 : until - tm_now_ms());
        (void)pthread_cond_timedwait(&p->cv, &p->mu, &ts); /* the loop decides */
    }
    if (!b.done) { /* never taken: out of the queue, the upstream told so */
        for (box **bb = &p->boxes; *bb; bb = &(*bb)->next)
            if (*bb == &b) {
                *bb = b.next;
                break;
            }
        b.rc = TIDEMARK_ETIMEDOUT;
    }
    p->waiters--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    *result = b.result;
    return b.rc;
}

int tm_gw_remote_start(child *ch, const char *url, json_t *params, int timeout_ms)
{
    tidemark_client_config_t cfg;
    tidemark_client_config_init(&cfg);
    json_t *info = json_object_get(params, "clientInfo");
    cfg.url = url;
    cfg.name = json_string_value(json_object_get(info, "name"));
    cfg.version = json_string_value(json_object_get(info, "version"));
    cfg.capabilities = json_object_get(params, "capabilities");
    cfg.opaque_policy = TIDEMARK_OPAQUE_RESUME; /* resume by id; the validator still refuses gaps */
    cfg.timeout_ms = timeout_ms;
    cfg.on_request = on_request;
    cfg.on_notification = on_notification;
    cfg.ud = ch;
    int rc = tidemark_client_new(&cfg, &ch->hc);
    if (!rc) /* its durations and spans on the gateway's /metrics */
        tm_client_count_on(ch->hc, tm_server_registry(ch->g->srv));
    json_t *err = NULL;
    if (!rc && (rc = tidemark_client_connect(ch->hc, &err)) != 0) {
        const char *why = json_string_value(json_object_get(err, "message"));
        TM_WARN("gateway: the upstream %s: %s", url, why ? why : tidemark_strerror(rc));
        tidemark_client_free(ch->hc);
        ch->hc = NULL;
    }
    json_decref(err);
    return rc;
}

void tm_gw_remote_stop(child *ch)
{
    tidemark_client_free(ch->hc);
    ch->hc = NULL;
}

typedef struct runner {
    child *ch;
    pending *p;
    const char *method;
    json_t *params;
} runner;

static void *runner_main(void *arg)
{
    runner *r = arg;
    json_t *res = NULL;
    tl_pending = r->p;
    int rc = tidemark_client_request(r->ch->hc, r->method, r->params, on_progress, r->p, &res);
    tl_pending = NULL;
    if (rc && !json_is_object(res)) {
        json_decref(res);
        res = tm_gw_error("upstream_failed", tidemark_strerror(rc));
    }
    json_t *resp = json_pack("{s:o}", rc ? "error" : "result", res ? res : json_object());
    pthread_mutex_lock(&r->p->mu);
    r->p->response = resp;
    if (!resp)
        r->p->lost = TIDEMARK_ENOMEM;
    pthread_cond_broadcast(&r->p->cv);
    pthread_mutex_unlock(&r->p->mu);
    return NULL;
}

/* Answer the boxes queued on p (the handler's thread). */
static void serve_boxes(pending *p, tidemark_call_t *call)
{
    pthread_mutex_lock(&p->mu);
    while (p->boxes) {
        box *b = p->boxes;
        p->boxes = b->next;
        b->taken = 1;
        pthread_mutex_unlock(&p->mu);
        json_t *res = NULL;
        int rc = call ? tidemark_call_request(call, b->method, b->params, ANSWER_WAIT_MS, &res)
                      : TIDEMARK_ENOTSUP;
        pthread_mutex_lock(&p->mu);
        b->result = res;
        b->rc = rc;
        b->done = 1;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* After the runner: no new box can come (p is untracked); those queued are
 * refused and their waiters gone before p may go. */
static void drain(pending *p)
{
    pthread_mutex_lock(&p->mu);
    for (box *b = p->boxes; b; b = b->next) {
        b->rc = TIDEMARK_ECANCELED;
        b->done = 1;
    }
    p->boxes = NULL;
    pthread_cond_broadcast(&p->cv);
    while (p->waiters > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int tm_gw_remote_ask(child *ch, tidemark_call_t *call, const char *method, json_t *params,
                     json_t **out)
{
    pending p;
    if (tm_gw_pending_init(&p) != 0)
        return TIDEMARK_ENOMEM;
    runner r = {.ch = ch, .p = &p, .method = method, .params = params};
    tm_gw_track(ch, &p);
    pthread_t t;
    int rc = pthread_create(&t, NULL, runner_main, &r) ? TIDEMARK_ENOMEM : 0;
    for (int over = rc != 0; !over;) {
        json_t *notes, *asks;
        over = tm_gw_take(&p, tm_now_ms() + 100, &notes, &asks);
        (void)tm_gw_relay(ch, call, notes, asks, TM_UPSTREAM_RESEND); /* no asks come from HTTP */
        serve_boxes(&p, call);
    }
    if (!rc && pthread_join(t, NULL) != 0)
        TM_WARN("gateway: an upstream request's thread could not be joined");
    tm_gw_untrack(ch, &p);
    drain(&p);
    if (!rc) {
        json_t *err = json_object_get(p.response, "error");
        *out = json_incref(err ? err : json_object_get(p.response, "result"));
        rc = err ? TIDEMARK_EPEER : *out ? 0 : TIDEMARK_ENOMEM;
    }
    tm_gw_pending_destroy(&p);
    return rc;
}

int tm_gw_remote_list(child *ch, const char *method, const char *field, json_t **items)
{
    int rc = tidemark_client_list(ch->hc, method, field, items);
    if (rc) {
        json_decref(*items);
        *items = NULL;
    }
    return rc;
}

int tm_gw_remote_caps(child *ch, json_t **caps)
{
    json_t *info = NULL;
    int rc = tidemark_client_server_info(ch->hc, &info);
    *caps = rc ? NULL : json_incref(json_object_get(info, "capabilities"));
    json_decref(info);
    return rc;
}
