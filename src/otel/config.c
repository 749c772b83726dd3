/*
 * config.c - the tracer's configuration from the OpenTelemetry SDK's
 * environment variables, read once per server or client object.
 * Unsupported values are warned about and replaced by the default; they
 * never stop the object from starting.
 */
#include "otel_int.h"
#include "../base/log.h"
#include "tidemark/tidemark.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* The signal-specific variable wins over the general one. */
static const char *env2(const char *traces, const char *general)
{
    const char *v = env(traces);
    return v ? v : env(general);
}

static int env_int(const char *name, int dflt, int min)
{
    const char *v = env(name);
    if (!v)
        return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < min || n > 1 << 30) {
        TM_WARN("otel: %s=%s is not a number >= %d; %d is used", name, v, min, dflt);
        return dflt;
    }
    return (int)n;
}

/* %XX decoded in place (W3C Baggage octets in OTEL_RESOURCE_ATTRIBUTES
 * and OTEL_EXPORTER_OTLP_HEADERS), spaces around trimmed. */
static char *decode(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2])) {
            char hex[3] = {r[1], r[2], 0};
            *w++ = (char)strtol(hex, NULL, 16);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    while (w > s && isspace((unsigned char)w[-1]))
        w--;
    *w = '\0';
    return s;
}

/* Each "key=value" of a comma-separated list, decoded, to fn. */
static void each_pair(const char *list, void (*fn)(void *, const char *, const char *), void *ud)
{
    char *copy = list ? strdup(list) : NULL, *save = NULL;
    for (char *p = copy ? strtok_r(copy, ",", &save) : NULL; p; p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *k = decode(p), *v = decode(eq + 1);
        if (*k)
            fn(ud, k, v);
    }
    free(copy);
}

static void add_attr(void *ud, const char *k, const char *v)
{
    json_t *attrs = ud;
    size_t i;
    json_t *a;
    json_array_foreach(attrs, i, a) /* a later key replaces an earlier one */
        if (!strcmp(json_string_value(json_object_get(a, "key")), k)) {
            json_array_remove(attrs, i);
            break;
        }
    json_array_append_new(attrs, json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v));
}

/* The attributes array's keys and values copied into c (protobuf). 0, or
 * TIDEMARK_ENOMEM. */
static int resource_pairs(tm_otel_cfg *c, const json_t *attrs)
{
    size_t i;
    const json_t *a;
    json_array_foreach(attrs, i, a) {
        if (c->n_res == TM_OTEL_RES_MAX) {
            TM_WARN("otel: more than %d resource attributes; the rest are not sent as protobuf",
                    TM_OTEL_RES_MAX);
            break;
        }
        const char *k = json_string_value(json_object_get(a, "key"));
        const char *v = json_string_value(json_object_get(json_object_get(a, "value"), "stringValue"));
        c->res_key[c->n_res] = strdup(k ? k : "");
        c->res_val[c->n_res] = strdup(v ? v : "");
        c->n_res++;
        if (!c->res_key[c->n_res - 1] || !c->res_val[c->n_res - 1])
            return TIDEMARK_ENOMEM;
    }
    return 0;
}

/* The resource: OTEL_RESOURCE_ATTRIBUTES, service.name from
 * OTEL_SERVICE_NAME (or that list, or service), and the SDK's name; as
 * OTLP JSON (returned) and as pairs in c (protobuf). */
static char *resource_json(tm_otel_cfg *c, const char *service)
{
    json_t *attrs = json_array();
    add_attr(attrs, "service.name", service);
    each_pair(env("OTEL_RESOURCE_ATTRIBUTES"), add_attr, attrs);
    if (env("OTEL_SERVICE_NAME"))
        add_attr(attrs, "service.name", env("OTEL_SERVICE_NAME"));
    add_attr(attrs, "telemetry.sdk.name", "tidemark");
    add_attr(attrs, "telemetry.sdk.version", tidemark_version(NULL));
    char *s = json_dumps(attrs, JSON_COMPACT);
    if (s && resource_pairs(c, attrs)) {
        free(s);
        s = NULL;
    }
    json_decref(attrs);
    return s;
}

typedef struct hdrs {
    char **v;
    int n;
} hdrs;

static void add_header(void *ud, const char *k, const char *v)
{
    hdrs *h = ud;
    char **nv = realloc(h->v, sizeof *nv * (size_t)(h->n + 2));
    if (!nv)
        return;
    h->v = nv;
    size_t len = strlen(k) + strlen(v) + 3;
    if ((nv[h->n] = malloc(len)) != NULL)
        snprintf(nv[h->n++], len, "%s: %s", k, v);
    nv[h->n] = NULL;
}

