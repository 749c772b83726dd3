/*
 * recovery.c - at start-up (and, on a store shared by several nodes,
 * periodically: tm_recover is then run for requests of nodes whose lease
 * lapsed), finish every request a dead process left
 * "started" (DESIGN.md §6): tools registered atomic or idempotent run again
 * and continue their stream (progress never goes backwards); any other tool
 * gets a typed outcome_unknown response. A resuming client always reaches
 * an end.
 */
#include "server_int.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pending {
    tm_request_rec *v;
    size_t n, cap;
} pending;

static int collect(void *ud, const tm_request_rec *r)
{
    pending *p = ud;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        tm_request_rec *v = realloc(p->v, cap * sizeof *v);
        if (!v)
            return 1;
        p->v = v;
        p->cap = cap;
    }
    tm_request_rec *o = &p->v[p->n++];
    memset(o, 0, sizeof *o);
    o->session = tm_strdup(r->session);
    o->key = tm_strdup(r->key);
    o->tool = r->tool ? strdup(r->tool) : NULL;
    o->stream = r->stream ? strdup(r->stream) : NULL;
    o->message = r->message ? strdup(r->message) : NULL;
    o->state = r->state;
    return 0;
}

typedef struct floor_scan {
    json_t *token;
    double floor;
    int found;
} floor_scan;

static int scan_progress(void *ud, const tm_event *ev)
{
    floor_scan *f = ud;
    if (ev->len == 0)
        return 0;
    json_t *m = json_loadb(ev->data, ev->len, JSON_ALLOW_NUL, NULL);
    const char *method = json_string_value(json_object_get(m, "method"));
    if (method && strcmp(method, "notifications/progress") == 0) {
        json_t *p = json_object_get(m, "params");
        if (json_equal(json_object_get(p, "progressToken"), f->token)) {
            double v = json_number_value(json_object_get(p, "progress"));
            if (!f->found || v > f->floor)
                f->floor = v;
            f->found = 1;
        }
    }
    json_decref(m);
    return 0;
}

/* The highest progress already on the stream for the call's token. */
static void progress_floor(tidemark_server_t *srv, tidemark_call_t *c, const char *stream)
{
    if (!c->progress_token)
        return;
    floor_scan f = {c->progress_token, 0, 0};
    tm_stream_bounds b;
    if (tm_store_bounds(srv->store, c->sess->id, stream, &b) != 0)
        return;
    uint64_t after = b.first_retained ? b.first_retained - 1 : 0;
    while (after < b.head) {
        if (tm_store_read(srv->store, c->sess->id, stream, after, 256, scan_progress, &f) != 0)
            break;
        after = after + 256 < b.head ? after + 256 : b.head;
    }
    c->has_floor = f.found;
    c->progress_floor = f.floor;
}

