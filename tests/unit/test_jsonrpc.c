/* test_jsonrpc.c - unit tests for src/mcp/jsonrpc.{h,c}. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "mcp/jsonrpc.h"
#include "tidemark/server.h"
#include "tidemark/tidemark.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

static json_t *parse_ok(const char *s)
{
    json_t *root = (json_t *)1;
    char err[256] = "";
    int rc = tm_jsonrpc_parse(s, strlen(s), &root, err, sizeof err);
    if (rc != 0)
        print_error("unexpected parse failure for %s: %s\n", s, err);
    assert_int_equal(rc, 0);
    assert_non_null(root);
    return root;
}

static void parse_fails(const char *s, size_t len, const char *err_contains)
{
    json_t *root = (json_t *)1;
    char err[256] = "";
    int rc = tm_jsonrpc_parse(s, len, &root, err, sizeof err);
    assert_int_equal(rc, TIDEMARK_EINVAL);
    assert_null(root);
    assert_true(strlen(err) > 0);
    if (err_contains && !strstr(err, err_contains)) {
        print_error("error text \"%s\" lacks \"%s\"\n", err, err_contains);
        fail();
    }
}

static char *repeat(const char *prefix, char c, size_t n, char c2, size_t n2, const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    char *s = malloc(pl + n + n2 + sl + 1);
    assert_non_null(s);
    memcpy(s, prefix, pl);
    memset(s + pl, c, n);
    memset(s + pl + n, c2, n2);
    memcpy(s + pl + n + n2, suffix, sl + 1);
    return s;
}

/* Classify a JSON text; the caller decrefs *root. */
static void classify_text(const char *text, json_t **root, tm_msg *m)
{
    *root = parse_ok(text);
    memset(m, 0xA5, sizeof *m); /* classify must set every field */
    tm_jsonrpc_classify(*root, m);
}

static void expect_invalid(const char *text, const char *why)
{
    json_t *root;
    tm_msg m;
    classify_text(text, &root, &m);
    /* release before asserting, so a failure does not also leak */
    int raw_ok = m.raw == root;
    json_decref(root);
    if (m.kind != TM_MSG_INVALID)
        print_error("expected INVALID for %s, got kind %d\n", text, (int)m.kind);
    assert_int_equal(m.kind, TM_MSG_INVALID);
    assert_non_null(m.why); /* static strings: valid after the decref */
    if (strcmp(m.why, why) != 0)
        print_error("for %s\n", text);
    assert_string_equal(m.why, why);
    assert_non_null(m.detail);
    assert_true(strlen(m.detail) > 0);
    assert_true(raw_ok);
}

static char *dump(const json_t *v, size_t *len)
{
    char *s = tm_jsonrpc_dump(v, len);
    assert_non_null(s);
    assert_int_equal(*len, strlen(s));
    return s;
}

/* ---- parse --------------------------------------------------------------- */

