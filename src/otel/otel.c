/* otel.c - the tracer: lifecycle, sampler, spans, the bounded queue. */
#include "otel_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static tm_counter *exported_on(tm_metrics *m)
{
    return tm_metrics_counter(m, "tidemark_otel_spans_exported_total", "",
                              "Trace spans the OTLP collector accepted.");
}

static tm_counter *dropped_on(tm_metrics *m)
{
    return tm_metrics_counter(m, "tidemark_otel_spans_dropped_total", "",
                              "Trace spans dropped: the export queue was full or an export failed.");
}

void tm_otel_count_on(tm_otel *o, tm_metrics *m)
{
    if (!o || !m)
        return;
    atomic_store(&o->m_exported, exported_on(m));
    atomic_store(&o->m_dropped, dropped_on(m));
}

tm_otel *tm_otel_from_env(const char *service, tm_metrics *metrics)
{
    /* the families are there (at 0) with tracing off too */
    tm_counter *exported = exported_on(metrics), *dropped = dropped_on(metrics);
    tm_otel_cfg cfg;
    int on = 0;
    if (tm_otel_cfg_read(&cfg, service, &on) != 0 || !on)
        return NULL;
    tm_otel *o = calloc(1, sizeof *o);
    if (!o || pthread_mutex_init(&o->mu, NULL) != 0) {
        free(o);
        tm_otel_cfg_free(&cfg);
        return NULL;
    }
    o->cfg = cfg;
    atomic_store(&o->m_exported, exported);
    atomic_store(&o->m_dropped, dropped);
    curl_global_init(CURL_GLOBAL_DEFAULT); /* before the thread: counted, undone in free */
    if (tm_cond_init_monotonic(&o->cv) != 0 ||
        pthread_create(&o->thread, NULL, tm_otel_exporter_main, o) != 0) {
        TM_WARN("otel: the exporter thread cannot start; tracing is off");
        curl_global_cleanup();
        tm_otel_cfg_free(&o->cfg);
        free(o);
        return NULL;
    }
    TM_INFO("otel: traces to %s (service %s)", o->cfg.url, service ? service : "unknown_service");
    return o;
}

void tm_otel_free(tm_otel *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    o->stopping = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL); /* it exported or dropped every queued span */
    curl_global_cleanup();
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    tm_otel_cfg_free(&o->cfg);
    free(o);
}

uint64_t tm_otel_dropped(const tm_otel *o) { return o ? atomic_load(&o->dropped) : 0; }

static int64_t unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The sampler: with a parent and parentbased, the parent's flag; else
 * the root sampler (traceidratio: the trace id's last 8 bytes as a
 * number below ratio * 2^64). */
static int sampled(const tm_otel_cfg *c, const tm_trace_ctx *parent, const uint8_t tid[16])
{
    if (parent && c->parentbased)
        return parent->flags & TM_TRACE_FLAG_SAMPLED;
    if (c->root != TM_SAMPLE_RATIO)
        return c->root == TM_SAMPLE_ON;
    if (c->ratio >= 1.0)
        return 1;
    uint64_t x = 0;
    for (int i = 8; i < 16; i++)
        x = x << 8 | tid[i];
    return (double)x < c->ratio * 18446744073709551616.0;
}

/* v copied into s's text: NULL when it does not fit, or (cut) cut at a
 * character boundary to what fits. */
static const char *text_copy(tm_span *s, const char *v, int cut)
{
    size_t n = strlen(v), room = TM_SPAN_TEXT - s->used - 1;
    if (n > room && !cut)
        return NULL;
    if (n > room) /* not inside a UTF-8 sequence */
        for (n = room; n > 0 && ((unsigned char)v[n] & 0xc0) == 0x80; n--)
            ;
    char *d = s->text + s->used;
    memcpy(d, v, n);
    d[n] = '\0';
    s->used += n + 1;
    return d;
}

tm_span *tm_span_start(tm_otel *o, tm_span_kind kind, const char *name,
                       const tm_trace_ctx *parent, const char *tracestate)
{
    if (!o)
        return NULL;
    tm_span *s = malloc(sizeof *s); /* not zeroed: text is 768 bytes; every field is set */
    if (!s)
        return NULL;
    if (parent && !parent->valid)
        parent = NULL;
    s->o = o;
    s->kind = kind;
    s->has_parent = s->error = 0;
    s->na = 0;
    s->used = 0;
    s->next = NULL;
    int rc = parent ? 0 : tm_trace_new_trace_id(s->ctx.trace_id);
    if (parent) {
        memcpy(s->ctx.trace_id, parent->trace_id, 16);
        memcpy(s->parent, parent->span_id, 8);
        s->has_parent = 1;
    }
    s->name = text_copy(s, name, 1);
    s->tracestate = tracestate && *tracestate ? strdup(tracestate) : NULL;
    if (rc || tm_trace_new_span_id(s->ctx.span_id) != 0) {
        tm_span_free(s);
        return NULL;
    }
    s->sampled = (uint8_t)(sampled(&o->cfg, parent, s->ctx.trace_id) != 0);
    s->ctx.flags = s->sampled ? TM_TRACE_FLAG_SAMPLED : 0;
    s->ctx.valid = 1;
    s->start_ns = unix_ns();
    return s;
}

const tm_trace_ctx *tm_span_ctx(const tm_span *s) { return s ? &s->ctx : NULL; }
const char *tm_span_tracestate(const tm_span *s) { return s ? s->tracestate : NULL; }

static tm_attr *attr_slot(tm_span *s, const char *key)
{
    if (!s || !s->sampled)
        return NULL; /* nothing is kept of a span that is never exported */
    for (int i = 0; i < s->na; i++)
        if (s->a[i].key == key) { /* keys are literals: the same key is the same pointer */
            s->a[i].s = NULL; /* its old text stays: a rare replacement */
            return &s->a[i];
        }
    if (s->na == TM_SPAN_MAX_ATTRS)
        return NULL;
    s->a[s->na].key = key;
    s->a[s->na].s = NULL;
    return &s->a[s->na++];
}

void tm_span_set_str(tm_span *s, const char *key, const char *v)
{
    if (!s || !s->sampled || !v)
        return;
    const char *t = text_copy(s, v, 0); /* no room: the attribute is left out */
    tm_attr *a = t ? attr_slot(s, key) : NULL;
    if (a)
        a->s = t;
}

void tm_span_set_int(tm_span *s, const char *key, int64_t v)
{
    tm_attr *a = attr_slot(s, key);
    if (a)
        a->i = v;
}

void tm_span_set_error(tm_span *s, const char *type)
{
    if (!s)
        return;
    s->error = 1;
    tm_span_set_str(s, "error.type", type);
}

void tm_span_end(tm_span *s)
{
    if (!s)
        return;
    if (!s->sampled) {
        tm_span_free(s);
        return;
    }
    s->end_ns = unix_ns();
    tm_otel *o = s->o;
    pthread_mutex_lock(&o->mu);
    int room = o->n < o->cfg.queue_max && !o->stopping;
    if (room) {
        if (o->tail)
            o->tail->next = s;
        else
            o->head = s;
        o->tail = s;
        if (++o->n == o->cfg.batch_max) /* the exporter waits for a full batch */
            pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    if (!room) {
        atomic_fetch_add(&o->dropped, 1);
        tm_counter_inc(atomic_load(&o->m_dropped));
        tm_span_free(s);
    }
}
