/*
 * era.c - which era a POST belongs to (2026-07-28 "modern", with its
 * metadata in every request, or the session-based 2025 versions), and the
 * checks a modern request passes before anything runs: its _meta, the
 * MCP-Protocol-Version header against the body, Mcp-Method, Mcp-Name and
 * the Mcp-Param-* headers a tool's input schema declares (x-mcp-header),
 * with the Base64 sentinel form. Pure functions over a header getter, so
 * they are tested without a server (tests/unit/test_era.c).
 */
#include "era.h"
#include "seal.h"
#include "tidemark/tidemark.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tm_era_served[] = {TM_MODERN_VERSION, TIDEMARK_PROTOCOL_2025_11_25,
                                     TIDEMARK_PROTOCOL_2025_06_18, TIDEMARK_PROTOCOL_2025_03_26,
                                     NULL};

json_t *tm_era_served_json(void)
{
    json_t *a = json_array();
    for (int i = 0; tm_era_served[i]; i++)
        json_array_append_new(a, json_string(tm_era_served[i]));
    return a;
}

static json_t *meta_of(const json_t *root)
{
    return json_object_get(json_object_get(root, "params"), "_meta");
}

const char *tm_era_body_version(const json_t *root)
{
    return json_is_object(root) ? json_string_value(json_object_get(meta_of(root), TM_META_VERSION))
                                : NULL;
}

int tm_era_modern(const char *hdr, const json_t *root)
{
    if (hdr && strcmp(hdr, TM_MODERN_VERSION) == 0)
        return 1;
    const char *b = tm_era_body_version(root);
    return b && !tm_protocol_version_supported(b);
}

/* A header value without the optional whitespace around it (RFC 9110 5.5).
 * OUT *len. NULL when absent. */
static const char *trimmed(const char *v, size_t *len)
{
    if (!v)
        return NULL;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    *len = n;
    return v;
}

static int visible_ascii(const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
            if (v[i] != '\t')
                return 0;
    return 1;
}

/* Standard Base64 with its padding, strictly: length a multiple of 4, only
 * the alphabet, '=' only as the last one or two. */
static int b64_std_decode(const char *s, size_t n, char **out, size_t *outlen)
{
    if (n == 0 || n % 4)
        return TIDEMARK_EINVAL;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    char *u = malloc(n + 1);
    if (!u)
        return TIDEMARK_ENOMEM;
    for (size_t i = 0; i < n - pad; i++) {
        char c = s[i];
        if (!(isalnum((unsigned char)c) || c == '+' || c == '/')) {
            free(u);
            return TIDEMARK_EINVAL;
        }
        u[i] = c == '+' ? '-' : c == '/' ? '_' : c;
    }
    void *d = NULL;
    int rc = tm_b64url_decode(u, n - pad, &d, outlen);
    free(u);
    if (rc)
        return rc;
    char *t = realloc(d, *outlen + 1);
    if (!t) {
        free(d);
        return TIDEMARK_ENOMEM;
    }
    t[*outlen] = 0;
    *out = t;
    return 0;
}

int tm_era_header_value(const char *raw, char **out, size_t *len)
{
    size_t n;
    const char *v = trimmed(raw, &n);
    *out = NULL;
    if (!v)
        return TIDEMARK_ENOTFOUND;
    if (!visible_ascii(v, n))
        return TIDEMARK_EINVAL;
    if (n >= 11 && strncmp(v, "=?base64?", 9) == 0 && strncmp(v + n - 2, "?=", 2) == 0)
        return b64_std_decode(v + 9, n - 11, out, len);
    if (!(*out = malloc(n + 1)))
        return TIDEMARK_ENOMEM;
    memcpy(*out, v, n);
    (*out)[n] = 0;
    *len = n;
    return 0;
}

static json_t *mismatch(const tm_msg *m, const char *reason, const char *msg, const char *header)
{
    return tm_jsonrpc_error(m->id, TM_RPC_HEADER_MISMATCH, msg, reason,
                            json_pack("{s:s}", "header", header));
}

/* The header's value: decoded from the sentinel form (Mcp-Name,
 * Mcp-Param-*) or, decode 0, as sent after trimming (Mcp-Method). */
static int header_text(const char *raw, int decode, char **out, size_t *len)
{
    if (decode)
        return tm_era_header_value(raw, out, len);
    size_t n;
    const char *v = trimmed(raw, &n);
    *out = NULL;
    if (!v)
        return TIDEMARK_ENOTFOUND;
    if (!visible_ascii(v, n))
        return TIDEMARK_EINVAL;
    if (!(*out = malloc(n + 1)))
        return TIDEMARK_ENOMEM;
    memcpy(*out, v, n);
    (*out)[n] = 0;
    *len = n;
    return 0;
}

