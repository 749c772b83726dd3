/*
 * export_pb.c - a batch of spans as an OTLP ExportTraceServiceRequest in
 * protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf): the request,
 * its resource and scope packed by libprotobuf-c from the messages of
 * otlp_trace.proto; each span written by w_span in the same wire format.
 *
 * Why spans are not packed by protobuf-c: its generic packer walks each
 * message's descriptor, about 330 instructions a message, and a span with
 * seven attributes is fifteen messages (a KeyValue and an AnyValue each):
 * 5,400 instructions a span, 5 % of an echo call's server CPU, where w_span
 * writes the same bytes in a fraction of that (docs/design.md, "Tracing").
 * test_otel decodes w_span's bytes with protobuf-c's generated Span, and
 * otel_traces with the official definitions.
 *
 * Invariant: each span is written on its own into one buffer, with room
 * for tm_otlp_span_bound(s) bytes; the request then holds those bytes
 * (otlp_trace.proto: ScopeSpans.spans are bytes, the same on the wire as
 * Span messages). Only the request's packed bytes outlive the call.
 */
#include "otel_int.h"
#include "otlp_trace.pb-c.h"
#include "tidemark/tidemark.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Protobuf's wire format, the few pieces a Span takes: a varint, a
 * field's tag, a length-delimited field, a fixed64 (little-endian). */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *w_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *w_tag(uint8_t *p, unsigned field, unsigned wt) { return w_varint(p, field << 3 | wt); }

static uint8_t *w_bytes(uint8_t *p, unsigned field, const void *d, size_t n)
{
    p = w_varint(w_tag(p, field, WT_LEN), n);
    memcpy(p, d, n);
    return p + n;
}

static uint8_t *w_fixed64(uint8_t *p, unsigned field, uint64_t v)
{
    p = w_tag(p, field, WT_I64);
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(v >> 8 * i);
    return p;
}

/* An attribute as Span.attributes (field 9): a KeyValue {key = 1, value =
 * 2}, its AnyValue {string_value = 1 | int_value = 3} (int64: the varint
 * of its two's complement, 10 bytes when negative). */
static uint8_t *w_attr(uint8_t *p, const tm_attr *a)
{
    size_t kl = strlen(a->key), sl = a->s ? strlen(a->s) : 0;
    uint64_t i = (uint64_t)a->i;
    size_t av = a->s ? 1 + varint_len(sl) + sl : 1 + varint_len(i);
    size_t kv = 1 + varint_len(kl) + kl + 1 + varint_len(av) + av;
    p = w_varint(w_tag(p, 9, WT_LEN), kv);
    p = w_bytes(p, 1, a->key, kl);
    p = w_varint(w_tag(p, 2, WT_LEN), av);
    return a->s ? w_bytes(p, 1, a->s, sl) : w_varint(w_tag(p, 3, WT_VARINT), i);
}

/* s as an opentelemetry-proto Span (otlp_trace.proto's Span: field
 * numbers, types and order as protobuf-c packs it, fields at their proto3
 * default left out; Status only when an error, code 2) at p, which has
 * tm_otlp_span_bound(s) bytes of room. The end of what was written. */
static uint8_t *w_span(uint8_t *p, const tm_span *s)
{
    p = w_bytes(p, 1, s->ctx.trace_id, 16);
    p = w_bytes(p, 2, s->ctx.span_id, 8);
    if (s->tracestate && *s->tracestate)
        p = w_bytes(p, 3, s->tracestate, strlen(s->tracestate));
    if (s->has_parent)
        p = w_bytes(p, 4, s->parent, 8);
    if (s->name && *s->name)
        p = w_bytes(p, 5, s->name, strlen(s->name));
    if (s->kind)
        p = w_varint(w_tag(p, 6, WT_VARINT), (uint64_t)s->kind);
    if (s->start_ns)
        p = w_fixed64(p, 7, (uint64_t)s->start_ns);
    if (s->end_ns)
        p = w_fixed64(p, 8, (uint64_t)s->end_ns);
    for (int i = 0; i < s->na; i++)
        p = w_attr(p, &s->a[i]);
    if (s->error) { /* Status {code = 3: 2, error} */
        p = w_varint(w_tag(p, 15, WT_LEN), 2);
        p = w_varint(w_tag(p, 3, WT_VARINT), 2);
    }
    return p;
}

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
 * bytes, each attribute's KeyValue and AnyValue two nested heads: what
 * w_span writes, field by field. */
size_t tm_otlp_span_bound(const tm_span *s)
{
    size_t n = 3 * (1 + 3 + 16) + 8 * 11 + s->used; /* ids, kind, times, status; name and values */
    if (s->tracestate)
        n += 11 + strlen(s->tracestate); /* a tag and any length */
    for (int i = 0; i < s->na; i++)
        n += 3 * 4 + 11 + strlen(s->a[i].key); /* attribute, value, string heads; int; key */
    return n;
}

/* Up to n spans written one after another into one buffer: *buf (malloc),
 * each span's bytes at spans[i]. The number written, or TIDEMARK_ENOMEM. */
static int pack_spans(const tm_span *batch, int n, ProtobufCBinaryData *spans, uint8_t **buf)
{
    size_t cap = 1024 * (size_t)(n ? n : 1), used = 0;
    size_t *off = malloc(sizeof *off * (size_t)(n ? n : 1));
    uint8_t *b = malloc(cap);
    int i = 0;
    for (const tm_span *s = batch; s && b && off && i < n; s = s->next, i++) {
        size_t len = tm_otlp_span_bound(s);
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
        used = (size_t)(w_span(b + used, s) - b);
        assert(used - off[i] <= len);
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
