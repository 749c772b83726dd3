/*
 * fuzz_jsonrpc.c - JSON-RPC decode (src/mcp/jsonrpc.c): tm_jsonrpc_parse,
 * tm_jsonrpc_classify, tm_jsonrpc_id_key.
 *
 * Input: a request body, as a POST would carry it. Invariants:
 *  - parse: success gives a value nested at most 64 deep that serialises
 *    and parses back to an equal value; failure gives no value and a
 *    message.
 *  - classify: the kind agrees with an independent statement of the
 *    JSON-RPC 2.0 rules (valid_message below), every field of the result is
 *    consistent with the kind (a request has a non-empty method, an id, no
 *    result; a notification has no id member; ...), and re-classifying the
 *    re-parsed text gives the same kind and reason.
 *  - id keys: the key of every valid id within TM_ID_MAX_BYTES fits in
 *    TM_ID_KEY_MAX and decodes back to exactly that id (so the key is
 *    injective); an integer's key is "i:" and its decimal text; a smaller
 *    buffer gives TIDEMARK_ERANGE or the same key, never a truncated one;
 *    two ids of one input (the elements of a batch) have the same key
 *    exactly when they are the same id.
 */
#include "fuzz_util.h"
#include "mcp/jsonrpc.h"
#include "tidemark/tidemark.h"

#include <errno.h>
#include <inttypes.h>

#define MAX_IDS 64

static size_t depth_of(const json_t *v)
{
    size_t d = 0, i;
    const char *k;
    json_t *e;
    if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            size_t x = depth_of(e);
            if (x > d)
                d = x;
        }
        return d + 1;
    }
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, e) {
            size_t x = depth_of(e);
            if (x > d)
                d = x;
        }
        return d + 1;
    }
    return 0;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hexval(char c)
{
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* Decode a key back to the id it names; NULL when it is not a well-formed
 * key. The escape rules are the header's: "s:" then the bytes with NUL and
 * '%' as %00 / %25; "i:" then the decimal integer. */
static json_t *key_decode(const char *key)
{
    size_t n = strlen(key);
    if (n >= 2 && key[0] == 'i' && key[1] == ':') {
        char *end;
        errno = 0;
        long long v = strtoll(key + 2, &end, 10);
        if (errno || *end || end == key + 2)
            return NULL;
        return json_integer((json_int_t)v);
    }
    if (n < 2 || key[0] != 's' || key[1] != ':')
        return NULL;
    char *bytes = malloc(n);
    size_t o = 0;
    for (size_t i = 2; i < n; i++) {
        if (key[i] == '%') {
            if (i + 2 >= n || !is_hex(key[i + 1]) || !is_hex(key[i + 2])) {
                free(bytes);
                return NULL;
            }
            int c = hexval(key[i + 1]) * 16 + hexval(key[i + 2]);
            if (c != 0 && c != '%') { /* only these two are ever escaped */
                free(bytes);
                return NULL;
            }
            bytes[o++] = (char)c;
            i += 2;
        } else {
            bytes[o++] = key[i];
        }
    }
    json_t *s = json_stringn_nocheck(bytes, o);
    free(bytes);
    return s;
}

static int same_id(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b))
        return json_integer_value(a) == json_integer_value(b);
    if (json_is_string(a) && json_is_string(b))
        return json_string_length(a) == json_string_length(b) &&
               memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    return 0;
}

static int id_within_limit(const json_t *id)
{
    return json_is_integer(id) || (json_is_string(id) && json_string_length(id) <= TM_ID_MAX_BYTES);
}

/* Checks the key of one id; returns the key (malloc'ed) or NULL when the
 * id is not valid or not within the limit. */
