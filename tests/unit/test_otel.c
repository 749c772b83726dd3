/*
 * test_otel.c - the tracing module (src/otel/): traceparent parse/format,
 * configuration from the environment (off unless an endpoint is set,
 * OTEL_SDK_DISABLED honoured), the samplers, _meta injection and reading,
 * and the bounded queue: spans past OTEL_BSP_MAX_QUEUE_SIZE are dropped and
 * counted, never waited for; the room reserved to pack a span is never
 * less than its packed size.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include "otel/otel.h"
#include "otel/otel_int.h"
#include "otlp_trace.pb-c.h"
#include "base/clock.h"
#include "base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int parse(const char *s, tm_trace_ctx *c) { return tm_traceparent_parse(s, strlen(s), c); }

static void test_parse_valid(void **st)
{
    (void)st;
    tm_trace_ctx c;
    assert_int_equal(parse(TP, &c), 0);
    assert_true(c.valid);
    assert_int_equal(c.flags, 1);
    assert_int_equal(c.trace_id[0], 0x4b);
    assert_int_equal(c.span_id[7], 0xb7);
    char out[TM_TRACEPARENT_LEN + 1];
    tm_traceparent_format(&c, out);
    assert_string_equal(out, TP);
    /* A later version may carry more after a '-'. */
    assert_int_equal(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what", &c), 0);
    assert_int_equal(c.flags, 0);
}

static void test_parse_invalid(void **st)
{
    (void)st;
    static const char *bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",   /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", /* 00 with more */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* upper case */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* zero span id */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* separator */
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  /* not hex */
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", /* later version, no '-' */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_trace_ctx c = {.valid = 1};
        assert_int_equal(parse(bad[i], &c), TIDEMARK_EINVAL);
        assert_false(c.valid);
    }
}

static void clear_env(void)
{
    static const char *v[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                              "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
                              "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY",
                              "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_TRACES_EXPORTER"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        unsetenv(v[i]);
}

/* Port 9 on loopback: nothing listens, a connection is refused at once. */
#define DEAD "http://127.0.0.1:9"

static void test_off_unless_configured(void **st)
{
    (void)st;
    clear_env();
    assert_null(tm_otel_from_env("t", NULL));
    assert_null(tm_span_start(NULL, TM_SPAN_SERVER, "x", NULL, NULL));
    tm_span_end(NULL); /* a NULL span is nothing to do */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", DEAD, 1);
    setenv("OTEL_SDK_DISABLED", "true", 1);
    assert_null(tm_otel_from_env("t", NULL));
    unsetenv("OTEL_SDK_DISABLED");
    setenv("OTEL_TRACES_EXPORTER", "none", 1);
    assert_null(tm_otel_from_env("t", NULL));
    unsetenv("OTEL_TRACES_EXPORTER");
    tm_otel *o = tm_otel_from_env("t", NULL);
    assert_non_null(o);
    tm_otel_free(o);
    clear_env();
}

static void test_samplers(void **st)
{
    (void)st;
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", DEAD, 1);
    tm_trace_ctx sampled, unsampled;
    assert_int_equal(parse(TP, &sampled), 0);
    assert_int_equal(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &unsampled), 0);
    tm_otel *o = tm_otel_from_env("t", NULL); /* parentbased_always_on */
    tm_span *a = tm_span_start(o, TM_SPAN_SERVER, "a", &unsampled, NULL);
    tm_span *b = tm_span_start(o, TM_SPAN_SERVER, "b", &sampled, "k=v");
    tm_span *r = tm_span_start(o, TM_SPAN_SERVER, "r", NULL, NULL);
    assert_int_equal(tm_span_ctx(a)->flags, 0);
    assert_int_equal(tm_span_ctx(b)->flags, 1);
    assert_int_equal(tm_span_ctx(r)->flags, 1);
    assert_memory_equal(tm_span_ctx(b)->trace_id, sampled.trace_id, 16);
    assert_memory_not_equal(tm_span_ctx(b)->span_id, sampled.span_id, 8);
    assert_string_equal(tm_span_tracestate(b), "k=v");
    tm_span_end(a);
    tm_span_end(b);
    tm_span_end(r);
    tm_otel_free(o);
    setenv("OTEL_TRACES_SAMPLER", "always_off", 1);
    o = tm_otel_from_env("t", NULL);
    b = tm_span_start(o, TM_SPAN_SERVER, "b", &sampled, NULL);
    assert_int_equal(tm_span_ctx(b)->flags, 0); /* not parent-based: off */
    tm_span_end(b);
    tm_otel_free(o);
    setenv("OTEL_TRACES_SAMPLER", "traceidratio", 1);
    setenv("OTEL_TRACES_SAMPLER_ARG", "0", 1);
    o = tm_otel_from_env("t", NULL);
    r = tm_span_start(o, TM_SPAN_SERVER, "r", NULL, NULL);
    assert_int_equal(tm_span_ctx(r)->flags, 0);
    tm_span_end(r);
    tm_otel_free(o);
    clear_env();
}