static json_t *header_error(const tm_msg *m, int rc, const char *name)
{
    if (rc == TIDEMARK_ENOTFOUND)
        return mismatch(m, "header_missing", "Header mismatch: a required header is missing", name);
    if (rc)
        return mismatch(m, "header_invalid", "Header mismatch: the header value is malformed", name);
    return mismatch(m, "header_mismatch", "Header mismatch: the header does not match the body",
                    name);
}

/* The body's value named by a standard or custom header equals the header.
 * NULL when it does, else the error. */
static json_t *same_text(const tm_msg *m, tm_hdr_fn hdr, void *ud, const char *name, int decode,
                         const char *body, size_t blen)
{
    char *v = NULL;
    size_t n = 0;
    int rc = header_text(hdr(ud, name), decode, &v, &n);
    int same = rc == 0 && n == blen && memcmp(v, body, n) == 0;
    free(v);
    return same ? NULL : header_error(m, rc, name);
}

/* Digits of s from *p on (at most max), appended to buf at *nb. */
static size_t take_digits(const char **p, const char *end, char *buf, size_t *nb, size_t max)
{
    size_t k = 0;
    for (; *p < end && **p >= '0' && **p <= '9'; (*p)++, k++)
        if (k < max)
            buf[(*nb)++] = **p;
    return k;
}

/* 1 when the n bytes of s are a JSON number whose exact value is want
 * ("42", "42.0", "4.2e1"), compared digit by digit, never as a double:
 * "0x2a", "42\0junk" and 2^53 + 1 for 2^53 are not. */
