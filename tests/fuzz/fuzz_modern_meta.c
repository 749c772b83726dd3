/*
 * fuzz_modern_meta.c - the checks of a 2026-07-28 request before anything
 * runs (src/server/era.c): the era of a POST, the `_meta` envelope, the
 * MCP-Protocol-Version header against the body, Mcp-Method, Mcp-Name (with
 * the "=?base64?...?=" sentinel form) and the Mcp-Param-* headers a tool's
 * input schema declares with x-mcp-header. Each is compared with a
 * statement of its rule written here from the transport's text.
 *
 * Input: FLAGS (1 byte: bit i set = header i present), then LF-separated
 * header values in this order - MCP-Protocol-Version, Mcp-Method, Mcp-Name,
 * Mcp-Param-Region, Mcp-Param-Count, Mcp-Param-Flag, Mcp-Param-Zone - then
 * the JSON body (the rest). A header value ends at a NUL, as in C. Headers
 * are looked up by name case-insensitively (the server's getter is). For
 * tools/call the schema below is passed as the tool's input schema:
 *     region: string "Region", count: integer "Count", flag: boolean
 *     "Flag", nested.zone: string "Zone" (a chain of properties).
 *
 * Invariants:
 *  - tm_era_header_value(v): TIDEMARK_ENOTFOUND iff v is NULL; after
 *    trimming spaces and tabs, a byte outside 0x20-0x7E other than a tab is
 *    EINVAL; a value starting "=?base64?" and ending "?=" is strict padded
 *    standard Base64 of the output (else EINVAL); any other value is the
 *    output as is. The output is NUL-terminated at its length.
 *  - tm_era_modern(h, body) is 1 iff h is "2026-07-28" or the body's
 *    _meta version is a string that is not a session-era version.
 *  - tm_era_check(request) passes (NULL) iff every rule holds: _meta is an
 *    object with a string version and an object of client capabilities;
 *    the version header is present and equals the body's version, which is
 *    2026-07-28; Mcp-Method is present, valid and equal to the method;
 *    for tools/call and prompts/get with a string params.name, and
 *    resources/read with a string params.uri, Mcp-Name decoded equals it;
 *    for tools/call each annotated argument that is present and not null
 *    (string, boolean as true/false, integer compared as a number) has its
 *    Mcp-Param header decoded equal to it. When it fails, the answer is a
 *    JSON-RPC error whose code and data.reason are those of a rule that
 *    does not hold (-32602 invalid_request_meta; -32020 header_missing /
 *    header_mismatch / header_invalid; -32022 unsupported_protocol_version
 *    with data.supported listing 2026-07-28), with HTTP status 400, and the
 *    request's id.
 *
 * Known findings (FUZZ_KNOWN, tests/fuzz/README.md): mcp-method-sentinel,
 * integer-precision, integer-form.
 */
#include "fuzz_util.h"
#include "mcp/jsonrpc.h"
#include "server/era.h"
#include "tidemark/tidemark.h"

#include <strings.h>

#define NHDR 7
static const char *const HDR_NAMES[NHDR] = {"MCP-Protocol-Version", "Mcp-Method", "Mcp-Name",
                                            "Mcp-Param-Region", "Mcp-Param-Count",
                                            "Mcp-Param-Flag", "Mcp-Param-Zone"};
enum { H_PV, H_METHOD, H_NAME, H_REGION, H_COUNT, H_FLAG, H_ZONE };

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"},"
    "\"count\":{\"type\":\"integer\",\"x-mcp-header\":\"Count\"},"
    "\"flag\":{\"type\":\"boolean\",\"x-mcp-header\":\"Flag\"},"
    "\"query\":{\"type\":\"string\"},"
    "\"nested\":{\"type\":\"object\",\"properties\":{"
    "\"zone\":{\"type\":\"string\",\"x-mcp-header\":\"Zone\"}}}}}";

typedef struct headers {
    char *v[NHDR]; /* NULL: absent */
} headers;

static const char *get_header(void *ud, const char *name)
{
    headers *h = ud;
    for (int i = 0; i < NHDR; i++)
        if (strcasecmp(name, HDR_NAMES[i]) == 0)
            return h->v[i];
    return NULL;
}

/* ---- the value rule, stated here ------------------------------------------------- */

static int std_six(unsigned char c)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(a, c) : NULL;
    return p ? (int)(p - a) : -1;
}