static char *check_id_key(const json_t *id, size_t salt)
{
    static char key[TM_ID_KEY_MAX];
    int rc = tm_jsonrpc_id_key(id, key, sizeof key);
    if (!tm_jsonrpc_id_valid(id)) {
        FUZZ_CHECK(rc == TIDEMARK_EINVAL, "invalid id gave key rc %d", rc);
        return NULL;
    }
    if (!id_within_limit(id)) {
        /* Too long for TM_ID_KEY_MAX is allowed, but never a truncated key. */
        if (rc == 0) {
            json_t *back = key_decode(key);
            FUZZ_CHECK(back && same_id(back, id), "over-long id gave a key that is not its own");
            json_decref(back);
        } else {
            FUZZ_CHECK(rc == TIDEMARK_ERANGE, "rc %d", rc);
        }
        return NULL;
    }
    FUZZ_CHECK(rc == 0, "a valid id within TM_ID_MAX_BYTES gave rc %d", rc);
    size_t klen = strlen(key);
    FUZZ_CHECK(klen < sizeof key, "key not NUL-terminated");
    json_t *back = key_decode(key);
    FUZZ_CHECK(back != NULL, "key [%s] is not well-formed", fz_show(key, klen));
    FUZZ_CHECK(same_id(back, id), "key [%s] names another id", fz_show(key, klen));
    json_decref(back);
    if (json_is_integer(id)) {
        char want[32];
        snprintf(want, sizeof want, "i:%" JSON_INTEGER_FORMAT, json_integer_value(id));
        FUZZ_CHECK(strcmp(want, key) == 0, "integer key [%s], want [%s]", key, want);
        /* The id's JSON text is its decimal text too. */
        char *txt = json_dumps(id, JSON_ENCODE_ANY);
        FUZZ_CHECK(txt && strcmp(txt, want + 2) == 0, "integer id dumps as [%s]", txt ? txt : "");
        free(txt);
    }
    /* Smaller buffers: ERANGE or the very same key, never a prefix. */
    size_t sizes[] = {1, 2, 3, klen, klen + 1, 1 + salt % (klen + 2)};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        if (n == 0 || n > sizeof key)
            continue;
        char *small = malloc(n);
        int r = tm_jsonrpc_id_key(id, small, n);
        if (n > klen)
            FUZZ_CHECK(r == 0 && strcmp(small, key) == 0, "buffer %zu: rc %d", n, r);
        else
            FUZZ_CHECK(r == TIDEMARK_ERANGE, "buffer %zu for a key of %zu: rc %d", n, klen, r);
        free(small);
    }
    return fz_dup(key, klen);
}

/* The JSON-RPC 2.0 rules as tm_jsonrpc_classify documents them, stated
 * independently: 1 when v is a valid request, notification, result or
 * error. */
static int valid_message(const json_t *v)
{
    if (!json_is_object(v))
        return 0;
    json_t *ver = json_object_get(v, "jsonrpc");
    if (!json_is_string(ver) || json_string_length(ver) != 3 || memcmp(json_string_value(ver), "2.0", 3))
        return 0;
    json_t *id = json_object_get(v, "id"), *method = json_object_get(v, "method");
    json_t *result = json_object_get(v, "result"), *error = json_object_get(v, "error");
    json_t *params = json_object_get(v, "params");
    int id_ok = (json_is_integer(id) || json_is_string(id)) && id_within_limit(id);
    if (method) {
        if (!json_is_string(method) || json_string_length(method) == 0 ||
            memchr(json_string_value(method), 0, json_string_length(method)))
            return 0;
        if (result || error)
            return 0;
        if (params && !json_is_object(params) && !json_is_array(params))
            return 0;
        return !id || id_ok;
    }
    if ((result != NULL) == (error != NULL) || !id_ok)
        return 0;
    if (error)
        return json_is_object(error) && json_is_integer(json_object_get(error, "code")) &&
               json_is_string(json_object_get(error, "message"));
    return 1;
}

