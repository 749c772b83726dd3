/* test_era.c - the era of a request and the checks of a 2026-07-28 request
 * (src/server/era.c), without a server: which POSTs are modern, the _meta
 * check, version header against body (-32020) and unsupported versions
 * (-32022 with requested / supported), Mcp-Method, Mcp-Name (trimmed, Base64
 * sentinel, strict padding and alphabet), and the Mcp-Param-* headers of
 * x-mcp-header properties (strings, integers compared as numbers, booleans,
 * nested properties, absent or null values not expected). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/era.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct hdrs {
    const char *k[8], *v[8];
} hdrs;

static const char *get(void *ud, const char *name)
{
    hdrs *h = ud;
    for (int i = 0; i < 8 && h->k[i]; i++)
        if (strcasecmp(h->k[i], name) == 0)
            return h->v[i];
    return NULL;
}

static json_t *body(const char *method, const char *params_json)
{
    json_t *p = json_loads(params_json, 0, NULL);
    assert_non_null(p);
    if (!json_object_get(p, "_meta"))
        json_object_set_new(p, "_meta", json_pack("{s:s,s:{}}", TM_META_VERSION, TM_MODERN_VERSION,
                                                  TM_META_CAPS));
    return json_pack("{s:s,s:i,s:s,s:o}", "jsonrpc", "2.0", "id", 7, "method", method, "params", p);
}

/* Run the check; the error's code and reason (0 / NULL when it passed). */
static int check(json_t *root, hdrs *h, const char *schema, const char **reason)
{
    tm_msg m;
    tm_jsonrpc_classify(root, &m);
    json_t *s = schema ? json_loads(schema, 0, NULL) : NULL;
    unsigned status = 0;
    json_t *e = tm_era_check(&m, get, h, s, &status);
    json_decref(s);
    static char why[64];
    *reason = NULL;
    int code = 0;
    if (e) {
        assert_int_equal(status, 400);
        assert_int_equal(json_integer_value(json_object_get(e, "id")), 7);
        code = (int)json_integer_value(json_object_get(json_object_get(e, "error"), "code"));
        const char *r = json_string_value(
            json_object_get(json_object_get(json_object_get(e, "error"), "data"), "reason"));
        snprintf(why, sizeof why, "%s", r ? r : "");
        *reason = why;
        json_decref(e);
    }
    return code;
}

static void test_which_era(void **st)
{
    (void)st;
    json_t *modern = body("tools/list", "{}");
    json_t *legacy = json_pack("{s:s,s:i,s:s}", "jsonrpc", "2.0", "id", 1, "method", "ping");
    assert_true(tm_era_modern("2026-07-28", legacy));
    assert_true(tm_era_modern(NULL, modern));
    assert_true(tm_era_modern("2025-11-25", modern)); /* then refused as a mismatch */
    assert_false(tm_era_modern(NULL, legacy));
    assert_false(tm_era_modern("2025-11-25", legacy));
    assert_false(tm_era_modern("1999-01-01", legacy)); /* the 2025 refusal stays */
    json_t *old_meta = body("ping", "{\"_meta\":{\"" TM_META_VERSION "\":\"2025-11-25\"}}");
    assert_false(tm_era_modern("2025-11-25", old_meta));
    json_decref(old_meta);
    json_decref(modern);
    json_decref(legacy);
}

