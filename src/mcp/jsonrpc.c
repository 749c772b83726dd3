/* jsonrpc.c - JSON-RPC 2.0 parse, validate, build. */
#include "jsonrpc.h"
#include "tidemark/tidemark.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define ID_TOO_LONG "\"id\" is longer than " TM_STRINGIFY(TM_ID_MAX_BYTES) " bytes"

/* jansson has no depth limit on decode; refuse deep nesting before parsing so
 * hostile input cannot exhaust the stack. Strings are skipped exactly. */
static int depth_ok(const char *s, size_t len)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > MAX_DEPTH)
                return 0;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return 1;
}

int tm_jsonrpc_parse(const char *body, size_t len, json_t **root, char *err, size_t errlen)
{
    *root = NULL;
    if (!depth_ok(body, len)) {
        snprintf(err, errlen, "nesting deeper than %d", MAX_DEPTH);
        return TIDEMARK_EINVAL;
    }
    json_error_t e;
    /* The common subset without jansson's lexer (below); the rest,
     * and every error, through jansson. Scalars decode too, so they get
     * "invalid request", not "parse error". */
    json_t *v = tm_json_fast_load(body, len);
    if (!v)
        v = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    if (!v) {
        snprintf(err, errlen, "%s (line %d, column %d)", e.text, e.line, e.column);
        return TIDEMARK_EINVAL;
    }
    *root = v;
    return 0;
}

int tm_jsonrpc_id_valid(const json_t *id)
{
    return id && (json_is_integer(id) || json_is_string(id));
}

int tm_jsonrpc_key_escape(const char *prefix, const char *s, size_t len, char *out, size_t n)
{
    size_t o = strlen(prefix);
    if (o >= n)
        return TIDEMARK_ERANGE;
    memcpy(out, prefix, o);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0 || c == '%') { /* keep NUL and '%' distinct and printable */
            if (o + 3 >= n)
                return TIDEMARK_ERANGE;
            o += (size_t)snprintf(out + o, n - o, "%%%02x", c);
        } else {
            if (o + 1 >= n)
                return TIDEMARK_ERANGE;
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return 0;
}

int tm_jsonrpc_id_key(const json_t *id, char *out, size_t n)
{
    if (json_is_integer(id)) {
        int w = snprintf(out, n, "i:%" JSON_INTEGER_FORMAT, json_integer_value(id));
        return (w < 0 || (size_t)w >= n) ? TIDEMARK_ERANGE : 0;
    }
    if (json_is_string(id))
        return tm_jsonrpc_key_escape("s:", json_string_value(id), json_string_length(id), out, n);
    return TIDEMARK_EINVAL;
}

static void invalid(tm_msg *m, const char *why, const char *detail)
{
    m->kind = TM_MSG_INVALID;
    m->why = why;
    m->detail = detail;
}

void tm_jsonrpc_classify(json_t *v, tm_msg *m)
{
    memset(m, 0, sizeof *m);
    m->raw = v;
    if (!json_is_object(v))
        return invalid(m, "invalid_request", "message is not a JSON object");
    json_t *id = json_object_get(v, "id");
    /* Keep a usable id for the error response when it is valid. */
    if (tm_jsonrpc_id_valid(id))
        m->id = id;
    json_t *ver = json_object_get(v, "jsonrpc");
    if (!json_is_string(ver) || json_string_length(ver) != 3 ||
        strcmp(json_string_value(ver), "2.0") != 0)
        return invalid(m, "invalid_jsonrpc_version", "\"jsonrpc\" must be \"2.0\"");
    json_t *method = json_object_get(v, "method");
    json_t *result = json_object_get(v, "result");
    json_t *error = json_object_get(v, "error");
    if (method) {
        if (!json_is_string(method) || json_string_length(method) == 0 ||
            strlen(json_string_value(method)) != json_string_length(method))
            return invalid(m, "invalid_method", "\"method\" must be a non-empty string without NUL");
        if (result || error)
            return invalid(m, "invalid_request", "a request cannot carry result or error");
        json_t *params = json_object_get(v, "params");
        if (params && !json_is_object(params) && !json_is_array(params))
            return invalid(m, "invalid_params", "\"params\" must be an object or array");
        m->method = json_string_value(method);
        m->params = params;
        if (!id) {
            m->kind = TM_MSG_NOTIFICATION;
            return;
        }
        if (!tm_jsonrpc_id_valid(id))
            return invalid(m, "invalid_id", "\"id\" must be a string or an integer");
        if (json_is_string(id) && json_string_length(id) > TM_ID_MAX_BYTES)
            return invalid(m, "id_too_long", ID_TOO_LONG);
        m->kind = TM_MSG_REQUEST;
        return;
    }
    if (!!result == !!error)
        return invalid(m, "invalid_request", "need exactly one of method, result, error");
    if (!tm_jsonrpc_id_valid(id))
        return invalid(m, "invalid_id", "\"id\" must be a string or an integer");
    if (json_is_string(id) && json_string_length(id) > TM_ID_MAX_BYTES)
        return invalid(m, "id_too_long", ID_TOO_LONG);
    if (result) {
        m->kind = TM_MSG_RESULT;
        m->result = result;
    } else {
        if (!json_is_object(error) || !json_is_integer(json_object_get(error, "code")) ||
            !json_is_string(json_object_get(error, "message")))
            return invalid(m, "invalid_error", "\"error\" needs integer code and string message");
        m->kind = TM_MSG_ERROR;
        m->error = error;
    }
}