static void test_parse_valid(void **state)
{
    (void)state;
    json_t *v = parse_ok("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    assert_true(json_is_object(v));
    assert_string_equal(json_string_value(json_object_get(v, "method")), "ping");
    json_decref(v);

    v = parse_ok("  [ {\"a\" : [1, 2, {\"b\": null}]} ]\n");
    assert_true(json_is_array(v));
    assert_int_equal(json_array_size(v), 1);
    json_decref(v);

    /* len bounds the input: bytes past len are not read */
    const char *s = "{\"a\":1}GARBAGE";
    json_t *root = NULL;
    char err[128];
    assert_int_equal(tm_jsonrpc_parse(s, 7, &root, err, sizeof err), 0);
    assert_int_equal(json_integer_value(json_object_get(root, "a")), 1);
    json_decref(root);
}

static void test_parse_syntax_errors(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "   ",
        "{",
        "}",
        "[1,]",
        "{\"a\":}",
        "{\"a\" 1}",
        "{'a':1}",
        "{\"a\":tru}",
        "{\"a\":\"unterminated}",
        "{\"a\":1} x",
        "{}{}",
        "{\"a\":01}",
        "{\"a\":\"\\x\"}",
        "{\"a\":1,}",
        /* integer out of 64-bit range is refused, not truncated */
        "{\"id\":9223372036854775808}",
        "{\"id\":-9223372036854775809}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        parse_fails(bad[i], strlen(bad[i]), NULL);
    /* a raw NUL byte in the body (not an escape) is a syntax error */
    parse_fails("{\"a\":\"x\0y\"}", 11, NULL);
}

static void test_parse_depth_limit(void **state)
{
    (void)state;
    /* exactly 64 levels is fine */
    char *s = repeat("", '[', 64, ']', 64, "");
    json_t *v = parse_ok(s);
    json_decref(v);
    free(s);

    /* 65 levels is refused */
    s = repeat("", '[', 65, ']', 65, "");
    parse_fails(s, strlen(s), "64");
    free(s);

    /* objects count too: {"a":{"a":...}} 65 deep */
    size_t n = 65;
    size_t cap = n * 6 + n + 8;
    s = malloc(cap);
    assert_non_null(s);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, "{\"a\":", 5);
        o += 5;
    }
    s[o++] = '1';
    memset(s + o, '}', n);
    o += n;
    s[o] = '\0';
    parse_fails(s, o, "64");
    /* and 64 of them pass */
    s[0] = ' ', s[1] = ' ', s[2] = ' ', s[3] = ' ', s[4] = ' ';
    s[o - 1] = ' ';
    v = parse_ok(s);
    json_decref(v);
    free(s);

    /* the limit is checked before parsing: an unterminated 65-deep prefix
     * reports the depth, not jansson's "unexpected end of input" */
    s = repeat("", '[', 65, ' ', 0, "");
    parse_fails(s, strlen(s), "nesting");
    free(s);

    /* hostile depth is refused quickly, without recursion */
    s = repeat("", '[', 1000000, ' ', 0, "");
    parse_fails(s, strlen(s), "nesting");
    free(s);
}

static void test_parse_depth_ignores_strings(void **state)
{
    (void)state;
    /* brackets inside strings are not nesting */
    char *s = repeat("[\"", '[', 200, '{', 200, "\"]");
    json_t *v = parse_ok(s);
    assert_int_equal(json_string_length(json_array_get(v, 0)), 400);
    json_decref(v);
    free(s);

    /* an escaped quote does not end the string */
    s = repeat("[\"\\\"", '[', 200, ' ', 0, "\"]");
    v = parse_ok(s);
    json_decref(v);
    free(s);

    /* an escaped backslash does end it: the brackets after it count */
    s = repeat("[\"\\\\\",", '[', 64, ']', 64, "]");
    parse_fails(s, strlen(s), "64");
    free(s);
    s = repeat("[\"\\\\\",", '[', 63, ']', 63, "]");
    v = parse_ok(s);
    json_decref(v);
    free(s);
}

static void test_parse_duplicate_keys(void **state)
{
    (void)state;
    parse_fails("{\"a\":1,\"a\":2}", 13, NULL);
    const char *nested = "{\"params\":{\"x\":1,\"x\":1}}";
    parse_fails(nested, strlen(nested), NULL);
    const char *dup_id = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"id\":2}";
    parse_fails(dup_id, strlen(dup_id), NULL);
    /* same key in different objects is fine */
    json_t *v = parse_ok("[{\"a\":1},{\"a\":2}]");
    json_decref(v);
}

static void test_parse_nul_in_string(void **state)
{
    (void)state;
    json_t *v = parse_ok("{\"s\":\"a\\u0000b\"}");
    json_t *s = json_object_get(v, "s");
    assert_true(json_is_string(s));
    assert_int_equal(json_string_length(s), 3);
    assert_memory_equal(json_string_value(s), "a\0b", 3);
    json_decref(v);
}

/* ---- classify ------------------------------------------------------------ */

