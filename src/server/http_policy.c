/* http_policy.c - header rules of the endpoint (see http_policy.h). */
#include "http_policy.h"
#include <ctype.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* Does the Accept header admit this media type (wildcards included)? */
int tm_policy_accepts(const char *accept, const char *type)
{
    if (!accept)
        return 0;
    const char *slash = strchr(type, '/');
    size_t major = (size_t)(slash - type);
    const char *p = accept;
    while (*p) {
        /* list elements are separated by commas with optional whitespace
         * (RFC 9110 OWS: spaces and tabs) */
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ';')
            e++;
        size_t n = (size_t)(e - p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if ((n == strlen(type) && strncasecmp(p, type, n) == 0) || (n == 3 && strncmp(p, "*/*", 3) == 0) ||
            (n == major + 2 && strncasecmp(p, type, major) == 0 && strncmp(p + major, "/*", 2) == 0))
            return 1;
        while (*e && *e != ',')
            e++;
        p = e;
    }
    return 0;
}

/* Is the header's media type exactly type (parameters such as charset allowed)?
 * RFC 9110: media-type = type "/" subtype *( OWS ";" OWS parameter ), so
 * after the type only whitespace and then the end or a ';' may follow. */
int tm_policy_media_type_is(const char *header, const char *type)
{
    if (!header)
        return 0;
    while (*header == ' ' || *header == '\t')
        header++;
    size_t n = strlen(type);
    if (strncasecmp(header, type, n) != 0)
        return 0;
    header += n;
    while (*header == ' ' || *header == '\t')
        header++;
    return *header == '\0' || *header == ';';
}

/* Host part of a Host header or of an Origin's authority, lower-cased and
 * its port removed. Returns 0 unless what follows the host is nothing or
 * ":<digits>" (so "localhost:80.evil.example" is not localhost), and the
 * host fits in out. */
static int host_only(const char *in, char *out, size_t n)
{
    size_t len;
    if (*in == '[') {
        const char *e = strchr(in, ']');
        if (!e)
            return 0;
        len = (size_t)(e - in + 1);
    } else {
        len = strcspn(in, ":");
    }
    if (len == 0 || len >= n)
        return 0;
    const char *rest = in + len;
    if (*rest == ':') {
        rest++;
        if (!*rest)
            return 0;
        for (; *rest; rest++)
            if (!isdigit((unsigned char)*rest))
                return 0;
    } else if (*rest) {
        return 0;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[len] = '\0';
    return 1;
}

static int is_loopback_host(const char *h)
{
    return strcmp(h, "localhost") == 0 || strcmp(h, "127.0.0.1") == 0 || strcmp(h, "[::1]") == 0;
}

int tm_policy_host_allowed(const char *const *allowed, const char *host)
{
    if (!host)
        return 0;
    char h[256];
    int parsed = host_only(host, h, sizeof h);
    if (allowed) {
        for (size_t i = 0; allowed[i]; i++)
            if ((parsed && strcasecmp(allowed[i], h) == 0) || strcasecmp(allowed[i], host) == 0 ||
                strcmp(allowed[i], "*") == 0)
                return 1;
        return 0;
    }
    return parsed && is_loopback_host(h);
}

int tm_policy_origin_allowed(const char *const *allowed, const char *origin)
{
    if (!origin)
        return 0;
    if (allowed) {
        for (size_t i = 0; allowed[i]; i++)
            if (strcasecmp(allowed[i], origin) == 0 || strcmp(allowed[i], "*") == 0)
                return 1;
        return 0;
    }
    const char *p = strstr(origin, "://");
    if (!p || (strncmp(origin, "http://", 7) != 0 && strncmp(origin, "https://", 8) != 0))
        return 0;
    char h[256];
    return host_only(p + 3, h, sizeof h) && is_loopback_host(h);
}