/* Strict padded Base64: 4k characters (k >= 1), '=' only as the last one or
 * two, the bits after the last whole byte zero. 1 and the bytes, else 0. */
static int ref_b64(const char *s, size_t n, unsigned char *out, size_t *outlen)
{
    if (n == 0 || n % 4)
        return 0;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    size_t m = n - pad, bits = m * 6, whole = bits / 8;
    if (bits - whole * 8 >= 6) /* padding only where a byte is short */
        return 0;
    memset(out, 0, whole + 1);
    for (size_t i = 0; i < m; i++) {
        int v = std_six((unsigned char)s[i]);
        if (v < 0)
            return 0;
        for (int b = 5; b >= 0; b--) {
            size_t bit = i * 6 + (size_t)(5 - b);
            if ((v >> b) & 1) {
                if (bit / 8 >= whole)
                    return 0;
                out[bit / 8] |= (unsigned char)(0x80 >> (bit % 8));
            }
        }
    }
    *outlen = whole;
    return 1;
}

typedef enum { V_ABSENT, V_INVALID, V_OK } vstate;

/* What a header value means. OUT bytes (size >= strlen(raw) + 1), *n. */
static vstate ref_value(const char *raw, int decode, unsigned char *out, size_t *n)
{
    if (!raw)
        return V_ABSENT;
    while (*raw == ' ' || *raw == '\t')
        raw++;
    size_t len = strlen(raw);
    while (len && (raw[len - 1] == ' ' || raw[len - 1] == '\t'))
        len--;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)raw[i];
        if ((c < 0x20 && c != '\t') || c > 0x7e)
            return V_INVALID;
    }
    if (decode && len >= 11 && memcmp(raw, "=?base64?", 9) == 0 &&
        memcmp(raw + len - 2, "?=", 2) == 0)
        return ref_b64(raw + 9, len - 11, out, n) ? V_OK : V_INVALID;
    memcpy(out, raw, len);
    *n = len;
    return V_OK;
}

static void check_header_value(const char *raw)
{
    size_t cap = raw ? strlen(raw) + 1 : 1, wn = 0, n = 99;
    unsigned char *want = malloc(cap);
    FUZZ_CHECK(want != NULL, "oom");
    vstate w = ref_value(raw, 1, want, &wn);
    char *out = NULL;
    int rc = tm_era_header_value(raw, &out, &n);
    const char *shown = raw ? fz_show(raw, strlen(raw)) : "(null)";
    if (w == V_ABSENT)
        FUZZ_CHECK(rc == TIDEMARK_ENOTFOUND && !out, "absent header: %d", rc);
    else if (w == V_INVALID)
        FUZZ_CHECK(rc == TIDEMARK_EINVAL && !out, "invalid value accepted (%d): %s", rc, shown);
    else
        FUZZ_CHECK(rc == 0 && out && n == wn && memcmp(out, want, n) == 0 && out[n] == '\0',
                   "value %s: rc %d, %zu bytes (want %zu)", shown, rc, rc ? 0 : n, wn);
    free(out);
    free(want);
}

/* ---- the request rules, stated here ---------------------------------------------- */

/* What may answer: the (code, reason) of each rule that fails. broken
 * counts the rules that fail; known those of them a known finding lets the
 * server pass, with its name; refuse_known the rules that hold but a known
 * finding makes the server refuse. */
#define MAX_FAIL 24
typedef struct fails {
    int n, broken, known, refuse_known;
    int refuse_ok; /* a rule that may be read either way: a refusal is also right */
    const char *known_name;
    struct {
        int code;
        const char *reason;
    } f[MAX_FAIL];
} fails;

static void fail_add(fails *fs, int code, const char *reason)
{
    if (fs->n < MAX_FAIL) {
        fs->f[fs->n].code = code;
        fs->f[fs->n].reason = reason;
        fs->n++;
    }
}

static void known(fails *fs, const char *name, int refuse)
{
    if (refuse)
        fs->refuse_known++;
    else
        fs->known++;
    fs->known_name = name;
}

static int sentinel_form(const char *raw)
{
    if (!raw)
        return 0;
    while (*raw == ' ' || *raw == '\t')
        raw++;
    size_t len = strlen(raw);
    while (len && (raw[len - 1] == ' ' || raw[len - 1] == '\t'))
        len--;
    return len >= 11 && memcmp(raw, "=?base64?", 9) == 0 && memcmp(raw + len - 2, "?=", 2) == 0;
}

