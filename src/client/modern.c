/*
 * modern.c - the 2026-07-28 era: finding out which era the server speaks
 * (server/discover, the -32022 retry, the fall back to a legacy session),
 * the _meta every modern request carries, and its HTTP headers: Mcp-Method,
 * Mcp-Name and the Mcp-Param-* headers a tool's input schema asks for with
 * x-mcp-header (values that are not plain header text in the base64
 * sentinel form), with the tools whose annotations are invalid left out.
 */
#include "client_int.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../mcp/jsonrpc.h"
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_INFO "io.modelcontextprotocol/clientInfo"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_LOG "io.modelcontextprotocol/logLevel"

/* ---- _meta ------------------------------------------------------------------------ */

#define TASKS_EXT "io.modelcontextprotocol/tasks"

/* caps (taken) with the tasks extension declared: a copy when shared. */
static json_t *with_tasks(json_t *caps)
{
    json_t *own = json_deep_copy(caps);
    json_decref(caps);
    json_t *ext = json_object_get(own, "extensions");
    if (own && !json_is_object(ext) && json_object_set_new(own, "extensions", ext = json_object()))
        ext = NULL;
    if (!ext || json_object_set_new(ext, TASKS_EXT, json_object()) != 0) {
        json_decref(own);
        return NULL;
    }
    return own;
}

json_t *tm_client_capabilities(tidemark_client_t *c)
{
    if (c->caps)
        return json_incref(c->caps);
    json_t *caps = json_object();
    if (caps && c->cfg.on_request &&
        (json_object_set_new(caps, "sampling", json_object()) != 0 ||
         json_object_set_new(caps, "elicitation", json_pack("{s:{}}", "form")) != 0)) {
        json_decref(caps);
        return NULL;
    }
    if (caps && c->roots &&
        json_object_set_new(caps, "roots", json_pack("{s:b}", "listChanged", 0)) != 0) {
        json_decref(caps);
        return NULL;
    }
    return caps;
}

int tm_modern_meta(tidemark_client_t *c, rq *r)
{
    if (!json_object_get(r->msg, "id"))
        return 0; /* notifications carry none */
    json_t *p = json_object_get(r->msg, "params");
    if (!json_is_object(p)) {
        p = json_object();
        if (json_object_set_new(r->msg, "params", p) != 0)
            return TIDEMARK_ENOMEM;
    }
    json_t *meta = json_object_get(p, "_meta");
    if (!json_is_object(meta)) {
        meta = json_object();
        if (json_object_set_new(p, "_meta", meta) != 0)
            return TIDEMARK_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    json_t *v = json_string(c->proto ? c->proto : TIDEMARK_CLIENT_MODERN_VERSION);
    pthread_mutex_unlock(&c->mu);
    json_t *caps = tm_client_capabilities(c);
    const char *method = json_string_value(json_object_get(r->msg, "method"));
    if (caps && (r->tasks || (method && !strncmp(method, "tasks/", 6))))
        caps = with_tasks(caps);
    int rc = json_object_set_new(meta, META_VERSION, v) |
             json_object_set_new(meta, META_INFO,
                                 json_pack("{s:s,s:s}", "name", c->name, "version", c->version)) |
             json_object_set_new(meta, META_CAPS, caps ? caps : json_object());
    if (c->cfg.log_level)
        rc |= json_object_set_new(meta, META_LOG, json_string(c->cfg.log_level));
    return rc ? TIDEMARK_ENOMEM : 0;
}

/* ---- header values ------------------------------------------------------------------ */

static char *b64(const unsigned char *s, size_t n)
{
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * ((n + 2) / 3) + 1), *w = o;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        *w++ = t[v >> 18 & 63];
        *w++ = t[v >> 12 & 63];
        *w++ = i + 1 < n ? t[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? t[v & 63] : '=';
    }
    *w = '\0';
    return o;
}

/* Whether s cannot go into a header as it is: bytes outside 0x20-0x7E,
 * space at either end, empty, or the sentinel's own shape. */
static int needs_b64(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || s[0] == ' ' || s[n - 1] == ' ')
        return 1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return 1;
    return n >= 11 && strncmp(s, "=?base64?", 9) == 0 && strcmp(s + n - 2, "?=") == 0;
}