static void test_classify_request(void **state)
{
    (void)state;
    json_t *root;
    tm_msg m;
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"x\":1}}",
                  &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    assert_ptr_equal(m.raw, root);
    assert_ptr_equal(m.id, json_object_get(root, "id"));
    assert_int_equal(json_integer_value(m.id), 7);
    assert_string_equal(m.method, "tools/call");
    assert_ptr_equal(m.params, json_object_get(root, "params"));
    assert_null(m.result);
    assert_null(m.error);
    assert_null(m.why);
    json_decref(root);

    /* string id, array params */
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"m\",\"params\":[1,2]}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    assert_string_equal(json_string_value(m.id), "abc");
    assert_true(json_is_array(m.params));
    json_decref(root);

    /* params absent */
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    assert_null(m.params);
    assert_int_equal(json_integer_value(m.id), 0);
    json_decref(root);

    /* negative and empty-string ids are valid ids */
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":-3,\"method\":\"ping\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    json_decref(root);
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":\"\",\"method\":\"ping\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    json_decref(root);
}

static void test_classify_notification(void **state)
{
    (void)state;
    json_t *root;
    tm_msg m;
    classify_text("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_NOTIFICATION);
    assert_null(m.id);
    assert_string_equal(m.method, "notifications/initialized");
    assert_null(m.params);
    assert_null(m.why);
    json_decref(root);

    classify_text("{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":{\"p\":true}}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_NOTIFICATION);
    assert_ptr_equal(m.params, json_object_get(root, "params"));
    json_decref(root);
}

static void test_classify_result(void **state)
{
    (void)state;
    json_t *root;
    tm_msg m;
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"result\":{\"ok\":1}}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_RESULT);
    assert_string_equal(json_string_value(m.id), "q");
    assert_ptr_equal(m.result, json_object_get(root, "result"));
    assert_null(m.error);
    assert_null(m.method);
    json_decref(root);

    /* result may be any JSON value, including null */
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":null}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_RESULT);
    assert_true(json_is_null(m.result));
    json_decref(root);
}

static void test_classify_error(void **state)
{
    (void)state;
    json_t *root;
    tm_msg m;
    classify_text("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32601,\"message\":\"nope\","
                  "\"data\":{\"reason\":\"x\"}}}",
                  &root, &m);
    assert_int_equal(m.kind, TM_MSG_ERROR);
    assert_int_equal(json_integer_value(m.id), 4);
    assert_ptr_equal(m.error, json_object_get(root, "error"));
    assert_null(m.result);
    json_decref(root);

    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":\"boom\"}", "invalid_error");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":\"1\",\"message\":\"m\"}}",
                   "invalid_error");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":1.5,\"message\":\"m\"}}",
                   "invalid_error");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":1}}", "invalid_error");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"message\":\"m\"}}", "invalid_error");
}

static void test_classify_non_object(void **state)
{
    (void)state;
    json_t *vals[] = {json_array(), json_string("x"), json_integer(1), json_null(), json_true()};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        tm_msg m;
        memset(&m, 0xA5, sizeof m);
        tm_jsonrpc_classify(vals[i], &m);
        assert_int_equal(m.kind, TM_MSG_INVALID);
        assert_string_equal(m.why, "invalid_request");
        assert_non_null(m.detail);
        assert_null(m.id);
        assert_null(m.method);
        json_decref(vals[i]);
    }
    /* a parsed batch array is not itself a message */
    expect_invalid("[{\"jsonrpc\":\"2.0\",\"method\":\"n\"}]", "invalid_request");
}