static void test_meta_and_version(void **st)
{
    (void)st;
    const char *why;
    hdrs ok = {{"MCP-Protocol-Version", "Mcp-Method"}, {" 2026-07-28 ", "tools/list"}};
    json_t *b = body("tools/list", "{}");
    assert_int_equal(check(b, &ok, NULL, &why), 0);
    json_decref(b);
    b = body("tools/list", "{\"_meta\":{\"" TM_META_VERSION "\":\"2026-07-28\"}}");
    assert_int_equal(check(b, &ok, NULL, &why), TM_RPC_INVALID_PARAMS);
    assert_string_equal(why, "invalid_request_meta");
    json_decref(b);
    b = body("tools/list", "{\"_meta\":{\"" TM_META_CAPS "\":{}}}");
    assert_int_equal(check(b, &ok, NULL, &why), TM_RPC_INVALID_PARAMS);
    json_decref(b);
    hdrs none = {{"Mcp-Method"}, {"tools/list"}};
    b = body("tools/list", "{}");
    assert_int_equal(check(b, &none, NULL, &why), TM_RPC_HEADER_MISMATCH);
    assert_string_equal(why, "header_missing");
    json_decref(b);
    hdrs v999 = {{"MCP-Protocol-Version", "Mcp-Method"}, {"v999", "tools/list"}};
    b = body("tools/list", "{\"_meta\":{\"" TM_META_VERSION "\":\"v999\",\"" TM_META_CAPS "\":{}}}");
    tm_msg m;
    tm_jsonrpc_classify(b, &m);
    unsigned status;
    json_t *e = tm_era_check(&m, get, &v999, NULL, &status);
    json_t *data = json_object_get(json_object_get(e, "error"), "data");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "error"), "code")),
                     TM_RPC_UNSUPPORTED_VERSION);
    assert_string_equal(json_string_value(json_object_get(data, "requested")), "v999");
    assert_int_equal(json_array_size(json_object_get(data, "supported")), 4);
    json_decref(e);
    assert_int_equal(check(b, &ok, NULL, &why), TM_RPC_HEADER_MISMATCH); /* 2026 vs v999 */
    json_decref(b);
}