/* Recover the unfinished requests of one stream: p->v[from, to). */
static void recover_stream(tidemark_server_t *srv, pending *p, size_t from, size_t to)
{
    tm_request_rec *first = &p->v[from];
    tm_sess *sess = tm_sess_find(srv, first->session);
    if (!sess) {
        TM_WARN("recovery: session %s is gone; %zu request(s) dropped", first->session, to - from);
        return;
    }
    tm_job *j = calloc(1, sizeof *j);
    if (!j) {
        tm_sess_unref(sess);
        return;
    }
    j->srv = srv;
    j->sess = sess;
    j->sse = 1;
    snprintf(j->stream, sizeof j->stream, "%s", first->stream);
    j->root = json_array();
    j->responses = json_array();
    pthread_mutex_init(&j->mu, NULL);
    j->remaining = (int)(to - from) + 1;
    for (size_t i = from; i < to; i++) {
        tm_request_rec *r = &p->v[i];
        json_t *msg = r->message ? json_loads(r->message, JSON_ALLOW_NUL, NULL) : NULL;
        tm_msg m;
        tm_jsonrpc_classify(msg, &m);
        json_array_append(j->root, msg ? msg : json_null());
        tm_reg_entry e = {0};
        int known = r->tool && tm_registry_get(srv->reg, TM_REG_TOOL, r->tool, &e) == 0;
        if (known)
            json_decref(e.desc);
        tidemark_call_t *c = calloc(1, sizeof *c);
        /* A key that does not fit could only come from a foreign writer:
         * never finish a record under a truncated key. */
        if (!c || m.kind != TM_MSG_REQUEST || !r->key || strlen(r->key) >= sizeof c->reqkey) {
            free(c);
            json_decref(msg);
            tm_job_complete(j, NULL, NULL);
            continue;
        }
        c->srv = srv;
        c->sess = sess;
        c->job = j;
        c->id = json_incref(m.id);
        c->method = m.method;
        c->params = m.params;
        c->recorded = 1;
        c->recovering = 1;
        snprintf(c->reqkey, sizeof c->reqkey, "%s", r->key);
        tm_jsonrpc_id_key(c->id, c->idkey, sizeof c->idkey);
        snprintf(c->idem, sizeof c->idem, "%s/%s", sess->id, c->reqkey);
        c->progress_token = json_object_get(json_object_get(m.params, "_meta"), "progressToken");
        json_decref(msg); /* j->root keeps it alive */
        if (known && (e.hints & (TIDEMARK_TOOL_ATOMIC | TIDEMARK_TOOL_IDEMPOTENT))) {
            progress_floor(srv, c, j->stream);
            pthread_mutex_lock(&sess->mu);
            if (tm_map_put(sess->calls, c->reqkey, c) == 0)
                c->registered = 1;
            pthread_mutex_unlock(&sess->mu);
            tm_metric_inc(TM_M_REQUESTS_RECOVERED);
            TM_INFO("recovery: re-running %s (%s) on %s/%s", r->tool, r->key, sess->id, j->stream);
            if (tm_call_submit(srv, c) == 0)
                continue;
            if (c->registered) {
                pthread_mutex_lock(&sess->mu);
                tm_map_del(sess->calls, c->reqkey);
                pthread_mutex_unlock(&sess->mu);
            }
        }
        json_t *x = json_pack("{s:s}", "tool", r->tool ? r->tool : "");
        json_t *resp = tm_jsonrpc_error(c->id, TM_RPC_OUTCOME_UNKNOWN,
                                        "Outcome unknown: the server stopped while this request "
                                        "ran, and the tool is neither atomic nor idempotent",
                                        "outcome_unknown", x);
        tm_metric_inc(TM_M_OUTCOME_UNKNOWN);
        TM_INFO("recovery: %s (%s) on %s/%s -> outcome_unknown", r->tool, r->key, sess->id, j->stream);
        tm_job_complete(j, resp, c);
    }
    tm_job_complete(j, NULL, NULL);
}

int tm_recover(tidemark_server_t *srv)
{
    pending p = {0};
    int rc = tm_store_requests_unfinished(srv->store, collect, &p);
    /* Nodes sharing the store: the listed records' nodes had lost their
     * lease, but every survivor sees them; finish only those this node
     * claims (atomically in the store, which checks the lease again), so
     * exactly one node does. */
    if (rc == 0 && tm_store_shared(srv->store)) {
        size_t k = 0;
        for (size_t i = 0; i < p.n; i++) {
            int c = p.v[i].session && p.v[i].key
                        ? tm_store_request_claim(srv->store, p.v[i].session, p.v[i].key)
                        : TIDEMARK_EBUSY;
            if (c != 0) {
                tm_request_rec_clear(&p.v[i]);
                continue;
            }
            p.v[k++] = p.v[i];
        }
        p.n = k;
    }
    /* Records come ordered by session and stream: recover stream by stream. */
    size_t i = 0;
    while (rc == 0 && i < p.n) {
        size_t k = i + 1;
        while (k < p.n && strcmp(p.v[k].session, p.v[i].session) == 0 &&
               strcmp(p.v[k].stream ? p.v[k].stream : "", p.v[i].stream ? p.v[i].stream : "") == 0)
            k++;
        if (p.v[i].session && p.v[i].stream)
            recover_stream(srv, &p, i, k);
        i = k;
    }
    if (p.n)
        TM_INFO("recovery: %zu unfinished request(s) handled", p.n);
    for (size_t k = 0; k < p.n; k++)
        tm_request_rec_clear(&p.v[k]);
    free(p.v);
    return rc;
}