static void test_classify_jsonrpc_version(void **state)
{
    (void)state;
    expect_invalid("{\"id\":1,\"method\":\"m\"}", "invalid_jsonrpc_version");
    expect_invalid("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"m\"}", "invalid_jsonrpc_version");
    expect_invalid("{\"jsonrpc\":\"2.0 \",\"id\":1,\"method\":\"m\"}", "invalid_jsonrpc_version");
    expect_invalid("{\"jsonrpc\":2.0,\"id\":1,\"method\":\"m\"}", "invalid_jsonrpc_version");
    expect_invalid("{\"jsonrpc\":null,\"id\":1,\"method\":\"m\"}", "invalid_jsonrpc_version");

    /* a valid id is kept so the error response can echo it */
    json_t *root;
    tm_msg m;
    classify_text("{\"jsonrpc\":\"1.0\",\"id\":42,\"method\":\"m\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_INVALID);
    assert_non_null(m.id);
    assert_int_equal(json_integer_value(m.id), 42);
    json_decref(root);
    /* an invalid id is not */
    classify_text("{\"jsonrpc\":\"1.0\",\"id\":4.2,\"method\":\"m\"}", &root, &m);
    assert_int_equal(m.kind, TM_MSG_INVALID);
    assert_null(m.id);
    json_decref(root);
}

/* "jsonrpc" must be exactly "2.0": a string with the same C prefix and an
 * embedded NUL is a different string. */
static void test_classify_jsonrpc_version_embedded_nul(void **state)
{
    (void)state;
    expect_invalid("{\"jsonrpc\":\"2.0\\u0000x\",\"id\":1,\"method\":\"m\"}",
                   "invalid_jsonrpc_version");
    expect_invalid("{\"jsonrpc\":\"2.0\\u0000\",\"id\":1,\"result\":{}}",
                   "invalid_jsonrpc_version");
}

static void test_classify_method(void **state)
{
    (void)state;
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":1}", "invalid_method");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":null}", "invalid_method");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":[\"m\"]}", "invalid_method");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":{}}", "invalid_method");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", "invalid_method");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"method\":\"\"}", "invalid_method");
    /* a request must not also carry result or error */
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"result\":{}}", "invalid_request");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"error\":{\"code\":1,"
                   "\"message\":\"x\"}}",
                   "invalid_request");
}

static void test_classify_params(void **state)
{
    (void)state;
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":1}", "invalid_params");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":\"x\"}", "invalid_params");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":true}", "invalid_params");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":null}", "invalid_params");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":1.5}", "invalid_params");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":7}", "invalid_params");
}

static void test_classify_bad_ids(void **state)
{
    (void)state;
    const char *ids[] = {"1.0", "1.5", "1e3", "true", "false", "null", "{}", "{\"a\":1}", "[]", "[1]"};
    char buf[256];
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        /* request */
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"m\"}", ids[i]);
        expect_invalid(buf, "invalid_id");
        /* result */
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}", ids[i]);
        expect_invalid(buf, "invalid_id");
        /* error */
        snprintf(buf, sizeof buf,
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":1,\"message\":\"m\"}}", ids[i]);
        expect_invalid(buf, "invalid_id");
        /* and the invalid id is never handed out */
        json_t *root;
        tm_msg m;
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"m\"}", ids[i]);
        classify_text(buf, &root, &m);
        assert_null(m.id);
        json_decref(root);
    }
    /* a response without an id at all */
    expect_invalid("{\"jsonrpc\":\"2.0\",\"result\":{}}", "invalid_id");
    expect_invalid("{\"jsonrpc\":\"2.0\",\"error\":{\"code\":1,\"message\":\"m\"}}", "invalid_id");
}

static void test_classify_result_and_error(void **state)
{
    (void)state;
    /* both */
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{\"code\":1,"
                   "\"message\":\"m\"}}",
                   "invalid_request");
    /* neither */
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1}", "invalid_request");
    expect_invalid("{\"jsonrpc\":\"2.0\"}", "invalid_request");
    /* both, even with a null result */
    expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":null,\"error\":{\"code\":1,"
                   "\"message\":\"m\"}}",
                   "invalid_request");
}

/* ---- ids ----------------------------------------------------------------- */

static void id_key_of(const char *json_id, char *out, size_t n)
{
    char buf[256];
    snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"m\"}", json_id);
    json_t *root;
    tm_msg m;
    classify_text(buf, &root, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    assert_int_equal(tm_jsonrpc_id_key(m.id, out, n), 0);
    json_decref(root);
}

static void test_id_valid(void **state)
{
    (void)state;
    json_t *i = json_integer(1), *s = json_string("x"), *r = json_real(1.0), *t = json_true(),
           *n = json_null(), *o = json_object(), *a = json_array();
    assert_true(tm_jsonrpc_id_valid(i));
    assert_true(tm_jsonrpc_id_valid(s));
    assert_false(tm_jsonrpc_id_valid(r));
    assert_false(tm_jsonrpc_id_valid(t));
    assert_false(tm_jsonrpc_id_valid(n));
    assert_false(tm_jsonrpc_id_valid(o));
    assert_false(tm_jsonrpc_id_valid(a));
    assert_false(tm_jsonrpc_id_valid(NULL));
    char key[32];
    assert_int_equal(tm_jsonrpc_id_key(r, key, sizeof key), TIDEMARK_EINVAL);
    assert_int_equal(tm_jsonrpc_id_key(n, key, sizeof key), TIDEMARK_EINVAL);
    assert_int_equal(tm_jsonrpc_id_key(o, key, sizeof key), TIDEMARK_EINVAL);
    json_decref(i), json_decref(s), json_decref(r), json_decref(t);
    json_decref(n), json_decref(o), json_decref(a);
}