json_t *tm_jsonrpc_result(json_t *id, json_t *result)
{
    json_t *o = json_object();
    json_object_set_new(o, "jsonrpc", json_string("2.0"));
    json_object_set(o, "id", id ? id : json_null());
    json_object_set_new(o, "result", result ? result : json_object());
    return o;
}

json_t *tm_jsonrpc_error(json_t *id, int code, const char *message, const char *reason,
                         json_t *extra)
{
    json_t *o = json_object();
    json_t *err = json_object();
    json_t *data = json_is_object(extra) ? extra : json_object();
    if (extra && !json_is_object(extra))
        json_decref(extra);
    if (reason)
        json_object_set_new(data, "reason", json_string(reason));
    json_object_set_new(err, "code", json_integer(code));
    json_object_set_new(err, "message", json_string(message ? message : ""));
    json_object_set_new(err, "data", data);
    json_object_set_new(o, "jsonrpc", json_string("2.0"));
    json_object_set(o, "id", id ? id : json_null());
    json_object_set_new(o, "error", err);
    return o;
}

json_t *tm_jsonrpc_notification(const char *method, json_t *params)
{
    json_t *o = json_object();
    json_object_set_new(o, "jsonrpc", json_string("2.0"));
    json_object_set_new(o, "method", json_string(method));
    if (params)
        json_object_set_new(o, "params", params);
    return o;
}

json_t *tm_jsonrpc_request(json_t *id, const char *method, json_t *params)
{
    json_t *o = json_object();
    json_object_set_new(o, "jsonrpc", json_string("2.0"));
    json_object_set_new(o, "id", id);
    json_object_set_new(o, "method", json_string(method));
    if (params)
        json_object_set_new(o, "params", params);
    return o;
}

char *tm_jsonrpc_dump(const json_t *v, size_t *len)
{
    char *s = tm_json_fast_dump(v, len); /* the same bytes, faster (below) */
    if (s)
        return s;
    s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s && len)
        *len = strlen(s);
    return s;
}

const char *const tm_protocol_versions[] = {TIDEMARK_PROTOCOL_2025_11_25, TIDEMARK_PROTOCOL_2025_06_18,
                                            TIDEMARK_PROTOCOL_2025_03_26, NULL};

int tm_protocol_version_supported(const char *v)
{
    for (int i = 0; v && tm_protocol_versions[i]; i++)
        if (strcmp(v, tm_protocol_versions[i]) == 0)
            return 1;
    return 0;
}

/* ---- fast paths -------------------------------------------------------------- */

/*
 * The request path's JSON without jansson's per-character
 * lexer and dumper, which dominated a call's cost (about 190 instructions a
 * byte to parse, 150 to dump: a 2026-07-28 request carries three times the
 * bytes of a 2025 one in its _meta).
 *
 * Both are exact or decline, never approximate:
 *  - tm_json_fast_load builds the same values json_loadb would, for the
 *    common subset only: strings without escapes or control characters
 *    (valid UTF-8), integers of up to 18 digits, literals, objects without a
 *    repeated key, arrays, nothing after the value. Anything else (an
 *    escape, a real, a long integer, a duplicate, a syntax error) returns
 *    NULL and the caller parses with jansson, which then accepts it or
 *    reports its own error.
 *  - tm_json_fast_dump writes what json_dumps(JSON_COMPACT | JSON_ENCODE_ANY)
 *    writes, byte for byte (insertion order, the same escapes; reals are
 *    written by jansson itself). Invalid UTF-8 or very deep nesting returns
 *    NULL, and the caller asks jansson (which refuses the same way).
 * tests/unit/test_jsonrpc.c compares both with jansson.
 */
