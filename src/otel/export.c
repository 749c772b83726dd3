/*
 * export.c - the exporter thread: takes up to a batch of spans from the
 * queue when a batch is full or the schedule delay passed, encodes them as
 * OTLP/HTTP protobuf (export_pb.c) or JSON (here: ids as lowercase hex,
 * times and ints as decimal strings) and POSTs them with libcurl, bounded by the export timeout. A
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tm_span_free(tm_span *s)
{
    if (!s)
        return;
    free(s->tracestate);
    free(s);
}

/* ---- OTLP/HTTP JSON, written with a pointer into a buffer sized for
 * the span beforehand (the encoding is most of the exporter's work at
 * high call rates: no jansson tree, no printf, one append per span) ---- */

#define LIT(p, s) (memcpy((p), (s), sizeof(s) - 1), (p) + sizeof(s) - 1)

/* A JSON string: quotes, backslash and control characters escaped (at
 * most 6 bytes per byte of s, plus 2). */
static char *w_str(char *p, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    *p++ = '"';
    for (;;) {
        size_t run = 0;
        for (unsigned char c; (c = (unsigned char)s[run]) >= 0x20 && c != '"' && c != '\\'; run++)
            ;
        memcpy(p, s, run); /* the bytes that need no escape, at once */
        p += run;
        s += run;
        if (!*s)
            break;
        unsigned char ch = (unsigned char)*s++;
        if (ch == '"' || ch == '\\') {
            *p++ = '\\';
            *p++ = (char)ch;
        } else {
            p = LIT(p, "\\u00");
            *p++ = hex[ch >> 4];
            *p++ = hex[ch & 15];
        }
    }
    *p++ = '"';
    return p;
}

/* A decimal number in quotes (OTLP JSON: 64-bit ints are strings); <= 23 bytes. */
static char *w_qnum(char *p, int64_t v)
{
    char d[24], *q = d + sizeof d;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--q = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--q = '-';
    *p++ = '"';
    memcpy(p, q, (size_t)(d + sizeof d - q));
    p += d + sizeof d - q;
    *p++ = '"';
    return p;
}

/* Keys are string literals of this library: written as they are. */
static char *w_attr(char *p, const tm_attr *a, int first)
{
    p = first ? LIT(p, "{\"key\":\"") : LIT(p, ",{\"key\":\"");
    size_t k = strlen(a->key);
    memcpy(p, a->key, k);
    p += k;
    if (!a->s)
        return LIT(w_qnum(LIT(p, "\",\"value\":{\"intValue\":"), a->i), "}}");
    return LIT(w_str(LIT(p, "\",\"value\":{\"stringValue\":"), a->s), "}}");
}

static char *w_hex(char *p, const uint8_t *id, size_t n)
{
    *p++ = '"';
    tm_trace_hex(id, n, p); /* writes a NUL after, overwritten next */
    p += 2 * n;
    *p++ = '"';
    return p;
}

/* Bytes span_json may write for s. */
static size_t span_bound(const tm_span *s)
{
    size_t n = 400 + 6 * s->used + (s->tracestate ? 6 * strlen(s->tracestate) : 0);
    for (int i = 0; i < s->na; i++)
        n += strlen(s->a[i].key) + 64;
    return n;
}

static char *span_json(char *p, const tm_span *s, int first)
{
    p = w_hex(first ? LIT(p, "{\"traceId\":") : LIT(p, ",{\"traceId\":"), s->ctx.trace_id, 16);
    p = w_hex(LIT(p, ",\"spanId\":"), s->ctx.span_id, 8);
    if (s->has_parent)
        p = w_hex(LIT(p, ",\"parentSpanId\":"), s->parent, 8);
    if (s->tracestate)
        p = w_str(LIT(p, ",\"traceState\":"), s->tracestate);
    p = w_str(LIT(p, ",\"name\":"), s->name);
    p = LIT(p, ",\"kind\":");
    *p++ = (char)('0' + s->kind);
    p = w_qnum(LIT(p, ",\"startTimeUnixNano\":"), s->start_ns);
    p = w_qnum(LIT(p, ",\"endTimeUnixNano\":"), s->end_ns);
    p = s->error ? LIT(p, ",\"status\":{\"code\":2},\"attributes\":[")
                 : LIT(p, ",\"status\":{\"code\":0},\"attributes\":[");
    for (int i = 0; i < s->na; i++)
        p = w_attr(p, &s->a[i], i == 0);
    return LIT(p, "]}");
}

/* The request body of a batch: one resource, one scope. Its size is
 * bounded by the spans', which are held already (the queue's bound).
 * NULL when memory is short. */
static char *batch_body(const tm_otel *o, const tm_span *batch)
{
    size_t need = 256 + strlen(o->cfg.resource);
    for (const tm_span *s = batch; s; s = s->next)
        need += span_bound(s);
    char *body = malloc(need), *p = body;
    if (!body)
        return NULL;
    p = LIT(p, "{\"resourceSpans\":[{\"resource\":{\"attributes\":");
    size_t r = strlen(o->cfg.resource);
    memcpy(p, o->cfg.resource, r);
    p = LIT(p + r, "},\"scopeSpans\":[{\"scope\":{\"name\":\"tidemark\",\"version\":");
    p = LIT(w_str(p, tidemark_version(NULL)), "},\"spans\":[");
    for (const tm_span *s = batch; s; s = s->next)
        p = span_json(p, s, s == batch);
    p = LIT(p, "]}]}]}");
    *p = '\0';
    return body;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* POST body (len bytes); 0 when the collector answered 2xx. */
static int post(CURL *h, const tm_otel *o, const void *body, size_t len)
{
    struct curl_slist *hl = curl_slist_append(NULL, o->cfg.protobuf ? "Content-Type: application/x-protobuf"
                                                                     : "Content-Type: application/json");
    for (int i = 0; o->cfg.headers && o->cfg.headers[i]; i++)
        hl = curl_slist_append(hl, o->cfg.headers[i]);
    curl_easy_setopt(h, CURLOPT_URL, o->cfg.url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
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
    tm_counter_add(atomic_load(&o->m_dropped), (uint64_t)n);
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
    size_t len = 0;
    void *body = NULL;
    if (h && o->cfg.protobuf)
        body = tm_otlp_pb_body(o, batch, n, &len);
    else if (h && (body = batch_body(o, batch)) != NULL)
        len = strlen(body);
    int ok = body && post(h, o, body, len) == 0;
    free(body);
    if (!ok) {
        drop_all(o, batch, n);
        return 0;
    }
    tm_counter_add(atomic_load(&o->m_exported), (uint64_t)n);
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