static void test_id_key_int64_exact(void **state)
{
    (void)state;
    char key[64];
    id_key_of("9223372036854775807", key, sizeof key);
    assert_string_equal(key, "i:9223372036854775807");
    id_key_of("-9223372036854775808", key, sizeof key);
    assert_string_equal(key, "i:-9223372036854775808");
    id_key_of("9223372036854775806", key, sizeof key);
    assert_string_equal(key, "i:9223372036854775806");
    id_key_of("0", key, sizeof key);
    assert_string_equal(key, "i:0");
    id_key_of("-1", key, sizeof key);
    assert_string_equal(key, "i:-1");

    /* the parsed value itself is exact, not a double approximation */
    json_t *root = parse_ok("{\"a\":9223372036854775807,\"b\":-9223372036854775808,"
                            "\"c\":9007199254740993}");
    assert_true(json_is_integer(json_object_get(root, "a")));
    assert_true(json_integer_value(json_object_get(root, "a")) == INT64_MAX);
    assert_true(json_integer_value(json_object_get(root, "b")) == INT64_MIN);
    assert_true(json_integer_value(json_object_get(root, "c")) == 9007199254740993LL);
    json_decref(root);
}

static void test_id_key_strings(void **state)
{
    (void)state;
    char k1[64], k2[64], k3[64], k4[64], k5[64];
    id_key_of("\"1\"", k1, sizeof k1);
    id_key_of("1", k2, sizeof k2);
    assert_string_equal(k1, "s:1");
    assert_string_equal(k2, "i:1");
    assert_string_not_equal(k1, k2);

    /* embedded NUL: "a\0b", "a", "a%00b", "a%b" and "a\0" all differ */
    id_key_of("\"a\\u0000b\"", k1, sizeof k1);
    id_key_of("\"a\"", k2, sizeof k2);
    id_key_of("\"a%00b\"", k3, sizeof k3);
    id_key_of("\"a%b\"", k4, sizeof k4);
    id_key_of("\"a\\u0000\"", k5, sizeof k5);
    const char *ks[] = {k1, k2, k3, k4, k5};
    for (size_t i = 0; i < 5; i++)
        for (size_t j = i + 1; j < 5; j++) {
            if (strcmp(ks[i], ks[j]) == 0)
                print_error("keys %zu and %zu collide: %s\n", i, j, ks[i]);
            assert_string_not_equal(ks[i], ks[j]);
        }
    /* keys are printable C strings (no NUL truncation) */
    assert_true(strlen(k1) > strlen("s:a"));
    assert_true(strlen(k5) > strlen("s:a"));

    /* "i:1" as a string id is not the integer 1 */
    id_key_of("\"i:1\"", k1, sizeof k1);
    id_key_of("1", k2, sizeof k2);
    assert_string_not_equal(k1, k2);

    /* "" is a valid id with its own key */
    id_key_of("\"\"", k1, sizeof k1);
    assert_string_equal(k1, "s:");
}

static void test_id_key_bounds(void **state)
{
    (void)state;
    json_t *s = json_string("abcdef");
    char key[16];
    memset(key, 'X', sizeof key);
    assert_int_equal(tm_jsonrpc_id_key(s, key, 9), 0); /* "s:abcdef" + NUL */
    assert_string_equal(key, "s:abcdef");
    assert_int_equal(tm_jsonrpc_id_key(s, key, 8), TIDEMARK_ERANGE);
    assert_int_equal(tm_jsonrpc_id_key(s, key, 2), TIDEMARK_ERANGE);
    json_decref(s);

    json_t *i = json_integer(12345);
    assert_int_equal(tm_jsonrpc_id_key(i, key, 8), 0); /* "i:12345" + NUL */
    assert_string_equal(key, "i:12345");
    assert_int_equal(tm_jsonrpc_id_key(i, key, 7), TIDEMARK_ERANGE);
    json_decref(i);

    /* escaped bytes need room for all three characters */
    json_t *p = json_stringn("%", 1);
    assert_int_equal(tm_jsonrpc_id_key(p, key, 6), 0); /* "s:%25" + NUL */
    assert_string_equal(key, "s:%25");
    assert_int_equal(tm_jsonrpc_id_key(p, key, 5), TIDEMARK_ERANGE);
    json_decref(p);
}