static void test_meta_roundtrip(void **st)
{
    (void)st;
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", DEAD, 1);
    tm_otel *o = tm_otel_from_env("t", NULL);
    json_t *in = json_pack("{s:s,s:{s:s,s:s}}", "name", "echo", "_meta", "traceparent", TP,
                           "tracestate", "a=1");
    tm_trace_ctx parent;
    const char *ts;
    assert_int_equal(tm_mcp_trace_from(in, NULL, &parent, &ts), 0);
    assert_string_equal(ts, "a=1");
    tm_span *s = tm_mcp_span_start(o, TM_SPAN_CLIENT, "tools/call", in, NULL, &parent, ts);
    json_t *out = json_object();
    assert_int_equal(tm_mcp_inject(s, out), 0);
    tm_trace_ctx got;
    assert_int_equal(tm_mcp_trace_from(out, NULL, &got, &ts), 0);
    assert_memory_equal(got.trace_id, parent.trace_id, 16);
    assert_memory_equal(got.span_id, tm_span_ctx(s)->span_id, 8);
    assert_string_equal(ts, "a=1");
    /* No _meta: the header; a bad _meta value: the header too. */
    json_t *none = json_object();
    assert_int_equal(tm_mcp_trace_from(none, TP, &got, &ts), 0);
    assert_int_equal(tm_mcp_trace_from(none, "junk", &got, &ts), TIDEMARK_EINVAL);
    tm_span_end(s);
    tm_otel_free(o);
    json_decref(in);
    json_decref(out);
    json_decref(none);
    clear_env();
}

/* A queue of 2 and a collector that refuses connections: ending 1000
 * spans never waits on the exporter, and every span is accounted for as
 * dropped (a full queue, or a failed export), none exported. */
static void test_queue_bound(void **st)
{
    (void)st;
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", DEAD, 1);
    setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2", 1);
    setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000", 1);
    tm_metrics *reg = tm_metrics_new();
    tm_otel *o = tm_otel_from_env("t", reg);
    assert_non_null(o);
    tm_counter *dropped = tm_metrics_counter(reg, "tidemark_otel_spans_dropped_total", "", NULL);
    tm_counter *exported = tm_metrics_counter(reg, "tidemark_otel_spans_exported_total", "", NULL);
    int64_t t0 = tm_now_ms();
    for (int i = 0; i < 1000; i++)
        tm_span_end(tm_span_start(o, TM_SPAN_SERVER, "s", NULL, NULL));
    assert_true(tm_now_ms() - t0 < 1000);
    /* At most 2 queued at a time: most were refused at the queue (the
     * exporter fails a batch in about 0.1 ms, the loop ends one in ~1 us). */
    assert_true(tm_otel_dropped(o) >= 500);
    tm_otel_free(o); /* what was queued fails to export: dropped too */
    assert_int_equal(tm_counter_get(dropped), 1000);
    assert_int_equal(tm_counter_get(exported), 0);
    tm_metrics_free(reg);
    clear_env();
}

/* The packed span of a batch of one, unpacked (free with
 * tm__otlp__export_trace_service_request__free_unpacked). */
static Tm__Otlp__ExportTraceServiceRequest *pack_one(tm_otel *o, tm_span *s)
{
    size_t len = 0;
    unsigned char *b = tm_otlp_pb_body(o, s, 1, &len);
    assert_non_null(b);
    Tm__Otlp__ExportTraceServiceRequest *r = tm__otlp__export_trace_service_request__unpack(NULL, len, b);
    free(b);
    assert_non_null(r);
    assert_int_equal(r->n_resource_spans, 1);
    assert_int_equal(r->resource_spans[0]->n_scope_spans, 1);
    assert_int_equal(r->resource_spans[0]->scope_spans[0]->n_spans, 1);
    return r;
}

static const Tm__Otlp__AnyValue *value_of(const Tm__Otlp__Span *sp, const char *key)
{
    for (size_t i = 0; i < sp->n_attributes; i++)
        if (!strcmp(sp->attributes[i]->key, key))
            return sp->attributes[i]->value;
    return NULL;
}

static const char *attr_of(const Tm__Otlp__Span *sp, const char *key)
{
    const Tm__Otlp__AnyValue *v = value_of(sp, key);
    assert_non_null(v);
    assert_int_equal(v->value_case, TM__OTLP__ANY_VALUE__VALUE_STRING_VALUE);
    return v->string_value;
}