/* "Name: value" with value encoded as the header rules say; malloc'd. */
static char *header_line(const char *name, const char *value)
{
    char *enc = NULL;
    if (needs_b64(value)) {
        char *e = b64((const unsigned char *)value, strlen(value));
        if (!e)
            return NULL;
        size_t n = strlen(e) + 12;
        enc = malloc(n);
        if (enc)
            snprintf(enc, n, "=?base64?%s?=", e);
        free(e);
        if (!enc)
            return NULL;
    }
    const char *v = enc ? enc : value;
    size_t n = strlen(name) + strlen(v) + 3;
    char *line = malloc(n);
    if (line)
        snprintf(line, n, "%s: %s", name, v);
    free(enc);
    return line;
}

/* A primitive argument as header text into *out (NULL: no header). */
static void scalar_text(json_t *v, char *buf, size_t n, const char **out)
{
    *out = buf;
    if (json_is_string(v))
        *out = json_string_value(v);
    else if (json_is_integer(v))
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v))
        snprintf(buf, n, "%lld", (long long)json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
    else
        *out = NULL;
}

static int hdr_add(tm_hdrs *h, char *line)
{
    if (!line || h->n >= (int)(sizeof h->v / sizeof h->v[0]) - 1) {
        free(line);
        return TIDEMARK_ENOMEM;
    }
    h->own[h->n] = line;
    h->v[h->n++] = line;
    h->v[h->n] = NULL;
    return 0;
}

int tm_hdrs_add(tm_hdrs *h, const char *line)
{
    return hdr_add(h, strdup(line));
}

void tm_hdrs_free(tm_hdrs *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->own[i]);
    h->n = 0;
}

/* The value at path (an array of property names) in args, or NULL. */
static json_t *at_path(json_t *args, json_t *path)
{
    size_t i;
    json_t *k;
    json_array_foreach(path, i, k) {
        if (i + 1 == json_array_size(path))
            break; /* the last element is the header name */
        args = json_object_get(args, json_string_value(k));
    }
    return args;
}

/* Mcp-Param-* of a tools/call from the tool's learned annotations. */
static int param_headers(tidemark_client_t *c, json_t *params, tm_hdrs *h)
{
    const char *tool = json_string_value(json_object_get(params, "name"));
    pthread_mutex_lock(&c->mu);
    json_t *list = tool ? json_incref(json_object_get(c->tool_headers, tool)) : NULL;
    pthread_mutex_unlock(&c->mu);
    int rc = 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char buf[64], name[160];
        const char *text;
        scalar_text(at_path(json_object_get(params, "arguments"), e), buf, sizeof buf, &text);
        if (!text)
            continue; /* absent or null: no header */
        snprintf(name, sizeof name, "Mcp-Param-%s",
                 json_string_value(json_array_get(e, json_array_size(e) - 1)));
        if ((rc = hdr_add(h, header_line(name, text))) != 0)
            break;
    }
    json_decref(list);
    return rc;
}

int tm_modern_headers(tidemark_client_t *c, rq *r, tm_hdrs *h)
{
    const char *method = json_string_value(json_object_get(r->msg, "method"));
    json_t *params = json_object_get(r->msg, "params");
    if (!method)
        return 0;
    int rc = hdr_add(h, header_line("Mcp-Method", method));
    const char *name = NULL;
    if (!strcmp(method, "tools/call") || !strcmp(method, "prompts/get"))
        name = json_string_value(json_object_get(params, "name"));
    else if (!strcmp(method, "resources/read"))
        name = json_string_value(json_object_get(params, "uri"));
    else if (!strncmp(method, "tasks/", 6))
        name = json_string_value(json_object_get(params, "taskId"));
    if (!rc && name)
        rc = hdr_add(h, header_line("Mcp-Name", name));
    if (!rc && !strcmp(method, "tools/call"))
        rc = param_headers(c, params, h);
    return rc;
}

/* ---- x-mcp-header annotations ------------------------------------------------------- */

