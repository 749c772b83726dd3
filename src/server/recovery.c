/*
 * recovery.c - at start-up (and, on a store shared by several nodes,
 * periodically: tm_recover is then run for requests of nodes whose lease
 * lapsed), finish every request a dead process left
 * "started": tools registered atomic or idempotent run again
 * and continue their stream (progress never goes backwards); any other tool
 * gets a typed outcome_unknown response. A resuming client always reaches
 * an end.
 */
#include "server_int.h"
#include "feed.h"
#include "tasks.h"
#include "record.h"
#include "../base/crash.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "../base/str.h"
#include "tidemark/tidemark.h"
#include <math.h>
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
    c->progress_floor = f.found ? f.floor : -INFINITY;
}

/* Recover the unfinished requests of one stream: p->v[from, to). */
static void recover_stream(tidemark_server_t *srv, pending *p, size_t from, size_t to)
{
    tm_request_rec *first = &p->v[from];
    tm_sess *sess = tm_sess_find(srv, first->session);
    if (!sess) {
        TM_WARN("recovery: session %s is gone; %zu request(s) dropped", TM_SID(first->session), to - from);
        return;
    }
    tm_job *j = tm_job_alloc();
    if (!j) {
        tm_sess_unref(sess);
        return;
    }
    j->srv = srv;
    j->sess = sess;
    j->sse = 1;
    if (strcmp(sess->version, TIDEMARK_PROTOCOL_2026_07_28) == 0)
        j->flags = TM_POST_MODERN;
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
        tidemark_call_t *c = tm_call_alloc();
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
        c->request = json_incref(msg);
        c->recorded = 1;
        c->recovering = 1;
        c->modern = tm_job_is(j, TM_POST_MODERN); /* its answer reads as a 2026-07-28 result */
        snprintf(c->reqkey, sizeof c->reqkey, "%s", r->key);
        tm_jsonrpc_id_key(c->id, c->idkey, sizeof c->idkey);
        snprintf(c->idem, sizeof c->idem, "%s/%s", sess->id, c->reqkey);
        c->progress_token = json_object_get(json_object_get(m.params, "_meta"), "progressToken");
        json_decref(msg); /* j->root keeps it alive */
        if (known && tm_record_may_rerun(tm_job_is(j, TM_POST_MODERN), r->key, e.hints)) {
            progress_floor(srv, c, j->stream);
            pthread_mutex_lock(&sess->mu);
            if (tm_map_put(sess->calls, c->reqkey, c) == 0)
                c->registered = 1;
            pthread_mutex_unlock(&sess->mu);
            tm_counter_inc(srv->m.recovered);
            TM_INFO("recovery: re-running %s (%s) on %s/%s", r->tool, r->key, TM_SID(sess->id), j->stream);
            if (tm_call_submit(srv, c) == 0)
                continue;
            if (c->registered) {
                pthread_mutex_lock(&sess->mu);
                tm_sess_calls_del(sess, c->reqkey);
                pthread_mutex_unlock(&sess->mu);
            }
        }
        json_t *x = json_pack("{s:s}", "tool", r->tool ? r->tool : "");
        json_t *resp = tm_jsonrpc_error(c->id, TM_RPC_OUTCOME_UNKNOWN,
                                        "Outcome unknown: the server stopped while this request "
                                        "ran, and the tool is neither atomic nor idempotent",
                                        "outcome_unknown", x);
        tm_counter_inc(srv->m.outcome_unknown);
        TM_INFO("recovery: %s (%s) on %s/%s -> outcome_unknown", r->tool, r->key, TM_SID(sess->id), j->stream);
        tm_job_complete(j, resp, c);
    }
    tm_job_complete(j, NULL, NULL);
}

static int by_session_stream(const void *a, const void *b)
{
    const tm_request_rec *x = a, *y = b;
    int c = strcmp(x->session ? x->session : "", y->session ? y->session : "");
    return c ? c : strcmp(x->stream ? x->stream : "", y->stream ? y->stream : "");
}