/* ---- builders ------------------------------------------------------------ */

static void test_error_builder(void **state)
{
    (void)state;
    json_t *id = json_integer(9);
    json_t *e = tm_jsonrpc_error(id, TM_RPC_INVALID_PARAMS, "bad", "resumption_gap",
                                 json_pack("{s:[i,i],s:s}", "missing", 3, 5, "extra", "yes"));
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "jsonrpc")), "2.0");
    assert_true(json_equal(json_object_get(e, "id"), id));
    assert_null(json_object_get(e, "result"));
    json_t *err = json_object_get(e, "error");
    assert_int_equal(json_integer_value(json_object_get(err, "code")), TM_RPC_INVALID_PARAMS);
    assert_string_equal(json_string_value(json_object_get(err, "message")), "bad");
    json_t *data = json_object_get(err, "data");
    assert_string_equal(json_string_value(json_object_get(data, "reason")), "resumption_gap");
    assert_string_equal(json_string_value(json_object_get(data, "extra")), "yes");
    json_t *missing = json_object_get(data, "missing");
    assert_int_equal(json_array_size(missing), 2);
    assert_int_equal(json_integer_value(json_array_get(missing, 0)), 3);
    assert_int_equal(json_integer_value(json_array_get(missing, 1)), 5);
    assert_int_equal(json_object_size(data), 3);
    /* the result is a valid error message */
    tm_msg m;
    tm_jsonrpc_classify(e, &m);
    assert_int_equal(m.kind, TM_MSG_ERROR);
    json_decref(e);
    /* id is borrowed, not stolen */
    assert_int_equal(id->refcount, 1);
    json_decref(id);

    /* the typed reason wins over a "reason" in extra */
    e = tm_jsonrpc_error(NULL, TM_RPC_SERVER_ERROR, "x", "cursor_ahead",
                         json_pack("{s:s,s:i}", "reason", "forged", "durable_head", 7));
    data = json_object_get(json_object_get(e, "error"), "data");
    assert_string_equal(json_string_value(json_object_get(data, "reason")), "cursor_ahead");
    assert_int_equal(json_integer_value(json_object_get(data, "durable_head")), 7);
    /* NULL id becomes null */
    assert_true(json_is_null(json_object_get(e, "id")));
    json_decref(e);

    /* no extra: data has just the reason */
    e = tm_jsonrpc_error(NULL, TM_RPC_INVALID_REQUEST, "m", "unknown_stream", NULL);
    data = json_object_get(json_object_get(e, "error"), "data");
    assert_int_equal(json_object_size(data), 1);
    assert_string_equal(json_string_value(json_object_get(data, "reason")), "unknown_stream");
    json_decref(e);

    /* a non-object extra is consumed (no leak under ASan) and ignored */
    e = tm_jsonrpc_error(NULL, TM_RPC_INVALID_REQUEST, "m", "r", json_integer(5));
    data = json_object_get(json_object_get(e, "error"), "data");
    assert_int_equal(json_object_size(data), 1);
    assert_string_equal(json_string_value(json_object_get(data, "reason")), "r");
    json_decref(e);

    /* string id with a NUL byte is echoed exactly */
    id = json_stringn("a\0b", 3);
    e = tm_jsonrpc_error(id, -32000, "m", "r", NULL);
    assert_true(json_equal(json_object_get(e, "id"), id));
    assert_int_equal(json_string_length(json_object_get(e, "id")), 3);
    json_decref(e);
    json_decref(id);
}