static int exact_integer(const char *s, size_t n, json_int_t want)
{
    const char *p = s, *end = s + n;
    char m[130];
    size_t nm = 0;
    int neg = p < end && *p == '-';
    p += neg;
    if (p >= end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9'))
        return 0;
    if (take_digits(&p, end, m, &nm, 64) > 64)
        return 0;
    long exp = 0;
    if (p < end && *p == '.') {
        p++;
        size_t f = take_digits(&p, end, m, &nm, 64);
        if (f == 0 || f > 64)
            return 0;
        exp -= (long)f;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = p < end && *p == '-';
        p += p < end && (*p == '-' || *p == '+');
        char e[8];
        size_t ne = 0;
        size_t k = take_digits(&p, end, e, &ne, 6);
        if (k == 0 || k > 6)
            return 0;
        e[ne] = 0;
        exp += eneg ? -atol(e) : atol(e);
    }
    if (p != end)
        return 0;
    size_t lead = 0;
    while (lead < nm && m[lead] == '0')
        lead++;
    while (nm > lead && m[nm - 1] == '0') {
        nm--;
        exp++;
    }
    if (nm == lead) /* zero */
        return want == 0;
    char w[32];
    snprintf(w, sizeof w, "%llu",
             want < 0 ? 0ULL - (unsigned long long)want : (unsigned long long)want);
    size_t nd = nm - lead, nw = strlen(w);
    if (exp < 0 || exp > 20 || neg != (want < 0) || nd + (size_t)exp != nw ||
        memcmp(m + lead, w, nd) != 0)
        return 0;
    for (size_t k = nd; k < nw; k++)
        if (w[k] != '0')
            return 0;
    return 1;
}

/* A custom header's check for one annotated value of the arguments. */
static json_t *param_check(const tm_msg *m, tm_hdr_fn hdr, void *ud, const char *suffix,
                           const json_t *val)
{
    char name[160];
    snprintf(name, sizeof name, "Mcp-Param-%s", suffix);
    if (json_is_string(val))
        return same_text(m, hdr, ud, name, 1, json_string_value(val), json_string_length(val));
    if (json_is_boolean(val))
        return same_text(m, hdr, ud, name, 1, json_is_true(val) ? "true" : "false",
                         json_is_true(val) ? 4 : 5);
    double d = json_is_real(val) ? json_real_value(val) : 0;
    if (!json_is_integer(val) && !(json_is_real(val) && d > -9.2e18 && d < 9.2e18 &&
                                   d == (double)(json_int_t)d)) /* range first: no UB cast */
        return NULL; /* not a primitive the annotation may name */
    json_int_t want = json_is_integer(val) ? json_integer_value(val) : (json_int_t)d;
    char *v = NULL;
    size_t n = 0;
    int rc = tm_era_header_value(hdr(ud, name), &v, &n);
    int same = rc == 0 && exact_integer(v, n, want); /* "42.0" is 42, "0x2a" is not */
    free(v);
    return same ? NULL : header_error(m, rc, name);
}

/* Walk the schema's properties chain alongside the arguments. */
static json_t *params_walk(const tm_msg *m, tm_hdr_fn hdr, void *ud, const json_t *schema,
                           const json_t *args, int depth)
{
    const char *k;
    json_t *p;
    if (depth > 8 || !json_is_object(args))
        return NULL;
    json_object_foreach(json_object_get(schema, "properties"), k, p) {
        const json_t *val = json_object_get(args, k);
        if (!val || json_is_null(val))
            continue; /* not sent: the header is not expected */
        const char *suffix = json_string_value(json_object_get(p, "x-mcp-header"));
        json_t *e = suffix ? param_check(m, hdr, ud, suffix, val)
                           : params_walk(m, hdr, ud, p, val, depth + 1);
        if (e)
            return e;
    }
    return NULL;
}

/* _meta: an object with the version (a string) and the client's
 * capabilities (an object). */
static json_t *meta_check(const tm_msg *m)
{
    json_t *meta = json_object_get(m->params, "_meta");
    const char *why = NULL;
    if (!json_is_object(meta))
        why = "params._meta is required";
    else if (!json_is_string(json_object_get(meta, TM_META_VERSION)))
        why = "params._meta[\"" TM_META_VERSION "\"] is required";
    else if (!json_is_object(json_object_get(meta, TM_META_CAPS)))
        why = "params._meta[\"" TM_META_CAPS "\"] is required";
    return why ? tm_jsonrpc_error(m->id, TM_RPC_INVALID_PARAMS, why, "invalid_request_meta", NULL)
               : NULL;
}

static json_t *version_check(const tm_msg *m, const char *hdr_pv)
{
    const char *b = json_string_value(json_object_get(json_object_get(m->params, "_meta"),
                                                      TM_META_VERSION));
    if (!hdr_pv)
        return tm_jsonrpc_error(m->id, TM_RPC_HEADER_MISMATCH,
                                "Header mismatch: MCP-Protocol-Version header is missing",
                                "header_missing", json_pack("{s:s}", "header", "MCP-Protocol-Version"));
    if (strcmp(hdr_pv, b) != 0)
        return tm_jsonrpc_error(m->id, TM_RPC_HEADER_MISMATCH,
                                "Header mismatch: MCP-Protocol-Version does not match _meta",
                                "header_mismatch",
                                json_pack("{s:s,s:s,s:s}", "header", "MCP-Protocol-Version",
                                          "headerValue", hdr_pv, "bodyValue", b));
    if (strcmp(b, TM_MODERN_VERSION) != 0)
        return tm_jsonrpc_error(m->id, TM_RPC_UNSUPPORTED_VERSION, "Unsupported protocol version",
                                "unsupported_protocol_version",
                                json_pack("{s:s,s:o}", "requested", b, "supported",
                                          tm_era_served_json()));
    return NULL;
}

/* The body value Mcp-Name mirrors, or NULL for methods without one. */
static const json_t *name_source(const tm_msg *m)
{
    if (strcmp(m->method, "tools/call") == 0 || strcmp(m->method, "prompts/get") == 0)
        return json_object_get(m->params, "name");
    if (strcmp(m->method, "resources/read") == 0)
        return json_object_get(m->params, "uri");
    return NULL;
}

json_t *tm_era_check(const tm_msg *m, tm_hdr_fn hdr, void *ud, const json_t *input_schema,
                     unsigned *status)
{
    *status = 400;
    json_t *e = meta_check(m);
    size_t n = 0;
    const char *raw = trimmed(hdr(ud, "MCP-Protocol-Version"), &n);
    char pv[64];
    snprintf(pv, sizeof pv, "%.*s", (int)(n < sizeof pv ? n : sizeof pv - 1), raw ? raw : "");
    if (!e)
        e = version_check(m, raw ? pv : NULL);
    if (!e)
        e = same_text(m, hdr, ud, "Mcp-Method", 0, m->method, strlen(m->method));
    const json_t *ns = e ? NULL : name_source(m);
    if (!e && json_is_string(ns))
        e = same_text(m, hdr, ud, "Mcp-Name", 1, json_string_value(ns), json_string_length(ns));
    if (!e && input_schema)
        e = params_walk(m, hdr, ud, input_schema, json_object_get(m->params, "arguments"), 0);
    return e;
}

json_t *tm_era_check_body(const tm_msg *m, unsigned *status)
{
    *status = 400;
    json_t *e = meta_check(m);
    if (!e) /* the body's version stands for the header: only which one it is counts */
        e = version_check(m, json_string_value(json_object_get(json_object_get(m->params, "_meta"),
                                                                TM_META_VERSION)));
    return e;
}
