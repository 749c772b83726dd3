/*
 * export.c - the exporter thread: takes up to a batch of spans from the
 * queue when a batch is full or the schedule delay passed, encodes them as
 * OTLP/HTTP JSON (ids as lowercase hex, times and ints as decimal
 * strings) and POSTs them with libcurl, bounded by the export timeout. A
 * failed export drops its spans (counted); nothing is retried, so a
 * collector that is down costs one refused connection per batch.
 */
#include "otel_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tm_span_free(tm_span *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->na; i++)
        free(s->a[i].s);
    free(s->name);
    free(s->tracestate);
    free(s);
}

static json_t *ns_str(int64_t ns) { return json_sprintf("%" PRId64, ns); }

static json_t *attr_json(const tm_attr *a)
{
    json_t *v = a->s ? json_pack("{s:s}", "stringValue", a->s)
                     : json_pack("{s:o}", "intValue", json_sprintf("%" PRId64, a->i));
    return json_pack("{s:s,s:o}", "key", a->key, "value", v);
}

static json_t *span_json(const tm_span *s)
{
    char tid[33], sid[17], pid[17];
    tm_trace_hex(s->ctx.trace_id, 16, tid);
    tm_trace_hex(s->ctx.span_id, 8, sid);
    json_t *attrs = json_array();
    for (int i = 0; i < s->na; i++)
        json_array_append_new(attrs, attr_json(&s->a[i]));
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:o,s:o,s:o,s:{s:i}}", "traceId", tid, "spanId", sid,
                          "name", s->name, "kind", (int)s->kind, "startTimeUnixNano",
                          ns_str(s->start_ns), "endTimeUnixNano", ns_str(s->end_ns),
                          "attributes", attrs, "status", "code", s->error ? 2 : 0);
    if (j && s->has_parent) {
        tm_trace_hex(s->parent, 8, pid);
        json_object_set_new(j, "parentSpanId", json_string(pid));
    }
    if (j && s->tracestate)
        json_object_set_new(j, "traceState", json_string(s->tracestate));
    return j;
}

/* The request body of a batch: one resource, one scope. */
static char *batch_body(const tm_otel *o, const tm_span *batch)
{
    json_t *spans = json_array();
    for (const tm_span *s = batch; s; s = s->next)
        json_array_append_new(spans, span_json(s));
    json_t *res = json_loads(o->cfg.resource, 0, NULL);
    json_t *body = json_pack("{s:[{s:{s:o},s:[{s:{s:s,s:s},s:o}]}]}", "resourceSpans", "resource",
                             "attributes", res ? res : json_array(), "scopeSpans", "scope", "name",
                             "tidemark", "version", tidemark_version(NULL), "spans", spans);
    char *txt = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return txt;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* POST body; 0 when the collector answered 2xx. */
static int post(CURL *h, const tm_otel *o, const char *body)
{
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    for (int i = 0; o->cfg.headers && o->cfg.headers[i]; i++)
        hl = curl_slist_append(hl, o->cfg.headers[i]);
    curl_easy_setopt(h, CURLOPT_URL, o->cfg.url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)o->cfg.timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hl);
    if (rc == CURLE_OK && status / 100 == 2)
        return 0;
    TM_DEBUG("otel: export to %s failed (%s, HTTP %ld)", o->cfg.url, curl_easy_strerror(rc), status);
    return -1;
}

static void drop_all(tm_otel *o, tm_span *batch, int n)
{
    atomic_fetch_add(&o->dropped, (uint64_t)n);
    tm_metric_add(TM_M_OTEL_SPANS_DROPPED, (uint64_t)n);
    while (batch) {
        tm_span *next = batch->next;
        tm_span_free(batch);
        batch = next;
    }
}

/* Export and free a batch of n spans; a failure drops them, counted.
 * Returns whether it was exported. */
static int export_batch(tm_otel *o, CURL *h, tm_span *batch, int n)
{
    char *body = h ? batch_body(o, batch) : NULL;
    int ok = body && post(h, o, body) == 0;
    free(body);
    if (!ok) {
        drop_all(o, batch, n);
        return 0;
    }
    atomic_fetch_add(&o->exported, (uint64_t)n);
    tm_metric_add(TM_M_OTEL_SPANS_EXPORTED, (uint64_t)n);
    while (batch) {
        tm_span *next = batch->next;
        tm_span_free(batch);
        batch = next;
    }
    return 1;
}

/* Up to max spans off the queue's head (mu held). */
static tm_span *take_locked(tm_otel *o, int max, int *n)
{
    tm_span *first = o->head, *last = NULL;
    for (*n = 0; *n < max && o->head; (*n)++) {
        last = o->head;
        o->head = o->head->next;
    }
    if (last)
        last->next = NULL;
    if (!o->head)
        o->tail = NULL;
    o->n -= *n;
    return *n ? first : NULL;
}

void *tm_otel_exporter_main(void *arg)
{
    tm_otel *o = arg;
    CURL *h = curl_easy_init(); /* kept: one connection to the collector, reused */
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (!o->stopping && o->n < o->cfg.batch_max) {
            struct timespec ts = tm_deadline_ms(o->cfg.delay_ms);
            pthread_cond_timedwait(&o->cv, &o->mu, &ts);
        }
        if (o->stopping && !o->n)
            break;
        int n;
        tm_span *batch = take_locked(o, o->cfg.batch_max, &n);
        pthread_mutex_unlock(&o->mu);
        int ok = batch ? export_batch(o, h, batch, n) : 1;
        pthread_mutex_lock(&o->mu);
        if (!ok && o->stopping) { /* the rest would fail too: stop is not held up */
            batch = take_locked(o, o->n, &n);
            pthread_mutex_unlock(&o->mu);
            drop_all(o, batch, n);
            pthread_mutex_lock(&o->mu);
        }
    }
    pthread_mutex_unlock(&o->mu);
    curl_easy_cleanup(h);
    return NULL;
}