/* A header mirroring bytes body[0..blen). decode: the sentinel form applies
 * (Mcp-Name, Mcp-Param-*); Mcp-Method's value is compared as sent. */
static void rule_text(fails *fs, const char *raw, int decode, const char *body, size_t blen)
{
    size_t cap = (raw ? strlen(raw) : 0) + 1, n = 0;
    unsigned char *v = malloc(cap);
    FUZZ_CHECK(v != NULL, "oom");
    vstate s = ref_value(raw, decode, v, &n);
    int broken = 1;
    if (s == V_ABSENT) {
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_missing");
    } else if (s == V_INVALID) {
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_invalid");
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
    } else if (n != blen || memcmp(v, body, n) != 0) {
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
    } else {
        broken = 0;
    }
    fs->broken += broken;
    if (!decode && sentinel_form(raw)) {
        /* The server decodes a sentinel in Mcp-Method too: its answer may
         * differ either way; the refusal reasons it may give are listed. */
        unsigned char *d = malloc(cap);
        size_t dn = 0;
        FUZZ_CHECK(d != NULL, "oom");
        vstate ds = ref_value(raw, 1, d, &dn);
        int passes = ds == V_OK && dn == blen && memcmp(d, body, dn) == 0;
        if (broken && passes)
            known(fs, "mcp-method-sentinel", 0);
        if (broken && !passes) /* refused either way, maybe as "invalid" */
            fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_invalid");
        if (!broken && !passes) {
            known(fs, "mcp-method-sentinel", 1);
            fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
            fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_invalid");
        }
        free(d);
    }
    free(v);
}

/* A JSON number (RFC 8259 grammar) whose exact value is the integer want:
 * 1 yes, 0 no, -1 not a JSON number. */
static int exact_integer(const char *s, size_t n, long long want)
{
    char digits[400];
    size_t nd = 0, i = 0;
    long exp = 0;
    int neg = 0;
    if (i < n && s[i] == '-')
        neg = 1, i++;
    if (i >= n || s[i] < '0' || s[i] > '9' || (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' &&
                                               s[i + 1] <= '9'))
        return -1;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        if (nd < sizeof digits - 1)
            digits[nd++] = s[i];
        else
            return -1;
    if (i < n && s[i] == '.') {
        size_t f0 = ++i;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, exp--)
            if (nd < sizeof digits - 1)
                digits[nd++] = s[i];
            else
                return -1;
        if (i == f0)
            return -1;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = i < n && s[i] == '-';
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t e0 = i;
        long e = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
            e = e < 100000 ? e * 10 + (s[i] - '0') : e;
        if (i == e0)
            return -1;
        exp += eneg ? -e : e;
    }
    if (i != n)
        return -1;
    size_t lead = 0;
    while (lead < nd && digits[lead] == '0')
        lead++;
    if (lead == nd)
        return want == 0; /* zero, whatever its sign or exponent */
    while (nd > lead && digits[nd - 1] == '0')
        nd--, exp++;
    if (exp < 0 || exp > 40)
        return 0;
    char val[450], w[32];
    size_t vn = 0;
    memcpy(val, digits + lead, nd - lead);
    vn = nd - lead;
    for (long k = 0; k < exp; k++)
        val[vn++] = '0';
    val[vn] = '\0';
    snprintf(w, sizeof w, "%lld", want);
    const char *wd = w[0] == '-' ? w + 1 : w;
    return neg == (want < 0) && strcmp(val, wd) == 0;
}

static void rule_integer(fails *fs, const char *raw, long long want)
{
    size_t cap = (raw ? strlen(raw) : 0) + 1, n = 0;
    unsigned char *v = malloc(cap + 1);
    FUZZ_CHECK(v != NULL, "oom");
    vstate s = ref_value(raw, 1, v, &n);
    if (s == V_ABSENT) {
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_missing");
        fs->broken++;
    } else if (s == V_INVALID) {
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_invalid");
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
        fs->broken++;
    } else {
        v[n] = '\0';
        int nul = memchr(v, '\0', n) != NULL;
        int ex = nul ? -1 : exact_integer((const char *)v, n, want);
        char *end = NULL;
        double d = n ? strtod((const char *)v, &end) : 0;
        int as_double = n && end && *end == '\0' && d == (double)want;
        /* Other decimal spellings of the same number ("42.", "+42", "4.2e+1")
         * are a lenient reading of "compared as numbers": either answer. */
        int hex = memchr(v, 'x', n) || memchr(v, 'X', n);
        int lenient = ex == -1 && as_double && !nul && !hex;
        if (ex != 1 && !lenient) { /* not that number */
            fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
            fs->broken++;
            if (as_double) /* bytes after a NUL, hex, or beyond a double's precision */
                known(fs, ex == 0 ? "integer-precision" : "integer-form", 0);
        } else if (lenient) {
            fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
            fs->refuse_ok++;
        }
    }
    free(v);
}