static void test_result_builder_echoes_id(void **state)
{
    (void)state;
    const char *ids[] = {"9223372036854775807", "-9223372036854775808", "\"a\\u0000b%\"", "\"1\"",
                         "0"};
    const char *want[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":9223372036854775807,\"result\":{\"ok\":true}}",
        "{\"jsonrpc\":\"2.0\",\"id\":-9223372036854775808,\"result\":{\"ok\":true}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\\u0000b%\",\"result\":{\"ok\":true}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{\"ok\":true}}",
        "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"ok\":true}}",
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"m\"}", ids[i]);
        json_t *root;
        tm_msg m;
        classify_text(buf, &root, &m);
        assert_int_equal(m.kind, TM_MSG_REQUEST);
        json_t *r = tm_jsonrpc_result(m.id, json_pack("{s:b}", "ok", 1));
        assert_true(json_equal(json_object_get(r, "id"), m.id));
        assert_int_equal(json_typeof(json_object_get(r, "id")), json_typeof(m.id));
        size_t len;
        char *s = dump(r, &len);
        assert_string_equal(s, want[i]);
        /* and it round-trips through our own parser to the same id key */
        json_t *back = parse_ok(s);
        tm_msg mb;
        tm_jsonrpc_classify(back, &mb);
        assert_int_equal(mb.kind, TM_MSG_RESULT);
        char k1[64], k2[64];
        assert_int_equal(tm_jsonrpc_id_key(m.id, k1, sizeof k1), 0);
        assert_int_equal(tm_jsonrpc_id_key(mb.id, k2, sizeof k2), 0);
        assert_string_equal(k1, k2);
        free(s);
        json_decref(back);
        json_decref(r);
        json_decref(root);
    }

    /* NULL result becomes an empty object; NULL id becomes null */
    json_t *r = tm_jsonrpc_result(NULL, NULL);
    assert_true(json_is_null(json_object_get(r, "id")));
    assert_true(json_is_object(json_object_get(r, "result")));
    assert_int_equal(json_object_size(json_object_get(r, "result")), 0);
    json_decref(r);
}

static void test_notification_and_request_builders(void **state)
{
    (void)state;
    json_t *n = tm_jsonrpc_notification("notifications/progress", json_pack("{s:i}", "p", 1));
    tm_msg m;
    tm_jsonrpc_classify(n, &m);
    assert_int_equal(m.kind, TM_MSG_NOTIFICATION);
    assert_string_equal(m.method, "notifications/progress");
    assert_int_equal(json_integer_value(json_object_get(m.params, "p")), 1);
    json_decref(n);

    n = tm_jsonrpc_notification("x", NULL);
    assert_null(json_object_get(n, "params"));
    json_decref(n);

    json_t *q = tm_jsonrpc_request(json_integer(INT64_MIN), "ping", NULL);
    tm_jsonrpc_classify(q, &m);
    assert_int_equal(m.kind, TM_MSG_REQUEST);
    assert_true(json_integer_value(m.id) == INT64_MIN);
    assert_string_equal(m.method, "ping");
    assert_null(m.params);
    json_decref(q);
}

static void test_dump_compact(void **state)
{
    (void)state;
    json_t *n = tm_jsonrpc_notification(
        "x/y", json_pack("{s:s,s:[i,i],s:{s:s}}", "a", "l1\nl2\r\nl3", "b", 1, 2, "c", "d", "e"));
    size_t len = 0;
    char *s = dump(n, &len);
    assert_string_equal(s, "{\"jsonrpc\":\"2.0\",\"method\":\"x/y\",\"params\":{\"a\":\"l1\\nl2\\r\\nl3\","
                           "\"b\":[1,2],\"c\":{\"d\":\"e\"}}}");
    assert_null(memchr(s, '\n', len));
    assert_null(memchr(s, '\r', len));
    free(s);
    json_decref(n);

    /* a string with NUL and U+2028 dumps as one line and round trips */
    json_t *v = json_pack("{s:s#}", "k", "a\0\n\xe2\x80\xa8z", (size_t)7);
    s = dump(v, &len);
    assert_null(memchr(s, '\n', len));
    assert_null(memchr(s, '\r', len));
    json_t *back = parse_ok(s);
    assert_true(json_equal(back, v));
    json_decref(back);
    free(s);
    json_decref(v);

    /* len may be NULL */
    v = json_pack("{s:i}", "a", 1);
    s = tm_jsonrpc_dump(v, NULL);
    assert_string_equal(s, "{\"a\":1}");
    free(s);
    json_decref(v);
}

