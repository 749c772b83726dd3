/* test_record.c - unit tests for src/server/record.{h,c}: the fingerprint a
 * retry is judged by, the verdicts, the refusals, the re-run rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/record.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

static json_t *js(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        print_error("bad JSON in the test: %s\n", e.text);
    assert_non_null(v);
    return v;
}

static int same(const char *a, const char *b)
{
    json_t *x = js(a), *y = js(b);
    int s = tm_record_same(x, y);
    assert_int_equal(s, tm_record_same(y, x)); /* symmetric */
    json_decref(x);
    json_decref(y);
    return s;
}

#define CALL(params) "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":" params "}"

static void test_same_call(void **state)
{
    (void)state;
    const char *a = CALL("{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"A\",\"n\":1}}");
    assert_true(same(a, a));
    /* member order and whitespace do not count; the id does not either */
    assert_true(same(a, "{ \"method\" : \"tools/call\", \"id\": 8, \"jsonrpc\":\"2.0\", \"params\":"
                        "{\"arguments\":{\"n\":1,\"entry\":\"A\"},\"name\":\"ledger_append\"}}"));
}

static void test_meta_aside(void **state)
{
    (void)state;
    /* a re-issue by the TypeScript SDK: a new progressToken (its new id) */
    assert_true(same(CALL("{\"name\":\"t\",\"arguments\":{},\"_meta\":{\"progressToken\":1}}"),
                     CALL("{\"name\":\"t\",\"arguments\":{},\"_meta\":{\"progressToken\":9,"
                          "\"dev.tidemark/idempotency-key\":\"k\"}}")));
    assert_true(same(CALL("{\"name\":\"t\"}"), CALL("{\"_meta\":{\"x\":1},\"name\":\"t\"}")));
    /* no params, empty params, params of _meta alone: all no params */
    const char *none = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}";
    assert_true(same(none, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{}}"));
    assert_true(same(none, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":"
                           "{\"_meta\":{\"progressToken\":2}}}"));
    assert_false(same(none, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":1}}"));
}

static void test_other_call(void **state)
{
    (void)state;
    const char *a = CALL("{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"A\"}}");
    assert_false(same(a, CALL("{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"B\"}}")));
    assert_false(same(a, CALL("{\"name\":\"ledger_read\",\"arguments\":{\"entry\":\"A\"}}")));
    assert_false(same(a, CALL("{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"A\"},"
                              "\"task\":{}}")));
    assert_false(same(a, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"prompts/get\",\"params\":"
                         "{\"name\":\"ledger_append\",\"arguments\":{\"entry\":\"A\"}}}"));
    /* what changes an input round is outside _meta */
    assert_false(same(CALL("{\"name\":\"t\",\"requestState\":\"s1\"}"),
                      CALL("{\"name\":\"t\",\"requestState\":\"s2\"}")));
    /* arrays keep their order; an integer is not a real */
    assert_false(same(CALL("{\"name\":\"t\",\"arguments\":{\"v\":[1,2]}}"),
                      CALL("{\"name\":\"t\",\"arguments\":{\"v\":[2,1]}}")));
    assert_false(same(CALL("{\"name\":\"t\",\"arguments\":{\"v\":1}}"),
                      CALL("{\"name\":\"t\",\"arguments\":{\"v\":1.0}}")));
    assert_false(same(CALL("{\"name\":\"t\",\"arguments\":{}}"), "[1]"));
}

static void test_judge(void **state)
{
    (void)state;
    const char *msg = CALL("{\"name\":\"t\",\"arguments\":{\"a\":1}}");
    json_t *retry = js(CALL("{\"name\":\"t\",\"arguments\":{\"a\":1}}"));
    json_t *other = js(CALL("{\"name\":\"t\",\"arguments\":{\"a\":2}}"));
    tm_request_rec rec = {.message = (char *)msg, .state = TM_REQ_STARTED, .stream = "r1"};
    assert_int_equal(tm_record_judge(NULL, NULL, retry), TM_REC_NEW);
    assert_int_equal(tm_record_judge(NULL, &rec, retry), TM_REC_RUNNING);
    assert_int_equal(tm_record_judge(NULL, &rec, other), TM_REC_REUSED);
    const char resp[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"x\":1}}";
    rec.state = TM_REQ_COMPLETED;
    rec.response = (char *)resp;
    rec.response_len = sizeof resp - 1;
    assert_int_equal(tm_record_judge(NULL, &rec, retry), TM_REC_ANSWERED);
    assert_int_equal(tm_record_judge(NULL, &rec, other), TM_REC_REUSED);
    rec.message = (char *)"{not json";
    assert_int_equal(tm_record_judge(NULL, &rec, retry), TM_REC_REUSED); /* proves nothing */
    /* the stored response under the re-issue's id */
    json_t *id = json_string("new");
    json_t *a = tm_record_answer(&rec, id);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_object_get(a, "id")), "new");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(a, "result"), "x")), 1);
    json_decref(a);
    json_decref(id);
    json_decref(retry);
    json_decref(other);
}

static void test_refusal(void **state)
{
    (void)state;
    json_t *plain = js(CALL("{\"name\":\"t\"}"));
    json_t *keyed = js(CALL("{\"name\":\"t\",\"_meta\":{\"dev.tidemark/idempotency-key\":\"k\"}}"));
    tm_msg m;
    tm_jsonrpc_classify(plain, &m);
    json_t *e = tm_record_refusal(&m);
    json_t *err = json_object_get(e, "error");
    assert_int_equal(json_integer_value(json_object_get(err, "code")), TM_RPC_INVALID_REQUEST);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "data"), "reason")),
                        "id_reused");
    assert_int_equal(json_integer_value(json_object_get(e, "id")), 7);
    json_decref(e);
    tm_jsonrpc_classify(keyed, &m);
    e = tm_record_refusal(&m);
    err = json_object_get(e, "error");
    assert_int_equal(json_integer_value(json_object_get(err, "code")), TM_RPC_INVALID_PARAMS);
    assert_string_equal(json_string_value(json_object_get(json_object_get(err, "data"), "reason")),
                        "idempotency_key_reused");
    json_decref(e);
    json_decref(plain);
    json_decref(keyed);
}

static void test_may_rerun(void **state)
{
    (void)state;
    const unsigned A = TIDEMARK_TOOL_ATOMIC, I = TIDEMARK_TOOL_IDEMPOTENT;
    for (int modern = 0; modern < 2; modern++) {
        assert_true(tm_record_may_rerun(modern, "i:1", I));
        assert_false(tm_record_may_rerun(modern, "i:1", 0));
        assert_true(tm_record_may_rerun(modern, "k:x", A));
    }
    assert_true(tm_record_may_rerun(0, "i:1", A));
    /* a key-less 2026-07-28 call's answer reaches no one: never twice */
    assert_false(tm_record_may_rerun(1, "i:1", A));
    assert_false(tm_record_may_rerun(1, "s:x", A));
    assert_false(tm_record_may_rerun(1, "e:3", A));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_call), cmocka_unit_test(test_meta_aside),
        cmocka_unit_test(test_other_call), cmocka_unit_test(test_judge),
        cmocka_unit_test(test_refusal), cmocka_unit_test(test_may_rerun),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
