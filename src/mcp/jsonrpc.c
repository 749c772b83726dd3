/* jsonrpc.c - JSON-RPC 2.0 parse, validate, build. */
#include "jsonrpc.h"
#include "tidemark/tidemark.h"
#include "../base/buf.h"
#include "../base/str.h"
#include <inttypes.h>
#include <stdint.h>
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
    /* Scalars decode too, so they get "invalid request", not "parse error". */
    json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
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
    if (json_is_integer(id)) { /* "i:%lld", on every call */
        json_int_t v = json_integer_value(id);
        char num[22];
        num[0] = '-';
        uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        tm_u64_dec(num + 1, u);
        size_t w = tm_strjoin(out, n, "i:", v < 0 ? num : num + 1, (const char *)NULL);
        return w >= n ? TIDEMARK_ERANGE : 0;
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

/* Output of one dump: the bytes on the caller's stack while they fit (one
 * exact malloc after, none of json_dumps' growing buffer and its copy);
 * past that all of them in a growable buffer. The value is walked once. */
typedef struct {
    char *stack;
    size_t cap, len;
    tm_buf spill; /* holds every byte once the stack is full */
} dump_out;

static int dump_chunk(const char *p, size_t n, void *arg)
{
    dump_out *o = arg;
    if (!o->spill.data && o->len + n <= o->cap) {
        memcpy(o->stack + o->len, p, n);
        o->len += n;
        return 0;
    }
    if (!o->spill.data && tm_buf_add(&o->spill, o->stack, o->len))
        return -1;
    return tm_buf_add(&o->spill, p, n) ? -1 : 0;
}

char *tm_jsonrpc_dump(const json_t *v, size_t *len)
{
    char stack[2048];
    dump_out o = {.stack = stack, .cap = sizeof stack};
    tm_buf_init(&o.spill, SIZE_MAX);
    if (json_dump_callback(v, dump_chunk, &o, JSON_COMPACT | JSON_ENCODE_ANY) != 0) {
        tm_buf_free(&o.spill);
        return NULL;
    }
    size_t n = o.len;
    char *s;
    if (o.spill.data) {
        s = tm_buf_steal(&o.spill, &n); /* NUL-terminated */
        char *exact = realloc(s, n + 1); /* up to half the buffer was spare */
        if (exact)
            s = exact;
    } else {
        s = n ? malloc(n + 1) : NULL; /* n == 0: nothing dumped, as json_dumps */
        if (s) {
            memcpy(s, stack, n);
            s[n] = 0;
        }
    }
    if (s && len)
        *len = n;
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
