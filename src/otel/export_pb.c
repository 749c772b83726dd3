/*
 * export_pb.c - a batch of spans as an OTLP ExportTraceServiceRequest in
 * protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf), packed by
 * libprotobuf-c from the messages of otlp_trace.proto.
 *
 * Invariant: the message tree points into the spans and the tracer's
 * configuration (no string is copied) and lives in one allocation freed
 * before this returns; only the packed bytes outlive it.
 */
#include "otel_int.h"
#include "otlp_trace.pb-c.h"
#include "tidemark/tidemark.h"
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

unsigned char *tm_otlp_pb_body(const tm_otel *o, const tm_span *batch, int n, size_t *len)
{
    struct {
        Tm__Otlp__ExportTraceServiceRequest req;
        Tm__Otlp__ResourceSpans rs, *rsp;
        Tm__Otlp__ScopeSpans ss, *ssp;
        Tm__Otlp__InstrumentationScope scope;
        pb_res res;
    } *top = calloc(1, sizeof *top);
    pb_span *spans = calloc((size_t)(n ? n : 1), sizeof *spans);
    Tm__Otlp__Span **sp = calloc((size_t)(n ? n : 1), sizeof *sp);
    unsigned char *out = NULL;
    if (top && spans && sp) {
        int i = 0;
        for (const tm_span *s = batch; s && i < n; s = s->next, i++) {
            pb_span_fill(&spans[i], s);
            sp[i] = &spans[i].span;
        }
        tm__otlp__instrumentation_scope__init(&top->scope);
        top->scope.name = "tidemark";
        top->scope.version = (char *)tidemark_version(NULL);
        tm__otlp__scope_spans__init(&top->ss);
        top->ss.scope = &top->scope;
        top->ss.n_spans = (size_t)i;
        top->ss.spans = sp;
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
    free(sp);
    free(spans);
    free(top);
    return out;
}