static int token_char(unsigned char ch)
{
    return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* One annotation at path: a valid header name on a primitive property. */
static const char *check_one(json_t *prop, const char *name, json_t *seen)
{
    if (!name || !name[0])
        return "x-mcp-header is empty";
    for (const char *p = name; *p; p++)
        if (!token_char((unsigned char)*p))
            return "x-mcp-header is not an HTTP token";
    json_t *type = json_object_get(prop, "type");
    const char *t = json_string_value(type);
    if ((t && strcmp(t, "string") && strcmp(t, "integer") && strcmp(t, "boolean")) ||
        json_is_array(type) || (type && !t))
        return "x-mcp-header on a parameter that is not a string, integer or boolean";
    char low[160];
    size_t i = 0;
    for (; name[i] && i < sizeof low - 1; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = '\0';
    if (json_object_get(seen, low))
        return "x-mcp-header names repeat";
    return json_object_set_new(seen, low, json_true()) ? "out of memory" : NULL;
}

/* Walk a schema: annotations only on chains of properties from the root. */
static const char *walk(json_t *node, json_t *path, int on_chain, json_t *out, json_t *seen)
{
    if (json_is_array(node)) {
        size_t i;
        json_t *v;
        json_array_foreach(node, i, v) {
            const char *why = walk(v, path, 0, out, seen);
            if (why)
                return why;
        }
        return NULL;
    }
    if (!json_is_object(node))
        return NULL;
    json_t *ann = json_object_get(node, "x-mcp-header");
    if (ann) {
        if (!on_chain || !json_array_size(path))
            return "x-mcp-header where no chain of properties reaches";
        const char *why = check_one(node, json_string_value(ann), seen);
        if (!why && !json_is_string(ann))
            why = "x-mcp-header is not a string";
        if (why)
            return why;
        json_t *e = json_deep_copy(path);
        if (!e || json_array_append(e, ann) != 0) {
            json_decref(e);
            return "out of memory";
        }
        if (json_array_append_new(out, e) != 0) /* takes e, also when it fails */
            return "out of memory";
    }
    const char *k;
    json_t *v;
    json_object_foreach(node, k, v) {
        if (!strcmp(k, "x-mcp-header") || !strcmp(k, "default") || !strcmp(k, "const") ||
            !strcmp(k, "enum") || !strcmp(k, "examples"))
            continue;
        int props = !strcmp(k, "properties") && json_is_object(v) && on_chain;
        const char *pk;
        json_t *pv;
        const char *why = NULL;
        if (props) {
            json_object_foreach(v, pk, pv) {
                json_t *sub = json_deep_copy(path);
                why = sub && !json_array_append_new(sub, json_string(pk))
                          ? walk(pv, sub, 1, out, seen) : "out of memory";
                json_decref(sub);
                if (why)
                    return why;
            }
        } else if ((why = walk(v, path, 0, out, seen)) != NULL) {
            return why;
        }
    }
    return NULL;
}

void tm_modern_tools_seen(tidemark_client_t *c, json_t *tools)
{
    for (size_t i = json_array_size(tools); i-- > 0;) {
        json_t *t = json_array_get(tools, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *out = json_array(), *seen = json_object(), *path = json_array();
        const char *why = out && seen && path
                              ? walk(json_object_get(t, "inputSchema"), path, 1, out, seen)
                              : "out of memory";
        json_decref(seen);
        json_decref(path);
        if (why) {
            TM_WARN("client: tool %s left out: %s", name ? name : "(no name)", why);
            json_decref(out);
            out = json_false();
        }
        pthread_mutex_lock(&c->mu);
        if (!c->tool_headers)
            c->tool_headers = json_object();
        if (name && c->tool_headers && json_object_set(c->tool_headers, name, out) != 0)
            TM_WARN("client: out of memory learning the headers of tool %s", name);
        pthread_mutex_unlock(&c->mu);
        json_decref(out);
        if (why && json_array_remove(tools, i) != 0)
            TM_WARN("client: tool %s could not be left out", name ? name : "(no name)");
    }
}

void tm_modern_tools_forget(tidemark_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    json_decref(c->tool_headers);
    c->tool_headers = NULL;
    pthread_mutex_unlock(&c->mu);
    tm_cache_clear(c); /* a cached tools/list would teach the same again */
}

int tm_modern_tool_refused(tidemark_client_t *c, const char *tool)
{
    pthread_mutex_lock(&c->mu);
    int refused = tool && json_is_false(json_object_get(c->tool_headers, tool));
    pthread_mutex_unlock(&c->mu);
    return refused;
}

int tm_modern_tool_known(tidemark_client_t *c, const char *tool)
{
    pthread_mutex_lock(&c->mu);
    int known = !tool || c->tool_headers != NULL;
    pthread_mutex_unlock(&c->mu);
    return known;
}

int tm_modern_new_id(tidemark_client_t *c, rq *r)
{
    int64_t id;
    int rc = tm_next_id(c, &id, NULL);
    if (rc)
        return rc;
    tm_pending_del(c, r);
    r->id = id;
    snprintf(r->key, sizeof r->key, "%" PRId64, id);
    if (json_object_set_new(r->msg, "id", json_integer(id)) != 0)
        return TIDEMARK_ENOMEM;
    return tm_pending_add(c, r);
}