/* tm_otlp_span_bound is at least the span's packed size for spans from
 * empty to full (every attribute slot, the whole text, a long tracestate,
 * int attributes at both extremes), every attribute decodes as the
 * official Span's KeyValue with the value set (empty strings and zeros
 * too), and integer request ids are written in decimal at both ends of
 * their range. */
static void test_span_bound(void **st)
{
    (void)st;
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", DEAD, 1);
    tm_otel *o = tm_otel_from_env("t", NULL);
    static const char *keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8",
                                 "k9", "ka", "kb", "kc", "kd", "ke", "kf", "kg", "kh"};
    static const json_int_t ids[] = {0, 7, -1, 1000000, INT64_MAX, INT64_MIN};
    static const char *want[] = {"0", "7", "-1", "1000000", "9223372036854775807",
                                 "-9223372036854775808"};
    char v[300], ts[513];
    memset(ts, 'a', 512);
    ts[512] = '\0';
    tm_trace_ctx parent;
    assert_int_equal(parse(TP, &parent), 0);
    for (int round = 0; round < 60; round++) {
        json_t *params = json_pack("{s:s}", "name", round % 2 ? "echo" : "");
        json_t *id = json_integer(ids[round % 6]);
        tm_span *s = tm_mcp_span_start(o, TM_SPAN_SERVER, "tools/call", params, id,
                                       round % 3 ? &parent : NULL, round % 4 ? ts : NULL);
        assert_non_null(s);
        int nattr = round % 19, vlen = round % 7 ? (round * 37) % 300 : 0;
        memset(v, 'x', (size_t)vlen);
        v[vlen] = '\0';
        static const int64_t ints[] = {INT64_MIN, -1, 0, INT64_MAX};
        for (int k = 0; k < nattr; k++) {
            if (k % 3 == 2)
                tm_span_set_int(s, keys[k], ints[k % 4]);
            else
                tm_span_set_str(s, keys[k], v);
        }
        if (round % 5 == 0)
            tm_span_set_error(s, "-32602");
        s->end_ns = s->start_ns + 1234; /* as tm_span_end would, without queueing it */
        Tm__Otlp__ExportTraceServiceRequest *r = pack_one(o, s);
        ProtobufCBinaryData packed = r->resource_spans[0]->scope_spans[0]->spans[0];
        assert_true(tm_otlp_span_bound(s) >= packed.len);
        Tm__Otlp__Span *sp = tm__otlp__span__unpack(NULL, packed.len, packed.data);
        assert_non_null(sp);
        assert_string_equal(attr_of(sp, "jsonrpc.request.id"), want[round % 6]);
        assert_string_equal(attr_of(sp, "mcp.method.name"), "tools/call");
        const tm_trace_ctx *c = tm_span_ctx(s);
        assert_int_equal(sp->trace_id.len, 16);
        assert_memory_equal(sp->trace_id.data, c->trace_id, 16);
        assert_int_equal(sp->span_id.len, 8);
        assert_memory_equal(sp->span_id.data, c->span_id, 8);
        if (round % 3) {
            assert_int_equal(sp->parent_span_id.len, 8);
            assert_memory_equal(sp->parent_span_id.data, parent.span_id, 8);
        } else {
            assert_int_equal(sp->parent_span_id.len, 0);
        }
        assert_string_equal(sp->trace_state, round % 4 ? ts : "");
        assert_string_equal(sp->name, round % 2 ? "tools/call echo" : "tools/call ");
        assert_int_equal(sp->kind, 2);
        assert_true(sp->start_time_unix_nano == (uint64_t)s->start_ns &&
                    sp->end_time_unix_nano == (uint64_t)s->end_ns);
        assert_int_equal(sp->status ? sp->status->code : 0, round % 5 == 0 ? 2 : 0);
        assert_int_equal(sp->n_attributes, s->na); /* left out: past the slots or the text */
        for (int k = 0; k < nattr; k++) {
            const Tm__Otlp__AnyValue *got = value_of(sp, keys[k]);
            if (got && k % 3 == 2) {
                assert_int_equal(got->value_case, TM__OTLP__ANY_VALUE__VALUE_INT_VALUE);
                assert_true(got->int_value == ints[k % 4]);
            } else if (got) {
                assert_string_equal(attr_of(sp, keys[k]), v);
            }
        }
        tm__otlp__span__free_unpacked(sp, NULL);
        tm__otlp__export_trace_service_request__free_unpacked(r, NULL);
        tm_span_free(s);
        json_decref(params);
        json_decref(id);
    }
    tm_otel_free(o);
    clear_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),       cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_off_unless_configured), cmocka_unit_test(test_samplers),
        cmocka_unit_test(test_meta_roundtrip),    cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_span_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