#define LOAD_DEPTH 64
#define DUMP_DEPTH 512

/* Length of the UTF-8 sequence at s (n bytes left), 0 when invalid: no
 * overlong forms, no surrogates, nothing above U+10FFFF (jansson's rules). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (k == 0 || k > n)
        return 0;
    unsigned cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

/* ---- load ------------------------------------------------------------------ */

typedef struct lx {
    const char *p, *end;
    int depth;
} lx;

static void ws(lx *x)
{
    while (x->p < x->end && (*x->p == ' ' || *x->p == '\n' || *x->p == '\r' || *x->p == '\t'))
        x->p++;
}

/* A string at x->p (its '"'): its bytes in place. -1 when outside the subset. */
static int lex_string(lx *x, const char **s, size_t *n)
{
    const unsigned char *q = (const unsigned char *)x->p + 1, *end = (const unsigned char *)x->end;
    while (q < end) {
        unsigned c = *q;
        if (c == '"') {
            *s = x->p + 1;
            *n = (size_t)((const char *)q - *s);
            x->p = (const char *)q + 1;
            return 0;
        }
        if (c == '\\' || c < 0x20)
            return -1; /* escapes and control characters: jansson's */
        size_t k = c < 0x80 ? 1 : utf8_len(q, (size_t)(end - q));
        if (!k)
            return -1;
        q += k;
    }
    return -1;
}

static json_t *lex_number(lx *x)
{
    const char *q = x->p + (*x->p == '-');
    const char *d = q;
    while (q < x->end && *q >= '0' && *q <= '9')
        q++;
    size_t nd = (size_t)(q - d);
    if (nd == 0 || nd > 18 || (*d == '0' && nd > 1))
        return NULL; /* no digits, too long for an exact int64 here, a leading zero */
    if (q < x->end && (*q == '.' || *q == 'e' || *q == 'E'))
        return NULL; /* a real: jansson's */
    json_int_t v = 0;
    for (const char *c = d; c < q; c++)
        v = v * 10 + (*c - '0');
    json_t *j = json_integer(*x->p == '-' ? -v : v);
    x->p = q;
    return j;
}

static json_t *lex_value(lx *x);

static json_t *lex_object(lx *x)
{
    json_t *o = json_object();
    x->p++;
    ws(x);
    if (x->p < x->end && *x->p == '}') {
        x->p++;
        return o;
    }
    while (o && x->p < x->end && *x->p == '"') {
        const char *k;
        size_t kn;
        if (lex_string(x, &k, &kn))
            break;
        ws(x);
        if (x->p >= x->end || *x->p != ':')
            break;
        x->p++;
        json_t *v = lex_value(x);
        if (!v || json_object_getn(o, k, kn) || json_object_setn_new_nocheck(o, k, kn, v)) {
            json_decref(v); /* a repeated key: jansson reports it */
            break;
        }
        ws(x);
        if (x->p < x->end && *x->p == '}') {
            x->p++;
            return o;
        }
        if (x->p >= x->end || *x->p != ',')
            break;
        x->p++;
        ws(x);
    }
    json_decref(o);
    return NULL;
}

static json_t *lex_array(lx *x)
{
    json_t *a = json_array();
    x->p++;
    ws(x);
    if (x->p < x->end && *x->p == ']') {
        x->p++;
        return a;
    }
    while (a) {
        json_t *v = lex_value(x);
        if (!v || json_array_append_new(a, v))
            break;
        ws(x);
        if (x->p < x->end && *x->p == ']') {
            x->p++;
            return a;
        }
        if (x->p >= x->end || *x->p != ',')
            break;
        x->p++;
    }
    json_decref(a);
    return NULL;
}

static json_t *lex_literal(lx *x, const char *word, json_t *v)
{
    size_t n = strlen(word);
    if ((size_t)(x->end - x->p) < n || memcmp(x->p, word, n) != 0)
        return NULL;
    x->p += n;
    return v;
}