static void test_method_and_name(void **st)
{
    (void)st;
    const char *why;
    json_t *b = body("tools/call", "{\"name\":\"get weather\",\"arguments\":{}}");
    struct {
        const char *method, *name;
        int code;
        const char *reason;
    } cases[] = {
        {"tools/call", "=?base64?Z2V0IHdlYXRoZXI=?=", 0, NULL},
        {"tools/call", "get weather", 0, NULL},
        {"tools/call", "  get weather\t", 0, NULL},
        {"tools/call", NULL, TM_RPC_HEADER_MISMATCH, "header_missing"},
        {"tools/call", "get_weather", TM_RPC_HEADER_MISMATCH, "header_mismatch"},
        {"tools/call", "=?base64?Z2V0IHdlYXRoZXI?=", TM_RPC_HEADER_MISMATCH, "header_invalid"},
        {"tools/call", "=?base64?Z2V0!HdlYXRoZXI=?=", TM_RPC_HEADER_MISMATCH, "header_invalid"},
        {"TOOLS/CALL", "get weather", TM_RPC_HEADER_MISMATCH, "header_mismatch"},
        {NULL, "get weather", TM_RPC_HEADER_MISMATCH, "header_missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hdrs h = {{"MCP-Protocol-Version"}, {"2026-07-28"}};
        int n = 1;
        if (cases[i].method) {
            h.k[n] = "mcp-method";
            h.v[n++] = cases[i].method;
        }
        if (cases[i].name) {
            h.k[n] = "MCP-NAME";
            h.v[n++] = cases[i].name;
        }
        assert_int_equal(check(b, &h, NULL, &why), cases[i].code);
        if (cases[i].reason)
            assert_string_equal(why, cases[i].reason);
    }
    json_decref(b);
}

static void test_params(void **st)
{
    (void)st;
    const char *why;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"region\":{\"type\":\"string\",\"x-mcp-header\":"
        "\"Region\"},\"n\":{\"type\":\"integer\",\"x-mcp-header\":\"N\"},\"on\":{\"type\":"
        "\"boolean\",\"x-mcp-header\":\"On\"},\"deep\":{\"type\":\"object\",\"properties\":{"
        "\"zone\":{\"type\":\"string\",\"x-mcp-header\":\"Zone\"}}}}}";
    json_t *b = body("tools/call", "{\"name\":\"t\",\"arguments\":{\"region\":\"Hello, \\u4e16\","
                                   "\"n\":42,\"on\":true,\"deep\":{\"zone\":\"z1\"}}}");
    hdrs h = {{"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Param-Region", "mcp-param-n",
               "Mcp-Param-On", "Mcp-Param-Zone"},
              {"2026-07-28", "tools/call", "t", "=?base64?SGVsbG8sIOS4lg==?=", "42.0", "true", "z1"}};
    assert_int_equal(check(b, &h, schema, &why), 0);
    h.v[4] = "43";
    assert_int_equal(check(b, &h, schema, &why), TM_RPC_HEADER_MISMATCH);
    h.v[4] = "42";
    h.v[5] = "TRUE";
    assert_int_equal(check(b, &h, schema, &why), TM_RPC_HEADER_MISMATCH);
    h.v[5] = "true";
    h.k[6] = NULL; /* the nested one missing */
    assert_int_equal(check(b, &h, schema, &why), TM_RPC_HEADER_MISMATCH);
    assert_string_equal(why, "header_missing");
    json_decref(b);
    /* Absent and null values: no header expected. */
    b = body("tools/call", "{\"name\":\"t\",\"arguments\":{\"region\":null}}");
    hdrs bare = {{"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"}, {"2026-07-28", "tools/call", "t"}};
    assert_int_equal(check(b, &bare, schema, &why), 0);
    json_decref(b);
}

/* Integers compared exactly (never as doubles, never by strtod), and the
 * sentinel form never applies to Mcp-Method. */
static void test_exact(void **st)
{
    (void)st;
    const char *why;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                         "\"x-mcp-header\":\"N\"}}}";
    json_t *b = body("tools/call", "{\"name\":\"t\",\"arguments\":{\"n\":9007199254740992}}");
    struct {
        const char *v;
        int code;
    } cases[] = {{"9007199254740992", 0}, {"9007199254740992.000", 0}, {"9.007199254740992e15", 0},
                 {"9007199254740993", TM_RPC_HEADER_MISMATCH}, {"9007199254740991", TM_RPC_HEADER_MISMATCH},
                 {"0x2a", TM_RPC_HEADER_MISMATCH}, {"+9007199254740992", TM_RPC_HEADER_MISMATCH},
                 {"9007199254740992.5", TM_RPC_HEADER_MISMATCH}, {"09007199254740992", TM_RPC_HEADER_MISMATCH}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hdrs h = {{"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Param-N"},
                  {"2026-07-28", "tools/call", "t", cases[i].v}};
        assert_int_equal(check(b, &h, schema, &why), cases[i].code);
    }
    json_decref(b);
    b = body("tools/call", "{\"name\":\"t\",\"arguments\":{\"n\":42}}");
    const char *ok42[] = {"42", "42.0", "4.2e1", "420e-1", "=?base64?NDI=?="};
    for (size_t i = 0; i < sizeof ok42 / sizeof ok42[0]; i++) {
        hdrs h = {{"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Param-N"},
                  {"2026-07-28", "tools/call", "t", ok42[i]}};
        assert_int_equal(check(b, &h, schema, &why), 0);
    }
    hdrs nul = {{"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Param-N"},
                {"2026-07-28", "tools/call", "t", "=?base64?NDIAanVuaw==?="}}; /* "42\0junk" */
    assert_int_not_equal(check(b, &nul, schema, &why), 0);
    json_decref(b);
    b = body("tools/list", "{}");
    hdrs sent = {{"MCP-Protocol-Version", "Mcp-Method"}, {"2026-07-28", "=?base64?dG9vbHMvbGlzdA==?="}};
    assert_int_equal(check(b, &sent, NULL, &why), TM_RPC_HEADER_MISMATCH);
    assert_string_equal(why, "header_mismatch");
    json_decref(b);
}

static void test_header_value(void **st)
{
    (void)st;
    char *v;
    size_t n;
    assert_int_equal(tm_era_header_value(NULL, &v, &n), TIDEMARK_ENOTFOUND);
    assert_int_equal(tm_era_header_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", &v, &n), 0);
    assert_string_equal(v, "=?base64?literal?=");
    free(v);
    assert_int_equal(tm_era_header_value("=?base64?SGVsbG8=", &v, &n), 0); /* no suffix: literal */
    assert_string_equal(v, "=?base64?SGVsbG8=");
    free(v);
    assert_int_equal(tm_era_header_value("a\x01" "b", &v, &n), TIDEMARK_EINVAL);
    assert_int_equal(tm_era_header_value("=?base64?SGVsbG8h-_==?=", &v, &n), TIDEMARK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_era),    cmocka_unit_test(test_meta_and_version),
        cmocka_unit_test(test_method_and_name), cmocka_unit_test(test_params),
        cmocka_unit_test(test_exact),        cmocka_unit_test(test_header_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