static void check_classify(json_t *v)
{
    tm_msg m;
    memset(&m, 0xA5, sizeof m); /* classify must set every field */
    tm_jsonrpc_classify(v, &m);
    FUZZ_CHECK(m.raw == v, "raw");
    int valid = valid_message(v);
    FUZZ_CHECK(valid == (m.kind != TM_MSG_INVALID), "kind %d but the rules say %s (why %s)", m.kind,
               valid ? "valid" : "invalid", m.kind == TM_MSG_INVALID && m.why ? m.why : "-");
    json_t *idm = json_is_object(v) ? json_object_get(v, "id") : NULL;
    json_t *method = json_is_object(v) ? json_object_get(v, "method") : NULL;
    switch (m.kind) {
    case TM_MSG_REQUEST:
    case TM_MSG_NOTIFICATION:
        FUZZ_CHECK(m.method && method && m.method == json_string_value(method) && m.method[0],
                   "method");
        FUZZ_CHECK(m.params == json_object_get(v, "params"), "params");
        FUZZ_CHECK(!m.result && !m.error && !m.why && !m.detail, "stray fields");
        if (m.kind == TM_MSG_REQUEST)
            FUZZ_CHECK(idm && m.id == idm && tm_jsonrpc_id_valid(m.id), "request id");
        else
            FUZZ_CHECK(!idm && !m.id, "a notification has no id");
        break;
    case TM_MSG_RESULT:
        FUZZ_CHECK(m.result && m.result == json_object_get(v, "result") && !m.error, "result");
        FUZZ_CHECK(!m.method && !method && m.id == idm && tm_jsonrpc_id_valid(m.id), "result id");
        FUZZ_CHECK(!m.why && !m.detail, "stray why");
        break;
    case TM_MSG_ERROR:
        FUZZ_CHECK(m.error && m.error == json_object_get(v, "error") && !m.result, "error");
        FUZZ_CHECK(json_is_integer(json_object_get(m.error, "code")) &&
                       json_is_string(json_object_get(m.error, "message")),
                   "error shape");
        FUZZ_CHECK(!m.method && !method && m.id == idm && tm_jsonrpc_id_valid(m.id), "error id");
        FUZZ_CHECK(!m.why && !m.detail, "stray why");
        break;
    case TM_MSG_INVALID:
        FUZZ_CHECK(m.why && m.why[0] && m.detail && m.detail[0], "an invalid message has a reason");
        /* The id is kept for the error answer when it is a valid id. */
        FUZZ_CHECK(m.id == (tm_jsonrpc_id_valid(idm) ? idm : NULL), "invalid message id");
        /* 0 stands for invalid request; else a JSON-RPC reserved code. */
        FUZZ_CHECK(m.code == 0 || (m.code <= -32000 && m.code >= -32768), "code %d", m.code);
        break;
    default:
        FUZZ_CHECK(0, "kind %d out of range", m.kind);
    }
    if (m.kind != TM_MSG_INVALID)
        FUZZ_CHECK(m.code == 0, "a valid message with code %d", m.code);

    /* The same message after a serialise/parse round trip classifies alike. */
    size_t len = 0;
    char *txt = tm_jsonrpc_dump(v, &len);
    FUZZ_CHECK(txt != NULL, "dump failed");
    json_t *again = NULL;
    char err[160];
    FUZZ_CHECK(tm_jsonrpc_parse(txt, len, &again, err, sizeof err) == 0, "re-parse: %s", err);
    FUZZ_CHECK(json_equal(v, again), "round trip changed the value: %s", fz_show(txt, len));
    tm_msg m2;
    tm_jsonrpc_classify(again, &m2);
    FUZZ_CHECK(m2.kind == m.kind, "kind %d after a round trip, %d before", m2.kind, m.kind);
    FUZZ_CHECK((m.why == NULL) == (m2.why == NULL) && (!m.why || strcmp(m.why, m2.why) == 0),
               "reason changed in a round trip");
    json_decref(again);
    free(txt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *root = (json_t *)1;
    char err[160] = "";
    int rc = tm_jsonrpc_parse((const char *)data, size, &root, err, sizeof err);
    if (rc != 0) {
        FUZZ_CHECK(rc == TIDEMARK_EINVAL && root == NULL && err[0], "failed parse: rc %d", rc);
        return 0;
    }
    FUZZ_CHECK(root != NULL, "no value");
    FUZZ_CHECK(depth_of(root) <= 64, "nesting %zu passed the limit", depth_of(root));

    check_classify(root);

    /* Ids: the root's and, for a batch, each element's. */
    json_t *ids[MAX_IDS];
    char *keys[MAX_IDS];
    size_t nid = 0;
    if (json_is_object(root))
        ids[nid++] = json_object_get(root, "id");
    if (json_is_array(root)) {
        size_t i;
        json_t *e;
        json_array_foreach(root, i, e) {
            if (nid == MAX_IDS)
                break;
            check_classify(e);
            ids[nid++] = json_is_object(e) ? json_object_get(e, "id") : e;
        }
    }
    for (size_t i = 0; i < nid; i++)
        keys[i] = ids[i] ? check_id_key(ids[i], size + i) : NULL;
    for (size_t i = 0; i < nid; i++)
        for (size_t j = i + 1; j < nid; j++)
            if (keys[i] && keys[j])
                FUZZ_CHECK((strcmp(keys[i], keys[j]) == 0) == same_id(ids[i], ids[j]),
                           "ids %zu and %zu: keys [%s] / [%s]", i, j, keys[i], keys[j]);
    for (size_t i = 0; i < nid; i++)
        free(keys[i]);
    json_decref(root);
    return 0;
}
