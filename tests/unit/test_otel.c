/*
 * test_otel.c - the tracing module (src/otel/): traceparent parse/format,
 * configuration from the environment (off unless an endpoint is set,
 * OTEL_SDK_DISABLED honoured), the samplers, _meta injection and reading,
 * and the bounded queue: spans past OTEL_BSP_MAX_QUEUE_SIZE are dropped and
 * counted, never waited for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include "otel/otel.h"
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),       cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_off_unless_configured), cmocka_unit_test(test_samplers),
        cmocka_unit_test(test_meta_roundtrip),    cmocka_unit_test(test_queue_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