static json_t *lex_value(lx *x)
{
    ws(x);
    if (x->p >= x->end || x->depth >= LOAD_DEPTH)
        return NULL;
    char c = *x->p;
    json_t *v = NULL;
    x->depth++;
    if (c == '{')
        v = lex_object(x);
    else if (c == '[')
        v = lex_array(x);
    else if (c == '"') {
        const char *s;
        size_t n;
        v = lex_string(x, &s, &n) == 0 ? json_stringn_nocheck(s, n) : NULL;
    } else if (c == '-' || (c >= '0' && c <= '9'))
        v = lex_number(x);
    else if (c == 't')
        v = lex_literal(x, "true", json_true());
    else if (c == 'f')
        v = lex_literal(x, "false", json_false());
    else if (c == 'n')
        v = lex_literal(x, "null", json_null());
    x->depth--;
    return v;
}

json_t *tm_json_fast_load(const char *s, size_t len)
{
    lx x = {s, s + len, 0};
    json_t *v = lex_value(&x);
    ws(&x);
    if (v && x.p != x.end) { /* something after the value: jansson's error */
        json_decref(v);
        v = NULL;
    }
    return v;
}

/* ---- dump ------------------------------------------------------------------ */

typedef struct ob {
    char *b;
    size_t n, cap;
} ob;

static int put(ob *o, const char *s, size_t n)
{
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n + 1)
            cap *= 2;
        char *b = realloc(o->b, cap);
        if (!b)
            return -1;
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    return 0;
}

/* A string as jansson writes it: '"', '\\' and control characters escaped
 * (the short forms where JSON has them), everything else as it is. */
static int put_string(ob *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s, *end = p + n, *run = p;
    if (put(o, "\"", 1))
        return -1;
    while (p < end) {
        unsigned c = *p;
        size_t k = c < 0x80 ? 1 : utf8_len(p, (size_t)(end - p));
        if (!k)
            return -1; /* jansson refuses it too */
        if (c >= 0x20 && c != '"' && c != '\\') {
            p += k;
            continue;
        }
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t en = 2;
        esc[1] = c == '"' ? '"' : c == '\\' ? '\\' : c == '\b' ? 'b' : c == '\f' ? 'f'
               : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : 'u';
        if (esc[1] == 'u') {
            memcpy(esc + 2, "00", 2);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            en = 6;
        }
        if (put(o, (const char *)run, (size_t)(p - run)) || put(o, esc, en))
            return -1;
        run = ++p;
    }
    return put(o, (const char *)run, (size_t)(p - run)) || put(o, "\"", 1) ? -1 : 0;
}

static int put_scalar(ob *o, const json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_STRING:
        return put_string(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: {
        int w = snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return w > 0 && (size_t)w < sizeof num ? put(o, num, (size_t)w) : -1;
    }
    case JSON_REAL: { /* jansson's own formatting of reals */
        char *r = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        int rc = r ? put(o, r, strlen(r)) : -1;
        free(r);
        return rc;
    }
    case JSON_TRUE:
        return put(o, "true", 4);
    case JSON_FALSE:
        return put(o, "false", 5);
    case JSON_NULL:
        return put(o, "null", 4);
    default:
        return -1;
    }
}

static int put_value(ob *o, const json_t *v, int depth)
{
    if (depth > DUMP_DEPTH) /* or a cycle: jansson's answer */
        return -1;
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        if (put(o, "[", 1))
            return -1;
        json_array_foreach(v, i, x)
            if ((i && put(o, ",", 1)) || put_value(o, x, depth + 1))
                return -1;
        return put(o, "]", 1);
    }
    if (!json_is_object(v))
        return put_scalar(o, v);
    if (put(o, "{", 1))
        return -1;
    int first = 1;
    for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        if ((!first && put(o, ",", 1)) ||
            put_string(o, json_object_iter_key(it), json_object_iter_key_len(it)) ||
            put(o, ":", 1) || put_value(o, json_object_iter_value(it), depth + 1))
            return -1;
        first = 0;
    }
    return put(o, "}", 1);
}

char *tm_json_fast_dump(const json_t *v, size_t *len)
{
    ob o = {0};
    if (!v || put_value(&o, v, 0) || put(&o, "", 0)) {
        free(o.b);
        return NULL;
    }
    o.b[o.n] = '\0';
    if (len)
        *len = o.n;
    return o.b;
}