/* Dumps of every length around the stack buffer's (2048) are whole and exact. */
static void test_dump_any_length(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 2030, 2046, 2047, 2048, 2049, 2050, 5000, 70000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *text = malloc(sizes[i] + 1);
        memset(text, 'x', sizes[i]);
        text[sizes[i]] = 0;
        json_t *v = json_string(text); /* dumps as "xxx...": 2 more bytes */
        size_t len = 0;
        char *s = dump(v, &len);
        assert_int_equal(len, sizes[i] + 2);
        assert_int_equal(strlen(s), len);
        assert_int_equal(s[0], '"');
        assert_int_equal(s[len - 1], '"');
        assert_memory_equal(s + 1, text, sizes[i]);
        free(s);
        json_decref(v);
        free(text);
    }
}

/* A message dumped in many small pieces (an array of short strings) across
 * the stack buffer's end: the same bytes json_dumps writes. */
static void test_dump_many_pieces(void **state)
{
    (void)state;
    const int counts[] = {0, 1, 200, 400, 409, 410, 2000};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        json_t *v = json_array();
        for (int k = 0; k < counts[i]; k++)
            json_array_append_new(v, json_sprintf("%c", 'a' + k % 26));
        char *want = json_dumps(v, JSON_COMPACT);
        size_t len = 0;
        char *s = dump(v, &len);
        assert_non_null(s);
        assert_string_equal(s, want);
        assert_int_equal(len, strlen(want));
        free(s);
        free(want);
        json_decref(v);
    }
}

/* The tool-answer helpers: their exact shape; NULL for text that is not UTF-8. */
static void test_result_helpers(void **state)
{
    (void)state;
    json_t *ok = tidemark_result_text("hi"), *err = tidemark_result_error("bad"), *empty = tidemark_content_text(NULL);
    size_t len;
    char *s = dump(ok, &len);
    assert_string_equal(s, "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}");
    free(s);
    s = dump(err, &len);
    assert_string_equal(s, "{\"content\":[{\"type\":\"text\",\"text\":\"bad\"}],\"isError\":true}");
    free(s);
    s = dump(empty, &len);
    assert_string_equal(s, "{\"type\":\"text\",\"text\":\"\"}");
    free(s);
    json_decref(ok);
    json_decref(err);
    json_decref(empty);
    assert_null(tidemark_content_text("a\xff"));
    assert_null(tidemark_result_text("a\xff"));
    assert_null(tidemark_result_error("a\xff"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_syntax_errors),
        cmocka_unit_test(test_parse_depth_limit),
        cmocka_unit_test(test_parse_depth_ignores_strings),
        cmocka_unit_test(test_parse_duplicate_keys),
        cmocka_unit_test(test_parse_nul_in_string),
        cmocka_unit_test(test_classify_request),
        cmocka_unit_test(test_classify_notification),
        cmocka_unit_test(test_classify_result),
        cmocka_unit_test(test_classify_error),
        cmocka_unit_test(test_classify_non_object),
        cmocka_unit_test(test_classify_jsonrpc_version),
        cmocka_unit_test(test_classify_jsonrpc_version_embedded_nul),
        cmocka_unit_test(test_classify_method),
        cmocka_unit_test(test_classify_params),
        cmocka_unit_test(test_classify_bad_ids),
        cmocka_unit_test(test_classify_result_and_error),
        cmocka_unit_test(test_id_valid),
        cmocka_unit_test(test_id_key_int64_exact),
        cmocka_unit_test(test_id_key_strings),
        cmocka_unit_test(test_id_key_bounds),
        cmocka_unit_test(test_error_builder),
        cmocka_unit_test(test_result_builder_echoes_id),
        cmocka_unit_test(test_notification_and_request_builders),
        cmocka_unit_test(test_dump_compact),
        cmocka_unit_test(test_dump_any_length),
        cmocka_unit_test(test_dump_many_pieces),
        cmocka_unit_test(test_result_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