/* Finish every record of p, stream by stream, then free p. */
static void recover_all(tidemark_server_t *srv, pending *p)
{
    if (p->n > 1)
        qsort(p->v, p->n, sizeof *p->v, by_session_stream);
    size_t i = 0;
    while (i < p->n) {
        size_t k = i + 1;
        while (k < p->n && by_session_stream(&p->v[k], &p->v[i]) == 0)
            k++;
        if (p->v[i].session && p->v[i].stream && k == i + 1 && p->v[i].key &&
            strcmp(p->v[i].key, TM_TASK_RECORD) == 0 && tm_tasks_recover(srv, &p->v[i]))
            ; /* a task's record: tasks.h */
        else if (p->v[i].session && p->v[i].stream)
            recover_stream(srv, p, i, k);
        i = k;
    }
    if (p->n)
        TM_INFO("recovery: %zu unfinished request(s) handled", p->n);
    for (size_t k = 0; k < p->n; k++)
        tm_request_rec_clear(&p->v[k]);
    free(p->v);
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
    if (rc) { /* a partial list: finish none of it now, the next pass will */
        for (size_t k = 0; k < p.n; k++)
            tm_request_rec_clear(&p.v[k]);
        p.n = 0;
    }
    recover_all(srv, &p);
    return rc;
}

/* ---- calls whose response could not be written (noted in unsettled.c) ---- */

typedef struct key_list {
    char **v;
    size_t n;
} key_list;

static void take_key(const char *k, void *v, void *ud)
{
    (void)v;
    key_list *l = ud;
    char *d = strdup(k);
    if (d)
        l->v[l->n++] = d;
}

/* The record of a failed call, if it still needs finishing here. 1:
 * collected into p; 0: nothing to do (absent, finished meanwhile, or
 * another node's now); -1: could not tell. */
static int failed_record(tidemark_server_t *srv, const char *k, pending *p)
{
    const char *nl = strchr(k, '\n');
    char sid[TM_SESSION_ID_LEN + 1];
    if (!nl || (size_t)(nl - k) != TM_SESSION_ID_LEN)
        return 0;
    memcpy(sid, k, TM_SESSION_ID_LEN);
    sid[TM_SESSION_ID_LEN] = '\0';
    /* Asked before the read: a COMMIT in doubt lands, then its backend
     * exits; "no doubt left" asked after a read that found nothing could
     * hide a record that landed in between. A record found started waits
     * for the doubt too: a COMMIT in doubt may hold the call's own events
     * (progress the re-run would read as not sent, and send again). */
    int doubt = tm_store_in_doubt(srv->store);
    TM_TEST_DELAY("TIDEMARK_RECOVER_READ_DELAY_MS"); /* a slow recoverer: a commit may land here */
    tm_request_rec rec;
    int rc = tm_store_request_get(srv->store, sid, nl + 1, &rec);
    if (rc == TIDEMARK_ENOTFOUND) /* absent, unless a COMMIT not confirmed may still land */
        return doubt ? -1 : 0;
    if (rc)
        return -1;
    int started = rec.state == TM_REQ_STARTED;
    /* Nodes sharing the store: one that took it over after this node's
     * lease lapsed finishes it (never both: the stream would run twice). */
    int mine = started && !doubt ? tm_store_request_mine(srv->store, sid, nl + 1) : 0;
    if (mine < 0 || (started && doubt)) {
        tm_request_rec_clear(&rec);
        return -1;
    }
    started = mine;
    if (started)
        collect(p, &rec);
    tm_request_rec_clear(&rec);
    return started;
}

void tm_recover_failed(tidemark_server_t *srv)
{
    if (tm_store_writable(srv->store) != 0)
        return;
    pthread_mutex_lock(&srv->fail_mu);
    size_t n = tm_map_count(srv->failed);
    key_list l = {n ? calloc(n, sizeof *l.v) : NULL, 0};
    if (l.v)
        tm_map_each(srv->failed, take_key, &l);
    pthread_mutex_unlock(&srv->fail_mu);
    pending p = {0};
    for (size_t i = 0; i < l.n; i++) {
        if (failed_record(srv, l.v[i], &p) >= 0) {
            pthread_mutex_lock(&srv->fail_mu);
            tm_map_del(srv->failed, l.v[i]);
            pthread_mutex_unlock(&srv->fail_mu);
        }
        free(l.v[i]);
    }
    free(l.v);
    recover_all(srv, &p);
}