/* The full traces URL: the signal's own as given, else the base + /v1/traces. */
static char *endpoint(void)
{
    const char *t = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), *b = env("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (t)
        return strdup(t);
    if (!b)
        return NULL;
    size_t n = strlen(b);
    while (n && b[n - 1] == '/')
        n--;
    char *u = malloc(n + sizeof "/v1/traces");
    if (u)
        snprintf(u, n + sizeof "/v1/traces", "%.*s/v1/traces", (int)n, b);
    return u;
}

/* http/protobuf unless http/json is asked for (the OTLP exporter
 * specification's default); grpc is not spoken. */
static void protocol(tm_otel_cfg *c)
{
    const char *p = env2("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL");
    c->protobuf = !p || strcmp(p, "http/json") != 0;
    if (p && strcmp(p, "http/json") != 0 && strcmp(p, "http/protobuf") != 0)
        TM_WARN("otel: OTLP protocol %s is not supported; traces are sent as http/protobuf", p);
}

static void sampler(tm_otel_cfg *c)
{
    static const struct { const char *name; tm_sampler root; int pb; } t[] = {
        {"always_on", TM_SAMPLE_ON, 0}, {"always_off", TM_SAMPLE_OFF, 0},
        {"traceidratio", TM_SAMPLE_RATIO, 0}, {"parentbased_always_on", TM_SAMPLE_ON, 1},
        {"parentbased_always_off", TM_SAMPLE_OFF, 1}, {"parentbased_traceidratio", TM_SAMPLE_RATIO, 1}};
    const char *s = env("OTEL_TRACES_SAMPLER");
    c->root = TM_SAMPLE_ON;
    c->parentbased = 1; /* the SDK's default: parentbased_always_on */
    for (size_t i = 0; s && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(s, t[i].name)) {
            c->root = t[i].root;
            c->parentbased = t[i].pb;
            s = NULL;
        }
    if (s)
        TM_WARN("otel: OTEL_TRACES_SAMPLER=%s is not supported; parentbased_always_on is used", s);
    const char *a = env("OTEL_TRACES_SAMPLER_ARG");
    char *end = NULL;
    c->ratio = a ? strtod(a, &end) : 1.0;
    if (a && (*end || !(c->ratio >= 0 && c->ratio <= 1))) {
        TM_WARN("otel: OTEL_TRACES_SAMPLER_ARG=%s is not a ratio in [0, 1]; 1.0 is used", a);
        c->ratio = 1.0;
    }
}

static void bsp(tm_otel_cfg *c)
{
    c->queue_max = env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1);
    c->batch_max = env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1);
    if (c->batch_max > c->queue_max)
        c->batch_max = c->queue_max;
    c->delay_ms = env_int("OTEL_BSP_SCHEDULE_DELAY", 5000, 0);
    int bsp_timeout = env_int("OTEL_BSP_EXPORT_TIMEOUT", 30000, 1);
    const char *tn = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") ? "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
                                                              : "OTEL_EXPORTER_OTLP_TIMEOUT";
    c->timeout_ms = env_int(tn, 10000, 1);
    if (c->timeout_ms > bsp_timeout)
        c->timeout_ms = bsp_timeout;
}

static int is_true(const char *v) { return v && !strcasecmp(v, "true"); }

int tm_otel_cfg_read(tm_otel_cfg *c, const char *service, int *on)
{
    memset(c, 0, sizeof *c);
    *on = 0;
    const char *exp = env("OTEL_TRACES_EXPORTER");
    if (is_true(env("OTEL_SDK_DISABLED")) || (exp && !strcmp(exp, "none")))
        return 0;
    if (exp && strcmp(exp, "otlp") != 0)
        TM_WARN("otel: OTEL_TRACES_EXPORTER=%s is not supported; otlp is used", exp);
    if (!(c->url = endpoint()))
        return 0; /* no endpoint: tracing is off */
    protocol(c);
    sampler(c);
    bsp(c);
    hdrs h = {0};
    each_pair(env2("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"), add_header, &h);
    c->headers = h.v;
    c->resource = resource_json(c, service ? service : "unknown_service");
    if (!c->resource) {
        tm_otel_cfg_free(c);
        return TIDEMARK_ENOMEM;
    }
    *on = 1;
    return 0;
}

void tm_otel_cfg_free(tm_otel_cfg *c)
{
    for (int i = 0; c->headers && c->headers[i]; i++)
        free(c->headers[i]);
    free(c->headers);
    free(c->url);
    free(c->resource);
    for (int i = 0; i < c->n_res; i++) {
        free(c->res_key[i]);
        free(c->res_val[i]);
    }
    memset(c, 0, sizeof *c);
}