/* One annotated argument, as the server reads it: string, boolean, integer
 * (an integral JSON number written as 4e2 or 400.0 included; other values
 * are not mirrored). */
static void rule_value(fails *fs, const char *raw, const json_t *v)
{
    if (json_is_string(v))
        rule_text(fs, raw, 1, json_string_value(v), json_string_length(v));
    else if (json_is_boolean(v))
        rule_text(fs, raw, 1, json_is_true(v) ? "true" : "false", json_is_true(v) ? 4 : 5);
    else if (json_is_integer(v))
        rule_integer(fs, raw, (long long)json_integer_value(v));
    else if (json_is_real(v) && json_real_value(v) > -9.2e18 && json_real_value(v) < 9.2e18 &&
             json_real_value(v) == (double)(long long)json_real_value(v))
        rule_integer(fs, raw, (long long)json_real_value(v)); /* 4e2 is the integer 400 */
}

static void rule_params(fails *fs, headers *h, const json_t *args)
{
    if (!json_is_object(args))
        return;
    rule_value(fs, h->v[H_REGION], json_object_get(args, "region"));
    rule_value(fs, h->v[H_COUNT], json_object_get(args, "count"));
    rule_value(fs, h->v[H_FLAG], json_object_get(args, "flag"));
    const json_t *nested = json_object_get(args, "nested");
    if (json_is_object(nested))
        rule_value(fs, h->v[H_ZONE], json_object_get(nested, "zone"));
}

static void ref_rules(const tm_msg *m, headers *h, int call, fails *fs)
{
    json_t *meta = json_object_get(m->params, "_meta");
    const char *bv = json_string_value(json_object_get(meta, TM_META_VERSION));
    if (!json_is_object(meta) || !bv || !json_is_object(json_object_get(meta, TM_META_CAPS))) {
        fail_add(fs, TM_RPC_INVALID_PARAMS, "invalid_request_meta");
        fs->broken++;
        return; /* nothing else is defined without the version */
    }
    size_t bvn = json_string_length(json_object_get(meta, TM_META_VERSION));
    unsigned char *pv = malloc((h->v[H_PV] ? strlen(h->v[H_PV]) : 0) + 1);
    size_t pn = 0;
    FUZZ_CHECK(pv != NULL, "oom");
    vstate ps = ref_value(h->v[H_PV], 0, pv, &pn);
    if (ps == V_ABSENT)
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_missing");
    else if (ps == V_INVALID || pn != bvn || memcmp(pv, bv, pn) != 0)
        fail_add(fs, TM_RPC_HEADER_MISMATCH, "header_mismatch");
    fs->broken += ps != V_OK || pn != bvn || memcmp(pv, bv, pn) != 0;
    free(pv);
    if (bvn != strlen(TM_MODERN_VERSION) || strcmp(bv, TM_MODERN_VERSION) != 0) {
        fail_add(fs, TM_RPC_UNSUPPORTED_VERSION, "unsupported_protocol_version");
        fs->broken++;
    }
    rule_text(fs, h->v[H_METHOD], 0, m->method, strlen(m->method));
    const json_t *ns = NULL;
    if (strcmp(m->method, "tools/call") == 0 || strcmp(m->method, "prompts/get") == 0)
        ns = json_object_get(m->params, "name");
    else if (strcmp(m->method, "resources/read") == 0)
        ns = json_object_get(m->params, "uri");
    if (json_is_string(ns))
        rule_text(fs, h->v[H_NAME], 1, json_string_value(ns), json_string_length(ns));
    if (call)
        rule_params(fs, h, json_object_get(m->params, "arguments"));
}

