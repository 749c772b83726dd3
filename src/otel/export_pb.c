/*
 * export_pb.c - a batch of spans as an OTLP ExportTraceServiceRequest in
 * protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf), packed by
 * libprotobuf-c from the messages of otlp_trace.proto.
 *
 * Invariant: each span is packed on its own from a message tree on the
 * stack that points into the span (no string is copied), into one buffer;
 * the request then holds those bytes (otlp_trace.proto: ScopeSpans.spans
 * are bytes, the same on the wire as Span messages). Only the request's
 * packed bytes outlive the call.
 */
#include "otel_int.h"
#include "otlp_trace.pb-c.h"
#include "tidemark/tidemark.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Everything one span needs, allocated together. */
typedef struct pb_span {
    Tm__Otlp__Span span;
    Tm__Otlp__Status status;
    Tm__Otlp__KeyValue kv[TM_SPAN_MAX_ATTRS];
    Tm__Otlp__AnyValue v[TM_SPAN_MAX_ATTRS];
    Tm__Otlp__KeyValue *kvp[TM_SPAN_MAX_ATTRS];
} pb_span;

/* key and value point at strings that outlive the message. */
static void pb_kv(Tm__Otlp__KeyValue *kv, Tm__Otlp__AnyValue *v, const char *key, const char *s,
                  int64_t i)
{
    tm__otlp__key_value__init(kv);
    tm__otlp__any_value__init(v);
    kv->key = (char *)key;
    kv->value = v;
    if (s) {
        v->value_case = TM__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
        v->string_value = (char *)s;
    } else {
        v->value_case = TM__OTLP__ANY_VALUE__VALUE_INT_VALUE;
        v->int_value = i;
    }
}

static void pb_span_fill(pb_span *p, const tm_span *s)
{
    Tm__Otlp__Span *m = &p->span;
    tm__otlp__span__init(m);
    tm__otlp__status__init(&p->status);
    m->trace_id = (ProtobufCBinaryData){16, (uint8_t *)s->ctx.trace_id};
    m->span_id = (ProtobufCBinaryData){8, (uint8_t *)s->ctx.span_id};
    if (s->has_parent)
        m->parent_span_id = (ProtobufCBinaryData){8, (uint8_t *)s->parent};
    if (s->tracestate)
        m->trace_state = s->tracestate;
    m->name = (char *)s->name;
    m->kind = (int32_t)s->kind;
    m->start_time_unix_nano = (uint64_t)s->start_ns;
    m->end_time_unix_nano = (uint64_t)s->end_ns;
    p->status.code = s->error ? 2 : 0;
    m->status = &p->status;
    for (int i = 0; i < s->na; i++) {
        pb_kv(&p->kv[i], &p->v[i], s->a[i].key, s->a[i].s, s->a[i].i);
        p->kvp[i] = &p->kv[i];
    }
    m->n_attributes = (size_t)s->na;
    m->attributes = p->kvp;
}

/* The resource's attributes, keys and values in the configuration. */
typedef struct pb_res {
    Tm__Otlp__Resource res;
    Tm__Otlp__KeyValue *kvp[TM_OTEL_RES_MAX];
    Tm__Otlp__KeyValue kv[TM_OTEL_RES_MAX];
    Tm__Otlp__AnyValue v[TM_OTEL_RES_MAX];
} pb_res;

static void pb_res_fill(pb_res *r, const tm_otel_cfg *c)
{
    tm__otlp__resource__init(&r->res);
    for (int i = 0; i < c->n_res; i++) {
        pb_kv(&r->kv[i], &r->v[i], c->res_key[i], c->res_val[i], 0);
        r->kvp[i] = &r->kv[i];
    }
    r->res.n_attributes = (size_t)c->n_res;
    r->res.attributes = r->kvp;
}

/* Every string and bytes field at most its length plus a tag and a 3-byte
 * length (text is under 2^21 bytes), every varint or fixed field at most 11
 * bytes, each attribute's KeyValue and AnyValue two nested heads. */
size_t tm_otlp_span_bound(const tm_span *s)
{
    size_t n = 3 * (1 + 3 + 16) + 8 * 11 + s->used; /* ids, kind, times, status; name and values */
    if (s->tracestate)
        n += 11 + strlen(s->tracestate); /* a tag and any length */
    for (int i = 0; i < s->na; i++)
        n += 3 * 4 + 11 + strlen(s->a[i].key); /* attribute, value, string heads; int; key */
    return n;
}

/* Up to n spans packed one after another into one buffer: *buf (malloc),
 * each span's bytes at spans[i]. The number packed, or TIDEMARK_ENOMEM. */
static int pack_spans(const tm_span *batch, int n, ProtobufCBinaryData *spans, uint8_t **buf)
{
    size_t cap = 1024 * (size_t)(n ? n : 1), used = 0;
    size_t *off = malloc(sizeof *off * (size_t)(n ? n : 1));
    uint8_t *b = malloc(cap);
    pb_span p;
    int i = 0;
    for (const tm_span *s = batch; s && b && off && i < n; s = s->next, i++) {
        pb_span_fill(&p, s);
        size_t len = tm_otlp_span_bound(s);
        assert(len >= tm__otlp__span__get_packed_size(&p.span));
        if (used + len > cap) {
            while (used + len > cap)
                cap *= 2;
            uint8_t *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        off[i] = used;
        used += tm__otlp__span__pack(&p.span, b + used);
        spans[i].len = used - off[i];
    }
    for (int k = 0; b && off && k < i; k++)
        spans[k].data = b + off[k];
    if (!off) {
        free(b);
        b = NULL;
    }
    free(off);
    *buf = b;
    return b ? i : TIDEMARK_ENOMEM;
}

unsigned char *tm_otlp_pb_body(const tm_otel *o, const tm_span *batch, int n, size_t *len)
{
    struct {
        Tm__Otlp__ExportTraceServiceRequest req;
        Tm__Otlp__ResourceSpans rs, *rsp;
        Tm__Otlp__ScopeSpans ss, *ssp;
        Tm__Otlp__InstrumentationScope scope;
        pb_res res;
    } *top = calloc(1, sizeof *top);
    ProtobufCBinaryData *spans = calloc((size_t)(n ? n : 1), sizeof *spans);
    uint8_t *packed = NULL;
    unsigned char *out = NULL;
    int np = top && spans ? pack_spans(batch, n, spans, &packed) : TIDEMARK_ENOMEM;
    if (np >= 0) {
        tm__otlp__instrumentation_scope__init(&top->scope);
        top->scope.name = "tidemark";
        top->scope.version = (char *)tidemark_version(NULL);
        tm__otlp__scope_spans__init(&top->ss);
        top->ss.scope = &top->scope;
        top->ss.n_spans = (size_t)np;
        top->ss.spans = spans;
        pb_res_fill(&top->res, &o->cfg);
        tm__otlp__resource_spans__init(&top->rs);
        top->rs.resource = &top->res.res;
        top->rs.n_scope_spans = 1;
        top->ssp = &top->ss;
        top->rs.scope_spans = &top->ssp;
        tm__otlp__export_trace_service_request__init(&top->req);
        top->req.n_resource_spans = 1;
        top->rsp = &top->rs;
        top->req.resource_spans = &top->rsp;
        *len = tm__otlp__export_trace_service_request__get_packed_size(&top->req);
        if ((out = malloc(*len ? *len : 1)) != NULL)
            tm__otlp__export_trace_service_request__pack(&top->req, out);
    }
    free(packed);
    free(spans);
    free(top);
    return out;
}