static void check_request(const tm_msg *m, headers *h)
{
    int call = strcmp(m->method, "tools/call") == 0;
    json_t *schema = call ? json_loads(SCHEMA, 0, NULL) : NULL;
    FUZZ_CHECK(!call || schema, "schema");
    fails fs = {0};
    ref_rules(m, h, call, &fs);
    unsigned status = 0;
    json_t *e = tm_era_check(m, get_header, h, schema, &status);
    if (!e) {
        /* Passing with a rule broken is a finding, unless a known one lets
         * every broken rule pass. */
        if (fs.broken > fs.known)
            FUZZ_CHECK(0, "passed with %d broken rule(s), first %d %s", fs.broken,
                       fs.n ? fs.f[0].code : 0, fs.n ? fs.f[0].reason : "");
        FUZZ_KNOWN(fs.known_name ? fs.known_name : "?", fs.broken == 0,
                   "passed with %d broken rule(s), first %d %s", fs.broken, fs.f[0].code,
                   fs.f[0].reason);
    } else {
        json_t *err = json_object_get(e, "error");
        int code = (int)json_integer_value(json_object_get(err, "code"));
        const char *reason = json_string_value(json_object_get(json_object_get(err, "data"),
                                                               "reason"));
        if (fs.broken == 0 && fs.refuse_ok == 0) {
            FUZZ_CHECK(fs.refuse_known > 0, "refused a valid request: %d %s", code,
                       reason ? reason : "-");
            FUZZ_KNOWN(fs.known_name, 0, "refused a valid request: %d %s", code,
                       reason ? reason : "-");
        }
        int listed = 0;
        for (int i = 0; i < fs.n; i++)
            listed |= fs.f[i].code == code && reason && strcmp(fs.f[i].reason, reason) == 0;
        FUZZ_CHECK(listed, "answer %d %s is no broken rule's (first: %d %s)", code,
                   reason ? reason : "-", fs.n ? fs.f[0].code : 0, fs.n ? fs.f[0].reason : "-");
        FUZZ_CHECK(status == 400, "HTTP status %u", status);
        FUZZ_CHECK(json_equal(json_object_get(e, "id"), m->id ? m->id : json_null()), "id");
        if (code == TM_RPC_UNSUPPORTED_VERSION) {
            json_t *sup = json_object_get(json_object_get(err, "data"), "supported");
            int has = 0;
            for (size_t i = 0; i < json_array_size(sup); i++)
                has |= json_is_string(json_array_get(sup, i)) &&
                       strcmp(json_string_value(json_array_get(sup, i)), TM_MODERN_VERSION) == 0;
            FUZZ_CHECK(has, "supported does not list %s", TM_MODERN_VERSION);
        }
        json_decref(e);
    }
    json_decref(schema);
}

static void check_era(const char *pv, json_t *root)
{
    const char *bv = NULL;
    if (json_is_object(root)) {
        json_t *meta = json_object_get(json_object_get(root, "params"), "_meta");
        bv = json_string_value(json_object_get(meta, TM_META_VERSION));
    }
    const char *got = tm_era_body_version(root);
    FUZZ_CHECK(got == bv || (got && bv && strcmp(got, bv) == 0), "body version");
    int want = (pv && strcmp(pv, TM_MODERN_VERSION) == 0) ||
               (bv && !tm_protocol_version_supported(bv));
    FUZZ_CHECK(tm_era_modern(pv, root) == want, "era of %s", pv ? fz_show(pv, strlen(pv)) : "-");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    int flags = fz_u8(&f);
    headers h = {{0}};
    for (int i = 0; i < NHDR; i++) {
        size_t n = 0;
        const char *v = fz_field(&f, '\n', &n);
        if (flags & (1 << i))
            h.v[i] = fz_dup(v ? v : "", n);
    }
    for (int i = 0; i < NHDR; i++)
        check_header_value(h.v[i]);
    json_t *root = NULL;
    char err[128];
    if (tm_jsonrpc_parse((const char *)f.p, f.n, &root, err, sizeof err) == 0) {
        check_era(h.v[H_PV], root);
        if (json_is_object(root)) {
            tm_msg m;
            tm_jsonrpc_classify(root, &m);
            if (m.kind == TM_MSG_REQUEST && m.method)
                check_request(&m, &h);
        }
        json_decref(root);
    }
    for (int i = 0; i < NHDR; i++)
        free(h.v[i]);
    return 0;
}
